"""An mcp 1.30 client (`mcp.ClientSession`) calling `book` through `mrtr proxy`, answering
its two questions; prints each question and the result.

Run with the mcp 1.30 peer's interpreter: `python proxy_mcp1_client.py http URL`, or
`python proxy_mcp1_client.py stdio COMMAND...` (the proxy's command line).
"""

import asyncio
import os
import sys
from typing import Any

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    print(f"asked: {params.message}", flush=True)
    content = {"size": "tiny"} if params.message.startswith("Size") else {"ok": True}
    return types.ElicitResult(action="accept", content=content)


async def call(read: Any, write: Any) -> None:
    async with ClientSession(read, write, elicitation_callback=answer) as session:
        await session.initialize()
        result = await session.call_tool("book", {"item": "bike"})
        print("result: " + " ".join(getattr(c, "text", "") for c in result.content), flush=True)


async def main() -> None:
    if sys.argv[1] == "http":
        async with streamablehttp_client(sys.argv[2]) as (read, write, _):
            await call(read, write)
    else:
        server = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
        async with stdio_client(server) as (read, write):
            await call(read, write)


asyncio.run(main())
