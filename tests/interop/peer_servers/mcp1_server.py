"""A server written with the official Python SDK 1.x (`mcp.server.fastmcp.FastMCP`).

Run with the peer's interpreter: `python mcp1_server.py stdio | http PORT | sse PORT`. Serves
mcp 1.3 (2024-11-05: no elicitation, no Streamable HTTP) to 1.30 alike: no `from __future__
import annotations`, which older FastMCP releases cannot read tool signatures under.
"""

import sys

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
server = FastMCP("mcp1-peer", host="127.0.0.1", port=port, log_level="WARNING")


class Name(BaseModel):
    name: str


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


if hasattr(Context, "elicit"):  # elicitation came with 2025-06-18 (mcp 1.10)

    @server.tool()
    async def greet(ctx: Context) -> str:  # type: ignore[type-arg]
        """Ask the user's name."""
        answer = await ctx.elicit("Your name?", schema=Name)
        if answer.action != "accept":
            return f"no name ({answer.action})"
        return f"hello {answer.data.name}"


@server.prompt()
def haiku(topic: str) -> str:
    """A prompt with one argument."""
    return f"Write a haiku about {topic}."


@server.resource("peer://readme", mime_type="text/plain")
def readme() -> str:
    """A static resource."""
    return "peer readme"


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    server.run({"stdio": "stdio", "http": "streamable-http", "sse": "sse"}[transport])  # type: ignore[arg-type]
