"""A server written with FastMCP 3.x or 4.x.

Run with the peer's interpreter: `python fastmcp_server.py stdio | http PORT | sse PORT`. On
4.x, which refuses `ctx.elicit()` on 2026-07-28 connections, the eliciting tool asks the way
FastMCP 4 documents for them: it returns an `InputRequiredResult` and reads the answer on the
retry.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import fastmcp
from fastmcp import Context, FastMCP

server = FastMCP("fastmcp-peer")
MAJOR = int(fastmcp.__version__.split(".")[0])
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@dataclass
class Name:
    name: str


@server.tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


if MAJOR >= 4:
    import mcp_types as types

    @server.tool
    async def greet(ctx: Context) -> Any:
        """Ask the user's name (an MRTR round)."""
        answer: Any = (ctx.input_responses or {}).get("name")
        if answer is None or ctx.request_state != "asked":
            params = types.ElicitRequestFormParams(message="Your name?", requested_schema=NAME)
            return types.InputRequiredResult(
                input_requests={"name": types.ElicitRequest(params=params)}, request_state="asked"
            )
        action = answer.get("action") if isinstance(answer, dict) else answer.action
        content = answer.get("content") if isinstance(answer, dict) else answer.content
        return f"hello {content['name']}" if action == "accept" else f"no name ({action})"

else:

    @server.tool
    async def greet(ctx: Context) -> str:
        """Ask the user's name (a request on the session)."""
        answer = await ctx.elicit("Your name?", response_type=Name)
        if answer.action != "accept":
            return f"no name ({answer.action})"
        return f"hello {answer.data.name}"


@server.prompt
def haiku(topic: str) -> str:
    """A prompt with one argument."""
    return f"Write a haiku about {topic}."


@server.resource("peer://readme", mime_type="text/plain")
def readme() -> str:
    """A static resource."""
    return "peer readme"


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        server.run("stdio", show_banner=False)
    else:
        server.run(transport, host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
