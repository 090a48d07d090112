"""A server written with the official Python SDK 2.x (`mcp.server.mcpserver.MCPServer`), served
by its dual-era loop (2026-07-28 and the initialize-based revisions).

Run with the peer's interpreter: `python mcp2_server.py stdio | http PORT`. The eliciting tool
asks in the 2026-07-28 style this SDK offers for it: an `InputRequiredResult`, answered on the
retry.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
server = MCPServer("mcp2-peer")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
async def greet(ctx: Context) -> str | types.InputRequiredResult:
    """Ask the user's name."""
    answer: Any = (ctx.input_responses or {}).get("name")
    if answer is None or ctx.request_state != "asked":
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message="Your name?", requested_schema=NAME)
        )
        return types.InputRequiredResult(input_requests={"name": request}, request_state="asked")
    action = answer.get("action") if isinstance(answer, dict) else answer.action
    content = answer.get("content") if isinstance(answer, dict) else answer.content
    return f"hello {content['name']}" if action == "accept" else f"no name ({action})"


@server.prompt()
def haiku(topic: str) -> str:
    """A prompt with one argument."""
    return f"Write a haiku about {topic}."


@server.resource("peer://readme", mime_type="text/plain")
def readme() -> str:
    """A static resource."""
    return "peer readme"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
