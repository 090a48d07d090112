"""Streamable HTTP, server side: a plain ASGI app, and `serve_http`.

One endpoint serves both protocol eras, told apart by how the client opens: a POST carrying
`Mcp-Session-Id`, a `GET`/`DELETE` carrying it, or a POST of `initialize` whose params carry no
modern `_meta` protocol version (whatever its headers; `protocol/era.classify`, called once
here, or by `http_legacy.py` for a session's requests) is a legacy (2025-11-25 and earlier)
client, served with sessions by `http_legacy.py`; everything else is 2026-07-28, served
statelessly as below. (Without the legacy shim, `InputRequiredConfig.legacy_shim`, such an
`initialize` is answered 400 with -32022 naming the versions served, and a session id is
ignored.)

Each POST carries one JSON-RPC message. A request is answered with one JSON object, unless its
handler sends a notification first (progress for a request with a `progressToken`, log
messages for one with a `logLevel`): the first notification turns the answer into an SSE
stream that ends with the response. So the common case costs one JSON encode and two ASGI
sends, and nothing is decided up front. `subscriptions/listen` is an SSE stream that stays
open. Closing a response stream, or the connection, cancels the request's handler.

Checks, in order, each with the status the spec gives and a JSON-RPC error body a person can
act on: path (404), HTTP method (405), `Origin` against the allowlist (403; localhost only by
default, against DNS rebinding) and `Host` when an allowlist is given (403), `Content-Type`
(415), `Content-Encoding` other than `identity` (415: bodies are never decompressed), `Accept`
(406; no header means anything goes, and a client that takes JSON but not SSE gets JSON with
its notifications dropped), body size (413), room in the server's budget of
request-body bytes in flight (503 with `Retry-After`, before the body is read), JSON (400,
-32700), JSON-RPC shape (400, -32600), and the request metadata headers against the body
(400, -32020 HeaderMismatch; see `headers.py`). Errors from the dispatcher keep their JSON-RPC
code and get the status the spec ties to it (400 for -32600/-32602/-32020/-32021/-32022, 404
for -32601); any other error is a normal JSON-RPC answer with 200. A notification is accepted
with 202 and no body.

The handler's `transport_info` is the request's ASGI scope (headers, client address...), for
`ServerOptions.principal`. With `ServerOptions.auth`, every request first passes the OAuth
resource-server check (`server/auth/guard.py`: Protected Resource Metadata, 401/403), and the
verified token rides in the scope.

`serve_http` (`http_serve.py`) runs the app under uvicorn with the connection limits of
`http_limits.py` (timeouts for headers, body and idle keep-alive; bounds on connections and
header bytes). Under uvicorn's own worker processes, `worker_app` builds each worker's app
and `worker_protocol` (uvicorn's `http=`) gives its connections the same limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.era import classify
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, McpError
from ..server.auth.guard import BearerGuard
from ..server.endpoint import LifespanError
from ..stepping import resume
from .http_checks import HeaderChecks, encoding_refusal
from .http_exchange import Exchange
from .http_legacy import LegacySessions
from .http_limits import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_INFLIGHT_BODY_BYTES,
    check_body_sizes,
)
from .http_responses import (
    JSON_TYPE,
    NOT_RUN,
    RETRY_AFTER,
    accepted,
    answer,
    plain,
    reject,
    status_of,
)
from .http_sse import DEFAULT_MAX_STREAMS, SSESessions
from .shared_key import warn_if_key_is_not_shared

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SESSION_ID = b"mcp-session-id"


class StreamableHTTPApp:
    """The MCP endpoint of `server` as an ASGI app (mountable in Starlette, FastAPI...).

    `path`: the endpoint's path (relative to the mount point), or None to answer on any path.
    `allowed_origins`: the `Origin` values accepted (exact, like `https://app.example.com`, or
    `"*"` for any); by default only `http(s)://` localhost, 127.0.0.1 and [::1] on any port.
    A request without `Origin` (not from a browser) is always accepted.
    `allowed_hosts`: if given, the `Host` header must name one of these hosts (port ignored).
    `max_body_size`: larger bodies get 413. `max_inflight_body_bytes`: bytes of request bodies
    this app holds at once, from the start of their reading to the end of their requests; a
    request that would go past it gets 503 with `Retry-After` (0 = no limit). It bounds the
    memory many concurrent large bodies take. `keepalive_interval`: seconds between SSE
    comments on quiet `subscriptions/listen` streams and legacy SSE streams (0 = none).

    Legacy (`initialize`-based) sessions, served on the same endpoint (`http_legacy.py`):
    `session_idle_timeout` seconds without use end one (0 = never); past `max_sessions` a new
    one is refused, none ended; `session_buffer_bytes` bounds the events each keeps for
    redelivery; `sse_retry` is the seconds a client waits before it resumes a stream the server
    ended early.

    The HTTP+SSE transport of 2024-11-05 (`http_sse.py`), for clients that predate Streamable
    HTTP: `GET sse_path` opens a session's stream and `POST sse_path?session_id=...` carries
    its messages, under the same checks (None turns it off). `max_sse_streams` bounds the
    streams open at once.
    """

    def __init__(
        self,
        server: ServerEndpoint,
        *,
        path: str | None = "/mcp",
        allowed_origins: Iterable[str] | None = None,
        allowed_hosts: Iterable[str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_inflight_body_bytes: int = DEFAULT_MAX_INFLIGHT_BODY_BYTES,
        keepalive_interval: float = 15.0,
        session_idle_timeout: float = 3600.0,
        max_sessions: int = 1000,
        session_buffer_bytes: int = 1024 * 1024,
        sse_retry: float = 1.0,
        sse_path: str | None = "/sse",
        max_sse_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        check_body_sizes(max_body_size, max_inflight_body_bytes)
        if sse_path is not None and sse_path == path:
            raise ValueError(f"sse_path {sse_path!r} is the Streamable HTTP path; give another")
        #: The HTTP+SSE sessions of `sse_path` (None: that transport is off).
        self.sse = (
            None
            if sse_path is None
            else SSESessions(
                server,
                sse_path,
                max_streams=max_sse_streams,
                keepalive_interval=keepalive_interval,
            )
        )
        self.server = server
        warn_if_key_is_not_shared(server)
        #: The legacy sessions of this endpoint.
        self.sessions = LegacySessions(
            server,
            idle_timeout=session_idle_timeout,
            max_sessions=max_sessions,
            buffer_bytes=session_buffer_bytes,
            retry=sse_retry,
            keepalive_interval=keepalive_interval,
        )
        self.path = path
        self.max_body_size = max_body_size
        self.max_inflight_body_bytes = max_inflight_body_bytes
        self.inflight_body_bytes = 0  # bytes of the bodies of requests in progress
        self.keepalive_interval = keepalive_interval
        checks = HeaderChecks(server, allowed_origins, allowed_hosts)
        #: The header checks of this endpoint, with their caches.
        self.checks = checks
        # Bound here: the request path reads the caches of its common case inline, and calls
        # the checks only on a miss.
        self._hosts = checks.hosts
        self._accept_cache = checks.accept_cache
        self._json_type_cache = checks.json_type_cache
        self._check_headers = checks.check_headers
        self._started = False  # whether this app's ASGI lifespan entered the server's
        #: Set by `drain`: the health check fails and every response closes its connection.
        self.draining = False
        #: Freeze the heap out of the cycle collector once started (see `serve_http`): set for
        #: processes this package runs (`worker_app`), never for an app embedded elsewhere.
        self.freeze_heap_on_start = False
        auth = server.options.auth
        # None without `ServerOptions.auth`: then no request pays for any of it.
        self._auth = None if auth is None else BearerGuard(auth, server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        # The server's lifespan runs from startup to shutdown, entered once by this app however
        # often it is sent these events, and shared with any other entry (`serve_http`).
        async with contextlib.AsyncExitStack() as running:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        if not self._started:
                            await running.enter_async_context(self.server.running())
                            self._started = True
                            if self.freeze_heap_on_start:
                                gc.collect()
                                gc.freeze()
                    except LifespanError as exc:
                        logger.error("%s", exc, exc_info=exc.__cause__)
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.close()
                    self._started = False
                    try:
                        await running.aclose()
                    except LifespanError as exc:
                        logger.error("%s", exc, exc_info=exc.__cause__)
                        await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                        return
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    def drain(self) -> None:
        """Start shutting down without refusing work: from now on a `GET` of the endpoint
        without a session (the load balancer's health check) gets 503, and every response
        carries `Connection: close`, so balancers and clients stop sending here while the
        requests they already sent are still answered (`serve_http` does it on SIGTERM)."""
        self.draining = True

    def close(self) -> None:
        """End every open stream gracefully: `subscriptions/listen` ones get their result,
        legacy sessions end (at shutdown)."""
        self.server.close_subscriptions()
        self.sessions.close()
        if self.sse is not None:
            self.sse.close()

    # --- one HTTP request ----------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.draining:
            send = _closing(send)
        sse = self.sse
        # OAuth (`ServerOptions.auth`): metadata, bearer token, required scopes; both eras.
        if self._auth is not None:
            route = self._route(scope)
            endpoint = sse.path if sse is not None and route == sse.path else self.path
            if not await self._auth.admit(scope, send, route, endpoint):
                return
        if (
            sse is not None
            and scope["path"].endswith(sse.path)
            and self._route(scope) == sse.path
            and self.server.serves_legacy
        ):
            await self._sse_request(scope, receive, send, sse)
            return
        path = self.path
        if (
            path is not None
            # Without a mount point the route is the path itself (an empty one is "/").
            and (scope.get("root_path") or scope["path"] != path or not path)
            and self._route(scope) != path
        ):
            await plain(send, 404, b"Not Found")
            return
        if scope["method"] != "POST":
            if scope["method"] in ("GET", "DELETE") and self.server.serves_legacy:
                stream_headers: dict[bytes, bytes] = dict(scope["headers"])
                if _SESSION_ID in stream_headers:
                    await self._legacy_stream(scope, receive, send, stream_headers)
                    return
            if self.draining and scope["method"] == "GET":
                await reject(
                    send,
                    503,
                    INTERNAL_ERROR,
                    "Service Unavailable: this instance is shutting down; send new requests "
                    "to another one",
                    extra=[(b"retry-after", b"1")],
                )
                return
            await reject(
                send,
                405,
                INVALID_REQUEST,
                f"Method Not Allowed: the MCP endpoint takes POST only, not {scope['method']}",
                extra=[(b"allow", b"POST")],
            )
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        if b"origin" in headers or self._hosts is not None:
            forbidden = self.checks.forbidden(headers)
            if forbidden is not None:
                await reject(send, 403, INVALID_REQUEST, forbidden)
                return
        # The header caches are read here and filled by their methods: a request whose
        # headers were seen before costs a lookup each, not a call.
        content_type = headers.get(b"content-type")
        if content_type is None or not (
            self._json_type_cache.get(content_type) or self.checks.is_json_type(content_type)
        ):
            await reject(
                send,
                415,
                INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
            return
        if b"content-encoding" in headers:
            refused = encoding_refusal(headers[b"content-encoding"])
            if refused is not None:
                await reject(send, 415, INVALID_REQUEST, refused)
                return
        accept = headers.get(b"accept")
        if accept is None:
            accept_sse = True
        else:
            accept_json, accept_sse = self._accept_cache.get(accept) or self.checks.accepts(accept)
            if not accept_json:
                await reject(
                    send,
                    406,
                    INVALID_REQUEST,
                    "Not Acceptable: the Accept header must allow application/json "
                    "(and text/event-stream for streamed responses)",
                )
                return
        # The body: `_read_body`, but its common case (one message of the declared length,
        # room in the budget) is read here.
        declared = headers.get(b"content-length")
        budget = self.max_inflight_body_bytes
        if (
            declared is not None
            and declared.isdigit()
            and (held := int(declared)) <= self.max_body_size
            and not (budget and self.inflight_body_bytes + held > budget)
        ):
            self.inflight_body_bytes += held
            try:
                message = await receive()
            except BaseException:
                self.inflight_body_bytes -= held
                raise
            data: bytes = message.get("body", b"")
            body: bytes | None = data
            if message.get("more_body", False) or len(data) != held:
                # Booked again there, before any await: the budget still has the room.
                self.inflight_body_bytes -= held
                body = await self._read_body(headers, receive, send, message)
        else:
            body = await self._read_body(headers, receive, send)
        if body is None:
            return
        try:
            await self._handle(scope, receive, send, headers, body, accept_sse)
        finally:
            self.inflight_body_bytes -= len(body)

    async def _sse_request(
        self, scope: Scope, receive: Receive, send: Send, sse: SSESessions
    ) -> None:
        """A request of the HTTP+SSE transport: the checks every request passes, then
        `http_sse.py`."""
        method = scope["method"]
        if method not in ("GET", "POST"):
            await reject(
                send,
                405,
                INVALID_REQUEST,
                f"Method Not Allowed: {sse.path} takes GET (the SSE stream) and POST (its "
                f"messages), not {method}",
                extra=[(b"allow", b"GET, POST")],
            )
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        forbidden = self.checks.forbidden(headers)
        if forbidden is not None:
            await reject(send, 403, INVALID_REQUEST, forbidden)
            return
        if method == "GET":
            accept = headers.get(b"accept")
            if accept is not None and not self.checks.accepts(accept)[1]:
                await reject(
                    send,
                    406,
                    INVALID_REQUEST,
                    "Not Acceptable: the stream is text/event-stream, which the Accept header "
                    "does not allow",
                )
                return
            await sse.open(scope, receive, send)
            return
        content_type = headers.get(b"content-type")
        if content_type is None or not self.checks.is_json_type(content_type):
            await reject(
                send,
                415,
                INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
            return
        if b"content-encoding" in headers:
            refused = encoding_refusal(headers[b"content-encoding"])
            if refused is not None:
                await reject(send, 415, INVALID_REQUEST, refused)
                return
        body = await self._read_body(headers, receive, send)
        if body is None:
            return
        try:
            try:
                message = jsonrpc.loads(body)
            except McpError as exc:
                await answer(send, 400, jsonrpc.error_response(None, exc))
                return
            if (
                self._auth is not None
                and isinstance(message, dict)
                and isinstance(message.get("method"), str)
                and jsonrpc.is_valid_id(message.get("id"))
                and await self._auth.refuse_call(message, scope, send)
            ):
                return  # a tool's own scopes, as on Streamable HTTP
            await sse.post(scope, send, message)
        finally:
            self.inflight_body_bytes -= len(body)

    async def _legacy_stream(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        """A GET or DELETE of a legacy session."""
        forbidden = self.checks.forbidden(headers)
        if forbidden is not None:
            await reject(send, 403, INVALID_REQUEST, forbidden)
            return
        if scope["method"] == "DELETE":
            await self.sessions.delete(send, headers, scope)
            return
        accept = headers.get(b"accept")
        accept_sse = True if accept is None else self.checks.accepts(accept)[1]
        await self.sessions.get(receive, send, headers, accept_sse, scope)

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        body: bytes,
        accept_sse: bool,
    ) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            await reject(send, 400, PARSE_ERROR, f"Parse error: {exc}")
            return
        try:
            kind = jsonrpc.classify(message)
        except McpError as exc:
            await answer(send, 400, jsonrpc.error_response(jsonrpc.readable_id(message), exc))
            return
        if (
            self._auth is not None
            and kind == "request"
            and await self._auth.refuse_call(message, scope, send)
        ):
            return  # a tool's own scopes: checked here, where both eras pass
        # A message with a session id goes to its session (which classifies its requests);
        # any other request's era is decided here, once (`protocol/era.classify`).
        if _SESSION_ID in headers and self.server.serves_legacy:
            await self.sessions.post(scope, receive, send, headers, message, kind, accept_sse)
            return
        if kind != "request":
            if kind == "notification":
                # Nothing to act on over HTTP: closing a stream is how a request is cancelled.
                await accepted(send)
                return
            await reject(
                send,
                400,
                INVALID_REQUEST,
                "Invalid Request: this endpoint takes requests and notifications, not responses",
                message.get("id") if jsonrpc.is_valid_id(message.get("id")) else None,
            )
            return
        if classify(message, False) == "opens-session":
            await self.sessions.initialize(scope, send, message)
            return
        problem = self._check_headers(message, headers)
        if problem is not None:
            await answer(send, 400, jsonrpc.error_response(message["id"], problem))
            return
        listen = message["method"] == "subscriptions/listen"
        if listen and not accept_sse:
            await reject(
                send,
                406,
                INVALID_REQUEST,
                "Not Acceptable: subscriptions/listen answers with text/event-stream, which the "
                "Accept header does not allow",
                message["id"],
            )
            return
        exchange = Exchange(send, receive, accept_sse, self.keepalive_interval if listen else 0)
        handling = self.server.handle_request(message, exchange.notify, scope)
        try:
            try:
                # The handler's first step, run here: most answer without waiting for
                # anything, and then nothing can have cancelled them and no watcher is due.
                pending = handling.send(None)
            except StopIteration as answered:
                response = answered.value
            else:
                # It waits: from now on a client that goes away cancels it.
                task = asyncio.current_task()
                assert task is not None
                exchange.task = task
                exchange.watch()
                try:
                    response = await resume(handling, pending)
                except asyncio.CancelledError:
                    if exchange.disconnected:
                        task.uncancel()
                        logger.debug("client went away; cancelled request %r", message["id"])
                        return
                    raise
                if exchange.disconnected:
                    # The handler swallowed the cancellation; the client is gone all the same.
                    if task.cancelling():
                        task.uncancel()
                    return
        finally:
            exchange.finish()
        if exchange.streaming:
            await exchange.respond(response)
            return
        data = orjson.dumps(response)
        status = 200 if "error" not in response else status_of(response)
        # A new list each time: middleware may add to a response's headers in place.
        answer_headers = [JSON_TYPE, (b"content-length", b"%d" % len(data))]
        if status == 503:
            answer_headers.append(RETRY_AFTER)
        await send({"type": "http.response.start", "status": status, "headers": answer_headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    @staticmethod
    def _route(scope: Scope) -> str:
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return path or "/"

    async def _read_body(
        self,
        headers: dict[bytes, bytes],
        receive: Receive,
        send: Send,
        first: Message | None = None,
    ) -> bytes | None:
        """The request's body, counted in `inflight_body_bytes` (the caller takes it out once
        the request is over), or None once the request has been answered (or abandoned).
        `first`: its first message, when the caller has received it already."""
        limit = self.max_body_size
        declared = headers.get(b"content-length")
        held = 0
        if declared is not None and declared.isdigit():
            held = int(declared)
            if held > limit:
                await _too_large(send, limit)
                return None
            # Booked before a byte is read, so concurrent bodies cannot pass the budget
            # together while each is still arriving.
            budget = self.max_inflight_body_bytes
            if budget and self.inflight_body_bytes + held > budget:
                await self._busy(send)
                return None
            self.inflight_body_bytes += held
        try:
            message = first if first is not None else await receive()
            body: bytes = message.get("body", b"")
            if not message.get("more_body", False) and len(body) == held:
                return body  # the common case: one message, the declared length
            chunks = []
            size = 0
            while True:
                if message["type"] == "http.disconnect":
                    self.inflight_body_bytes -= held
                    return None
                body = message.get("body", b"")
                size += len(body)
                if size > limit:
                    await _too_large(send, limit)
                    self.inflight_body_bytes -= held
                    return None
                if size > held:  # no Content-Length: booked as it arrives
                    if not self._book(size - held):
                        await self._busy(send)
                        self.inflight_body_bytes -= held
                        return None
                    held = size
                chunks.append(body)
                if not message.get("more_body", False):
                    break
                message = await receive()
        except BaseException:
            self.inflight_body_bytes -= held
            raise
        self.inflight_body_bytes += size - held  # a body shorter than declared
        return b"".join(chunks)

    def _book(self, size: int) -> bool:
        """Count `size` more body bytes in flight, if the budget has room for them."""
        budget = self.max_inflight_body_bytes
        if budget and self.inflight_body_bytes + size > budget:
            return False
        self.inflight_body_bytes += size
        return True

    async def _busy(self, send: Send) -> None:
        logger.debug("503: %d body bytes already in flight", self.inflight_body_bytes)
        await reject(
            send,
            503,
            INTERNAL_ERROR,
            "Service Unavailable: the server is receiving as many request bodies as it "
            f"holds at once ({self.max_inflight_body_bytes} bytes); retry in a moment",
            extra=[(b"retry-after", b"1")],
            data=NOT_RUN,
        )


def _closing(send: Send) -> Send:
    """`send`, with `Connection: close` added to the response's headers."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return closing


async def _too_large(send: Send, limit: int) -> None:
    await reject(
        send,
        413,
        INVALID_REQUEST,
        f"Payload Too Large: a JSON-RPC message may be at most {limit} bytes here",
    )


__all__ = ["StreamableHTTPApp"]
