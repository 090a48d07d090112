"""Following a backend's changes: its `list_changed` and `resources/updated` notifications,
for a proxy's `Server` (`gateway.py`) and for a backend mounted in one (`mounted.py`).

Rules:

1. A backend's list change re-reads that list (`resync`); a list found unchanged is passed on
   as it came (`announce`), so a change announced by hand still reaches the clients.
2. Updates are followed for the backend's resources (the first `MAX_FOLLOWED`); a change of
   the resource list follows the new ones.
3. A backend session opened again (the backend restarted) may offer other things: everything
   is re-read (`reopened`). A failed watch starts again after a second; only cancelling it
   ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..protocol.errors import McpError
from .incident import redact
from .proxy import ProxyBackend

logger = logging.getLogger("mrtr.proxy")

#: The most resources whose updates are followed on the backend.
MAX_FOLLOWED = 100
#: Which of the backend's lists (`proxy.LISTS`) each change it announces re-reads.
RESYNCED = {"tools": ("tools",), "prompts": ("prompts",), "resources": ("resources", "templates")}


async def follow(
    backend: ProxyBackend,
    *,
    resync: Callable[[tuple[str, ...]], Awaitable[bool]],
    announce: Callable[[str], None],
    updated: Callable[[str], None],
    resources: Callable[[], list[str]],
    reopened: Callable[[], Awaitable[object]],
) -> None:
    """Follow `backend`'s changes until cancelled (module rules): `resync(lists)` re-reads
    lists, saying whether they changed; `announce(kind)` ("tools", "prompts", "resources")
    passes on an unchanged one; `updated(uri)` passes on a resource update; `resources()`
    lists the URIs to follow; `reopened()` re-reads everything."""
    last: object = None
    while True:
        try:
            client = await backend.pool.shared.client()
            if last is not None and client is not last:
                await reopened()
            last = client
            uris = resources()[:MAX_FOLLOWED]
            async with client.listen(
                tools=True, prompts=True, resources=True, resource_uris=uris
            ) as changes:
                async for change in changes:
                    if change.kind == "resource" and change.uri:
                        updated(change.uri)
                    elif change.kind in RESYNCED:
                        if not await resync(RESYNCED[change.kind]):
                            announce(change.kind)
                        if change.kind == "resources":
                            break  # follow the new list's resources
                else:
                    await asyncio.sleep(1.0)  # the backend ended the stream: not in a loop
        except asyncio.CancelledError:
            raise
        except (McpError, OSError) as exc:
            logger.warning(
                "watching the backend's changes failed (%s); starting again", redact(str(exc))
            )
            await asyncio.sleep(1.0)


__all__ = ["MAX_FOLLOWED", "follow"]
