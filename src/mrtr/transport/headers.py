"""The request metadata headers of Streamable HTTP, shared by the server app and the client.

Every POST mirrors parts of its JSON-RPC body into headers so intermediaries can route without
parsing it: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` (the tool or prompt name, or the
resource URI) and, for `tools/call`, one `Mcp-Param-{Name}` per argument whose schema carries
an `x-mcp-header` annotation. Values that are not plain visible ASCII travel Base64-encoded as
`=?base64?...?=`. The server decodes and compares every one with the body; the client derives
them from the body and from the tool definitions it has seen.

Rules for `x-mcp-header` (a tool that breaks one is invalid as a whole):

1. The value is a non-empty HTTP token (RFC 9110 `tchar`s), unique among the schema's
   annotations ignoring case.
2. It annotates a property reached from the schema root through `properties` keys only (not
   `items`, `anyOf`/`oneOf`/`allOf`/`not`, `if`/`then`/`else`, `$ref` or `$defs`).
3. The property is a string, an integer or a boolean (`number` is not allowed). A nullable
   primitive (`["string", "null"]`, or `anyOf` of such types) counts as that primitive.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, NamedTuple

PROTOCOL_VERSION = "MCP-Protocol-Version"
METHOD = "Mcp-Method"
NAME = "Mcp-Name"
PARAM_PREFIX = "Mcp-Param-"

#: Which body field `Mcp-Name` mirrors, by method.
NAME_FIELDS: dict[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension routes its requests by task id.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

#: Methods whose `Mcp-Name` may be left out (a sent one must still match the body). The
#: tasks extension asks clients to send the task id there, for routing; the core table does
#: not require it, clients exist that omit it, and any instance answers any task from the
#: store, so its absence harms nothing. A mismatch stays refused: then an intermediary that
#: routes or authorizes on the header would act on another task than the server.
NAME_OPTIONAL: frozenset[str] = frozenset(("tasks/get", "tasks/update", "tasks/cancel"))

ANNOTATION = "x-mcp-header"

_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="
_TCHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_PRIMITIVES = frozenset(("string", "integer", "boolean"))
# RFC 9110 field values: visible ASCII, space and tab (obs-text is not accepted).
_NOT_FIELD_CHAR = re.compile(rb"[^\t\x20-\x7e]")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
# Keywords whose value is a map of name -> subschema, and those whose value is a subschema (or a
# list of them). Annotations are looked for only where a schema can be, never in `const`,
# `default`, `examples` or other data.
_SCHEMA_MAPS = ("patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_VALUES = (
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)


class HeaderParam(NamedTuple):
    """One `x-mcp-header` annotation: the header's name part and the argument's path."""

    name: str
    path: tuple[str, ...]

    @property
    def header(self) -> str:
        """The full header name, `Mcp-Param-{name}`."""
        return PARAM_PREFIX + self.name


class InvalidHeaderAnnotation(ValueError):
    """A tool's `x-mcp-header` annotations break the rules; the message says which and how."""


# --- values ---------------------------------------------------------------------------------


def _plain(value: str) -> bool:
    """Whether `value` can go in a header as is: visible ASCII and inner spaces only."""
    return (
        value.isascii()
        and value.isprintable()
        and value[:1] != " "
        and value[-1:] != " "
        and not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX))
    )


def encode_value(value: str) -> str:
    """The header form of `value`: itself when plain, else `=?base64?{UTF-8 Base64}?=`.

    A plain value that looks like the sentinel is encoded too, so decoding is unambiguous.
    """
    if _plain(value):
        return value
    encoded = base64.b64encode(value.encode("utf-8")).decode("ascii")
    return _SENTINEL_PREFIX + encoded + _SENTINEL_SUFFIX


