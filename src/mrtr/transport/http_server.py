"""Streamable HTTP, server side: a plain ASGI app, and `serve_http`.

One endpoint serves both protocol eras, told apart by how the client opens: a POST carrying
`Mcp-Session-Id`, a `GET`/`DELETE` carrying it, or a POST of `initialize` whose params carry no
modern `_meta` protocol version (whatever its headers) is a legacy (2025-11-25 and earlier)
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
(415), `Accept` (406; no header means anything goes, and a client that takes JSON but not SSE
gets JSON with its notifications dropped), body size (413), room in the server's budget of
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

`serve_http` runs the app under uvicorn with the connection limits of `http_limits.py`
(timeouts for headers, body and idle keep-alive; bounds on connections and header bytes).
Under uvicorn's own worker processes, `worker_app` builds each worker's app and
`worker_protocol` (uvicorn's `http=`) gives its connections the same limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

import orjson
import uvicorn

import mrtr.transport.headers as mcp_headers

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    McpError,
)
from ..server.auth.guard import BearerGuard
from ..server.endpoint import LifespanError
from ..stepping import resume
from .http_guard import guarded_protocol
from .http_legacy import LegacySessions, close_sse_stream
from .http_limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_GRACE,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_INFLIGHT_BODY_BYTES,
    HTTPLimits,
    check_body_sizes,
    connection_cap,
    raise_open_files_limit,
)
from .http_responses import (
    JSON_TYPE,
    NOT_RUN,
    RETRY_AFTER,
    SSE_HEADERS,
    accepted,
    answer,
    plain,
    reject,
    send_json,
    status_of,
)
from .http_sse import DEFAULT_MAX_STREAMS, SSESessions
from .sse import KEEPALIVE, encode_event

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_T = TypeVar("_T")

_LOCAL_HOSTS = frozenset(("localhost", "127.0.0.1", "::1"))

_NAME_FIELDS = mcp_headers.NAME_FIELDS
_NAME_OPTIONAL = mcp_headers.NAME_OPTIONAL
_SESSION_ID = b"mcp-session-id"
_METHOD = b"mcp-method"
_CACHE_LIMIT = 256  # distinct values of a header remembered
_CACHE_KEY_LIMIT = 512  # bytes of the longest header value remembered


def _show(value: str) -> str:
    """A value quoted for an error message, cut short when long."""
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _mismatch(message: str) -> McpError:
    return McpError(HEADER_MISMATCH, f"Header mismatch: {message}")


def _media_ranges(value: bytes) -> list[tuple[str, float]]:
    ranges = []
    for part in value.decode("latin-1").split(","):
        media, *params = part.split(";")
        quality = 1.0
        for param in params:
            key, _, number = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(number)
                except ValueError:
                    quality = 0.0
        ranges.append((media.strip().lower(), quality))
    return ranges


def _acceptable(ranges: list[tuple[str, float]], media: str) -> bool:
    # The most specific range that names the type decides (RFC 9110 12.5.1).
    for candidate in (media, media.split("/")[0] + "/*", "*/*"):
        qualities = [quality for name, quality in ranges if name == candidate]
        if qualities:
            return max(qualities) > 0
    return False


def _local_origin(origin: str) -> bool:
    """Whether `origin` is http(s) on localhost, 127.0.0.1 or [::1] (any port)."""
    try:
        parts = urlsplit(origin)
        return (
            parts.scheme in ("http", "https")
            and parts.hostname in _LOCAL_HOSTS
            and parts.username is None
            and not parts.path
            and (parts.port is None or parts.port > 0)  # `port` raises for a malformed one
        )
    except ValueError:
        return False


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
        self._origins = (
            None if allowed_origins is None else {o.rstrip("/").lower() for o in allowed_origins}
        )
        self._hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        self._accept_cache: dict[bytes, tuple[bool, bool]] = {}
        self._json_type_cache: dict[bytes, bool] = {}
        self._origin_cache: dict[bytes, bool] = {}
        self._started = False  # whether this app's ASGI lifespan entered the server's
        #: Set by `drain`: the health check fails and every response closes its connection.
        self.draining = False
        #: Freeze the heap out of the cycle collector once started (see `serve_http`): set for
        #: processes this package runs (`worker_app`), never for an app embedded elsewhere.
        self.freeze_heap_on_start = False
        self._text_cache: dict[bytes, str] = {}  # Mcp-Method, MCP-Protocol-Version
        self._name_cache: dict[bytes, str] = {}  # Mcp-Name, decoded
        self._host_cache: dict[bytes, bool] = {}
        self._tool_params: dict[str, tuple[dict[str, Any], tuple[_ParamHeader, ...]]] = {}
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
            forbidden = self._forbidden(headers)
            if forbidden is not None:
                await reject(send, 403, INVALID_REQUEST, forbidden)
                return
        # The header caches are read here and filled by their methods: a request whose
        # headers were seen before costs a lookup each, not a call.
        content_type = headers.get(b"content-type")
        if content_type is None or not (
            self._json_type_cache.get(content_type) or self._is_json_type(content_type)
        ):
            await reject(
                send,
                415,
                INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
            return
        accept = headers.get(b"accept")
        if accept is None:
            accept_sse = True
        else:
            accept_json, accept_sse = self._accept_cache.get(accept) or self._accepts(accept)
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

    def _forbidden(self, headers: dict[bytes, bytes]) -> str | None:
        """Why a request is refused with 403 (its `Origin` or `Host`), or None."""
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_allowed(origin):
            return "Forbidden: this Origin is not allowed"
        if self._hosts is not None and not self._host_allowed(headers.get(b"host")):
            return "Forbidden: this Host is not allowed"
        return None

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
        forbidden = self._forbidden(headers)
        if forbidden is not None:
            await reject(send, 403, INVALID_REQUEST, forbidden)
            return
        if method == "GET":
            accept = headers.get(b"accept")
            if accept is not None and not self._accepts(accept)[1]:
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
        if content_type is None or not self._is_json_type(content_type):
            await reject(
                send,
                415,
                INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
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
        forbidden = self._forbidden(headers)
        if forbidden is not None:
            await reject(send, 403, INVALID_REQUEST, forbidden)
            return
        if scope["method"] == "DELETE":
            await self.sessions.delete(send, headers, scope)
            return
        accept = headers.get(b"accept")
        accept_sse = True if accept is None else self._accepts(accept)[1]
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
        # What `jsonrpc.classify` says of a well-formed request, without the call. orjson
        # makes exact dicts, strs and ints (never subclasses, and a bool is not an int to
        # `type`), so these tests pass exactly when `classify` answers "request"; anything
        # else is left to it.
        if (
            type(message) is dict
            and message.get("jsonrpc") == "2.0"
            and type(message.get("method")) is str
            and ((params := message.get("params")) is None or type(params) is dict)
            and (type(request_id := message.get("id")) is str or type(request_id) is int)
        ):
            kind = "request"
        else:
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
        # The era, by how the client opens (see the module docstring): a session id, or an
        # `initialize` without a modern `_meta`, is a legacy client.
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
        method = message["method"]
        if method == "initialize" and not _modern(message):
            await self.sessions.initialize(scope, send, message)
            return
        problem = self._check_headers(message, headers)
        if problem is not None:
            await answer(send, 400, jsonrpc.error_response(message["id"], problem))
            return
        listen = method == "subscriptions/listen"
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
        exchange = _Exchange(send, receive, accept_sse, self.keepalive_interval if listen else 0)
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

    # --- header checks -----------------------------------------------------------------------

    def _check_headers(
        self, message: dict[str, Any], headers: dict[bytes, bytes]
    ) -> McpError | None:
        """Compare the request metadata headers with the body (see `headers.py`)."""
        method: str = message["method"]
        raw = headers.get(_METHOD)
        if raw is None:
            hint = (
                "; a client of MCP 2025-11-25 or earlier sends initialize first"
                if self.server.serves_legacy
                else ""
            )
            return _mismatch(f"the Mcp-Method header is required (here {_show(method)}){hint}")
        # Header values are decoded once per distinct raw value (a client sends the same few
        # again and again); each cache holds one transformation only.
        texts = self._text_cache
        value = texts.get(raw)
        if value is None:
            value = _remember(texts, raw, raw.strip(b" \t").decode("latin-1"))
        if value != method:
            return _mismatch(
                f"Mcp-Method header value {_show(value)} does not match body method {_show(method)}"
            )
        params = message.get("params")
        raw = headers.get(b"mcp-protocol-version")
        if raw is None:
            return _mismatch("the MCP-Protocol-Version header is required")
        meta = params.get("_meta") if params is not None else None
        body_version = meta.get(meta_keys.PROTOCOL_VERSION) if isinstance(meta, dict) else None
        # A body without a version is malformed, which the dispatcher reports (-32602).
        if isinstance(body_version, str):
            value = texts.get(raw)
            if value is None:
                value = _remember(texts, raw, raw.strip(b" \t").decode("latin-1"))
            if value != body_version:
                return _mismatch(
                    f"MCP-Protocol-Version header value {_show(value)} does not match "
                    f"_meta[{meta_keys.PROTOCOL_VERSION!r}] {_show(body_version)}"
                )
        field = _NAME_FIELDS.get(method)
        if field is None or params is None:
            return None
        name = params.get(field)
        if not isinstance(name, str):
            return None  # the dispatcher says what is wrong with the body
        raw = headers.get(b"mcp-name")
        if raw is None:
            if method in _NAME_OPTIONAL:
                return None  # tasks/*: lenient on a missing header (see `NAME_OPTIONAL`)
            return _mismatch(f"the Mcp-Name header is required for {method} (params.{field})")
        names = self._name_cache
        value = names.get(raw)
        if value is None:
            try:
                value = mcp_headers.decode_value(raw)
            except ValueError as exc:
                return _mismatch(f"the Mcp-Name header {exc}")
            _remember(names, raw, value)
        if value != name:
            return _mismatch(
                f"Mcp-Name header value {_show(value)} does not match body params.{field} "
                f"{_show(name)}"
            )
        if method == "tools/call":
            definition = self.server.tool_definition(name)
            cached = self._tool_params.get(name)
            annotated = (
                cached[1]
                if cached is not None and cached[0] is definition
                else self._header_params(name, definition)
            )
            if annotated:
                return _check_param_headers(annotated, params.get("arguments"), headers)
        return None

    def _header_params(
        self, tool: str, definition: dict[str, Any] | None
    ) -> tuple[_ParamHeader, ...]:
        """The `x-mcp-header` annotations of tool `tool`, whose definition is `definition`
        (remembered with it: a tool registered again is read again)."""
        if definition is None:
            return ()
        try:
            params = mcp_headers.header_params(definition.get("inputSchema"))
        except mcp_headers.InvalidHeaderAnnotation as exc:
            logger.warning("tool %r: %s; its x-mcp-header annotations are not enforced", tool, exc)
            params = ()
        checks = tuple(
            _ParamHeader(
                param.header,
                param.header.lower().encode("ascii"),
                param.path,
                "arguments." + ".".join(param.path),
            )
            for param in params
        )
        self._tool_params[tool] = (definition, checks)
        return checks

    # --- cached header parsing -----------------------------------------------------------

    def _accepts(self, value: bytes) -> tuple[bool, bool]:
        known = self._accept_cache.get(value)
        if known is None:
            ranges = _media_ranges(value)
            known = (
                _acceptable(ranges, "application/json"),
                _acceptable(ranges, "text/event-stream"),
            )
            _remember(self._accept_cache, value, known)
        return known

    def _is_json_type(self, value: bytes) -> bool:
        known = self._json_type_cache.get(value)
        if known is None:
            media = value.decode("latin-1").split(";")[0].strip().lower()
            known = media == "application/json"
            _remember(self._json_type_cache, value, known)
        return known

    def _origin_allowed(self, value: bytes) -> bool:
        known = self._origin_cache.get(value)
        if known is None:
            origin = value.decode("latin-1").strip().rstrip("/").lower()
            if self._origins is not None:
                known = "*" in self._origins or origin in self._origins
            else:
                known = _local_origin(origin)
            _remember(self._origin_cache, value, known)
        return known

    def _host_allowed(self, value: bytes | None) -> bool:
        if value is None or self._hosts is None:
            return self._hosts is None
        known = self._host_cache.get(value)
        if known is None:
            try:
                host = urlsplit("//" + value.decode("latin-1").strip()).hostname
            except ValueError:
                host = None
            known = _remember(
                self._host_cache,
                value,
                host is not None and (host in self._hosts or f"[{host}]" in self._hosts),
            )
        return known


def _closing(send: Send) -> Send:
    """`send`, with `Connection: close` added to the response's headers."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return closing


