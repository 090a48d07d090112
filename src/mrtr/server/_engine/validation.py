"""A pydantic validation error as one readable line, for the messages the client is sent.

Rules:

1. Each problem quotes the value it is about as `repr` would, cut to 60 characters, and
   written without descending more than four levels into lists, tuples and dicts (a deeper
   one is `[...]`, `(...)` or `{...}`) nor past the 60 characters: a value nested a thousand
   levels deep, or a list of a million items, costs a message no more than a short one.
"""

from __future__ import annotations

from typing import Any, Final

import pydantic

#: How many characters of a value a message quotes.
QUOTED: Final = 60
# How many levels of lists, tuples and dicts a quoted value shows.
_LEVELS: Final = 4
_CLOSING: dict[type, str] = {list: "]", tuple: ")", dict: "}"}


def describe_validation_error(exc: pydantic.ValidationError, root: str = "arguments") -> str:
    """One readable line per problem: `field: message (got value)`, no internals.

    `root` names the whole value, for a problem with no field path.
    """
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err.get("loc", ())) or root
        got = err.get("input")
        suffix = "" if err.get("type") == "missing" else f" (got {quoted(got)})"
        parts.append(f"{where}: {err.get('msg', 'invalid')}{suffix}")
    return "; ".join(parts)


def quoted(value: Any, room: int = QUOTED) -> str:
    """`repr(value)` cut to `room` characters, written as rule 1 says."""
    out: list[str] = []
    left = room

    def put(text: str) -> None:
        nonlocal left
        out.append(text)
        left -= len(text)

    def walk(node: Any, level: int) -> None:
        # Recursion is bounded by _LEVELS, whatever the value's depth.
        kind = type(node)
        closing = _CLOSING.get(kind)
        if closing is None:
            try:
                put(repr(node))
            except Exception:  # a repr of the handler's own type failing, or recursing
                put(f"<{kind.__name__} object>")
            return
        opening = "({["[")}]".index(closing)]
        if level >= _LEVELS:
            put(f"{opening}...{closing}")
            return
        put(opening)
        pairs = node.items() if kind is dict else ((None, item) for item in node)
        for index, (key, item) in enumerate(pairs):
            if left <= 0:
                return  # the rest would be cut
            if index:
                put(", ")
            if kind is dict:
                walk(key, level + 1)
                put(": ")
            walk(item, level + 1)
        if kind is tuple and len(node) == 1:
            put(",")
        put(closing)

    walk(value, 0)
    return "".join(out)[:room]
