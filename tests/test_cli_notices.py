"""`mrtr list` shows a model argument's fields; `mrtr call` shows the server's progress (a
progress line) and log messages on stderr, and asks its questions on the terminal when a person
types the answers, so that `2>/dev/null` hides none.

The commands run for real: `mrtr list` / `mrtr call` in a subprocess, the server under
`mrtr serve` over stdio, and for the terminal a pseudo-terminal (`pty`) as the controlling
terminal of the command.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrtr.cli.notices import BAR_WIDTH, Notices, progress_text
from mrtr.cli.terminal import question_sink

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60  # a guard against a hang, never a measurement

SERVER = '''\
from pydantic import BaseModel

from mrtr import RequestContext, Server

server = Server("notices")


class Note(BaseModel):
    title: str
    body: str = ""
    tags: list[str] = []


class Region(BaseModel):
    region: str


@server.tool()
def add(note: Note, copies: int = 1) -> str:
    """Add a note."""
    return f"added {note.title} x{copies}"


@server.tool()
async def work(ctx: RequestContext) -> str:
    """Work in three steps."""
    await ctx.log("info", "starting", logger="worker")
    for step in (1, 2, 3):
        await ctx.report_progress(step, 3, f"step {step}")
    await ctx.log("warning", {"left": 0})
    return "worked"


@server.tool()
async def order(ctx: RequestContext) -> str:
    """Ask where to ship."""
    answer = await ctx.elicit("Ship to which region?", Region)
    return f"shipping to {answer.content.region}" if answer.content else "cancelled"
'''


@pytest.fixture(scope="module")
def server_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("notices") / "notices_server.py"
    path.write_text(SERVER)
    return path


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def mrtr(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mrtr", *words],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=environment(),
        stdin=subprocess.DEVNULL,
    )


def serve(server_file: Path) -> list[str]:
    return ["--", sys.executable, "-m", "mrtr", "serve", str(server_file)]


def test_list_shows_the_fields_of_a_model_argument(server_file: Path) -> None:
    done = mrtr("list", *serve(server_file))
    assert done.returncode == 0, done.stderr
    line = "  add(note: {title: string, body?: string, tags?: array[string]}, copies?: integer)"
    assert line + "  Add a note." in done.stdout.splitlines()


def test_call_shows_progress_and_log_messages_on_stderr(server_file: Path) -> None:
    done = mrtr("call", "work", *serve(server_file))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "worked\n"
    lines = done.stderr.splitlines()
    bar = "#" * (BAR_WIDTH // 3) + "." * (BAR_WIDTH - BAR_WIDTH // 3)
    expected = [
        "server log [info] worker: starting",
        f"progress [{bar}] 1/3  step 1",
        f"progress [{'#' * BAR_WIDTH}] 3/3  step 3",
        'server log [warning] {"left": 0}',
    ]
    assert all(line in lines for line in expected), done.stderr
    assert [lines.index(line) for line in expected] == sorted(lines.index(x) for x in expected)


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, to see what is written for one."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_line_rewritten_in_place() -> None:
    shown = Terminal()
    notices = Notices(shown)
    notices.progress(1, 2, "half")
    notices.log({"level": "info", "data": "note"})  # ends the open progress line first
    notices.progress(2, 2, "all")  # the last report ends its line itself
    notices.progress(5, None, None)
    notices.end_line()
    assert shown.getvalue() == (
        f"\r\x1b[K{progress_text(1, 2, 'half')}\n"
        "server log [info] note\n"
        f"\r\x1b[K{progress_text(2, 2, 'all')}\n"
        "\r\x1b[Kprogress 5\n"
    )


def test_questions_go_to_the_terminal_only_when_the_answers_come_from_one(
    tmp_path: Path,
) -> None:
    assert question_sink(io.StringIO("piped answers\n")) is sys.stderr
    assert question_sink(Terminal(), tty=str(tmp_path / "no" / "tty")) is sys.stderr
    primary, secondary = os.openpty()
    try:
        sink = question_sink(Terminal(), tty=os.ttyname(secondary))
        assert sink is not sys.stderr
        sink.write("Ship where?\n")
        sink.flush()
        assert b"Ship where?" in os.read(primary, 1024)
        sink.close()
    finally:
        os.close(primary)
        os.close(secondary)


def _read_until(fd: int, wanted: bytes, seen: bytearray, start: int = 0) -> None:
    """Read what the terminal shows into `seen` until `wanted` is shown past `start`."""
    deadline = time.monotonic() + TIMEOUT
    while wanted not in seen[start:]:
        left = deadline - time.monotonic()
        assert left > 0, f"never shown {wanted!r}; the terminal showed {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the command ended and closed the terminal
                chunk = b""
            assert chunk, f"never shown {wanted!r}; the terminal showed {bytes(seen)!r}"
            seen.extend(chunk)


def test_call_asks_on_the_terminal_with_stderr_discarded(server_file: Path, tmp_path: Path) -> None:
    result = tmp_path / "result.txt"
    words = [sys.executable, "-m", "mrtr", "call", "order", *serve(server_file)]
    line = " ".join(f"'{word}'" for word in words) + f" 2>/dev/null >'{result}'"
    pid, terminal = pty.fork()
    if pid == 0:  # the command, with the pseudo-terminal as its controlling terminal
        os.execvpe("sh", ["sh", "-c", line], environment())
    seen = bytearray()
    try:
        _read_until(terminal, b"Ship to which region?", seen)
        _read_until(terminal, b"[c]ancel > ", seen)
        os.write(terminal, b"a\n")
        _read_until(terminal, b"Region", seen, start=seen.index(b"[c]ancel > "))
        _read_until(terminal, b"> ", seen, start=seen.rindex(b"Region"))
        os.write(terminal, b"eu\n")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, bytes(seen)
    assert result.read_text() == "shipping to eu\n"
