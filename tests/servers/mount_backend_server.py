"""A 2026-07-28 server mounted in another through a `Client` (`tests/test_mount_proxy.py`),
served by `mrtr serve ... --transport http`: `order` asks twice, `grow` registers a new tool
(a change of its tool list), and `calls` says how often each tool really started.
"""

from __future__ import annotations

from mrtr import RequestContext, Server

server = Server("growing", version="2.1.0", instructions="Order things; grow tools.")

SIZE = {"type": "object", "properties": {"size": {"type": "string"}}}
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}

#: How many times each tool's first round ran (a round replayed for its answers not counted).
started: dict[str, int] = {}


@server.tool()
async def order(ctx: RequestContext, item: str) -> str:
    """Ask for a size, then for a confirmation."""
    if ctx.round == 0:
        started["order"] = started.get("order", 0) + 1
    size = await ctx.elicit(f"Size of {item}?", SIZE)
    sized = (size.content or {}).get("size")
    confirmed = await ctx.elicit(f"Order a {sized} {item}?", CONFIRM)
    verdict = "ordered" if (confirmed.content or {}).get("ok") else "not ordered"
    return f"{sized} {item}: {verdict}"


@server.tool()
def calls() -> str:
    """How many orders started, as the backend counted them."""
    return f"order started {started.get('order', 0)} time(s)"


@server.tool()
def grow(ctx: RequestContext, name: str) -> str:
    """Register the tool `name` (the tool list changes)."""
    ctx.server.add_tool(lambda: f"I am {name}", name=name)
    return f"grew {name}"
