"""`Registry`: what one server offers, and what a client may see of it.

Rules:

1. The registry holds the tools, prompts, resources, resource templates and the completion
   handler a server registered, each rendered once at registration (`primitives.py`). It
   knows nothing of protocol eras, sessions or transports: the era dispatchers add what their
   revision requires around what it gives.
2. An entry carrying a disabled tag is hidden: it leaves the lists and every lookup here
   (`tool`, `prompt`, `resource`, `find_resource`, `tool_definition`, `has_resource`) answers
   as if it were not registered. Templates match in registration order; replacing one keeps
   its place.
3. A change of what a client may list (a registration, a removal, a tag disabled or enabled)
   is announced through `on_change`, called with the kind of list that changed.
4. Lists are paged by an opaque cursor: an offset the client hands back unchanged; anything
   else is -32602.
5. A URI is matched against each template once (`UriTemplate.resolve`): the first template
   it fits serves it; if none does, the first that refused a value says why. A URI longer
   than `MAX_URI_LENGTH` is matched against none (a static resource is still found by it).
"""

from __future__ import annotations

import base64
import inspect
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ..protocol.errors import McpError, invalid_params
from ..protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from .primitives import PromptEntry, ResourceEntry, ToolEntry
from .subscriptions import PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED, TOOLS_LIST_CHANGED
from .uri_template import MAX_URI_LENGTH

if TYPE_CHECKING:
    from .options import ServerOptions

logger = logging.getLogger("mrtr.server")

Entry = ToolEntry | PromptEntry | ResourceEntry

#: The lists a client may page through: the entries' key in the result, and their kind.
_LISTS = {
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("resourceTemplates", "templates"),
}


