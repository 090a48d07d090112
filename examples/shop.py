"""A small shop: an MCP server a host (Claude Desktop, Claude Code, Cursor, VS Code) can run.

    mrtr install claude-desktop examples/shop.py:server
    mrtr list -- mrtr serve examples/shop.py:server
    mrtr call order item=tea -- mrtr serve examples/shop.py:server

It serves both protocol eras: a 2026-07-28 client gets its questions as MRTR rounds, a client
of an earlier revision gets them as live `elicitation/create` requests.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from mrtr import RequestContext, Server

server = Server("shop", version="1.0.0", instructions="A shop selling tea, coffee and cups.")

PRICES = {"tea": 4.5, "coffee": 6.0, "cup": 12.0}


class Region(BaseModel):
    region: Annotated[str, Field(description="where to ship: eu, us or asia")]


@server.tool()
def price(
    item: Annotated[str, Field(description="tea, coffee or cup")], quantity: int = 1
) -> float:
    """The price of `quantity` of an item, in euros."""
    if item not in PRICES:
        raise ValueError(f"no such item {item!r}; the shop sells {', '.join(PRICES)}")
    return PRICES[item] * quantity


@server.tool()
async def order(ctx: RequestContext, item: str, quantity: int = 1) -> str:
    """Order an item, asking the user where to ship it."""
    if item not in PRICES:
        raise ValueError(f"no such item {item!r}; the shop sells {', '.join(PRICES)}")
    where = await ctx.elicit(f"Ship {quantity} x {item} to which region?", Region)
    if not where.is_accepted() or where.content is None:
        return "Order cancelled"
    return f"Ordered {quantity} x {item}, shipping to {where.content.region}"


@server.prompt()
def recommend(taste: str) -> str:
    """Ask for a recommendation from the shop's range."""
    return f"Recommend one of {', '.join(PRICES)} to someone who likes {taste}."


@server.resource("shop://catalogue", mime_type="application/json")
def catalogue() -> dict[str, float]:
    """Every item and its price."""
    return PRICES


if __name__ == "__main__":
    server.run()
