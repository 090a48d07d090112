"""The person at the terminal: line-based questions and answers.

Questions and notes never go to stdout, which carries only the command's result (and `--json`
output stays parseable): they go to the terminal (`/dev/tty`) when a person types the answers,
so that `2>/dev/null` hides no question, and to stderr otherwise (`question_sink`). Answers are
read a line at a time, which works the same on a terminal and with piped stdin. End of input
means the person is gone: `NoAnswer`.

Rules:
* Everything a `TextConsole` writes passes through `display.shown` (the callers show server
  text through it already; this is the last line of defence for a string they missed).
* A secret (`read_secret`) is typed without echo on a terminal, and shown as a mask in the
  transcript of piped answers; it is never written anywhere by this module.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, TextIO, TypeVar

from .display import shown

T = TypeVar("T")

#: How many invalid answers one question takes before the person is taken to have given up.
MAX_ATTEMPTS = 10
#: What is shown in place of a secret.
MASK = "\u2022\u2022\u2022\u2022"


class NoAnswer(Exception):
    """The person gave no usable answer: end of input, or too many invalid answers."""


class InvalidAnswer(ValueError):
    """An answer that does not fit the question; the message says why, for a re-ask."""


class Console(Protocol):
    """Where questions are written and answers read, one line at a time."""

    def say(self, text: str = "") -> None:
        """Write `text` and a newline."""

    def read_line(self, prompt: str) -> str | None:
        """Write `prompt` and read one line (without its newline); None at end of input."""

    def read_secret(self, prompt: str) -> str | None:
        """As `read_line`, for an answer that must not be shown (typed without echo)."""


class TextConsole:
    """A `Console` over text streams (default: answers from stdin, everything else to stderr).

    When the answers do not come from a terminal they are echoed after the prompt, so that a
    transcript of a piped session reads like the interactive one.
    """

    def __init__(self, source: TextIO | None = None, sink: TextIO | None = None) -> None:
        self._source = source if source is not None else sys.stdin
        self._sink = sink if sink is not None else sys.stderr
        try:
            self._echo = not self._source.isatty()
        except (AttributeError, ValueError):
            self._echo = True

    def say(self, text: str = "") -> None:
        self._sink.write(shown(text) + "\n")
        self._sink.flush()

    def read_line(self, prompt: str) -> str | None:
        return self._read(prompt, secret=False)

    def read_secret(self, prompt: str) -> str | None:
        if self._echo:  # piped answers: read as usual, the transcript shows a mask
            return self._read(prompt, secret=True)
        with _echo_off(self._source) as off:
            if not off:  # no terminal control here: getpass knows the platform's way
                import getpass

                try:
                    return getpass.getpass(shown(prompt), stream=self._sink)
                except EOFError:
                    return None
            answer = self._read(prompt, secret=True)
        self._sink.write("\n")  # the Enter typed was not echoed either
        self._sink.flush()
        return answer

    def _read(self, prompt: str, *, secret: bool) -> str | None:
        self._sink.write(shown(prompt))
        self._sink.flush()
        line = self._source.readline()
        if not line:
            if self._echo:
                self._sink.write("<end of input>\n")
                self._sink.flush()
            return None
        answer = line.rstrip("\r\n")
        if self._echo:
            self._sink.write((MASK if secret else shown(answer)) + "\n")
            self._sink.flush()
        return answer


@contextlib.contextmanager
def _echo_off(source: TextIO) -> Iterator[bool]:
    """Turn off the terminal's echo of `source` meanwhile; yields False where that cannot be
    done (no termios, not a terminal). The echo is also restored at exit: the read runs in a
    daemon thread, which an interrupted command never lets finish."""
    try:
        import termios
    except ImportError:  # Windows
        yield False
        return
    try:
        fd = source.fileno()
        saved = termios.tcgetattr(fd)
    except (termios.error, OSError, ValueError, AttributeError):
        yield False
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # lflag

    def restore() -> None:
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    atexit.register(restore)
    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, quiet)
        yield True
    finally:
        restore()
        atexit.unregister(restore)


def question_sink(source: TextIO | None = None, tty: str = "/dev/tty") -> TextIO:
    """Where to write questions: the terminal `tty` when the answers come from one (`source`,
    default stdin, is a terminal) and it can be opened; else stderr, beside a script's piped
    answers."""
    source = source if source is not None else sys.stdin
    try:
        typed = source.isatty()
    except (AttributeError, ValueError):
        typed = False
    if typed:
        try:
            # Kept open for the rest of the command: every question of the call goes there.
            return open(tty, "w", encoding="utf-8", errors="replace")
        except OSError:
            pass  # no controlling terminal (a daemon, some IDEs)
    return sys.stderr


def ask(
    console: Console,
    prompt: str,
    parse: Callable[[str], T],
    *,
    attempts: int = MAX_ATTEMPTS,
    secret: bool = False,
) -> T:
    """Ask until `parse` accepts the answer; each `InvalidAnswer` is shown and asked again.
    A `secret` answer is read with `Console.read_secret`.

    Raises `NoAnswer` at end of input or after `attempts` invalid answers.
    """
    read = console.read_secret if secret else console.read_line
    for _ in range(attempts):
        line = read(prompt)
        if line is None:
            raise NoAnswer("end of input")
        try:
            return parse(line.strip())
        except InvalidAnswer as exc:
            console.say(f"  ! {exc}")
    console.say(f"  ! no valid answer after {attempts} tries; giving up")
    raise NoAnswer("too many invalid answers")


async def run_blocking(fn: Callable[[], T]) -> T:
    """Run a blocking terminal interaction without blocking the event loop.

    A daemon thread rather than the loop's executor: if the command is interrupted while a
    read is pending, the blocked thread must not keep the process alive at exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            value = fn()
        except BaseException as exc:
            error = exc
            _post(loop, lambda: deliver(lambda: future.set_exception(error)))
        else:
            _post(loop, lambda: deliver(lambda: future.set_result(value)))

    threading.Thread(target=work, name="mrtr-terminal", daemon=True).start()
    return await future


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    # The loop may already be closed if the command ended while this thread was reading.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)


__all__ = [
    "MASK",
    "MAX_ATTEMPTS",
    "Console",
    "InvalidAnswer",
    "NoAnswer",
    "TextConsole",
    "ask",
    "question_sink",
    "run_blocking",
]
