"""A server for the end-of-input tests: `quick` answers at once (a sync function, so it runs on
a worker thread), `half_second` after 0.5 s. Serve it with
`mrtr serve tests/servers/eof_server.py:server` (stdio)."""

from __future__ import annotations

import asyncio

from mrtr import Server

server = Server("eof-test-server", version="1.0.0")


@server.tool()
def quick() -> str:
    """Answer at once."""
    return "quick answer"


@server.tool()
async def half_second() -> str:
    """Answer after half a second."""
    await asyncio.sleep(0.5)
    return "answer after 0.5 s"
