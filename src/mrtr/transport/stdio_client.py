"""stdio transport, client side: `StdioTransport`.

It spawns the server, routes each response line to the request waiting for its id, hands the
requests a legacy server sends (`elicitation/create`, `ping`...) to the client and writes back
its answers, forwards the child's stderr to the `mrtr.stdio.server` logger and shuts the child
down as the spec asks: close its stdin, wait, SIGTERM, wait, SIGKILL, and always reap it. For
the era probe it can start the same command afresh (`restart`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    RESPONSE_TOO_LARGE,
    McpError,
    method_not_found,
)
from .base import MAX_MESSAGE_SIZE, NotificationHandler, RequestHandler
from .stdio_framing import NEWLINE, describe_size, leading_id, logger

#: The child's stderr, one record per line (at INFO: stderr is not an error channel).
server_stderr_logger = logging.getLogger("mrtr.stdio.server")

# Variables a restricted child environment keeps (inherit_env=False): enough to find programs,
# a home directory, temp space and the locale, nothing that tends to hold a secret.
_BASE_ENV = (
    ("APPDATA", "COMSPEC", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
     "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP", "USERNAME",
     "USERPROFILE")
    if sys.platform == "win32"
    else ("HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR",
          "USER")
)  # fmt: skip
_STDERR_TAIL = 8  # stderr lines quoted when the server dies
_BACKLOG_PAUSE = 1024  # messages queued behind a notification handler before reading pauses
_EXIT_SETTLE = 1.0  # after exit (or stdout EOF), how long the other may take to follow
_GONE = object()  # queued after the last message once the server has gone


class _Lines:
    """Splits a byte stream into lines; a line over `limit` bytes is dropped and reported."""

    __slots__ = ("_on_oversized", "_pieces", "_size", "_skipping", "limit")

    def __init__(self, limit: int, on_oversized: Callable[[bytes], None]) -> None:
        self.limit = limit
        self._on_oversized = on_oversized
        self._pieces: list[bytes] = []
        self._size = 0
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` completes (without their newlines)."""
        if b"\n" not in data:
            self._hold(data)
            return []
        lines = data.split(b"\n")
        tail = lines.pop()
        if self._skipping:
            self._skipping = False
            del lines[0]  # the end of a line already reported as oversized
        elif self._pieces:
            self._pieces.append(lines[0])
            lines[0] = b"".join(self._pieces)
            self._pieces.clear()
            self._size = 0
        if len(data) > self.limit or (lines and len(lines[0]) > self.limit):
            kept = []
            for line in lines:
                if len(line) > self.limit:
                    self._on_oversized(line[:512])
                else:
                    kept.append(line)
            lines = kept
        if tail:
            self._hold(tail)
        return lines

    def rest(self) -> bytes:
        """At end-of-file: whatever followed the last newline."""
        rest = b"".join(self._pieces)
        self._pieces.clear()
        self._size = 0
        return rest

    def _hold(self, data: bytes) -> None:
        if self._skipping:
            return
        self._pieces.append(data)
        self._size += len(data)
        if self._size > self.limit:
            head = self._pieces[0][:512]
            self._pieces.clear()
            self._size = 0
            self._skipping = True
            self._on_oversized(head)


