"""`Server.mount(prefix, other)`: offer another server's tools, prompts, resources, templates
and completions as one's own, under a prefix.

Rules:

1. Names: a mounted tool or prompt `name` is `prefix_name`; a resource or template URI
   `scheme://rest` is `scheme://prefix/rest` (`scheme:rest` without `//` is
   `scheme:prefix/rest`). The prefix is 1-64 characters of A-Z, a-z, 0-9, `_`, `-`, `.`; or
   empty, which renames nothing (how `mrtr proxy` serves its backend as its own).
2. A mounted thing is an entry of the outer registry whose handler forwards the request to the
   mounted one: the outer server's middleware and options apply to it as to its own, and the
   mounted server's middleware still runs around its own handler, its disabled tags hide
   what they hide, and its tools' OAuth scopes are required by the outer server.
3. Collisions are errors, whenever they can be: mounting a server whose prefixed name or URI
   is already taken, registering on the outer server a name a mount holds, and registering on
   the mounted server a name whose prefixed form the outer server holds all raise a
   `ValueError` naming both, and change nothing. A mountable whose lists are read once it
   runs (a proxy's backend) is checked when the outer server starts: a collision then stops
   the start with that error. One its later list changes bring (nobody to raise to) is logged,
   and the colliding item left out.
4. A mounted server's handler runs inside the outer request: its questions (`ctx.elicit`,
   `ctx.sample`, `ctx.list_roots`) are asked of the outer client, as MRTR rounds of the outer
   request in the 2026-07-28 era and live on a legacy session; its logs and progress go to
   the outer request's stream. Each of its rounds runs once, its result kept across the outer
   request's rounds with `ctx.once`, so its own `ctx.once` effects never repeat.
5. Changes of a mounted server's lists (a registration, a removal, tags) are applied to the
   outer registry at once, which announces them to the outer server's clients; so are its
   resource updates, under the outer URI.
6. The mounted server's lifespan runs inside the outer one (entered after it starts, left
   before it ends); mount before serving.
7. Anything satisfying `Mountable` can be mounted; an mrtr `Server` is one through
   `ServerMountable`, a proxy's backend or a `Client` through `mrtr.proxy.mounted`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import pydantic

from ..inputs import InputRequest
from ..protocol import meta as meta_keys
from ..protocol.errors import McpError
from ..protocol.versions import LATEST_PROTOCOL_VERSION
from ._engine.questions import Batch
from .context import RequestContext
from .primitives import PromptEntry, ResourceEntry, ToolEntry
from .subscriptions import PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED, TOOLS_LIST_CHANGED
from .uri_template import UriTemplate

if TYPE_CHECKING:
    from .lifespan import LifespanRunner
    from .registry import Registry

logger = logging.getLogger("mrtr.server.mount")

_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{0,64}")

#: The lists a mountable offers, by the change notification that announces each.
KINDS: dict[str, tuple[str, ...]] = {
    TOOLS_LIST_CHANGED: ("tools",),
    PROMPTS_LIST_CHANGED: ("prompts",),
    RESOURCES_LIST_CHANGED: ("resources", "resourceTemplates"),
}
#: How a registry names each kind in its messages and checks.
_NOUN = {
    "tools": "tool",
    "prompts": "prompt",
    "resources": "resource",
    "resourceTemplates": "resource template",
}

#: Sends one modern request to a mounted server: `(method, params)` -> the result, or raises.
Send = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class Mountable(Protocol):
    """Something `Server.mount` can offer under a prefix: an mrtr `Server` (`ServerMountable`),
    or a proxy to a remote or stdio server."""

    @property
    def name(self) -> str:
        """What to call it in messages."""

    def listing(self, kind: str) -> list[dict[str, Any]]:
        """The wire listings of `kind` ("tools", "prompts", "resources", "resourceTemplates")
        a client may see now, as its own list results show them."""

    def watch(
        self,
        changed: Callable[[str], None],
        check: Callable[[str, str], None],
        updated: Callable[[str], None],
    ) -> None:
        """Call `changed(kind)` (`toolsListChanged`...) after a list changes, `updated(uri)`
        after a resource changes (its own URI), and, where it can, `check(noun, key)` before it
        registers `key` ("tool", "prompt", "resource", "resource template"), which raises to
        refuse."""

    def running(self) -> AbstractAsyncContextManager[Any]:
        """Its lifespan: entered while the outer server runs."""

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The OAuth scopes a caller's token needs to call its tool `name` (checked by the
        outer server over HTTP, where tokens are, as for its own tools)."""

    def request(self, method: str, params: dict[str, Any], ctx: RequestContext) -> Awaitable[Any]:
        """Serve `tools/call`, `prompts/get`, `resources/read` or `completion/complete`
        (`params` in its own names) for the outer request `ctx`: its questions asked through
        `ctx`, its notifications sent to `ctx.notify_sink`. The result is a dict; a
        `tools/call` may also end the outer round with an `InputRequiredResult` (a manual-style
        round, continued on the retry through `ctx.request_state`). A protocol error is an
        `McpError`."""