def encode_cursor(offset: int) -> str:
    """The opaque cursor of a list page starting at `offset`."""
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: Any) -> int:
    """The offset an `encode_cursor` cursor names; -32602 for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, number = raw.partition(":")
        offset = int(number)
        if tag != "o" or offset < 0:
            raise ValueError
        return offset
    except (ValueError, TypeError, UnicodeDecodeError):
        raise invalid_params(
            "Invalid cursor: pass back a nextCursor from an earlier list result, unchanged"
        ) from None


def _nobody(uri: str) -> None:
    """Where a resource update goes until the server says."""


class Registry:
    """The tools, prompts, resources and templates of one server (see the module rules)."""

    def __init__(self, options: ServerOptions, on_change: Callable[[str], None]) -> None:
        self.options = options
        self.on_change = on_change
        self.tools: dict[str, ToolEntry] = {}
        self.prompts: dict[str, PromptEntry] = {}
        self.resources: dict[str, ResourceEntry] = {}
        self.templates: list[ResourceEntry] = []
        #: The argument-completion handler, and whether it takes the request's context.
        self.completion: Callable[..., Any] | None = None
        self.completion_takes_ctx = False
        #: Tags whose entries are hidden (rule 2).
        self.disabled: frozenset[str] = frozenset()
        #: Called as `guard(noun, key)` before each registration; raising refuses it (a
        #: mounted server's names, `mount.py`).
        self.guards: list[Callable[[str, str], None]] = []
        #: Called with the URI of a resource that changed (`Server.notify_resource_updated`):
        #: the server's subscriptions, and any server mounting this one.
        self.on_updated: Callable[[str], None] = _nobody

    # --- registration ----------------------------------------------------------------------

    def add_tool(self, entry: ToolEntry) -> None:
        """Register `entry` under its name (`ServerOptions.on_duplicate` if it is taken)."""
        self._check_duplicate("tool", entry.name, entry.name in self.tools)
        self.tools[entry.name] = entry
        self.on_change(TOOLS_LIST_CHANGED)

    def add_prompt(self, entry: PromptEntry) -> None:
        """Register `entry` under its name (`ServerOptions.on_duplicate` if it is taken)."""
        self._check_duplicate("prompt", entry.name, entry.name in self.prompts)
        self.prompts[entry.name] = entry
        self.on_change(PROMPTS_LIST_CHANGED)

    def add_resource(self, entry: ResourceEntry) -> None:
        """Register `entry`: a static resource at its URI, or a template (rule 2's order)."""
        if entry.template is None:
            self._check_duplicate("resource", entry.uri, entry.uri in self.resources)
            self.resources[entry.uri] = entry
        else:
            at = next((i for i, t in enumerate(self.templates) if t.uri == entry.uri), None)
            self._check_duplicate("resource template", entry.uri, at is not None)
            if at is None:
                self.templates.append(entry)
            else:
                self.templates[at] = entry  # replaced where it was: matching order holds
        self.on_change(RESOURCES_LIST_CHANGED)

    def set_completion(self, fn: Callable[..., Any]) -> None:
        """Make `fn` the argument-completion handler."""
        self.completion = fn
        self.completion_takes_ctx = "ctx" in inspect.signature(fn).parameters

    def remove_tool(self, name: str) -> None:
        """Remove the tool `name` (a `KeyError` if there is none)."""
        if self.tools.pop(name, None) is None:
            raise KeyError(f"no tool named {name!r}")
        self.on_change(TOOLS_LIST_CHANGED)

    def remove_prompt(self, name: str) -> None:
        """Remove the prompt `name` (a `KeyError` if there is none)."""
        if self.prompts.pop(name, None) is None:
            raise KeyError(f"no prompt named {name!r}")
        self.on_change(PROMPTS_LIST_CHANGED)

    def remove_resource(self, uri: str) -> None:
        """Remove the resource at `uri`, or the template spelled `uri` (a `KeyError` if
        there is neither)."""
        if self.resources.pop(uri, None) is None:
            kept = [t for t in self.templates if t.uri != uri]
            if len(kept) == len(self.templates):
                raise KeyError(f"no resource or resource template {uri!r}")
            self.templates = kept
        self.on_change(RESOURCES_LIST_CHANGED)

    def watch(
        self,
        changed: Callable[[str], None],
        check: Callable[[str, str], None],
        updated: Callable[[str], None],
    ) -> None:
        """Also call `changed(kind)` after each change (rule 3), `check(noun, key)` before each
        registration, which raises to refuse it, and `updated(uri)` after `on_updated(uri)`
        (a server mounting this one)."""
        announce, tell = self.on_change, self.on_updated

        def both(kind: str) -> None:
            announce(kind)
            changed(kind)

        def both_updated(uri: str) -> None:
            tell(uri)
            updated(uri)

        self.on_change, self.on_updated = both, both_updated
        self.guards.append(check)

    def _check_duplicate(self, kind: str, key: str, taken: bool) -> None:
        """Ask the guards, then apply `ServerOptions.on_duplicate` to a registration under a
        name already taken."""
        for guard in self.guards:
            guard(kind, key)
        if not taken:
            return
        policy = self.options.on_duplicate
        if policy == "error":
            raise ValueError(
                f"{kind} {key!r} is already registered: remove it first, give the new one "
                "another name, or set ServerOptions(on_duplicate='replace')"
            )
        if policy == "warn":
            logger.warning(
                "%s %r registered again: the new one replaces the first "
                "(ServerOptions.on_duplicate='error' refuses this, 'replace' stays silent)",
                kind,
                key,
            )

    # --- tags (rule 2) ---------------------------------------------------------------------

    def disable(self, tags: Collection[str]) -> None:
        """Hide every entry carrying one of `tags`."""
        self.disabled = self.disabled | frozenset(tags)
        self._tags_changed(tags)

    def enable(self, tags: Collection[str]) -> None:
        """Show again what `disable(tags)` hid (unless another disabled tag still hides it)."""
        self.disabled = self.disabled - frozenset(tags)
        self._tags_changed(tags)

    def _tags_changed(self, tags: Collection[str]) -> None:
        changed = frozenset(tags)
        kinds: list[tuple[Collection[Entry], str]] = [
            (self.tools.values(), TOOLS_LIST_CHANGED),
            (self.prompts.values(), PROMPTS_LIST_CHANGED),
            ([*self.resources.values(), *self.templates], RESOURCES_LIST_CHANGED),
        ]
        for entries, notification in kinds:
            if any(not e.tags.isdisjoint(changed) for e in entries):
                self.on_change(notification)

    def hidden(self, entry: Entry) -> bool:
        """Whether a disabled tag hides `entry` (it is then unknown to clients)."""
        return bool(entry.tags) and not entry.tags.isdisjoint(self.disabled)

    # --- lookups -----------------------------------------------------------------------------

    def tool(self, name: str) -> ToolEntry | None:
        """The tool a client may call as `name`, or None."""
        entry = self.tools.get(name)
        if entry is None or (entry.tags and self.disabled and self.hidden(entry)):
            return None
        return entry

    def prompt(self, name: str) -> PromptEntry | None:
        """The prompt a client may get as `name`, or None."""
        entry = self.prompts.get(name)
        if entry is None or (entry.tags and self.disabled and self.hidden(entry)):
            return None
        return entry

    def resource(self, uri: str) -> tuple[ResourceEntry, dict[str, str]] | None:
        """The resource serving `uri` with the template variables it matched, or None."""
        found = self.find_resource(uri)
        return None if isinstance(found, McpError) else found

    def has_resource(self, uri: str) -> bool:
        """Whether `uri` names a registered resource or matches a resource template."""
        return self.resource(uri) is not None

    def find_resource(self, uri: str) -> tuple[ResourceEntry, dict[str, str]] | McpError:
        """The resource serving `uri` with the template variables it matched, or the -32602
        for a URI no resource serves, saying which value a template refused (rule 5)."""
        entry = self.resources.get(uri)
        if entry is not None and not (self.disabled and self.hidden(entry)):
            return entry, {}
        if len(uri) > MAX_URI_LENGTH and self.templates:
            return invalid_params(
                f"Resource not found: {uri[:100]}... (the URI is {len(uri)} characters long; "
                f"resource templates match URIs of at most {MAX_URI_LENGTH} characters)",
                {"limit": MAX_URI_LENGTH},
            )
        refused: str | None = None
        for template in self.templates:
            assert template.template is not None
            if self.disabled and self.hidden(template):
                continue
            found = template.template.resolve(uri)
            if isinstance(found, dict):
                return template, found
            if found is not None and refused is None:
                refused = (
                    f"Resource not found: {uri} (refused by template {template.uri!r}: "
                    f"{found}, which could leave its place)"
                )
        return invalid_params(refused or f"Resource not found: {uri}", {"uri": uri})

    def completes(self, ref: dict[str, Any]) -> None:
        """Check that a `completion/complete` reference names a registered prompt, resource
        or template (-32602 otherwise)."""
        # isinstance first: an unhashable name or uri must be -32602, not a lookup TypeError.
        if ref.get("type") == "ref/prompt":
            name = ref.get("name")
            if not isinstance(name, str) or name not in self.prompts:
                raise invalid_params(f"Unknown prompt: {name!r}")
        elif ref.get("type") == "ref/resource":
            uri = ref.get("uri")
            if not isinstance(uri, str) or (
                uri not in self.resources and all(t.uri != uri for t in self.templates)
            ):
                raise invalid_params(f"Unknown resource or template: {uri!r}")
        else:
            raise invalid_params('"ref.type" must be "ref/prompt" or "ref/resource"')

    def tool_definition(self, name: str) -> dict[str, Any] | None:
        """The wire definition of tool `name`, as `tools/list` shows it, or None."""
        entry = self.tools.get(name)
        if entry is None or (entry.tags and self.disabled and self.hidden(entry)):
            return None
        return entry.wire

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The OAuth scopes a token needs to call tool `name` (none for an unknown tool)."""
        entry = self.tools.get(name)
        return frozenset() if entry is None else entry.scopes

    # --- lists (rule 4) ----------------------------------------------------------------------

    def page(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One page of the list `method` names (`tools/list`...): its entries' wire listings
        and, when more follow, the `nextCursor`."""
        key, kind = _LISTS[method]
        entries: Collection[Entry] = (
            self.templates if kind == "templates" else getattr(self, kind).values()
        )
        disabled = self.disabled
        if disabled:
            items = [e.wire for e in entries if e.tags.isdisjoint(disabled)]
        else:
            items = [e.wire for e in entries]
        cursor = params.get("cursor")
        start = 0 if cursor is None else decode_cursor(cursor)
        size = self.options.page_size
        result: dict[str, Any] = {key: items[start : start + size]}
        if start + size < len(items):
            result["nextCursor"] = encode_cursor(start + size)
        return result

    def capabilities(self, *, tasks: bool = False) -> dict[str, Any]:
        """The server capabilities what is registered gives (changes reach clients on every
        transport, so every list says `listChanged`); `tasks`: the tasks extension is on."""
        caps: dict[str, Any] = {"logging": {}}
        if tasks:
            caps["extensions"] = {TASKS_EXTENSION: {}}
        if self.tools:
            caps["tools"] = {"listChanged": True}
        if self.prompts:
            caps["prompts"] = {"listChanged": True}
        if self.resources or self.templates:
            caps["resources"] = {"listChanged": True, "subscribe": True}
        if self.completion is not None:
            caps["completions"] = {}
        return caps


__all__ = ["Registry", "decode_cursor", "encode_cursor"]
