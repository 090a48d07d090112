"""stdio transport, server side: `serve_stdio(server)`.

It reads one message per line from stdin and runs each request in its own task (through
`ServerConnection`), so a slow tool never holds up a fast one and `notifications/cancelled`
reaches the right handler.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from ..server.connection import ServerConnection
from .base import MAX_MESSAGE_SIZE
from .process_stdio import LineWriter, open_stdin, open_stdout
from .stdio_framing import NEWLINE, describe_size, leading_id, logger

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

#: Seconds requests in flight at end of input get to end and be answered.
EOF_GRACE = 10.0


async def serve_stdio(
    server: ServerEndpoint,
    stdin: asyncio.StreamReader | None = None,
    stdout: LineWriter | None = None,
    *,
    max_message_size: int = MAX_MESSAGE_SIZE,
    eof_grace: float = EOF_GRACE,
) -> None:
    """Serve `server` on stdin/stdout until stdin reaches end-of-file, then return.

    `stdin`/`stdout` default to the process's own. While serving, file descriptors 0 and 1 are
    pointed at the null device and at stderr, so a stray `print()`, `input()` or child process
    cannot corrupt the message stream; they are restored on return. End-of-file is the
    client's signal to shut down: requests in flight get `eof_grace` seconds to end and be
    answered (so `printf '<request>\\n' | mrtr serve app.py:server | cat` prints the answer),
    those still running then are cancelled, everything written is flushed, and the function
    returns. A line that is not JSON gets
    a -32700 error; a line longer than the reader's limit (`max_message_size` for the default
    stdin; a `StreamReader` passed in keeps its own `limit`) gets a -32600 error naming the
    limit; serving continues either way. At `ServerOptions.budgets.connection_requests`
    requests in flight (each counted until its answer is written to `stdout`), input is not
    read until one ends. Logs go to stderr only.

    The server's lifespan runs while serving: it starts before the first line is read (a
    failure is a `LifespanError` and nothing is served) and is run out at end-of-file, or when
    the serving task is cancelled (SIGTERM under `server.run()`).
    """
    async with contextlib.AsyncExitStack() as stack:
        if stdin is None:
            stdin = await stack.enter_async_context(open_stdin(max_message_size))
        if stdout is None:
            stdout = await stack.enter_async_context(open_stdout())
        # Entered once the streams are redirected, so that a stray print() of the lifespan
        # cannot corrupt the message stream; run out before they are restored.
        await stack.enter_async_context(server.running())
        await _Session(server, stdin, stdout, max_message_size).run(eof_grace)


class _Session:
    """One stdio server session: the read loop and the single writer."""

    def __init__(
        self, server: ServerEndpoint, reader: asyncio.StreamReader, writer: LineWriter, limit: int
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._limit = limit
        self._broken = False
        self._connection = ServerConnection(
            server,
            self.send,
            "stdio",
            max_in_flight=server.options.budgets.connection_requests,
        )

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as one line. Each write is a whole line and writes are never
        split across awaits, so concurrent senders cannot interleave."""
        if self._broken:
            return
        try:
            data = orjson.dumps(message, option=NEWLINE)
        except TypeError as exc:  # orjson.JSONEncodeError: a handler produced a non-JSON value
            request_id = None if "method" in message else jsonrpc.readable_id(message)
            logger.error("dropping a message that cannot be encoded as JSON: %s", exc)
            if request_id is None:
                return
            error = McpError(INTERNAL_ERROR, "Internal error: the result is not valid JSON")
            data = orjson.dumps(jsonrpc.error_response(request_id, error), option=NEWLINE)
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as exc:  # the client closed our stdout: nobody is listening any more
            self._broken = True
            logger.warning("stdout is closed (%s); no further messages will be sent", exc)

    async def run(self, eof_grace: float) -> None:
        reader = self._reader
        connection = self._connection
        try:
            while not self._broken:
                # Backpressure: at the bound on requests in flight (answers not yet written
                # included), input waits in the pipe.
                await connection.room()
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as eof:
                    # End of input; a last message without its newline is still read.
                    if eof.partial and not eof.partial.isspace():
                        await connection.feed_bytes(eof.partial)
                    break
                except asyncio.LimitOverrunError as overrun:
                    if not await self._refuse_oversized(overrun.consumed):
                        break
                    continue
                if not line.isspace():
                    await connection.feed_bytes(line)
            await connection.finish(0 if self._broken else eof_grace)
        finally:
            await connection.aclose()  # cancelled (SIGTERM) or failed: no grace

    async def _refuse_oversized(self, consumed: int) -> bool:
        """Skip a line longer than the reader's limit and answer it; False at end-of-file."""
        reader = self._reader
        head = b""
        size = 0
        at_eof = False
        try:
            while True:
                # The first `consumed` bytes hold no newline; drop them and look again.
                chunk = await reader.readexactly(consumed)
                head = head or chunk[:512]
                size += consumed
                try:
                    size += len(await reader.readuntil(b"\n"))
                    break
                except asyncio.LimitOverrunError as overrun:
                    consumed = overrun.consumed
        except asyncio.IncompleteReadError as eof:
            size += len(eof.partial)
            at_eof = True
        limit = describe_size(self._limit)
        logger.warning("refused a %d-byte message: over the %s limit", size, limit)
        error = McpError(
            INVALID_REQUEST,
            f"Invalid Request: message too large ({size} bytes); this server accepts at most "
            f"{limit} per message",
        )
        await self.send(jsonrpc.error_response(leading_id(head), error))
        return not at_eof