def _modern(message: dict[str, Any]) -> bool:
    """Whether a request's params carry a modern `_meta` protocol version (of any value)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta_keys.PROTOCOL_VERSION in meta


def _remember(cache: dict[bytes, _T], key: bytes, value: _T) -> _T:
    """`value`, remembered for `key` unless `key` is long (values come from clients: never
    let a cache grow without bound, in entries or in bytes)."""
    if len(key) <= _CACHE_KEY_LIMIT:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value
    return value


class _ParamHeader(NamedTuple):
    """One `Mcp-Param-*` header to check: its name, as a header key, the argument's path and
    that path as error messages name it (all worked out once per tool definition)."""

    header: str
    key: bytes
    path: tuple[str, ...]
    where: str


def _check_param_headers(
    params: tuple[_ParamHeader, ...], arguments: Any, headers: dict[bytes, bytes]
) -> McpError | None:
    for param in params:
        header = param.header
        body_value = mcp_headers.argument_at(arguments, param.path)
        raw = headers.get(param.key)
        where = param.where
        if raw is None:
            if body_value is None:
                continue
            return _mismatch(f"the {header} header is required: the body has {where}")
        try:
            value = mcp_headers.decode_value(raw)
        except ValueError as exc:
            return _mismatch(f"the {header} header {exc}")
        if body_value is None:
            return _mismatch(f"{header} header is set but the body has no {where}")
        if not mcp_headers.argument_matches(value, body_value):
            return _mismatch(
                f"{header} header value {_show(value)} does not match body {where} "
                f"{_show(str(body_value))}"
            )
    return None


class _Exchange:
    """One request's response: plain JSON, or an SSE stream once a notification comes."""

    __slots__ = (
        "accept_sse",
        "disconnected",
        "done",
        "keepalive",
        "keepalive_interval",
        "lock",
        "receive",
        "send",
        "streaming",
        "task",
        "watcher",
    )

    def __init__(
        self, send: Send, receive: Receive, accept_sse: bool, keepalive_interval: float
    ) -> None:
        self.send = send
        self.receive = receive
        #: The task running the handler, known once it waits (only then can it be cancelled).
        self.task: asyncio.Task[Any] | None = None
        self.accept_sse = accept_sse
        self.keepalive_interval = keepalive_interval
        self.streaming = False
        self.done = False
        self.disconnected = False
        self.lock: asyncio.Lock | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.keepalive: asyncio.Task[None] | None = None

    def watch(self) -> None:
        if not self.done:
            self.watcher = asyncio.ensure_future(self._wait_for_disconnect())

    async def _wait_for_disconnect(self) -> None:
        # The body has been read, so the next message is the disconnect (or, on some servers,
        # the end of our own response). Anything else is ignored, a bounded number of times.
        for _ in range(16):
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
        else:
            return
        if not self.done:
            self.disconnected = True
            self.done = True
            assert self.task is not None  # set before the watcher starts
            self.task.cancel()

    async def notify(self, message: dict[str, Any]) -> None:
        """The handler's notification sink: the first one turns the answer into a stream."""
        if self.done or not self.accept_sse:
            return
        event = encode_event(orjson.dumps(message))
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if self.done:
                return
            if not self.streaming:
                self.streaming = True
                await self.send(
                    {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                )
                if self.keepalive_interval > 0:
                    self.keepalive = asyncio.ensure_future(self._keep_alive())
            await self.send({"type": "http.response.body", "body": event, "more_body": True})

    async def _keep_alive(self) -> None:
        while not self.done:
            await asyncio.sleep(self.keepalive_interval)
            assert self.lock is not None
            async with self.lock:
                if self.done:
                    return
                await self.send(
                    {"type": "http.response.body", "body": KEEPALIVE, "more_body": True}
                )

    def finish(self) -> None:
        """No more notifications: the handler is over (or the client is gone)."""
        self.done = True
        if self.watcher is not None:
            self.watcher.cancel()
        if self.keepalive is not None:
            self.keepalive.cancel()

    async def respond(self, response: dict[str, Any]) -> None:
        body = orjson.dumps(response)
        if self.streaming:
            assert self.lock is not None
            async with self.lock:
                await self.send(
                    {"type": "http.response.body", "body": encode_event(body), "more_body": False}
                )
            return
        await send_json(self.send, status_of(response), body)


async def _too_large(send: Send, limit: int) -> None:
    await reject(
        send,
        413,
        INVALID_REQUEST,
        f"Payload Too Large: a JSON-RPC message may be at most {limit} bytes here",
    )


# --- running it --------------------------------------------------------------------------


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, ending listen streams and legacy sessions (their GET streams) before
    it waits for connections to close (a shutdown would otherwise wait on them for ever).

    SIGTERM drains first: for `drain_grace` seconds the app fails the health check and closes
    each connection after its response while still serving, so a load balancer stops sending
    here before the socket closes (a request it sent on a kept-alive connection is answered,
    never cut); then the usual shutdown. A second SIGTERM skips the rest of the grace, and
    the process exits normally (status 0), not by the signal.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        mcp_server: ServerEndpoint,
        running: contextlib.AsyncExitStack | None = None,
        drain_grace: float = 0.0,
    ) -> None:
        super().__init__(config)
        self.mcp_server = mcp_server
        self.running = running
        self.drain_grace = drain_grace
        self._drain_until: float | None = None
        self._drain_logged = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM:
            super().handle_exit(sig, frame)
            return
        # Not recorded for uvicorn to raise again at the end: a drained stop is a clean exit.
        app = self.config.app
        if self._drain_until is None and self.drain_grace > 0 and not self.should_exit:
            self._drain_until = time.monotonic() + self.drain_grace
            if isinstance(app, StreamableHTTPApp):
                app.drain()
        else:
            self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self._drain_until is not None and not self.should_exit:
            if not self._drain_logged:  # logged here, not in the signal handler
                self._drain_logged = True
                logger.warning(
                    "SIGTERM: draining; the health check fails for %.3g s, then new "
                    "connections are refused and requests in flight finish",
                    self.drain_grace,
                )
            if time.monotonic() >= self._drain_until:
                self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, StreamableHTTPApp):
            if self._drain_until is not None:
                # A drain lets legacy requests in flight finish: ending their sessions would
                # cancel them. New connections are refused from now on.
                for listener in self.servers:
                    listener.close()
                await app.sessions.settle(self.config.timeout_graceful_shutdown)
            app.close()
        else:
            self.mcp_server.close_subscriptions()
        await super().shutdown(sockets)
        if self.running is not None:
            # Run out here, not after `serve()` returns: on SIGINT uvicorn re-raises the
            # signal as `serve()` ends, and the process would die before the lifespan ran out.
            await self.running.aclose()