class StdioTransport:
    """Runs `command args...` as the server and speaks JSON-RPC over its stdin and stdout.

    Environment: the child inherits this process's environment with `env` laid over it, like
    any program the user starts, so PATH, a virtualenv, proxies and credentials the user
    exported for the server all reach it (a stripped-down default environment is a common
    cause of servers that work in a shell and fail under a client). For a server you do not
    trust with your environment, pass `inherit_env=False`: the child then gets only PATH, HOME,
    the user, locale and temp-directory variables, plus `env`.

    The child's stderr goes, line by line, to the `mrtr.stdio.server` logger. `close()` closes
    the child's stdin, waits up to `shutdown_timeout` seconds for it to exit, then sends
    SIGTERM, waits again, then SIGKILL, and always reaps it. If the server exits on its own,
    every pending and later request fails with `McpError(CONNECTION_CLOSED)` naming the exit
    code; only the client's era probe restarts it (`restart`).

    `noise` is set whenever the server writes to stdout what is not a JSON-RPC message.
    """

    #: How a client finds out the server's era over stdio: the `server/discover` probe.
    era_probe = "discover"

    @property
    def era_key(self) -> str:
        """What a client caches this server's era under: one server configuration (command,
        arguments, directory, environment), digested so no value of `env` is kept in it."""
        env = sorted(self.env.items()) if self.env is not None else None
        cwd = str(self.cwd) if self.cwd is not None else None
        config = [self.command, self.args, cwd, env, self.inherit_env]
        digest = hashlib.sha256(orjson.dumps(config)).hexdigest()
        return f"stdio:{digest}"

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        inherit_env: bool = True,
        shutdown_timeout: float = 2.0,
        max_message_size: int = MAX_MESSAGE_SIZE,
    ) -> None:
        self.command = command
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.inherit_env = inherit_env
        self.shutdown_timeout = shutdown_timeout
        self.max_message_size = max_message_size
        self.noise = asyncio.Event()
        self._on_notification: NotificationHandler | None = None
        self._on_request: RequestHandler | None = None
        self._generation = 0  # which child the pipe callbacks belong to (see `restart`)
        self._reset()

    def _reset(self) -> None:
        """The state of one child process, fresh."""
        self._process: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._error: McpError | None = None  # set once no more requests can succeed
        self._closing = False
        self._gone = False
        self._exited: asyncio.Event = asyncio.Event()
        self._finished: asyncio.Event = asyncio.Event()
        self._exit_timer: asyncio.TimerHandle | None = None
        self._write_room: asyncio.Future[None] | None = None
        self._backlog: collections.deque[Any] | None = None
        self._backlog_task: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._stdout = _Lines(self.max_message_size, self._oversized_response)
        self._stderr = _Lines(self.max_message_size, self._oversized_stderr)
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._answering: set[asyncio.Task[None]] = set()

    @property
    def pid(self) -> int | None:
        """The child's process id, once started."""
        return self._process.get_pid() if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has been reaped (negative: killed by a signal)."""
        return self._process.get_returncode() if self._process is not None else None

    def child_env(self) -> dict[str, str] | None:
        """The environment the child gets (None: exactly this process's)."""
        if self.inherit_env:
            return {**os.environ, **self.env} if self.env else None
        base = {name: os.environ[name] for name in _BASE_ENV if name in os.environ}
        return {**base, **(self.env or {})}

    # --- ClientTransport ---------------------------------------------------------------------

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        """Start the server process; its requests (legacy servers only) go to `on_request`."""
        if self._process is not None:
            raise RuntimeError("this StdioTransport is already connected; use a new one")
        self._on_notification = on_notification
        self._on_request = on_request
        await self._spawn()

    async def restart(self) -> None:
        """End the server (as `close` does) and start the same command again, fresh. Requests
        pending on the old process fail with `CONNECTION_CLOSED`."""
        if self._process is None:
            raise RuntimeError("this StdioTransport is not connected")
        await self.close()
        self._generation += 1  # anything the old child's pipes still deliver is dropped
        self._reset()
        self.noise.clear()
        await self._spawn()

    async def _spawn(self) -> None:
        loop = asyncio.get_running_loop()
        generation = self._generation
        try:
            process, _ = await loop.subprocess_exec(
                lambda: _ChildProtocol(
                    current=lambda: self._generation == generation,
                    data=self._data,
                    eof=self._eof,
                    exited=self._child_exited,
                    finished=self._child_finished,
                    pause=self._pause_writing,
                    resume=self._resume_writing,
                ),
                self.command,
                *self.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.child_env(),
                cwd=self.cwd,
            )
        except OSError as exc:
            self._error = McpError(
                CONNECTION_CLOSED, f"could not start the stdio server {self._name()}: {exc}"
            )
            raise McpError(self._error.code, self._error.message) from exc
        self._process = process
        # A cast, not an isinstance check: uvloop's pipe transports do not subclass asyncio's.
        self._stdin = cast(asyncio.WriteTransport, process.get_pipe_transport(0))

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its response; cancelling sends `notifications/cancelled`."""
        self._check_open()
        request_id = message["id"]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._send(message)
            if self._write_room is not None:
                await asyncio.shield(self._write_room)
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None and self._error is None:
                self._write(
                    jsonrpc.notification(
                        "notifications/cancelled",
                        {"requestId": request_id, "reason": "cancelled by the client"},
                    )
                )
            raise
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a notification."""
        self._check_open()
        self._send(message)
        if self._write_room is not None:
            await asyncio.shield(self._write_room)

    async def close(self) -> None:
        """Shut the server down (stdin EOF, then SIGTERM, then SIGKILL) and reap it."""
        process = self._process
        if process is None or self._closing:
            return
        self._closing = True
        if self._error is None:
            self._error = McpError(CONNECTION_CLOSED, "the stdio transport is closed")
        self._fail_pending()
        try:
            if self._stdin is not None:
                self._stdin.close()  # end-of-file: the server's cue to exit
            if not await self._wait(self._exited, self.shutdown_timeout):
                logger.info("%s did not exit on stdin EOF; terminating it", self._name())
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                if not await self._wait(self._exited, self.shutdown_timeout):
                    logger.warning("%s ignored SIGTERM; killing it", self._name())
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await self._wait(self._exited, 10.0)
            # Let its last stdout/stderr lines arrive (a grandchild may hold them open: bounded).
            await self._wait(self._finished, _EXIT_SETTLE)
        finally:
            if self._exit_timer is not None:
                self._exit_timer.cancel()
            process.close()  # kills the child if it is somehow still running
            task = self._backlog_task
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            answering = list(self._answering)
            for task in answering:
                task.cancel()
            await asyncio.gather(*answering, return_exceptions=True)
        # Closing the pipes above schedules their last callbacks; let them run while the loop
        # is certainly alive, so nothing touches it after it closes.
        await self._wait(self._finished, 1.0)

    # --- writing -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._error is not None:
            raise McpError(self._error.code, self._error.message, self._error.data)
        if self._stdin is None:
            raise McpError(CONNECTION_CLOSED, "the stdio transport is not connected")

    def _write(self, message: dict[str, Any]) -> bool:
        """Queue one message on the child's stdin; False when that pipe is already closed."""
        data = orjson.dumps(message, option=NEWLINE)
        stdin = self._stdin
        if stdin is None or stdin.is_closing():
            return False
        stdin.write(data)
        return True

    def _send(self, message: dict[str, Any]) -> None:
        if not self._write(message):
            # The child stopped reading (its exit, if that is why, is reported once seen).
            raise McpError(
                CONNECTION_CLOSED, f"the stdio server {self._name()} no longer reads its stdin"
            )

    def _pause_writing(self) -> None:
        self._write_room = asyncio.get_running_loop().create_future()

    def _resume_writing(self) -> None:
        room, self._write_room = self._write_room, None
        if room is not None and not room.done():
            room.set_result(None)

    # --- reading -----------------------------------------------------------------------------

    def _data(self, fd: int, data: bytes) -> None:
        if fd == 1:
            for line in self._stdout.feed(data):
                self._line(line)
        elif fd == 2:
            for line in self._stderr.feed(data):
                self._stderr_line(line)

    def _eof(self, fd: int) -> None:
        if fd == 1:
            rest = self._stdout.rest()
            if rest:
                self._line(rest)
            self._check_gone()
        elif fd == 2:
            rest = self._stderr.rest()
            if rest:
                self._stderr_line(rest)

    def _line(self, line: bytes) -> None:
        if not line or line.isspace():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            logger.warning(
                "%s wrote a line to stdout that is not JSON (ignored): %r", self._name(), line[:200]
            )
            self.noise.set()
            return
        self._dispatch(message)

    def _stderr_line(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip("\r")
        self._stderr_tail.append(text)
        server_stderr_logger.info("%s", text)

    def _oversized_response(self, head: bytes) -> None:
        limit = describe_size(self.max_message_size)
        request_id = leading_id(head)
        logger.error(
            "%s sent a message over max_message_size (%s), dropped; it began %r",
            self._name(), limit, head[:100],
        )  # fmt: skip
        future = self._pending.pop(request_id, None) if request_id is not None else None
        if future is not None and not future.done():
            future.set_exception(
                McpError(
                    RESPONSE_TOO_LARGE,
                    f"the server's response is larger than max_message_size ({limit}); "
                    "raise StdioTransport(max_message_size=...) to accept it",
                )
            )

    def _oversized_stderr(self, head: bytes) -> None:
        self._stderr_line(head + b" ... [stderr line over max_message_size, cut]")

    # --- dispatch, in arrival order ------------------------------------------------------------

    def _dispatch(self, message: Any) -> None:
        backlog = self._backlog
        if backlog is not None:
            # An async notification handler is running: keep order by queueing behind it.
            backlog.append(message)
            if len(backlog) >= _BACKLOG_PAUSE and not self._reading_paused:
                self._set_reading(paused=True)
            return
        outcome = self._deliver(message)
        if outcome is not None:
            self._backlog = collections.deque()
            self._backlog_task = asyncio.get_running_loop().create_task(
                self._drain_backlog(outcome)
            )

    def _deliver(self, message: Any) -> Awaitable[Any] | None:
        """Hand one message over; returns a notification handler's pending awaitable."""
        if message is _GONE:
            self._fail_pending()
            return None
        if not isinstance(message, dict):
            logger.warning("%s sent a JSON value that is not a message (ignored)", self._name())
            self.noise.set()
            return None
        if "method" in message:
            if "id" in message:
                self._answer(message)
                return None
            if self._on_notification is None:
                return None
            try:
                outcome = self._on_notification(message)
            except Exception:
                logger.exception("the notification handler failed on %r", message.get("method"))
                return None
            return outcome if inspect.isawaitable(outcome) else None
        request_id = message.get("id")
        future = (
            self._pending.pop(request_id, None)  # type: ignore[arg-type]
            if jsonrpc.is_valid_id(request_id)
            else None
        )
        if future is None:
            # Normal after a cancellation: the answer crossed our notifications/cancelled.
            logger.debug("response for unknown or cancelled request %r (ignored)", request_id)
        elif not future.done():
            future.set_result(message)
        return None

    def _answer(self, message: dict[str, Any]) -> None:
        """A server's request (a legacy session's `elicitation/create`, `ping`...): answered
        in its own task, so a person taking their time does not stop the reading."""
        handler = self._on_request
        if handler is None or not jsonrpc.is_valid_id(message.get("id")):
            method = message.get("method")
            error = method_not_found(method if isinstance(method, str) else repr(method)[:100])
            self._write(jsonrpc.error_response(jsonrpc.readable_id(message), error))
            return
        task = asyncio.get_running_loop().create_task(self._answer_with(handler, message))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer_with(self, handler: RequestHandler, message: dict[str, Any]) -> None:
        try:
            response = await handler(message)
        except Exception:  # the handler must not raise; if it does, the server still hears
            logger.exception("answering the server's %r request failed", message.get("method"))
            response = jsonrpc.error_response(
                message["id"], McpError(INTERNAL_ERROR, "the client failed to answer")
            )
        self._write(response)

    async def _drain_backlog(self, outcome: Awaitable[Any] | None) -> None:
        backlog = self._backlog
        assert backlog is not None
        while True:
            if outcome is not None:
                try:
                    await outcome
                except Exception:
                    logger.exception("the notification handler failed")
            if not backlog:
                break
            outcome = self._deliver(backlog.popleft())
        self._backlog = None
        if self._reading_paused:
            self._set_reading(paused=False)

    def _set_reading(self, *, paused: bool) -> None:
        self._reading_paused = paused
        process = self._process
        stdout = cast(asyncio.ReadTransport | None, process and process.get_pipe_transport(1))
        if stdout is not None and not stdout.is_closing():
            if paused:
                stdout.pause_reading()
            else:
                stdout.resume_reading()

    # --- the child's end -----------------------------------------------------------------------

    def _child_exited(self) -> None:
        self._exited.set()
        self._check_gone()

    def _child_finished(self) -> None:
        self._finished.set()
        self._set_gone()

    def _check_gone(self) -> None:
        """At stdout EOF or exit. The server is gone once it has exited and all its pipes are
        closed (`connection_lost`), or shortly after either event when the other never comes
        (a grandchild holding stdout open, a server that closed stdout and lingers)."""
        if self._gone or self._exit_timer is not None:
            return
        self._exit_timer = asyncio.get_running_loop().call_later(_EXIT_SETTLE, self._set_gone)

    def _set_gone(self) -> None:
        if self._gone:
            return
        self._gone = True
        if self._exit_timer is not None:
            self._exit_timer.cancel()
            self._exit_timer = None
        if self._error is None:
            self._error = self._exit_error()
            logger.warning("%s", self._error.message)
        self._resume_writing()
        self._dispatch(_GONE)  # after every message already received

    def _exit_error(self) -> McpError:
        code = self.returncode
        if code is None:
            what = "closed its stdout"
        elif code < 0:
            try:
                what = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
        message = f"the stdio server {self._name()} {what}"
        if self._stderr_tail:
            message += "; its last stderr lines: " + " | ".join(self._stderr_tail)[-1000:]
        return McpError(CONNECTION_CLOSED, message, {"returncode": code})

    def _fail_pending(self) -> None:
        error = self._error or McpError(CONNECTION_CLOSED, "the stdio transport is closed")
        pending = list(self._pending.values())
        self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(McpError(error.code, error.message, error.data))

    async def _wait(self, event: asyncio.Event, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def _name(self) -> str:
        pid = self.pid
        return f"{self.command!r}" + (f" (pid {pid})" if pid is not None else "")


class _ChildProtocol(asyncio.SubprocessProtocol):
    """Feeds the child's pipes and lifecycle into its `StdioTransport`, with no task per line.
    After a restart, what the previous child still delivers is dropped (`current` says no)."""

    def __init__(
        self,
        *,
        current: Callable[[], bool],
        data: Callable[[int, bytes], None],
        eof: Callable[[int], None],
        exited: Callable[[], None],
        finished: Callable[[], None],
        pause: Callable[[], None],
        resume: Callable[[], None],
    ) -> None:
        self._current = current
        self._data = data
        self._eof = eof
        self._exited = exited
        self._finished = finished
        self._pause = pause
        self._resume = resume

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self._current():
            self._data(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if self._current():
            self._eof(fd)

    def process_exited(self) -> None:
        if self._current():
            self._exited()

    def connection_lost(self, exc: Exception | None) -> None:
        # The process has exited and all its pipes are closed: nothing more can arrive.
        if self._current():
            self._finished()

    def pause_writing(self) -> None:
        if self._current():
            self._pause()

    def resume_writing(self) -> None:
        if self._current():
            self._resume()
