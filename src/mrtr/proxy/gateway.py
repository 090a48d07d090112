"""`proxy_server`: a `Server` that serves a backend MCP server to clients of both eras.

The proxy is the backend mounted with no prefix (`Server.mount("", backend)`, see
`mrtr.server.mount` and `mounted.py`): one algorithm lists the backend, follows its list
changes and resource updates, and forwards what its clients ask, for a mount and for the
proxy alike. What only the proxy adds: its clients are told the backend's identity (its
`serverInfo`, its name replaced by `name` when one is given, and its `instructions`) once the
backend has started, and again each time a backend session is opened anew (a restarted
backend may be another one).
"""

from __future__ import annotations

import logging
from typing import Any

from ..client.client import Client
from ..protocol.errors import McpError
from ..server.options import ServerOptions
from ..server.server import Server
from .backend import BackendTarget
from .mounted import MountedBackend
from .proxy import ProxyBackend

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
    server = Server(name or "mrtr-proxy", options=options)

    async def identify() -> None:
        await _identify(server, proxied, name)

    server.mount("", MountedBackend(proxied, opened=identify))
    return server


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
        backend.pool.incidents.name = name  # a caller never hears the name it replaces
    server.identify(info, instructions if instructions is not None else server.instructions)
