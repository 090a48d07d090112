"""Following `nextCursor` through every page of a list, with bounds a server cannot defeat.

A page whose `nextCursor` was already followed would loop forever, and a server may hand out
fresh cursors without end: both end the walk with `McpError(PROTOCOL_VIOLATION)` (past
`max_pages`, saying how to read further). An empty `nextCursor` ends the list, as it does
for the other SDKs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

from ..protocol.errors import PROTOCOL_VIOLATION, McpError

#: Pages `all_tools()` and its siblings read before giving up.
DEFAULT_MAX_PAGES = 1000


class Page(Protocol):
    """A list result: one page, and the cursor of the next."""

    @property
    def next_cursor(self) -> str | None: ...


P = TypeVar("P", bound=Page)


async def pages(
    method: str, fetch: Callable[[str | None], Awaitable[P]], max_pages: int
) -> AsyncIterator[P]:
    """Every page of `method`, fetched one at a time as the caller iterates."""
    if max_pages < 1:
        raise ValueError(f"max_pages must be at least 1, not {max_pages}")
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(max_pages):
        page = await fetch(cursor)
        yield page
        cursor = page.next_cursor
        if not cursor:
            return
        if cursor in seen:
            raise McpError(
                PROTOCOL_VIOLATION,
                f"{method}: the server returned a nextCursor it had already returned "
                f"({cursor[:80]!r}); stopping instead of looping",
            )
        seen.add(cursor)
    raise McpError(
        PROTOCOL_VIOLATION,
        f"{method}: the server still had more after {max_pages} pages (max_pages); "
        "pass a larger max_pages to read further",
        {"maxPages": max_pages},
    )
