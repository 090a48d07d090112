"""`proxy_server`: a `Server` that serves a backend MCP server to clients of both eras.

While the server runs (its lifespan), the backend is started, the server tells its clients
the backend's identity (its `serverInfo`, its name replaced by `name` when one is given, and
its `instructions`), its lists are mirrored (`mirror.py`) and a watch on its changes keeps
them in line (`follow.py`): a backend's `list_changed` becomes a re-read of that list (and
the proxy's own `list_changed` to its clients), and a backend's `resources/updated` the
proxy's. When the server stops, held calls are cancelled and the backend is closed (a stdio
backend is stopped). With a store and a broker shared by
several instances, rounds of a held call that reach another instance are relayed to the one
holding it (`relay.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from ..client.client import Client
from ..protocol.errors import McpError
from ..server.options import ServerOptions
from ..server.server import Server
from .backend import BackendTarget
from .follow import follow
from .mirror import Mirror
from .proxy import ProxyBackend
from .relay import Relay

logger = logging.getLogger("mrtr.proxy")


def proxy_server(
    backend: ProxyBackend | BackendTarget | Client | str | list[str],
    *,
    name: str | None = None,
    options: ServerOptions | None = None,
    **backend_options: Any,
) -> Server:
    """A `Server` serving `backend` (a `ProxyBackend`, or what `ProxyBackend` takes, with
    `backend_options` for it); serve it like any other (`run()`, `asgi_app()`). Its clients
    are told the backend's name (or `name`), version and instructions once it has started."""
    if not isinstance(backend, ProxyBackend):
        backend = ProxyBackend(backend, **backend_options)
    elif backend_options:
        raise TypeError("give backend options to ProxyBackend(...), not beside one")
    proxied = backend

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[ProxyBackend]:
        mirror = Mirror(server, proxied)
        await proxied.start()
        watch: asyncio.Task[None] | None = None
        store, broker = server.options.store, server.options.broker
        relay = None if store is None or broker is None else Relay(proxied.held, store, broker)

        async def reopened() -> None:  # the backend started again: it may be another one now
            await _identify(server, proxied, name)
            await mirror.sync()

        notify = {
            "tools": server.notify_tools_changed,
            "prompts": server.notify_prompts_changed,
            "resources": server.notify_resources_changed,
        }
        try:
            await _identify(server, proxied, name)
            await mirror.sync()
            watch = asyncio.ensure_future(
                follow(
                    proxied,
                    resync=lambda kinds: mirror.sync(*kinds),
                    announce=lambda kind: notify[kind](),
                    updated=server.notify_resource_updated,
                    resources=lambda: list(mirror.known["resources"]),
                    reopened=reopened,
                )
            )
            if relay is not None:
                await relay.start()
                proxied.relay = relay
            yield proxied
        finally:
            if relay is not None:
                proxied.relay = None
                await relay.stop()
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(BaseException):
                    await watch
            await proxied.close()

    return Server(name or "mrtr-proxy", options=options, lifespan=lifespan)


async def _identify(server: Server, backend: ProxyBackend, name: str | None) -> None:
    """Tell `server`'s clients the backend's identity: its `serverInfo` (with `name`, when
    given) and `instructions`; what the backend does not tell stays the proxy's own."""
    try:
        info, instructions = await backend.identity()
    except McpError as exc:
        logger.warning("the backend did not tell who it is (%s): the proxy tells its own", exc)
        return
    info = info or server.info
    if name is not None:
        info = info.model_copy(update={"name": name})
    server.identify(info, instructions if instructions is not None else server.instructions)