class MountedServer(Protocol):
    """What `ServerMountable` uses of an mrtr `Server` besides its registry."""

    @property
    def name(self) -> str:
        """The server's name."""

    def running(self) -> AbstractAsyncContextManager[Any]:
        """Its lifespan."""

    def handle_request(
        self, message: dict[str, Any], notify: Any = None, transport_info: Any = None
    ) -> Awaitable[dict[str, Any]]:
        """Handle one request, giving its response."""


class ServerMountable:
    """An mrtr `Server` as a `Mountable`: its registry read directly, its requests served by
    its own entry (so its middleware runs), as 2026-07-28 rounds relayed by `relay_rounds`."""

    def __init__(self, server: MountedServer, registry: Registry) -> None:
        self.server = server
        self.registry = registry
        self.name = server.name

    def listing(self, kind: str) -> list[dict[str, Any]]:
        """The wire listings of `kind` its clients may see now."""
        registry = self.registry
        entries = registry.templates if kind == "resourceTemplates" else getattr(registry, kind)
        found = entries if isinstance(entries, list) else entries.values()
        return [e.wire for e in found if not registry.hidden(e)]

    def watch(
        self,
        changed: Callable[[str], None],
        check: Callable[[str, str], None],
        updated: Callable[[str], None],
    ) -> None:
        """See `Mountable.watch`: through the registry's hooks."""
        self.registry.watch(changed, check, updated)

    def running(self) -> AbstractAsyncContextManager[Any]:
        """The server's lifespan."""
        return self.server.running()

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The scopes its tool `name` was registered with."""
        return self.registry.tool_scopes(name)

    def request(
        self, method: str, params: dict[str, Any], ctx: RequestContext
    ) -> Awaitable[dict[str, Any]]:
        """See `Mountable.request`: the server's entry, round after round."""
        send = functools.partial(self._send, ctx)
        return relay_rounds(ctx, method, params, send)

    async def _send(self, ctx: RequestContext, method: str, params: dict[str, Any]) -> Any:
        message = {"jsonrpc": "2.0", "id": f"mounted:{method}", "method": method, "params": params}
        response = await self.server.handle_request(message, ctx.notify_sink, ctx.transport_info)
        error = response.get("error")
        if error is not None:
            raise McpError(error.get("code", -32603), error.get("message", ""), error.get("data"))
        return response["result"]


async def relay_rounds(
    ctx: RequestContext, method: str, params: dict[str, Any], send: Send
) -> dict[str, Any]:
    """Serve `method` on a 2026-07-28 server through `send`, for the outer request `ctx`
    (rule 4): each `input_required` it answers is asked of the outer client through `ctx`, and
    the answers go back with its `requestState`, until it completes. Each of its rounds runs
    once however often the outer handler is replayed."""
    meta: dict[str, Any] = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_CAPABILITIES: ctx.client_capabilities,
    }
    for key, value in (
        (meta_keys.CLIENT_INFO, ctx.client_info),
        (meta_keys.LOG_LEVEL, ctx.log_level),
        (meta_keys.PROGRESS_TOKEN, ctx.progress_token),
    ):
        if value is not None:
            meta[key] = value
    request = {**params, "_meta": meta}
    step = 0
    while True:
        step += 1
        # "retry": a round cut short may run again, as its own `once` keeps its effects.
        run = functools.partial(send, method, request)
        result: dict[str, Any] = await ctx.once(f"mounted:{step}", run, on_uncertain="retry")
        if result.get("resultType") != "input_required":
            return _as_outer(result)
        asked = result.get("inputRequests") or {}
        # Keyed by round too: a mounted handler may reuse a key from one round to the next.
        questions = {
            key: ctx.question(InputRequest.model_validate(value), key=f"{key}@{step}", convert=_raw)
            for key, value in asked.items()
        }
        answers = await Batch(ctx.engine, questions)
        request = {**params, "_meta": meta, "inputResponses": answers}
        if result.get("requestState") is not None:
            request["requestState"] = result["requestState"]


