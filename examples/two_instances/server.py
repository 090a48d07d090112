"""The server both instances run: `order` asks the user to confirm, then names the process
that placed the order (so you can see which instance finished a flow)."""

from __future__ import annotations

import os

from mrtr import RequestContext, Server

# No `options=`: `mrtr serve` reads MRTR_REQUEST_STATE_KEY and MRTR_STORE_URL.
server = Server("two-instances", version="1.0.0")

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@server.tool()
async def order(ctx: RequestContext, item: str) -> str:
    """Order `item` once the user confirms."""
    answer = await ctx.elicit(f"Order {item}?", CONFIRM)
    if answer.action != "accept" or not (answer.content or {}).get("ok"):
        return "cancelled"
    return f"ordered {item} (placed by process {os.getpid()})"


@server.tool()
def whoami() -> int:
    """The id of the process that served this request."""
    return os.getpid()
