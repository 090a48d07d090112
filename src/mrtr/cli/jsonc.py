"""JSON with comments (JSONC), as VS Code writes `mcp.json`: read it, and add or replace one
server entry by editing the text, so that every comment and the file's layout stay.

Comments are `// ...` to the end of the line and `/* ... */`; a comma may trail the last member
of an object or array. `blank` turns both into spaces (keeping every offset and line break),
which leaves plain JSON whose members can be found at the same offsets in the original text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\r\n]*")


class JSONCError(ValueError):
    """Text that is not JSONC; the message says where."""


def blank(text: str) -> str:
    """`text` with its comments and trailing commas replaced by spaces, line breaks kept."""
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # a comma seen since the last value, which a closing bracket makes trailing
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            i = end + 1
            last_comma = -1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line = text.count("\n", 0, i) + 1
                raise JSONCError(f"a /* comment on line {line} is never closed")
            out[i : end + 2] = [ch if ch == "\n" else " " for ch in text[i : end + 2]]
            i = end + 2
        else:
            if c == ",":
                last_comma = i
            elif c in "}]" and last_comma >= 0:
                out[last_comma] = " "
                last_comma = -1
            elif not c.isspace():
                last_comma = -1
            i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """The value of a JSONC document; raises `JSONCError` (a `ValueError`) naming the place."""
    try:
        return json.loads(blank(text))
    except json.JSONDecodeError as exc:
        raise JSONCError(f"{exc.msg}: line {exc.lineno} column {exc.colno}") from None


@dataclass(frozen=True, slots=True)
class _Member:
    key: str
    key_start: int
    value_start: int
    value_end: int


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)
    return match.end() if match else i


def _members(plain: str, brace: int) -> tuple[list[_Member], int]:
    """The members of the object whose `{` is at `brace` in plain JSON, and its `}`."""
    members: list[_Member] = []
    i = _skip(plain, brace + 1)
    while plain[i] != "}":
        key, after_key = _DECODER.raw_decode(plain, i)
        start = _skip(plain, _skip(plain, after_key) + 1)  # past the colon
        _, end = _DECODER.raw_decode(plain, start)
        members.append(_Member(key, i, start, end))
        i = _skip(plain, end)
        if plain[i] == ",":
            i = _skip(plain, i + 1)
    return members, i


def _indent_of(text: str, at: int) -> str:
    """The spaces and tabs that start the line holding offset `at`."""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _dump(value: Any, indent: str) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)


def _insert(text: str, plain: str, brace: int, key: str, value: Any) -> str:
    """`text` with `"key": value` added as the last member of the object at `brace`."""
    members, close = _members(plain, brace)
    if members:
        last = members[-1]
        indent = _indent_of(text, last.key_start)
        item = f",\n{indent}{json.dumps(key, ensure_ascii=False)}: {_dump(value, indent)}"
        return text[: last.value_end] + item + text[last.value_end :]
    outer = _indent_of(text, brace)
    indent = outer + "  "
    item = f"\n{indent}{json.dumps(key, ensure_ascii=False)}: {_dump(value, indent)}\n{outer}"
    return text[: brace + 1] + item + text[close:]


def set_entry(text: str, section: str, name: str, entry: Any) -> str:
    """`text` (a JSONC object) with `entry` as `name` under the object `section`, added or
    replacing the old value, every other character left as it was."""
    plain = blank(text)
    top = _skip(plain, 0)
    members, _ = _members(plain, top)
    found = next((m for m in members if m.key == section), None)
    if found is None:
        return _insert(text, plain, top, section, {name: entry})
    servers, _ = _members(plain, found.value_start)
    old = next((m for m in servers if m.key == name), None)
    if old is None:
        return _insert(text, plain, found.value_start, name, entry)
    indent = _indent_of(text, old.key_start)
    return text[: old.value_start] + _dump(entry, indent) + text[old.value_end :]


__all__ = ["JSONCError", "blank", "loads", "set_entry"]
