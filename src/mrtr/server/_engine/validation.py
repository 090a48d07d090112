"""A pydantic validation error as one readable line, for the messages the client is sent."""

from __future__ import annotations

import pydantic


def describe_validation_error(exc: pydantic.ValidationError, root: str = "arguments") -> str:
    """One readable line per problem: `field: message (got value)`, no internals.

    `root` names the whole value, for a problem with no field path.
    """
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err.get("loc", ())) or root
        got = err.get("input")
        suffix = "" if err.get("type") == "missing" else f" (got {got!r:.60})"
        parts.append(f"{where}: {err.get('msg', 'invalid')}{suffix}")
    return "; ".join(parts)
