"""`mrtr list` and `mrtr inspect`: what a server offers, from any server of either era.

Both connect with `mrtr.Client` in its default `protocol="auto"`, so a 2026-07-28 server and
an `initialize`-based one are described alike. `inspect` prints the server's full description
as one JSON object (its identity, era, version, capabilities, instructions, and every tool,
prompt, resource and resource template as the server listed them); `list` prints the names
and one-line descriptions for a person.

Rules:
* What the server sent is printed through `display`: each line of `list` with `shown_line`,
  `inspect`'s JSON with `shown_json` (still JSON), errors with `shown_line`.
* An unexpected error (a description too deep to walk or encode, a bug) is one line, never a
  traceback; the exit status is 1.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..client import Client, ClientOptions
from ..protocol import meta as meta_keys
from ..protocol.errors import LOCAL_CODES, METHOD_NOT_FOUND, McpError
from .display import shown_json, shown_line

#: (capability, list method, result key): what a description gathers.
_KINDS = (
    ("tools", "tools/list", "tools"),
    ("prompts", "prompts/list", "prompts"),
    ("resources", "resources/list", "resources"),
    ("resources", "resources/templates/list", "resourceTemplates"),
)
#: Pages read of one list at most: a server that hands out cursors forever is cut off here.
MAX_PAGES = 1000


@dataclass(slots=True)
class ServerTarget:
    """Where the server is: a Streamable HTTP URL, or a command speaking stdio."""

    url: str | None = None
    command: list[str] = field(default_factory=list)
    protocol: str = "auto"

    @property
    def label(self) -> str:
        """How the server is named in messages."""
        return self.url if self.url is not None else shlex.join(self.command)

    def client(self) -> Client:
        """A client for the target (no handlers: listing asks nothing of the user)."""
        options = ClientOptions(protocol=self.protocol)  # type: ignore[arg-type]
        if self.url is not None:
            return Client.http(self.url, options=options)
        return Client.stdio(self.command[0], self.command[1:], options=options)


async def describe(client: Client) -> dict[str, Any]:
    """The server's full description, as wire JSON (camelCase names)."""
    discovered = await client.request("server/discover")
    meta = discovered.get("_meta")
    capabilities = discovered.get("capabilities")
    if not isinstance(capabilities, dict):
        capabilities = {}
    description: dict[str, Any] = {
        "serverInfo": meta.get(meta_keys.SERVER_INFO) if isinstance(meta, dict) else None,
        "era": client.era,
        "protocolVersion": client.protocol_version,
        "capabilities": capabilities,
        "instructions": discovered.get("instructions"),
    }
    for capability, method, key in _KINDS:
        description[key] = (
            await _list_all(client, method, key) if capability in capabilities else []
        )
    return description


async def _list_all(client: Client, method: str, key: str) -> list[Any]:
    items: list[Any] = []
    cursor: Any = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        try:
            page = await client.request(method, None if cursor is None else {"cursor": cursor})
        except McpError as exc:
            if exc.code == METHOD_NOT_FOUND:  # declared the capability, serves no list
                return items
            raise
        found = page.get(key)
        if isinstance(found, list):
            items.extend(found)
        cursor = page.get("nextCursor")
        # A cursor seen before would loop forever: the list ends where it repeats.
        if not isinstance(cursor, str) or cursor in seen:
            break
        seen.add(cursor)
    return items


def format_listing(description: dict[str, Any]) -> str:
    """`mrtr list`'s text: a heading for the server, then one line per item."""
    info = description.get("serverInfo") or {}
    name = info.get("name", "?") if isinstance(info, dict) else "?"
    version = info.get("version", "") if isinstance(info, dict) else ""
    lines = [f"{name} {version}".rstrip() + f" ({description['era']}, "
             f"{description['protocolVersion']})"]  # fmt: skip
    sections = (
        ("tools", "tools", _tool_line),
        ("prompts", "prompts", _prompt_line),
        ("resources", "resources", _resource_line),
        ("resource templates", "resourceTemplates", _template_line),
    )
    for title, key, line in sections:
        items = [item for item in description.get(key, []) if isinstance(item, dict)]
        lines.append(f"{title} ({len(items)}):" if items else f"{title}: none")
        lines.extend("  " + line(item) for item in items)
    return "\n".join(shown_line(line) for line in lines)


