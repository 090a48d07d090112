"""Running `StreamableHTTPApp`: `serve_http` under uvicorn, with the connection limits of
`http_limits.py` and a drain on SIGTERM, and `worker_app`/`worker_protocol` for uvicorn's own
worker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import time
from collections.abc import Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from .http_app import StreamableHTTPApp
from .http_guard import guarded_protocol
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
    connection_cap,
    raise_open_files_limit,
)
from .http_sse import DEFAULT_MAX_STREAMS

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")


class UvicornServer(uvicorn.Server):
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
    gracefully before connections are drained. Responses carry no `Server` header unless
    `server_header=True`. The server's lifespan runs from before the socket is bound (a
    failure is a `LifespanError`: nothing is served) until uvicorn is done.
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
    # No `Server: uvicorn` banner: it names the software to anyone probing, and is one more
    # header written out on every response. `Date` stays (RFC 9110 asks an origin server for
    # it), and so does uvicorn's handling of `X-Forwarded-For` from trusted proxies.
    uvicorn_kwargs.setdefault("server_header", False)
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
        await UvicornServer(config, server, running, drain_grace).serve()


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
    """uvicorn's `http=` for worker processes (`mrtr.transport.http_serve:worker_protocol`):
    a connection bounded by the limits of this process's `worker_app`."""
    if _worker is None:
        raise RuntimeError(
            "worker_protocol bounds the connections of worker_app's app: load the app with "
            "worker_app (mrtr.cli.serve:make_app) in this process"
        )
    return _worker[1](**kwargs)


__all__ = ["UvicornServer", "serve_http", "worker_app", "worker_protocol"]