#: What a 2026-07-28 result carries for its own era; the outer server's era adds its own.
_ERA_FIELDS = ("resultType", "ttlMs", "cacheScope")


def _as_outer(result: dict[str, Any]) -> dict[str, Any]:
    """A mounted server's final result as the outer handler's value: without its era's fields
    and its server info (a copy: the kept round's value stays as it came)."""
    outer = {key: value for key, value in result.items() if key not in _ERA_FIELDS}
    meta = outer.get("_meta")
    if isinstance(meta, dict):
        meta = {key: value for key, value in meta.items() if key != meta_keys.SERVER_INFO}
        if meta:
            outer["_meta"] = meta
        else:
            del outer["_meta"]
    return outer


def _raw(key: str, value: Any) -> Any:
    """An answer as the wire has it: a live answer may come as a result model."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
        value.pop("_meta", None)
    return value


# --- the entries a mount puts in the outer registry (rule 2) -------------------------------


class _MountedTool(ToolEntry):
    __slots__ = ()

    def result(self, value: Any) -> Any:
        return value if type(value) is dict else super().result(value)


class _MountedPrompt(PromptEntry):
    __slots__ = ()

    def result(self, value: Any) -> Any:
        return value if type(value) is dict else super().result(value)


class _MountedResource(ResourceEntry):
    __slots__ = ()

    def result(self, uri: str, value: Any) -> Any:
        return value if type(value) is dict else super().result(uri, value)


def prefixed_uri(prefix: str, uri: str) -> str:
    """`uri` as mounted under `prefix` (rule 1)."""
    if not prefix:
        return uri
    scheme, sep, rest = uri.partition("://")
    if sep:
        return f"{scheme}://{prefix}/{rest}"
    scheme, sep, rest = uri.partition(":")
    if not sep:
        raise ValueError(f"cannot mount {uri!r} under {prefix!r}: it has no scheme")
    return f"{scheme}:{prefix}/{rest}"


def _outer_uri(prefix: str, item: Any) -> Any:
    """A resource's contents named by its outer URI (a copy)."""
    if isinstance(item, dict) and isinstance(item.get("uri"), str) and ":" in item["uri"]:
        return {**item, "uri": prefixed_uri(prefix, item["uri"])}
    return item


def unprefixed_uri(prefix: str, uri: str) -> str:
    """The mounted server's own URI for `uri`, as mounted under `prefix` (rule 1)."""
    if not prefix:
        return uri
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, sep, rest = uri.partition(":")
    return f"{scheme}{sep}{rest.removeprefix(prefix + '/')}"