async def serve_http(
    server: ServerEndpoint,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    path: str | None = "/mcp",
    allowed_origins: Iterable[str] | None = None,
    allowed_hosts: Iterable[str] | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    keepalive_interval: float = 15.0,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_inflight_body_bytes: int = DEFAULT_MAX_INFLIGHT_BODY_BYTES,
    session_idle_timeout: float = 3600.0,
    max_sessions: int = 1000,
    session_buffer_bytes: int = 1024 * 1024,
    sse_retry: float = 1.0,
    sse_path: str | None = "/sse",
    max_sse_streams: int = DEFAULT_MAX_STREAMS,
    drain_grace: float = DEFAULT_DRAIN_GRACE,
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    **uvicorn_kwargs: Any,
) -> None:
    """Serve `server` over Streamable HTTP with uvicorn until stopped (Ctrl-C, SIGTERM).

    Connections are bounded (see `HTTPLimits`, where 0 turns a limit off): `header_timeout`
    and `body_timeout` seconds for a request's headers and body (408 past them), `keep_alive`
    seconds of idleness between requests, `max_connections` open at once (503 past it;
    lowered if need be to stay clear of the process's open-files limit, whose soft value is
    first raised toward the hard one), `max_header_size` bytes of headers (431), and
    `max_inflight_body_bytes` of request bodies in progress at once (503 with `Retry-After`).
    Legacy sessions: `session_idle_timeout`, `max_sessions`, `session_buffer_bytes` and
    `sse_retry`, and the HTTP+SSE transport: `sse_path` and `max_sse_streams`, as
    `StreamableHTTPApp` takes them.

    SIGTERM drains (a rolling restart): for `drain_grace` seconds (0 = none) the health check
    (`GET` of the endpoint) answers 503 and each response closes its connection, while every
    request is still served; then no new connection is accepted, and the requests in flight
    get `drain_timeout` seconds (0 = no limit) to finish before they are cancelled; then the
    function returns. Ctrl-C skips the grace. A second SIGTERM ends the grace at once.

    uvicorn picks uvloop and httptools when they are installed. Other keyword arguments go to
    `uvicorn.Config` (access logging is off unless `access_log=True`; `http` may name "h11" or
    "httptools"). At shutdown, open `subscriptions/listen` streams and legacy sessions end
    gracefully before connections are drained. The server's lifespan runs from before the
    socket is bound (a failure is a `LifespanError`: nothing is served) until uvicorn is done.
    """
    if "timeout_keep_alive" in uvicorn_kwargs:
        raise TypeError("serve_http: pass keep_alive=..., not timeout_keep_alive=...")
    if drain_grace < 0 or drain_timeout < 0:
        raise ValueError("serve_http: drain_grace and drain_timeout must be >= 0")
    if uvicorn_kwargs.get("ws", "none") != "none":
        # An upgraded connection would leave the connection count; the endpoint takes none.
        raise ValueError("serve_http: the MCP endpoint serves no WebSockets (ws must be 'none')")
    limits = HTTPLimits(
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keep_alive=keep_alive,
        max_connections=connection_cap(max_connections, raise_open_files_limit()),
        max_header_size=max_header_size,
        max_inflight_body_bytes=max_inflight_body_bytes,
    )
    app = StreamableHTTPApp(
        server,
        path=path,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        max_body_size=max_body_size,
        max_inflight_body_bytes=limits.max_inflight_body_bytes,
        keepalive_interval=keepalive_interval,
        session_idle_timeout=session_idle_timeout,
        max_sessions=max_sessions,
        session_buffer_bytes=session_buffer_bytes,
        sse_retry=sse_retry,
        sse_path=sse_path,
        max_sse_streams=max_sse_streams,
    )
    uvicorn_kwargs.setdefault("access_log", False)
    uvicorn_kwargs["ws"] = "none"
    uvicorn_kwargs["http"] = guarded_protocol(limits, uvicorn_kwargs.get("http", "auto"))
    uvicorn_kwargs["timeout_keep_alive"] = limits.keep_alive
    uvicorn_kwargs.setdefault("timeout_graceful_shutdown", drain_timeout or None)
    config = uvicorn.Config(app, host=host, port=port, **uvicorn_kwargs)
    # Started before the socket is bound: a lifespan that fails leaves nothing listening. The
    # app's own ASGI lifespan then shares this run (and `lifespan="off"` cannot skip it).
    async with contextlib.AsyncExitStack() as running:
        await running.enter_async_context(server.running())
        # What exists now (modules, schemas, the lifespan's state) lives as long as the
        # process: kept out of the cycle collector, whose full passes would otherwise walk it
        # all (~100k objects, tens of ms) whenever requests in flight get promoted, which
        # under many concurrent legacy sessions was every half second.
        gc.collect()
        gc.freeze()
        await _Uvicorn(config, server, running, drain_grace).serve()


