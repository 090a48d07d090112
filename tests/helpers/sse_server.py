"""The server the HTTP+SSE (2024-11-05) tests serve."""

from __future__ import annotations

from typing import Any

from mrtr import RequestContext, Server, ServerOptions

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def build_server(**options: Any) -> Server:
    server = Server("sse-interop", version="1.0.0", options=ServerOptions(**options))

    @server.tool()
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    async def greet(ctx: RequestContext) -> str:
        """Ask the user's name."""
        answer = await ctx.elicit("Your name?", NAME)
        return f"hello {(answer.content or {}).get('name')} ({answer.action})"

    return server
