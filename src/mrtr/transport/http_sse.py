"""The HTTP+SSE transport of MCP 2024-11-05, server side, served beside Streamable HTTP.

Clients and hosts that predate Streamable HTTP open an SSE stream with `GET` and `POST` each
message to a URL the server announces on it. `StreamableHTTPApp` routes its `sse_path` here
once it checked what every request passes (`Origin`/`Host`, bearer auth, `Content-Type`,
body size). Rules:

1. `GET <sse_path>` (its `Accept` must allow `text/event-stream`, 406 otherwise) opens a
   session: an SSE stream whose first event is `endpoint`, whose data is the URL to POST to,
   `<sse_path>?session_id=<id>` (128 random bits). The session lives as long as its stream:
   when the client disconnects, its requests are cancelled and what waits on it fails.
2. A session is bound to the caller that opened it (`ServerOptions.principal`): another
   caller's POST finds it as unknown as any other id.
3. `POST <sse_path>?session_id=<id>` carries one JSON-RPC message: without `session_id` 400,
   with an unknown one 404, with JSON that is not a JSON-RPC message 400 (-32700/-32600);
   otherwise 202 Accepted, and the message is served as on stdio (`ServerConnection`, with
   the stream's legacy session: before `initialize` only `ping` is served, as the legacy
   lifecycle says): responses, notifications and the server's own
   requests (elicitation, sampling, roots) go out on the stream as `message` events, and the
   client's answers to those come back by POST.
4. Bounds: `max_streams` open at once (503 with `Retry-After` past it) and
   `Budgets.sessions_per_principal` per caller (429); neither ends a live stream.
5. Quiet streams get an SSE comment every `keepalive_interval` seconds; `close()` (shutdown)
   ends every stream.

Sessions live in the process that serves their stream: behind a load balancer the POSTs of a
session must reach that instance (route on `session_id`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from ..server.budgets import holder, refusal
from ..server.connection import ServerConnection
from ..server.session import LegacySession
from .http_responses import SSE_HEADERS, accepted, reject, send_json
from .sse import KEEPALIVE, encode_named_event

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

#: The query parameter naming the session in the POST URL.
SESSION_PARAMETER = "session_id"
#: HTTP+SSE streams one endpoint keeps open at once by default.
DEFAULT_MAX_STREAMS = 1000
_MAX_ID_LENGTH = 256


class _Stream:
    """One open SSE stream and the session it carries."""

    __slots__ = ("_lock", "_open", "_send", "connection", "ended", "principal")

    def __init__(self, send: Send, principal: str | None) -> None:
        self._send = send
        self._lock = asyncio.Lock()
        self._open = True
        self.principal = principal
        #: Set when the server ends the stream (shutdown).
        self.ended = asyncio.Event()
        self.connection: ServerConnection | None = None

    async def write(self, data: bytes) -> None:
        """Send one SSE block; nothing once the stream is closed (the client has gone)."""
        async with self._lock:  # one writer at a time: events never interleave
            if not self._open:
                return
            try:
                await self._send({"type": "http.response.body", "body": data, "more_body": True})
            except OSError:
                self._open = False

    async def message(self, message: dict[str, Any]) -> None:
        """The session's channel to the client: one JSON-RPC message as a `message` event."""
        try:
            data = orjson.dumps(message)
        except TypeError as exc:  # orjson.JSONEncodeError: a handler produced a non-JSON value
            logger.error("dropping a message that cannot be encoded as JSON: %s", exc)
            if "method" in message or not jsonrpc.is_valid_id(message.get("id")):
                return
            error = McpError(INTERNAL_ERROR, "Internal error: the result is not valid JSON")
            data = orjson.dumps(jsonrpc.error_response(message["id"], error))
        if not self._open:
            logger.debug("the SSE stream is closed; a message to its client is dropped")
            return
        await self.write(encode_named_event("message", data))

    async def close(self) -> None:
        async with self._lock:
            if not self._open:
                return
            self._open = False
            with contextlib.suppress(OSError):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class SSESessions:
    """The HTTP+SSE sessions of one endpoint (see the module rules)."""

    def __init__(
        self,
        server: ServerEndpoint,
        path: str,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        keepalive_interval: float = 15.0,
    ) -> None:
        if not path.startswith("/"):
            raise ValueError(f"sse_path must start with '/', not {path!r}")
        if max_streams < 1:
            raise ValueError("max_sse_streams must be >= 1")
        self.server = server
        self.path = path
        self.max_streams = max_streams
        self.keepalive_interval = keepalive_interval
        self._streams: dict[str, _Stream] = {}
        self._held: dict[str, int] = {}
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._streams)

    async def wait_empty(self) -> None:
        """Return once no stream is open (after `close`, or when every client has gone)."""
        await self._empty.wait()

    def close(self) -> None:
        """End every stream (at shutdown): their sessions end with them."""
        for stream in self._streams.values():
            stream.ended.set()

    def _principal(self, scope: Any) -> str | None:
        resolver = self.server.options.principal
        if resolver is None:
            return None
        try:
            return resolver(scope)
        except Exception:
            # Unknown caller: it matches no session opened by a known one (fails closed).
            logger.exception("ServerOptions.principal failed on an HTTP+SSE request")
            return None

    # --- the stream (rules 1, 4, 5) -------------------------------------------------------

    async def open(self, scope: Any, receive: Receive, send: Send) -> None:
        """Serve a `GET`: the session's stream, until the client or the server ends it."""
        principal = self._principal(scope)
        who = holder(principal, scope)
        per_holder = self.server.options.budgets.sessions_per_principal
        if len(self._streams) >= self.max_streams:
            error = refusal(
                "HTTP+SSE streams", self.max_streams, "total", "retry when streams have closed"
            )
            body = orjson.dumps(jsonrpc.error_response(None, error))
            await send_json(send, 503, body, [(b"retry-after", b"5")])
            return
        if self._held.get(who, 0) >= per_holder:
            error = refusal(
                "HTTP+SSE streams", per_holder, "principal", "close a stream no longer used"
            )
            await send_json(send, 429, orjson.dumps(jsonrpc.error_response(None, error)))
            return
        session_id = secrets.token_urlsafe(16)
        stream = _Stream(send, principal)

        session = LegacySession(stream.message, session_id)
        session.principal = principal
        connection = ServerConnection(self.server, stream.message, scope, session)
        stream.connection = connection
        self._streams[session_id] = stream
        self._empty.clear()
        self._held[who] = self._held.get(who, 0) + 1
        root = scope.get("root_path", "")
        endpoint = f"{root}{self.path}?{SESSION_PARAMETER}={session_id}"
        disconnected = asyncio.ensure_future(_disconnect(receive))
        ended = asyncio.ensure_future(stream.ended.wait())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await stream.write(encode_named_event("endpoint", endpoint.encode("utf-8")))
            waiting = {disconnected, ended}
            interval = self.keepalive_interval or None
            while True:
                done, _ = await asyncio.wait(
                    waiting, timeout=interval, return_when=asyncio.FIRST_COMPLETED
                )
                if done:
                    break
                await stream.write(KEEPALIVE)
        finally:
            disconnected.cancel()
            ended.cancel()
            # Unknown to POSTs from here on; then its requests end, then the stream.
            del self._streams[session_id]
            left = self._held[who] - 1
            if left:
                self._held[who] = left
            else:
                del self._held[who]
            try:
                await asyncio.shield(connection.aclose())
                await asyncio.shield(stream.close())
            finally:
                if not self._streams:
                    self._empty.set()

    # --- messages (rules 2, 3) ------------------------------------------------------------

    def find(self, scope: Any) -> tuple[str | None, ServerConnection | None]:
        """The session id a POST names (None: it names none) and its connection (None:
        unknown, ended, or another caller's)."""
        query = scope.get("query_string", b"").decode("latin-1")
        values = parse_qs(query).get(SESSION_PARAMETER)
        if not values:
            return None, None
        session_id = values[0]
        if len(session_id) > _MAX_ID_LENGTH:
            return session_id, None
        stream = self._streams.get(session_id)
        if stream is None or stream.connection is None:
            return session_id, None
        if stream.principal != self._principal(scope):
            return session_id, None  # another caller's session: as unknown as any other id
        return session_id, stream.connection

    async def post(self, scope: Any, send: Send, message: Any) -> None:
        """Serve a `POST` of one decoded message to a session."""
        session_id, connection = self.find(scope)
        if session_id is None:
            await reject(
                send,
                400,
                INVALID_REQUEST,
                f"Bad Request: POST messages to the URL of the stream's endpoint event, which "
                f"names the session (?{SESSION_PARAMETER}=...); open the stream with GET "
                f"{self.path} first",
            )
            return
        try:
            kind = jsonrpc.classify(message)
        except McpError as exc:
            response = jsonrpc.error_response(jsonrpc.readable_id(message), exc)
            await send_json(send, 400, orjson.dumps(response))
            return
        request_id = message.get("id") if kind == "request" else None
        if connection is None:
            await reject(
                send,
                404,
                INVALID_REQUEST,
                "Session not found: this session_id is unknown, or its SSE stream has closed; "
                f"open a new stream with GET {self.path}",
                request_id,
            )
            return
        await accepted(send)
        await connection.feed(message)


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


__all__ = ["DEFAULT_MAX_STREAMS", "SESSION_PARAMETER", "SSESessions"]