# --- uvicorn's worker processes ---------------------------------------------------------------

_APP_KEYWORDS = frozenset(
    ("path", "allowed_origins", "allowed_hosts", "max_body_size", "keepalive_interval",
     "session_idle_timeout", "max_sessions", "session_buffer_bytes", "sse_retry", "sse_path",
     "max_sse_streams")
)  # fmt: skip
_LIMIT_KEYWORDS = frozenset(
    ("header_timeout", "body_timeout", "keep_alive", "max_connections", "max_header_size",
     "max_inflight_body_bytes")
)  # fmt: skip

# This process's worker app and the protocol class bounding its connections: uvicorn resolves
# `http=` by import, so the class the app's limits built is found here.
_worker: tuple[StreamableHTTPApp, type[asyncio.Protocol]] | None = None


def worker_app(server: ServerEndpoint, **options: Any) -> StreamableHTTPApp:
    """The app of one uvicorn worker process, bounded as `serve_http` bounds its own.

    `options` are `serve_http`'s keywords (the app's and the connection limits; HTTP+SSE is
    off unless `sse_path` is given, as a session's POSTs may reach another worker). Load it from
    an app factory and name `worker_protocol` as uvicorn's `http` (with `ws="none"` and
    `timeout_keep_alive` equal to `keep_alive`): each connection of the worker then gets the
    limits. The server's lifespan runs with the ASGI lifespan of each worker.
    """
    global _worker
    unknown = set(options) - _APP_KEYWORDS - _LIMIT_KEYWORDS
    if unknown:
        raise TypeError(f"worker_app: unexpected keywords {', '.join(sorted(unknown))}")
    limit = {name: value for name, value in options.items() if name in _LIMIT_KEYWORDS}
    limit["max_connections"] = connection_cap(
        limit.get("max_connections", DEFAULT_MAX_CONNECTIONS), raise_open_files_limit()
    )
    limits = HTTPLimits(**limit)
    app_options = {name: value for name, value in options.items() if name in _APP_KEYWORDS}
    # Workers share one port: the POSTs of an HTTP+SSE session would reach any of them, not
    # the one holding its stream, so that transport is off unless a caller insists.
    app_options.setdefault("sse_path", None)
    app = StreamableHTTPApp(
        server, max_inflight_body_bytes=limits.max_inflight_body_bytes, **app_options
    )
    app.freeze_heap_on_start = True  # a worker process is ours, as `serve_http`'s is
    guarded = guarded_protocol(limits)

    def shutdown(self: Any) -> None:
        # uvicorn asks each connection to end before it waits for them: open listen streams
        # and legacy sessions end first, or a worker would wait on them for ever.
        app.close()
        super(closing, self).shutdown()

    closing: type[asyncio.Protocol] = type(guarded.__name__, (guarded,), {"shutdown": shutdown})
    _worker = (app, closing)
    return app


def worker_protocol(**kwargs: Any) -> asyncio.Protocol:
    """uvicorn's `http=` for worker processes (`mrtr.transport.http_server:worker_protocol`):
    a connection bounded by the limits of this process's `worker_app`."""
    if _worker is None:
        raise RuntimeError(
            "worker_protocol bounds the connections of worker_app's app: load the app with "
            "worker_app (mrtr.cli.serve:make_app) in this process"
        )
    return _worker[1](**kwargs)


__all__ = ["StreamableHTTPApp", "close_sse_stream", "serve_http", "worker_app", "worker_protocol"]
