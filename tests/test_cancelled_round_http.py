"""A redeemed round whose client drops its connection mid-round, over real HTTP (uvicorn on a
loopback port): the round is cancelled and released at once, so the client's retry of the same
round is answered promptly (not after `round_timeout` + 5 s), the `ctx.once` that finished
before the drop is reused, and the side effect after it runs exactly once. A `once` still
running at the drop finishes first, and the retry reuses it."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers.transport_flow import serve
from mrtr import Client, ElicitRequestParams, ElicitResult, RequestContext, Server, ServerOptions
from mrtr.server.store import MemoryStore

KEY = "h" * 40
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
GUARD = 10.0  # seconds: far below round_timeout + 5 s, which a held retry would wait


def confirm(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


class Shop:
    """`order` asks once, pays in `ctx.once`, waits for `release`, then ships."""

    def __init__(self) -> None:
        self.server = Server(
            "shop",
            options=ServerOptions(
                request_state_key=KEY,
                store=MemoryStore(),
                input_required=ServerOptions.InputRequiredConfig(round_timeout=600),
            ),
        )
        self.paid: list[str] = []
        self.shipped: list[str] = []
        self.reached = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()

        @self.server.tool()
        async def order(ctx: RequestContext, item: str) -> str:
            await ctx.elicit(f"Order {item}?", SCHEMA, key="confirm")

            def pay() -> str:
                self.paid.append(item)
                return f"receipt-{len(self.paid)}"

            receipt: str = await ctx.once("payment", pay)
            self.reached.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            self.shipped.append(item)  # the counted side effect after the event
            return f"{item} shipped, {receipt}"

        @self.server.tool()
        async def slow_order(ctx: RequestContext, item: str) -> str:
            await ctx.elicit(f"Order {item}?", SCHEMA, key="confirm")

            async def pay() -> str:
                self.reached.set()
                await self.release.wait()  # the payment provider is slow
                self.paid.append(item)
                return f"receipt-{len(self.paid)}"

            try:
                receipt: str = await ctx.once("payment", pay)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            self.shipped.append(item)
            return f"{item} shipped, {receipt}"


async def test_a_retry_after_a_dropped_connection_is_answered_at_once_and_ships_once() -> None:
    shop = Shop()
    async with serve(shop.server.asgi_app()) as url:
        params = {"name": "order", "arguments": {"item": "lamp"}}
        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            first = await client.request("tools/call", params)
        assert first["resultType"] == "input_required"
        final = {
            **params,
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
            "requestState": first["requestState"],
        }
        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            held = asyncio.create_task(client.request("tools/call", final))
            await asyncio.wait_for(shop.reached.wait(), GUARD)
            held.cancel()  # the client goes away: its connection closes mid-round
            await asyncio.gather(held, return_exceptions=True)
            # The server saw the drop: the round was cancelled while held.
            await asyncio.wait_for(shop.cancelled.wait(), GUARD)
        assert shop.paid == ["lamp"] and shop.shipped == []
        shop.release.set()

        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            retried = await asyncio.wait_for(client.request("tools/call", final), GUARD)
            again = await asyncio.wait_for(client.request("tools/call", final), GUARD)
    assert retried["content"][0]["text"] == "lamp shipped, receipt-1"
    assert again == retried
    assert shop.paid == ["lamp"]  # the finished once was reused, not run again
    assert shop.shipped == ["lamp"]  # the side effect after the event ran exactly once


async def test_a_payment_running_at_the_drop_finishes_and_the_retry_reuses_it() -> None:
    shop = Shop()
    async with serve(shop.server.asgi_app()) as url:
        params = {"name": "slow_order", "arguments": {"item": "desk"}}
        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            first = await client.request("tools/call", params)
        final = {
            **params,
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
            "requestState": first["requestState"],
        }
        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            held = asyncio.create_task(client.request("tools/call", final))
            await asyncio.wait_for(shop.reached.wait(), GUARD)
            held.cancel()  # dropped while the payment is in progress
            await asyncio.gather(held, return_exceptions=True)
            await asyncio.wait_for(shop.cancelled.wait(), GUARD)
        assert shop.paid == []

        async with Client.http(f"{url}/mcp", elicitation_handler=confirm) as client:
            retried = asyncio.create_task(client.request("tools/call", final))
            shop.release.set()  # the payment completes after the drop
            answer = await asyncio.wait_for(retried, GUARD)
    assert answer["content"][0]["text"] == "desk shipped, receipt-1"
    assert shop.paid == ["desk"] and shop.shipped == ["desk"]
