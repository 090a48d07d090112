"""The backend's tools, prompts, resources and templates, registered on the proxy's `Server`.

Each backend entry becomes an entry of the same name (URI) whose handler forwards to the
backend (`ProxyBackend`), with the backend's own listing fields: schemas, descriptions,
annotations, icons and `_meta`. The proxy's lists are paged by the proxy. `sync` brings the
registrations in line with the backend's lists (at start, and on each change the backend
announces): what the backend dropped is removed, what it added is registered, and the
`Server` tells its clients that the list changed. An entry the proxy cannot register (a tool
name outside MCP's characters, a prompt argument that is no identifier) is skipped with a
warning naming it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from ..protocol.errors import METHOD_NOT_FOUND, McpError
from ..protocol.types import Icon, ToolAnnotations
from ..server.context import RequestContext
from ..server.server import Server
from ..server.uri_template import UriTemplate
from .proxy import LISTS, ProxyBackend

logger = logging.getLogger("mrtr.proxy")

Handler = Callable[..., Coroutine[Any, Any, Any]]


class Mirror:
    """Keeps `server`'s registrations in line with `backend`'s lists."""

    def __init__(self, server: Server, backend: ProxyBackend) -> None:
        self.server = server
        self.backend = backend
        #: What is registered now, by kind: name or URI -> the backend's listing.
        self.known: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in LISTS}
        self._completion = False

    async def sync(self, *kinds: str) -> bool:
        """Bring the `kinds` named (default all) in line with the backend's lists; whether
        anything changed (the server then told its clients)."""
        changed = False
        for kind in kinds or tuple(LISTS):
            method, key = LISTS[kind]
            try:
                items = await self.backend.list(method, key)
            except McpError as exc:
                if exc.code != METHOD_NOT_FOUND:
                    raise
                items = []  # the backend offers none of this kind
            changed = self._apply(kind, items) or changed
        if not self._completion and (self.known["prompts"] or self.known["templates"]):
            self._completion = True
            self.server.completion()(self.backend.complete)
        return changed

    def _apply(self, kind: str, items: list[dict[str, Any]]) -> bool:
        ident = (
            "name"
            if kind in ("tools", "prompts")
            else ("uri" if kind == "resources" else "uriTemplate")
        )
        fresh = {item[ident]: item for item in items if isinstance(item.get(ident), str)}
        known = self.known[kind]
        before = dict(known)
        for key in [k for k in known if fresh.get(k) != known[k]]:
            self._remove(kind, key)
            del known[key]
        for key, item in fresh.items():
            if key in known:
                continue
            try:
                self._add(kind, item)
            except (ValueError, TypeError) as exc:
                logger.warning("the proxy cannot serve the backend's %s %r: %s", kind, key, exc)
                continue
            known[key] = item
        return known != before

    def _remove(self, kind: str, key: str) -> None:
        server = self.server
        if kind == "tools":
            server.remove_tool(key)
        elif kind == "prompts":
            server.remove_prompt(key)
        else:
            server.remove_resource(key)

    def _add(self, kind: str, item: dict[str, Any]) -> None:
        server, backend = self.server, self.backend
        common: dict[str, Any] = {
            "title": item.get("title"),
            "description": item.get("description"),
            "icons": _icons(item.get("icons")),
            "meta": item.get("_meta") if isinstance(item.get("_meta"), dict) else None,
            "run_in_thread": False,
        }
        if kind == "tools":
            name = item["name"]

            async def call(ctx: RequestContext) -> Any:
                return await backend.call_tool(ctx, name)

            annotations = item.get("annotations")
            server.add_tool(
                call,
                name,
                input_schema=_schema(item.get("inputSchema")) or {"type": "object"},
                output_schema=_schema(item.get("outputSchema")),
                structured_output=False,
                annotations=(
                    ToolAnnotations.model_validate(annotations)
                    if isinstance(annotations, dict)
                    else None
                ),
                **common,
            )
        elif kind == "prompts":
            name = item["name"]

            async def get(ctx: RequestContext, **_: Any) -> Any:
                return await backend.get_prompt(name, ctx.params.get("arguments"))

            _shape(get, [_argument(a) for a in item.get("arguments") or [] if isinstance(a, dict)])
            server.add_prompt(get, name, **common)
        else:
            uri = item["uri"] if kind == "resources" else item["uriTemplate"]

            async def read(ctx: RequestContext, **_: Any) -> Any:
                return await backend.read_resource(ctx.params["uri"])

            fields = {**common, "name": item.get("name"), "mime_type": item.get("mimeType")}
            if kind == "resources":
                _shape(read, [])
                if isinstance(item.get("size"), int):
                    fields["size"] = item["size"]
                server.add_resource(read, uri, **fields)
            else:
                variables = UriTemplate(uri).variables
                _shape(read, [(v, True, None) for v in variables])
                server.add_resource_template(read, uri, **fields)


def _schema(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _icons(value: Any) -> list[Icon] | None:
    if not isinstance(value, list):
        return None
    return [Icon.model_validate(icon) for icon in value if isinstance(icon, dict)] or None


def _argument(arg: dict[str, Any]) -> tuple[str, bool, str | None]:
    name = arg.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"prompt argument {name!r} is not an identifier")
    description = arg.get("description")
    return name, bool(arg.get("required")), description if isinstance(description, str) else None


def _shape(fn: Handler, params: list[tuple[str, bool, str | None]]) -> None:
    """Give `fn` (which takes `ctx` and `**_`) the signature of the backend's arguments, so
    the listing shows them and the server binds them; the handler reads `ctx.params`."""
    annotations: dict[str, Any] = {"ctx": RequestContext, "return": Any}
    signature = [
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=RequestContext)
    ]
    for name, required, description in params:
        annotation: Any = str if required else str | None
        if description:
            annotation = Annotated[annotation, description]
        annotations[name] = annotation
        default = inspect.Parameter.empty if required else None
        signature.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    fn.__annotations__ = annotations
    fn.__signature__ = inspect.Signature(signature, return_annotation=Any)  # type: ignore[attr-defined]