def _first_line(item: dict[str, Any]) -> str:
    text = item.get("description")
    if not isinstance(text, str) or not text.strip():
        return ""
    return "  " + text.strip().splitlines()[0]


def _tool_line(tool: dict[str, Any]) -> str:
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        schema = {}
    defs = schema.get("$defs", schema.get("definitions"))
    params = _fields(schema, defs if isinstance(defs, dict) else {}, ())
    return f"{tool.get('name')}({params}){_first_line(tool)}"


def _fields(schema: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> str:
    """An object schema's properties as `name: type, optional?: type`."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict):
        properties = {}
    if not isinstance(required, list):
        required = []
    return ", ".join(
        f"{name}{'' if name in required else '?'}: {_type_name(spec, defs, seen)}"
        for name, spec in properties.items()
    )


def _type_name(spec: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> str:
    """A short name for a JSON Schema: its type; an object (such as a pydantic model, a `$ref`
    into `$defs`) as `{field: type, ...}`; an array as `array[item]`. A model that contains
    itself is named, not expanded again."""
    if not isinstance(spec, dict):
        return "any"
    ref = spec.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        target = defs.get(name)
        if name in seen or not isinstance(target, dict):
            return name
        return _type_name(target, defs, (*seen, name))
    for combinator in ("anyOf", "oneOf"):
        options = spec.get(combinator)
        if isinstance(options, list):
            return "|".join(_type_name(option, defs, seen) for option in options)
    every = spec.get("allOf")
    if isinstance(every, list) and len(every) == 1:
        return _type_name(every[0], defs, seen)
    kind = spec.get("type")
    if kind == "object" and isinstance(spec.get("properties"), dict) and spec["properties"]:
        return "{" + _fields(spec, defs, seen) + "}"
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array[{_type_name(spec['items'], defs, seen)}]"
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    return "any"


def _prompt_line(prompt: dict[str, Any]) -> str:
    arguments = prompt.get("arguments")
    names = [
        f"{a.get('name')}{'' if a.get('required') else '?'}"
        for a in (arguments if isinstance(arguments, list) else [])
        if isinstance(a, dict)
    ]
    return f"{prompt.get('name')}({', '.join(names)}){_first_line(prompt)}"


def _resource_line(resource: dict[str, Any]) -> str:
    mime = resource.get("mimeType")
    kind = f" [{mime}]" if isinstance(mime, str) else ""
    return f"{resource.get('uri')}{kind}{_first_line(resource)}"


def _template_line(template: dict[str, Any]) -> str:
    mime = template.get("mimeType")
    kind = f" [{mime}]" if isinstance(mime, str) else ""
    return f"{template.get('uriTemplate')}{kind}{_first_line(template)}"


async def run_listing(
    target: ServerTarget, as_json: bool, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Describe the server and print it (JSON for `inspect`); returns the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    command = "inspect" if as_json else "list"
    try:
        async with target.client() as client:
            description = await describe(client)
        text = (
            shown_json(json.dumps(description, indent=2, ensure_ascii=False))
            if as_json
            else format_listing(description)
        )
    except McpError as exc:
        if exc.code in LOCAL_CODES:  # found on this side (unreachable, timed out...)
            print(f"mrtr {command}: {shown_line(exc.message)}", file=err)
        else:
            said = shown_line(f"{exc.code} from {target.label}: {exc.message}")
            print(f"mrtr {command}: error {said}", file=err)
        return 1
    except OSError as exc:
        said = shown_line(f"({target.label}): {exc}")
        print(f"mrtr {command}: cannot reach the server {said}", file=err)
        return 1
    except (RecursionError, ValueError, TypeError) as exc:  # a description too deep to show
        print(f"mrtr {command}: cannot show what the server sent: {shown_line(str(exc))}",
              file=err)  # fmt: skip
        return 1
    print(text, file=out)
    out.flush()
    return 0


__all__ = ["MAX_PAGES", "ServerTarget", "describe", "format_listing", "run_listing"]
