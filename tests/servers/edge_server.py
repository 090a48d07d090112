"""Tools whose answers sit at the client's edges: an error that talks about a session, a tool
slower than the client's timeout. Each counts its runs, so a test can tell a tool that ran
twice from one that ran once."""

from __future__ import annotations

import asyncio
from collections import Counter

from mrtr import Server
from mrtr.protocol.errors import INVALID_PARAMS, McpError

server = Server("edges", version="1.0.0")

#: How many times each tool started, by name.
runs: Counter[str] = Counter()


@server.tool()
async def checkout(cart: str) -> str:
    """Refuse with an error about the application's own (checkout) session."""
    runs["checkout"] += 1
    message = f"checkout session for cart {cart} expired; initialize a new one"
    raise McpError(INVALID_PARAMS, message)


@server.tool()
async def dawdle(seconds: float) -> str:
    """Sleep `seconds`, then answer."""
    runs["dawdle"] += 1
    await asyncio.sleep(seconds)
    return "done"
