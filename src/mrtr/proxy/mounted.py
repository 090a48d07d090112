"""A proxy's backend, or a `Client`, mounted in a `Server` (`server.mount(prefix, other)`).

`MountedBackend` is the `Mountable` (`mrtr.server.mount`) of a `ProxyBackend`; `mrtr proxy`
is one mounted with no prefix (`gateway.py`), so a proxy and a mount follow one algorithm.
Rules:

1. The backend is started (a stdio command), or connected (a URL, a `Client`), when the
   outer server starts, inside its lifespan, and closed when it stops; a `Client` connected
   already is left open, its owner's to close. A backend that cannot start, or whose lists
   cannot be read then, stops the outer server's start with a `LifespanError` saying why.
2. Its lists (every page) are read once it has started, and again on each `list_changed` it
   sends; the outer server applies them (and a collision when it starts is an error that
   stops the start, one found later is logged and the item left out: mount.py, rule 3). Its
   `resources/updated` reach the outer server's subscribers under the outer URI.
3. A `tools/call` is a held call (`held.py`), as through `mrtr proxy`: the backend's questions
   go to the outer client as rounds of the outer request on 2026-07-28 (the backend call held
   meanwhile, never run again) and live on a legacy session. Prompts, reads and completions
   go to the backend's shared session. The outer server's auth applies; the backend's tools
   need no scopes of their own.
4. Held calls live in this process. Where the outer server has a shared store and broker
   (`MRTR_STORE_URL`, or `ServerOptions.store` and `broker`), a round that reaches another
   instance is relayed to this one (`relay.py`), as through `mrtr proxy`; the relay starts
   with the first `tools/call` (the options are the outer server's, which a `Mountable` meets
   in its requests) and stops with the outer server. Without them, the rounds of one call
   must reach this process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..client.client import Client
from ..protocol.errors import METHOD_NOT_FOUND, McpError
from ..server.endpoint import LifespanError
from ..server.mount import KINDS, Mountable
from .follow import follow
from .incident import BackendIncident
from .proxy import LISTS, ProxyBackend
from .relay import Relay

if TYPE_CHECKING:
    from ..server.context import RequestContext

#: The `Mountable` kind of each of the backend's lists (`proxy.LISTS`).
_KIND = {
    "tools": "tools",
    "prompts": "prompts",
    "resources": "resources",
    "templates": "resourceTemplates",
}
#: The change that announces each of the backend's lists, by `follow`'s kind.
_CHANGE = {kind: change for change, kinds in KINDS.items() for kind in kinds}


class MountedBackend:
    """A `ProxyBackend` as a `Mountable` (the module rules)."""

    def __init__(
        self, backend: ProxyBackend, *, opened: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.backend = backend
        self.name = backend.describe()
        #: Called once the backend has started, and each time its session opened anew.
        self._opened = opened
        #: The backend's listings by `Mountable` kind, as last read.
        self.lists: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _KIND.values()}
        self._changed: Callable[[str], None] = _nobody
        self._updated: Callable[[str], None] = _nobody
        #: Whether the relay is settled for this run: started, or not wanted (rule 4).
        self._relay_settled = False
        self._relay_starting = asyncio.Lock()

    def listing(self, kind: str) -> list[dict[str, Any]]:
        """The backend's listings of `kind`, as last read (none before it started)."""
        return self.lists.get(kind, [])

    def watch(
        self,
        changed: Callable[[str], None],
        check: Callable[[str, str], None],
        updated: Callable[[str], None],
    ) -> None:
        """See `Mountable.watch`; `check` goes unused: the backend registers on its own, so a
        collision is found when its list is read (rule 2)."""
        self._changed, self._updated = changed, updated

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[MountedBackend]:
        """The backend started and its lists read, and followed while inside (rules 1, 2)."""
        backend = self.backend
        watch: asyncio.Task[None] | None = None
        try:
            try:
                await backend.start()
                if self._opened is not None:
                    await self._opened()
                await self._read(tuple(LISTS))
            except McpError as exc:  # the outer server does not start, and says why
                # To the operator: the backend as configured, redacted (incident.py).
                why = exc.detail if isinstance(exc, BackendIncident) else exc.message
                raise LifespanError(f"the backend did not start: {why}") from exc
            watch = asyncio.ensure_future(
                follow(
                    backend,
                    resync=self._resync,
                    announce=lambda kind: self._changed(_CHANGE[_KIND[kind]]),
                    updated=lambda uri: self._updated(uri),
                    resources=lambda: [str(item.get("uri")) for item in self.lists["resources"]],
                    reopened=self._reopened,
                )
            )
            yield self
        finally:
            relay, backend.relay = backend.relay, None
            self._relay_settled = False
            if relay is not None:
                await relay.stop()
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(BaseException):
                    await watch
            await backend.close()

    async def _read(self, lists: tuple[str, ...]) -> bool:
        """Read the backend's `lists` (`proxy.LISTS` names); whether any differs."""
        changed = False
        for name in lists:
            method, key = LISTS[name]
            try:
                items = await self.backend.list(method, key)
            except McpError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                items = []  # the backend offers none of this kind
            kind = _KIND[name]
            changed = changed or items != self.lists[kind]
            self.lists[kind] = items
        return changed

    async def _reopened(self) -> None:
        """The backend's session was opened anew: it may be another server now."""
        if self._opened is not None:
            await self._opened()
        await self._resync(tuple(LISTS))

    async def _resync(self, lists: tuple[str, ...]) -> bool:
        """Read `lists` again and have the outer server apply each that changed."""
        if not await self._read(lists):
            return False
        for change in {_CHANGE[_KIND[name]] for name in lists}:
            self._changed(change)
        return True

    def tool_scopes(self, name: str) -> frozenset[str]:
        """None: the backend checks its own authorization (rule 3)."""
        return frozenset()

    async def request(self, method: str, params: dict[str, Any], ctx: RequestContext) -> Any:
        """See `Mountable.request` (rule 3)."""
        backend = self.backend
        if method == "tools/call":
            if not self._relay_settled:
                await self._start_relay(ctx)
            return await backend.call_tool(ctx, params["name"])
        if method == "prompts/get":
            prompt = await backend.get_prompt(params["name"], params.get("arguments"))
            return prompt.to_wire()
        if method == "resources/read":
            read = await backend.read_resource(params["uri"])
            return read.to_wire()
        if method == "completion/complete":
            context = params.get("context") or {}
            arguments = context.get("arguments") if isinstance(context, dict) else None
            completion = await backend.complete(params["ref"], params["argument"], arguments or {})
            return {"completion": completion}
        raise McpError(METHOD_NOT_FOUND, f"a mounted backend does not serve {method}")

    async def _start_relay(self, ctx: RequestContext) -> None:
        """Start relaying rounds between instances if the outer server shares a store and a
        broker (rule 4); once per run, whichever call comes first."""
        async with self._relay_starting:
            if self._relay_settled:
                return
            options = ctx.server.options
            store, broker = options.store, options.broker
            if store is not None and broker is not None:
                relay = Relay(self.backend.held, store, broker)
                await relay.start()
                self.backend.relay = relay
            self._relay_settled = True


def _nobody(_: str) -> None:
    """What a change is told to before the mount watches."""


def as_mountable(other: ProxyBackend | Client | Mountable) -> Mountable:
    """`other` as `Server.mount` takes it: a `ProxyBackend` or a `Client` (the backend of
    one) as a `MountedBackend`, a `Mountable` as it is; a `TypeError` for anything else."""
    if isinstance(other, Client):
        other = ProxyBackend(other)
    if isinstance(other, ProxyBackend):
        return MountedBackend(other)
    if not all(callable(getattr(other, name, None)) for name in _MOUNTABLE):
        raise TypeError(
            f"cannot mount {type(other).__name__}: give an mrtr Server, a Client, a "
            "mrtr.proxy.ProxyBackend, or a mrtr.server.mount.Mountable"
        )
    return other


#: The methods a `Mountable` has.
_MOUNTABLE = ("listing", "watch", "running", "tool_scopes", "request")


__all__ = ["MountedBackend", "as_mountable"]
