"""Results and content blocks as text a person reads at the terminal.

Rules:
* The text here is what the server sent, unfiltered: the command shows it through
  `display.shown` (or `display.shown_json` for `--json`) as it prints it.
* A result nested more than `MAX_RESULT_DEPTH` levels is not shown at all
  (`mrtr.server.input_bounds.nesting_exceeds` tells, without recursion): no content a person
  reads is that deep, and encoding it would exhaust the recursion of the encoders.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, Final

from ..protocol.types import CallToolResult

#: The deepest nesting (objects, arrays, models) of a result that is shown.
MAX_RESULT_DEPTH: Final = 64


def pretty_json(value: Any) -> str:
    """Indented JSON, keeping non-ASCII text readable."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _decoded_size(data: Any) -> str:
    if not isinstance(data, str):
        return "no data"
    try:
        return f"{len(base64.b64decode(data, validate=True))} bytes"
    except (binascii.Error, ValueError):
        return f"{len(data)} characters of undecodable base64"


def describe_block(block: Mapping[str, Any]) -> str:
    """One content block (wire form): text as is, everything else summarised on one line."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return (
            f"[{kind}: {block.get('mimeType', 'unknown type')}, {_decoded_size(block.get('data'))}]"
        )
    if kind == "resource_link":
        name = block.get("title") or block.get("name") or ""
        mime = f", {block['mimeType']}" if block.get("mimeType") else ""
        return f"[resource link: {name} <{block.get('uri')}>{mime}]"
    if kind == "resource":
        resource = block.get("resource")
        return describe_resource(resource if isinstance(resource, Mapping) else {})
    if kind == "tool_use":
        return f"[tool call {block.get('name')}({json.dumps(block.get('input', {}))})]"
    if kind == "tool_result":
        inner = block.get("content")
        parts = (
            [describe_block(b) for b in inner if isinstance(b, Mapping)]
            if isinstance(inner, list)
            else []
        )
        return f"[tool result for {block.get('toolUseId')}: {' '.join(parts)}]"
    return f"[{kind or 'unknown'} content]"


def describe_resource(contents: Mapping[str, Any]) -> str:
    """Embedded or read resource contents: text shown under a header, blobs summarised."""
    uri = contents.get("uri", "?")
    mime = f" ({contents['mimeType']})" if contents.get("mimeType") else ""
    if "text" in contents:
        return f"[resource {uri}{mime}]\n{contents['text']}"
    return f"[resource {uri}{mime}: {_decoded_size(contents.get('blob'))}]"


def format_tool_result(result: CallToolResult) -> str:
    """A tool result for reading: text content as text, structured content as indented JSON.

    A text block that only repeats the structured content as JSON is shown once, indented.
    """
    wire = result.to_wire()
    blocks = wire.get("content") or []
    structured = wire.get("structuredContent")
    lines: list[str] = []
    if result.is_error:
        lines.append("The tool reported an error:")
    shown_structured = False
    for block in blocks:
        if (
            structured is not None
            and block.get("type") == "text"
            and _same_json(block.get("text"), structured)
        ):
            lines.append(pretty_json(structured))
            shown_structured = True
        else:
            lines.append(describe_block(block))
    if structured is not None and not shown_structured:
        lines.append("structured content:")
        lines.append(pretty_json(structured))
    if not lines:
        lines.append("(the tool returned no content)")
    return "\n".join(lines)


def _same_json(text: Any, value: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


__all__ = [
    "MAX_RESULT_DEPTH",
    "describe_block",
    "describe_resource",
    "format_tool_result",
    "pretty_json",
]
