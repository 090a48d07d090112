"""The server behind `mrtr demo`: a tiny shop whose handlers ask questions mid-body.

It uses only the public `mrtr` API, so it doubles as an example. Serve it yourself with
`mrtr serve mrtr.cli.demo_server:server --transport http` and try
`mrtr call http://127.0.0.1:8000/mcp place_order item="tea" --root .`.

* `place_order` (tool) asks in three rounds: confirm the order (a form), where to ship it (a
  form from a pydantic model), then a gift note (sampling) and the receipt folder (roots)
  together in one round.
* `order_update_email` (prompt) asks which tone the email should have.
* `orders://{order_id}` (resource template) asks before revealing an order.

Each question is an MRTR round for a 2026-07-28 client, and a live request on the session for
a legacy (`initialize`-based) one: the handlers are the same for both.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Literal

from pydantic import BaseModel, Field

from mrtr import (
    PromptMessage,
    RequestContext,
    Server,
    TextContent,
)

server = Server(
    "mrtr-demo-shop",
    version="1.0.0",
    instructions="A demo shop: every handler asks you something before it answers.",
)

UNIT_PRICE = 9.5

CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {
        "confirm": {"type": "boolean", "title": "Place the order", "default": True},
    },
    "required": ["confirm"],
}

REVEAL_SCHEMA = {
    "type": "object",
    "properties": {
        "reveal": {"type": "boolean", "title": "Reveal the order", "default": False},
    },
    "required": ["reveal"],
}


class Shipping(BaseModel):
    """Where and how to ship."""

    region: Literal["eu", "us", "apac"] = Field(description="Where the parcel goes")
    express: bool = Field(default=False, description="Express delivery (+5.00)")


class Order(BaseModel):
    """What `place_order` returns (also its structured content)."""

    status: Literal["placed", "not placed"]
    order_id: str | None = None
    item: str
    quantity: int
    region: str | None = None
    express: bool = False
    total: float = 0.0
    gift_note: str | None = None
    receipt_folder: str | None = None


def _new_order_id() -> str:
    return f"ord-{secrets.token_hex(3)}"


@server.tool()
async def place_order(ctx: RequestContext, item: str, quantity: int = 1) -> Order:
    """Order an item: asks you to confirm it, where to ship it, and for a gift note."""
    confirm = await ctx.elicit(
        f"Place an order for {quantity} x {item} at {UNIT_PRICE:.2f} each?",
        CONFIRM_SCHEMA,
        key="confirm",
    )
    if not confirm.is_accepted() or not (confirm.content or {}).get("confirm"):
        return Order(status="not placed", item=item, quantity=quantity)

    # Replay runs this handler from the top on every round; `once` keeps the id stable.
    order_id: str = await ctx.once("order-id", _new_order_id)

    shipping = await ctx.elicit("Where should we ship it?", Shipping, key="shipping")
    if not shipping.is_accepted() or shipping.content is None:
        return Order(status="not placed", order_id=order_id, item=item, quantity=quantity)

    # Two questions awaited together go out in the same round.
    note, roots = await asyncio.gather(
        ctx.sample(
            f"Write a one-line gift note to go with {item}.",
            system_prompt="You write short, warm gift notes.",
            max_tokens=60,
            key="gift_note",
        ),
        ctx.list_roots(key="receipt_folder"),
    )
    text = note.content.text if isinstance(note.content, TextContent) else ""
    total = quantity * UNIT_PRICE + (5.0 if shipping.content.express else 0.0)
    return Order(
        status="placed",
        order_id=order_id,
        item=item,
        quantity=quantity,
        region=shipping.content.region,
        express=shipping.content.express,
        total=round(total, 2),
        gift_note=text or None,
        receipt_folder=roots.roots[0].uri if roots.roots else None,
    )


class Tone(BaseModel):
    """The tone of an email."""

    tone: Literal["friendly", "formal", "playful"] = "friendly"


@server.prompt()
async def order_update_email(ctx: RequestContext, order_id: str) -> list[PromptMessage]:
    """An email telling the customer their order has shipped, in the tone you pick."""
    answer = await ctx.elicit("Which tone should the email have?", Tone, key="tone")
    tone = answer.content.tone if answer.is_accepted() and answer.content else "neutral"
    return [
        PromptMessage(
            role="user",
            content=TextContent(
                text=f"Write a {tone} email telling the customer that order {order_id} "
                "has shipped and will arrive within five days."
            ),
        )
    ]


@server.resource_template("orders://{order_id}", name="order", mime_type="text/plain")
async def order_details(ctx: RequestContext, order_id: str) -> str:
    """An order's details, revealed only once you confirm."""
    answer = await ctx.elicit(
        f"Reveal the details of order {order_id}?", REVEAL_SCHEMA, key="reveal"
    )
    if not answer.is_accepted() or not (answer.content or {}).get("reveal"):
        return f"Order {order_id}: details withheld."
    return f"Order {order_id}: paid, packed, handed to the carrier."


__all__ = ["Order", "Shipping", "Tone", "server"]
