"""A stdio server built on the official MCP Python SDK (`mcp`), for interop tests.

`python official_shop.py legacy` serves the `initialize`-based era only (the handshake loop of
the official SDK), where `order` asks with the classic server-to-client `ctx.elicit()`;
`python official_shop.py modern` serves the official dual-era loop, where `order_mrtr` asks in
the MRTR style (an `InputRequiredResult`, answered on the retry). The same tool name, `order`,
is registered in both, so one client script runs unchanged against either.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from pydantic import BaseModel


class Region(BaseModel):
    region: str


def build(era: str) -> MCPServer:
    server = MCPServer("official-shop")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    if era == "legacy":

        @server.tool()
        async def order(item: str, ctx: Context) -> str:
            """Order an item, asking where to ship it (a live server-to-client request)."""
            await ctx.report_progress(1, 2, "asking")
            answer = await ctx.elicit(f"Ship {item} to which region?", Region)
            if answer.action != "accept":
                return "Cancelled"
            await ctx.report_progress(2, 2, "ordered")
            return f"Ordered {item}, shipping to {answer.data.region}"

    else:

        @server.tool()
        async def order(item: str, ctx: Context) -> str | types.InputRequiredResult:
            """Order an item, asking where to ship it (an MRTR round)."""
            answer: Any = (ctx.input_responses or {}).get("region")
            if answer is None or ctx.request_state != "asked":
                schema = Region.model_json_schema()
                request = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=f"Ship {item} to which region?", requested_schema=schema
                    )
                )
                return types.InputRequiredResult(
                    input_requests={"region": request}, request_state="asked"
                )
            content = answer.get("content") if isinstance(answer, dict) else answer.content
            if (answer.get("action") if isinstance(answer, dict) else answer.action) != "accept":
                return "Cancelled"
            return f"Ordered {item}, shipping to {content['region']}"

    @server.prompt()
    def greet(name: str) -> str:
        return f"Say hello to {name}."

    @server.resource("file:///readme")
    def readme() -> str:
        return "Read me first."

    return server


async def serve_legacy(server: MCPServer) -> None:
    lowlevel = server._lowlevel_server
    async with lowlevel.lifespan(lowlevel) as state, stdio_server() as (read, write):
        await serve_loop(
            lowlevel,
            read,
            write,
            lifespan_state=state,
            init_options=lowlevel.create_initialization_options(),
        )


if __name__ == "__main__":
    era = sys.argv[1] if len(sys.argv) > 1 else "modern"
    app = build(era)
    if era == "legacy":
        anyio.run(serve_legacy, app)
    else:
        app.run("stdio")
