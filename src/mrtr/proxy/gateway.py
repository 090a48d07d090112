"""`proxy_server`: a `Server` that serves a backend MCP server to clients of both eras.

While the server runs (its lifespan), the backend is started, its lists are mirrored
(`mirror.py`) and a watch on its changes keeps them in line: a backend's `list_changed`
becomes a re-read of that list (and the proxy's own `list_changed` to its clients), and a
backend's `resources/updated` the proxy's. When the server stops, held calls are cancelled
and the backend is closed (a stdio backend is stopped). With a store and a broker shared by
several instances, rounds of a held call that reach another instance are relayed to the one
holding it (`relay.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from ..protocol.errors import McpError
from ..server.options import ServerOptions
from ..server.server import Server
from .backend import BackendTarget
from .mirror import Mirror
from .proxy import ProxyBackend
from .relay import Relay

logger = logging.getLogger("mrtr.proxy")

#: Which lists each change the backend announces re-reads.
_CHANGED = {"tools": ("tools",), "prompts": ("prompts",), "resources": ("resources", "templates")}
#: The most resources whose updates the proxy follows on the backend.
MAX_FOLLOWED = 100


def proxy_server(
    backend: ProxyBackend | BackendTarget | str | list[str],
    *,
    name: str = "mrtr-proxy",
    options: ServerOptions | None = None,
    **backend_options: Any,
) -> Server:
    """A `Server` serving `backend` (a `ProxyBackend`, or what `ProxyBackend` takes, with
    `backend_options` for it); serve it like any other (`run()`, `asgi_app()`)."""
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
        try:
            await mirror.sync()
            watch = asyncio.ensure_future(_watch(server, mirror))
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

    return Server(name, options=options, lifespan=lifespan)


async def _watch(server: Server, mirror: Mirror) -> None:
    """Follow the backend's changes until cancelled; a failed watch starts again.

    A list change re-reads that list: a different list makes the server tell its clients,
    and an unchanged one is passed on as it came. Updates are followed for the backend's
    resources (the first `MAX_FOLLOWED`); a change of the resource list follows the new ones.
    """
    notify = {
        "tools": server.notify_tools_changed,
        "prompts": server.notify_prompts_changed,
        "resources": server.notify_resources_changed,
    }
    last: object = None
    while True:
        try:
            client = await mirror.backend.pool.shared.client()
            if last is not None and client is not last:
                await mirror.sync()  # a restarted backend may offer other things
            last = client
            uris = list(mirror.known["resources"])[:MAX_FOLLOWED]
            async with client.listen(
                tools=True, prompts=True, resources=True, resource_uris=uris
            ) as changes:
                async for change in changes:
                    if change.kind == "resource" and change.uri:
                        server.notify_resource_updated(change.uri)
                    elif change.kind in _CHANGED:
                        if not await mirror.sync(*_CHANGED[change.kind]):
                            notify[change.kind]()
                        if change.kind == "resources":
                            break  # follow the new list's resources
                else:
                    await asyncio.sleep(1.0)  # the backend ended the stream: not in a loop
        except asyncio.CancelledError:
            raise
        except (McpError, OSError) as exc:
            logger.warning("watching the backend's changes failed (%s); starting again", exc)
            await asyncio.sleep(1.0)