def decode_value(raw: bytes) -> str:
    """The value a received header carries, decoded from the sentinel form when it uses it.

    Leading and trailing spaces and tabs are not part of a field value (RFC 9110). Raises
    `ValueError` saying why for characters a header value may not hold, or bad Base64/UTF-8.
    """
    raw = raw.strip(b" \t")
    if _NOT_FIELD_CHAR.search(raw) is not None:
        raise ValueError("contains characters not allowed in a header value")
    text = raw.decode("ascii")
    if (
        len(text) >= len(_SENTINEL_PREFIX) + len(_SENTINEL_SUFFIX)
        and text.startswith(_SENTINEL_PREFIX)
        and text.endswith(_SENTINEL_SUFFIX)
    ):
        inner = text[len(_SENTINEL_PREFIX) : -len(_SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(inner, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise ValueError("is not valid Base64 of UTF-8 text in =?base64?...?= form") from None
    return text


def format_argument(value: Any) -> str | None:
    """The string form of an argument for its `Mcp-Param-*` header (before encoding), or None
    when the value cannot be mirrored (null, or not a string, integer or boolean)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return value
    return None


def argument_at(arguments: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in the call's arguments, or None when there is none."""
    value = arguments
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def argument_matches(header_value: str, body_value: Any) -> bool:
    """Whether a decoded `Mcp-Param-*` value stands for `body_value` (numbers compare by value:
    `42.0` matches `42`)."""
    if isinstance(body_value, bool):
        return header_value == ("true" if body_value else "false")
    if isinstance(body_value, int | float):
        if _NUMBER.match(header_value) is None:
            return False
        number: float = (
            int(header_value) if header_value.lstrip("-").isdigit() else float(header_value)
        )
        return number == body_value
    if isinstance(body_value, str):
        return header_value == body_value
    return False


# --- x-mcp-header annotations ---------------------------------------------------------------


def _primitive(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind in _PRIMITIVES
    if isinstance(kind, list):
        kinds = set(kind) - {"null"}
        return bool(kinds) and kinds <= _PRIMITIVES and all(isinstance(k, str) for k in kind)
    if kind is None:
        for keyword in ("anyOf", "oneOf"):
            options = schema.get(keyword)
            if isinstance(options, list) and options:
                kinds = {o.get("type") if isinstance(o, dict) else None for o in options}
                kinds.discard("null")
                return bool(kinds) and kinds <= _PRIMITIVES
    return False


def _where(path: tuple[str, ...] | None) -> str:
    if path is None:
        return "a subschema outside 'properties' (under items, anyOf, $defs or the like)"
    return "properties." + ".".join(path) if path else "the schema root"


def header_params(schema: Any) -> tuple[HeaderParam, ...]:
    """The `x-mcp-header` annotations of a tool's `inputSchema`, checked against the rules in
    this module's header; raises `InvalidHeaderAnnotation` naming the first rule broken."""
    if not isinstance(schema, dict):
        return ()
    found: list[HeaderParam] = []
    seen: dict[str, str] = {}
    # (subschema, its path when reachable through `properties` alone, else None). The root's
    # path is () and it is no property, so an annotation there is misplaced too.
    stack: list[tuple[Any, tuple[str, ...] | None]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        if ANNOTATION in node:
            name = node[ANNOTATION]
            if not path:
                raise InvalidHeaderAnnotation(
                    f"{ANNOTATION} must annotate a property reached through 'properties' only, "
                    f"not {_where(path)}"
                )
            where = _where(path)
            if not isinstance(name, str) or not name:
                raise InvalidHeaderAnnotation(f"{ANNOTATION} on {where} must be a non-empty string")
            if not all(c in _TCHARS for c in name):
                raise InvalidHeaderAnnotation(
                    f"{ANNOTATION} {name!r} on {where} is not an HTTP token (letters, digits and "
                    "!#$%&'*+-.^_`|~ only)"
                )
            if name.lower() in seen:
                raise InvalidHeaderAnnotation(
                    f"{ANNOTATION} {name!r} on {where} repeats {seen[name.lower()]!r} "
                    "(names are compared ignoring case)"
                )
            if not _primitive(node):
                raise InvalidHeaderAnnotation(
                    f"{ANNOTATION} {name!r} on {where} must annotate a string, integer or "
                    "boolean property"
                )
            seen[name.lower()] = name
            found.append(HeaderParam(name, path))
        properties = node.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                stack.append((sub, (*path, key) if path is not None else None))
        for keyword in _SCHEMA_MAPS:
            group = node.get(keyword)
            if isinstance(group, dict):
                stack.extend((sub, None) for sub in group.values())
        for keyword in _SCHEMA_VALUES:
            sub = node.get(keyword)
            if isinstance(sub, dict):
                stack.append((sub, None))
            elif isinstance(sub, list):
                stack.extend((item, None) for item in sub)
    found.sort(key=lambda p: p.path)
    return tuple(found)
