"""A server for the `mrtr call` tests: tools that ask every kind of question.

Serve it with `mrtr serve tests/servers/cli_server.py:server` (stdio) or run this file.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mrtr import RequestContext, Server, TaskSettings, TextContent, ToolError

server = Server("cli-test-server", version="1.0.0")

SIGNUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 2},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "age": {"type": "integer", "minimum": 18, "maximum": 130},
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [
                {"const": "free", "title": "Free"},
                {"const": "pro", "title": "Professional"},
            ],
            "default": "free",
        },
        "extras": {
            "type": "array",
            "title": "Extras",
            "items": {"type": "string", "enum": ["stickers", "mug", "hoodie"]},
        },
        "newsletter": {"type": "boolean", "title": "Newsletter", "default": False},
    },
    "required": ["name", "email", "age"],
}


@server.tool()
async def signup(ctx: RequestContext, source: str = "cli") -> str:
    """Sign up: asks a form with every field type."""
    answer = await ctx.elicit("Tell us about yourself", SIGNUP_SCHEMA)
    if answer.action != "accept":
        return f"signup {answer.action}d" if answer.action == "decline" else "signup cancelled"
    content = dict(sorted((answer.content or {}).items()))
    return f"signed up from {source}: {content!r}"


@server.tool()
async def echo(n: Any = None, name: Any = None, ok: Any = None, tags: Any = None) -> dict[str, Any]:
    """Return the arguments as received, with their JSON types."""
    received = {"n": n, "name": name, "ok": ok, "tags": tags}
    return {
        key: {"value": value, "type": type(value).__name__}
        for key, value in received.items()
        if value is not None
    }


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
async def poem(ctx: RequestContext, topic: str) -> str:
    """Ask the client's model for a poem."""
    reply = await ctx.sample(f"A poem about {topic}", system_prompt="You are a poet", max_tokens=50)
    text = reply.content.text if isinstance(reply.content, TextContent) else "?"
    return f"{reply.model}/{reply.stop_reason}: {text}"


@server.tool()
async def where(ctx: RequestContext) -> str:
    """List the client's roots."""
    roots = await ctx.list_roots()
    return " ".join(f"{root.name}={root.uri}" for root in roots.roots)


@server.tool()
async def login(ctx: RequestContext) -> str:
    """Send the person to a URL."""
    answer = await ctx.elicit_url("Sign in to continue", "https://auth.example.com/login?x=1")
    return f"login {answer.action}"


@server.tool()
async def fail() -> str:
    """Always fails."""
    raise ToolError("this tool always fails")


@server.tool(task=TaskSettings("required", poll_interval=0.05))
async def forever() -> str:
    """Runs as a task that never ends."""
    await asyncio.Event().wait()
    return "never"


if __name__ == "__main__":
    server.run()
