"""The shop the redemption and store tests drive: a purchase that asks to confirm, then charges
once."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers.mrtr_flows import accept, call_tool, result_of
from mrtr import McpError, RequestContext, Server, ServerOptions, ToolError

KEY = "k" * 40


SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


class Shop:
    """A server whose `charge` asks once, then charges: the side effect to run once."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("request_state_key", KEY)
        self.server = Server("shop", options=ServerOptions(**options))
        self.charges: list[int] = []
        self.gate: asyncio.Event | None = None

        @self.server.tool()
        async def charge(ctx: RequestContext, amount: int) -> str:
            answer = await ctx.elicit("Charge?", SCHEMA, key="confirm")
            if self.gate is not None:
                await self.gate.wait()
            self.charges.append(amount)  # after the last question
            if amount < 0:
                raise ToolError(f"refund of {-amount} failed after charging")
            if amount == 0:
                raise McpError(-32000, "nothing to charge", {"charged": len(self.charges)})
            return f"charge #{len(self.charges)} of {amount}: {answer.action}"

        @self.server.tool()
        async def report(ctx: RequestContext, size: int) -> str:
            await ctx.elicit("Report?", SCHEMA, key="confirm")
            self.charges.append(size)
            return "x" * size

    async def first_state(self, name: str = "charge", **arguments: Any) -> str:
        first = result_of(await call_tool(self.server, name, arguments))
        assert first["resultType"] == "input_required"
        state: str = first["requestState"]
        return state

    async def final(self, state: str, name: str = "charge", **arguments: Any) -> dict[str, Any]:
        return await call_tool(
            self.server, name, arguments, responses={"confirm": accept(ok=True)}, state=state
        )