class Mount:
    """One mountable offered under one prefix in one outer registry (the module rules)."""

    def __init__(self, registry: Registry, prefix: str, other: Mountable) -> None:
        self.registry = registry
        self.prefix = prefix
        self.other = other
        #: What this mount put in the registry: (noun, key) -> the mounted listing.
        self.held: dict[tuple[str, str], dict[str, Any]] = {}
        self._syncing = False

    def key(self, noun: str, key: str) -> str:
        """The outer name or URI of the mounted `key`."""
        if noun in ("tool", "prompt"):
            return f"{self.prefix}_{key}" if self.prefix else key
        return prefixed_uri(self.prefix, key)

    def _taken(self, noun: str, key: str) -> bool:
        registry = self.registry
        if noun == "tool":
            return key in registry.tools
        if noun == "prompt":
            return key in registry.prompts
        return key in registry.resources or any(t.uri == key for t in registry.templates)

    def _collision(self, noun: str, key: str, own: str) -> ValueError:
        return ValueError(
            f"{noun} {key!r} is taken twice: by the outer server and by {own!r} of "
            f"{self.other.name!r} mounted at prefix {self.prefix!r}; rename one, or mount "
            "under another prefix"
        )

    def guard_outer(self, noun: str, key: str) -> None:
        """Refuse an outer registration of a name this mount holds (rule 3)."""
        if self._syncing:
            return
        if noun == "resource template":
            noun_held = (noun, key) in self.held or ("resource", key) in self.held
        else:
            noun_held = (noun, key) in self.held
        if noun_held:
            raise self._collision(noun, key, key)

    def guard_inner(self, noun: str, key: str) -> None:
        """Refuse a mounted registration whose outer name the outer server holds (rule 3)."""
        outer = self.key(noun, key)
        if self._taken(noun, outer) and (noun, outer) not in self.held:
            raise self._collision(noun, outer, key)

    def wanted(self, change: str, skip: bool = False) -> dict[tuple[str, str], dict[str, Any]]:
        """What the registry should hold for `change` now: (noun, outer key) -> the mounted
        listing; a `ValueError` if an outer key is taken by something else (rule 3), or with
        `skip` that item logged and left out."""
        wanted: dict[tuple[str, str], dict[str, Any]] = {}
        for kind in KINDS[change]:
            noun = _NOUN[kind]
            field = {"tools": "name", "prompts": "name", "resources": "uri"}.get(
                kind, "uriTemplate"
            )
            for wire in self.other.listing(kind):
                own = wire[field]
                outer = self.key(noun, own)
                if (noun, outer) not in self.held and self._taken(noun, outer):
                    if not skip:
                        raise self._collision(noun, outer, own)
                    logger.warning("%s; it is left out", self._collision(noun, outer, own))
                    continue
                wanted[(noun, outer)] = wire
        return wanted

    def sync(self, change: str, skip: bool = False) -> bool:
        """Make the registry hold what the mountable lists now for `change` (rule 5), which
        announces what it changes; whether anything changed. `skip`: see `wanted`."""
        wanted = self.wanted(change, skip)
        self._syncing = True
        changed = False
        try:
            for held in [h for h in self.held if h[0] in _nouns(change)]:
                if wanted.get(held) != self.held[held]:
                    self._remove(*held)
                    changed = True
            for (noun, outer), wire in wanted.items():
                if (noun, outer) not in self.held:
                    self._add(noun, outer, wire)
                    changed = True
        finally:
            self._syncing = False
        return changed

    def changed(self, change: str) -> None:
        """The mountable's list of `change` changed: apply it (rule 5), a colliding item left
        out (rule 3: nobody to raise to); a change announced with nothing to apply
        (`notify_tools_changed()` said by hand) is announced as well."""
        if not self.sync(change, skip=True):
            self.registry.on_change(change)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The mountable's lifespan (rule 6), its lists applied once it started: a collision
        then is an error, which stops the outer server's start (rule 3)."""
        async with self.other.running():
            for change in KINDS:
                self.wanted(change)  # every collision is found before anything changes
            for change in KINDS:
                self.sync(change)
            yield

    def _remove(self, noun: str, outer: str) -> None:
        del self.held[(noun, outer)]
        registry = self.registry
        if noun == "tool":
            registry.remove_tool(outer)
        elif noun == "prompt":
            registry.remove_prompt(outer)
        else:
            registry.remove_resource(outer)

    def _add(self, noun: str, outer: str, wire: dict[str, Any]) -> None:
        other, registry = self.other, self.registry
        if noun == "tool":
            name = wire["name"]

            async def call_tool(ctx: RequestContext) -> Any:
                params = {"name": name, "arguments": ctx.params.get("arguments") or {}}
                return await other.request("tools/call", params, ctx)

            tool = _MountedTool(call_tool, name=outer)
            tool.wire = {**wire, "name": outer}
            tool.scopes = other.tool_scopes(name)
            registry.add_tool(tool)
        elif noun == "prompt":
            name = wire["name"]

            async def get_prompt(ctx: RequestContext) -> Any:
                params = {"name": name, "arguments": ctx.params.get("arguments") or {}}
                return await other.request("prompts/get", params, ctx)

            prompt = _MountedPrompt(get_prompt, name=outer)
            prompt.wire = {**wire, "name": outer}
            registry.add_prompt(prompt)
        else:
            prefix = self.prefix

            async def read_resource(ctx: RequestContext) -> Any:
                params = {"uri": unprefixed_uri(prefix, ctx.params["uri"])}
                result = await other.request("resources/read", params, ctx)
                contents = result.get("contents")
                if isinstance(contents, list):  # each under the URI the client reads it by
                    result["contents"] = [_outer_uri(prefix, item) for item in contents]
                return result

            template = noun == "resource template"
            resource = _MountedResource(read_resource, outer, template=False)
            resource.template = UriTemplate(outer) if template else None
            resource.wire = {**wire, "uriTemplate" if template else "uri": outer}
            registry.add_resource(resource)
        self.held[(noun, outer)] = wire

    def updated(self, uri: str) -> None:
        """The mounted resource `uri` changed: tell the outer server's subscribers (rule 5)."""
        self.registry.on_updated(prefixed_uri(self.prefix, uri))

    def owns(self, ref: dict[str, Any]) -> dict[str, Any] | None:
        """A `completion/complete` reference in the mounted server's own names, when it names
        something this mount holds; else None."""
        if ref.get("type") == "ref/prompt" and ("prompt", ref.get("name")) in self.held:
            name = str(ref["name"])
            return {**ref, "name": name.removeprefix(self.prefix + "_") if self.prefix else name}
        uri = ref.get("uri")
        if ref.get("type") == "ref/resource" and (
            ("resource", uri) in self.held or ("resource template", uri) in self.held
        ):
            assert isinstance(uri, str)
            return {**ref, "uri": unprefixed_uri(self.prefix, uri)}
        return None


