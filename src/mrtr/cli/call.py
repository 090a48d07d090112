"""`mrtr call`: call one tool on a server and answer its questions at the terminal.

The server may speak 2026-07-28 or an `initialize`-based revision: the client finds out, and
the questions are asked the same way whether they come in MRTR rounds or as a legacy server's
own requests.

The server is an `http(s)://` URL (Streamable HTTP) or a command to spawn (stdio). Arguments
are `key=value` words whose values are read as JSON when they parse (`n=3` is 3, `ok=true` is
True, `tags=["a"]` a list) and as plain strings otherwise (`name=bob`).

`timeout` (`--timeout SECONDS`) bounds the whole call: connecting, every question, and a task
the server runs the call as; past it the call is stopped (a task it drives is cancelled) and
one line says so.

A protected HTTP server (401) is authorized with OAuth (`sign_in.py`): the authorization URL is
printed and opened in a browser, and the tokens are kept in `~/.mrtr/tokens.json`, so the next
call signs in no more.

Rules:
* Everything the server sent is printed through `display`: the result text (`shown`), the
  `--json` result (`shown_json`, still JSON), errors, task statuses and a stdio server's
  stderr lines (`shown_line`).
* A result nested more than `results.MAX_RESULT_DEPTH` levels is a protocol violation, said in
  one line; any other unexpected error is one line too, never a traceback. Both exit 1.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ..client.client import Client, InputHandlerError
from ..deadline import Deadline
from ..protocol.errors import LOCAL_CODES, MISSING_REQUIRED_CLIENT_CAPABILITY, McpError
from ..protocol.tasks import DetailedTask
from ..protocol.types import Root
from ..server.input_bounds import nesting_exceeds
from .display import shown, shown_json, shown_line
from .notices import Notices
from .responder import SamplingRefused, TerminalResponder
from .results import MAX_RESULT_DEPTH, format_tool_result, pretty_json
from .terminal import Console, TextConsole, question_sink

if TYPE_CHECKING:
    from ..client.auth import OAuth


def is_url(word: str) -> bool:
    """True for an `http://` or `https://` URL."""
    return word.lower().startswith(("http://", "https://"))


def parse_arguments(words: Sequence[str]) -> dict[str, Any]:
    """Tool arguments from `key=value` words; raises ValueError naming the bad word."""
    arguments: dict[str, Any] = {}
    for word in words:
        key, sep, raw = word.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {word!r} is not key=value")
        if key in arguments:
            raise ValueError(f"argument {key!r} is given twice")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def parse_headers(words: Sequence[str]) -> dict[str, str]:
    """HTTP headers from `Name=value` (or `Name: value`) words; raises ValueError."""
    headers: dict[str, str] = {}
    for word in words:
        eq, colon = word.find("="), word.find(":")
        cut = min(i for i in (eq, colon) if i >= 0) if eq >= 0 or colon >= 0 else -1
        name = word[:cut].strip() if cut > 0 else ""
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"--header {word!r} is not Name=value")
        headers[name] = word[cut + 1 :].strip()
    return headers


class _ServerLineFormatter(logging.Formatter):
    """`server: LINE`, the line shown (`shown_line`): a server's stderr is its own text."""

    def format(self, record: logging.LogRecord) -> str:
        return "server: " + shown_line(record.getMessage())


def forward_server_stderr(stream: TextIO | None = None) -> None:
    """Show a stdio server's stderr lines (logged by the transport) prefixed `server: `."""
    log = logging.getLogger("mrtr.stdio.server")
    if log.handlers:
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_ServerLineFormatter())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


