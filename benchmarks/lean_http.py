"""A measuring stick for the HTTP layer: the least HTTP/1.1 work an ASGI app's keep-alive
POSTs need, on httptools, to count what a layer leaner than uvicorn would save.

Not a server to expose to anyone: it has no limit on headers, bodies or connections, no
timeouts (a client that sends half a request holds its connection forever), no write flow
control, and it reads one request at a time per connection. A server exposed to clients needs
all of those; RESULTS.md ("What the targets would take") lists them with what this saves.

`xproc_server.py` serves a kind ending in `-lean` (`floor-lean`, `floor-mcp-lean`,
`ours-lean`) with it, on the loopback, for `instructions.py` and `saturation.py`.

What it does per request: httptools parses; the ASGI scope is a copy of the connection's with
the method, path and header list set; the app runs in a task of its own, as under uvicorn
(`mrtr.stepping.start_task`: started eagerly from Python 3.12 on), since an app may rely on
`asyncio.current_task()` (deadlines, cancellation); the response's head and body go out in one
write when the app sends its body in one message, else chunked.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httptools

from mrtr.stepping import start_task

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]

_REASONS = {
    200: b"OK",
    202: b"Accepted",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    406: b"Not Acceptable",
    413: b"Content Too Large",
    415: b"Unsupported Media Type",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
_lifespans: set[asyncio.Task[None]] = set()
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_SERVER_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


class _Connection(asyncio.Protocol):
    """One client connection: parse, call the app, write its answer."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.base: Message = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not `asyncio.Transport` subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.base = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "scheme": "http",
            "root_path": "",
            "query_string": b"",
            "client": tuple(transport.get_extra_info("peername")[:2]),
            "server": tuple(transport.get_extra_info("sockname")[:2]),
        }

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._abort(_BAD_REQUEST)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path, _, query = self.url.partition(b"?")
        scope = dict(self.base)
        scope["method"] = self.parser.get_method().decode("ascii")
        scope["path"] = path.decode("latin-1")
        scope["raw_path"] = path
        scope["query_string"] = query
        scope["headers"] = self.headers
        # One request at a time: read nothing more on this connection until it is answered.
        assert self.transport is not None
        self.transport.pause_reading()
        start_task(self._cycle(scope, b"".join(self.body), self.parser.should_keep_alive()))

    # --- one request --------------------------------------------------------------------------

    async def _cycle(self, scope: Message, body: bytes, keep_alive: bool) -> None:
        transport = self.transport
        assert transport is not None
        delivered = False
        head: list[bytes] = []
        chunked = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self.closed
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal chunked
            if message["type"] == "http.response.start":
                status = message["status"]
                head.append(b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")))
                sized = False
                for name, value in message.get("headers", ()):
                    head.append(b"%s: %s\r\n" % (name, value))
                    sized = sized or name.lower() == b"content-length"
                chunked = not sized
                if chunked:
                    head.append(b"transfer-encoding: chunked\r\n")
                if not keep_alive:
                    head.append(b"connection: close\r\n")
                head.append(b"\r\n")
                return
            if message["type"] != "http.response.body" or transport.is_closing():
                return
            data: bytes = message.get("body", b"")
            more = message.get("more_body", False)
            if chunked:
                framed = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
                data = framed + (b"" if more else b"0\r\n\r\n")
            if head:
                data = b"".join(head) + data
                head.clear()
            transport.write(data)
            if not more and not keep_alive:
                transport.close()

        try:
            await self.app(scope, receive, send)
        except Exception:
            self._abort(_SERVER_ERROR if head else b"")
        if not transport.is_closing():
            transport.resume_reading()

    def _abort(self, answer: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if answer:
                transport.write(answer)
            transport.close()


async def serve(app: App, sock: socket.socket, *, lifespan: bool) -> asyncio.AbstractServer:
    """Serve `app` on the bound socket `sock` (after its ASGI lifespan startup, when `lifespan`)."""
    loop = asyncio.get_running_loop()
    if lifespan:
        started: asyncio.Future[None] = loop.create_future()
        events: asyncio.Queue[Message] = asyncio.Queue()
        events.put_nowait({"type": "lifespan.startup"})

        async def lifespan_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed":
                started.set_exception(RuntimeError(message.get("message", "startup failed")))

        # Referenced for the server's life: the app's lifespan ends with the process.
        _lifespans.add(
            loop.create_task(
                app({"type": "lifespan", "asgi": {"version": "3.0"}}, events.get, lifespan_send)
            )
        )
        await started
    return await loop.create_server(lambda: _Connection(app), sock=sock)