def _nouns(change: str) -> tuple[str, ...]:
    return tuple(_NOUN[kind] for kind in KINDS[change])


class Completions:
    """The outer registry's completion handler once something is mounted: a reference to a
    mounted prompt or resource goes to its server, any other to the outer server's own
    handler (the one set before mounting)."""

    def __init__(self, own: Callable[..., Any] | None, own_takes_ctx: bool) -> None:
        self.own = own
        self.own_takes_ctx = own_takes_ctx
        self.mounts: list[Mount] = []

    async def __call__(
        self, ref: dict[str, Any], argument: dict[str, Any], arguments: dict[str, Any], ctx: Any
    ) -> Any:
        """Complete `argument` of `ref` (see the class)."""
        for mount in self.mounts:
            own_ref = mount.owns(ref)
            if own_ref is not None:
                params: dict[str, Any] = {"ref": own_ref, "argument": argument}
                if arguments:
                    params["context"] = {"arguments": arguments}
                result = await mount.other.request("completion/complete", params, ctx)
                return result.get("completion", {"values": []})
        if self.own is None:
            return []
        if self.own_takes_ctx:
            values = self.own(ref, argument, arguments, ctx=ctx)
        else:
            values = self.own(ref, argument, arguments)
        return await values if isinstance(values, Awaitable) else values


#: Which registries each registry has mounted (mrtr servers only), to refuse a cycle.
_MOUNTED: weakref.WeakKeyDictionary[Registry, list[Registry]] = weakref.WeakKeyDictionary()


def _reaches(start: Registry, target: Registry) -> bool:
    """Whether `start` is `target` or mounts it, directly or through other mounts."""
    seen: set[int] = set()
    todo = [start]
    while todo:
        found = todo.pop()
        if found is target:
            return True
        if id(found) not in seen:
            seen.add(id(found))
            todo.extend(_MOUNTED.get(found, ()))
    return False


def mount(registry: Registry, lifespan: LifespanRunner, prefix: str, other: Mountable) -> Mount:
    """Offer `other` in `registry` under `prefix`, its lifespan inside `lifespan` (the module
    rules); what `Server.mount` does."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"mount prefix {prefix!r} must be 1-64 characters of A-Z, a-z, 0-9, '_', '-', '.' "
            "(or empty, to offer the names as they are)"
        )
    if lifespan.active:
        raise RuntimeError(
            f"cannot mount {other.name!r} while the server runs: mount before serving"
        )
    if isinstance(other, ServerMountable) and _reaches(other.registry, registry):
        raise ValueError(
            f"cannot mount {other.name!r}: it is this server, or mounts it (directly or "
            "through others), and each would offer the other's tools without end"
        )
    added = Mount(registry, prefix, other)
    for change in KINDS:
        added.wanted(change)  # every collision is found before anything changes (rule 3)
    for change in KINDS:
        added.sync(change)
    registry.guards.append(added.guard_outer)
    if isinstance(other, ServerMountable):
        _MOUNTED.setdefault(registry, []).append(other.registry)
    other.watch(added.changed, added.guard_inner, added.updated)
    completions = registry.completion
    if not isinstance(completions, Completions):
        completions = Completions(registry.completion, registry.completion_takes_ctx)
        registry.set_completion(completions)
    completions.mounts.append(added)
    lifespan.nest(added.running)
    return added


__all__ = [
    "KINDS",
    "Completions",
    "Mount",
    "Mountable",
    "MountedServer",
    "ServerMountable",
    "mount",
    "prefixed_uri",
    "relay_rounds",
    "unprefixed_uri",
]