@dataclass(slots=True)
class CallCommand:
    """One `mrtr call`: where the server is, which tool, and how to show the result."""

    tool: str
    arguments: dict[str, Any]
    url: str | None = None
    command: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    roots: list[Root] = field(default_factory=list)
    raw_json: bool = False
    auth: OAuth | None = None
    timeout: float | None = None  # seconds for the whole call; None: no bound of its own

    @property
    def server_label(self) -> str:
        """How the server is named when it asks something."""
        return self.url if self.url is not None else shlex.join(self.command)

    def client(self, responder: TerminalResponder, notices: Notices | None = None) -> Client:
        """A client for the target, answering through `responder`; the server's log messages
        (info and above) go to `notices`."""
        handlers = responder.client_handlers()
        if notices is not None:
            handlers.update(_after_progress(handlers, notices))
            handlers.update(log_handler=notices.log, log_level="info")
        if self.url is not None:
            return Client.http(self.url, headers=self.headers or None, auth=self.auth, **handlers)
        return Client.stdio(self.command[0], self.command[1:], **handlers)

    async def run(
        self, console: Console | None = None, out: TextIO | None = None, err: TextIO | None = None
    ) -> int:
        """Call the tool and print its result; returns the exit status (0, or 1 on error)."""
        out = out if out is not None else sys.stdout
        err = err if err is not None else sys.stderr
        try:
            return await self._run(console, out, err)
        except Exception as exc:  # a bug or a peer nobody foresaw: one line, not a traceback
            print(f"mrtr call: unexpected error: {shown_line(_reason(exc))}", file=err)
            return 1

    async def _run(self, console: Console | None, out: TextIO, err: TextIO) -> int:
        console = console or TextConsole(sink=question_sink())
        responder = TerminalResponder(console, self.server_label, self.roots)
        notices = Notices(err)
        deadline = Deadline(self.timeout) if self.timeout is not None else None
        try:
            with deadline if deadline is not None else contextlib.nullcontext():
                async with self.client(responder, notices) as client:
                    result = await client.call_tool(
                        self.tool,
                        self.arguments,
                        progress_callback=notices.progress,
                        on_task_status=_task_reporter(err, notices),
                    )
        except TimeoutError:
            if deadline is None or not deadline.expired:
                raise
            return self._timed_out(err, notices)
        except McpError as exc:
            if deadline is not None and deadline.expired:  # what the cancellation ended in
                return self._timed_out(err, notices)
            if responder.refusal is not None:
                print(f"mrtr call: stopped: {responder.refusal}", file=err)
                return 1
            return self._report(exc, err)
        except OSError as exc:
            said = shown_line(f"({self.server_label}): {exc}")
            print(f"mrtr call: cannot reach the server {said}", file=err)
            return 1
        finally:
            notices.end_line()
        if responder.refusal is not None:  # a legacy server turned the refusal into a result
            print(f"mrtr call: stopped: {responder.refusal}", file=err)
            return 1
        if nesting_exceeds(result, MAX_RESULT_DEPTH):
            print(
                "mrtr call: error: the server broke the protocol: its result nests more than "
                f"{MAX_RESULT_DEPTH} levels deep (not shown)",
                file=err,
            )
            return 1
        if self.raw_json:
            wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            print(shown_json(pretty_json(wire)), file=out)
        else:
            print(shown(format_tool_result(result)), file=out)
        out.flush()
        return 1 if result.is_error else 0

    def _timed_out(self, err: TextIO, notices: Notices) -> int:
        """Say, in one line, that `--timeout` stopped the call; returns the exit status (1)."""
        notices.end_line()
        print(
            f"mrtr call: stopped: the call did not end within {self.timeout:g} s (--timeout)",
            file=err,
        )
        return 1

    def _report(self, exc: McpError, err: TextIO) -> int:
        """Print why the call failed; returns the exit status (1)."""
        if isinstance(exc, InputHandlerError):
            if isinstance(exc.__cause__, SamplingRefused):
                print(f"mrtr call: stopped: {exc.__cause__}", file=err)
            else:
                print(f"mrtr call: error: {shown_line(exc.message)}", file=err)
            return 1
        if exc.code in LOCAL_CODES:  # found on this side (its message says it all)
            print(f"mrtr call: error: {shown_line(exc.message)}", file=err)
            return 1
        print(f"mrtr call: error {exc.code}: {shown_line(exc.message)}", file=err)
        if exc.data is not None:
            data = "(nested too deep to show)"
            if not nesting_exceeds(exc.data, MAX_RESULT_DEPTH):
                data = shown_json(json.dumps(exc.data, ensure_ascii=False))
            print(f"  data: {data}", file=err)
        if exc.code == MISSING_REQUIRED_CLIENT_CAPABILITY and "roots" in str(exc.data):
            print("  hint: offer roots with --root PATH", file=err)
        return 1


def _after_progress(handlers: dict[str, Any], notices: Notices) -> dict[str, Any]:
    """The question handlers of `handlers`, each ending an open progress line first."""

    def wrap(handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def asked(params: Any) -> Any:
            notices.end_line()
            return await handler(params)

        return asked

    names = ("elicitation_handler", "sampling_handler")
    return {name: wrap(handlers[name]) for name in names if name in handlers}


def _task_reporter(err: TextIO, notices: Notices) -> Callable[[DetailedTask], None]:
    """Shows, on `err`, each new status of the task the server ran the call as."""

    def report(task: DetailedTask) -> None:
        notices.end_line()
        said = f" ({task.status_message})" if task.status_message else ""
        line = shown_line(f"{task.task_id}: {task.status}{said}")
        print(f"mrtr call: task {line}", file=err, flush=True)

    return report


def _reason(exc: Exception) -> str:
    """An exception in words: its type, and its message when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = [
    "CallCommand",
    "forward_server_stderr",
    "is_url",
    "parse_arguments",
    "parse_headers",
]
