"""Our side of the interoperability matrix: one server with every feature a peer client checks.

Run as `python matrix_server.py stdio` or `python matrix_server.py http PORT` (Streamable HTTP at
http://127.0.0.1:PORT/mcp). Both eras are served from the same endpoint; every result is plain
text a driver can compare without knowing the era.
"""

from __future__ import annotations

import sys
from pathlib import Path

# A peer client may start this with a bare environment (no PYTHONPATH): serve this checkout's mrtr.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from mrtr import RequestContext, Server

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def build_matrix_server() -> Server:
    """The matrix server: tools, a prompt, a resource and a template."""
    server = Server("mrtr-matrix", version="1.0.0")

    @server.tool()
    async def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool()
    async def greet(ctx: RequestContext) -> str:
        """Ask the user's name once."""
        answer = await ctx.elicit("Your name?", NAME)
        if answer.action != "accept" or not answer.content:
            return f"no name ({answer.action})"
        return f"hello {answer.content['name']}"

    @server.tool()
    async def trip(ctx: RequestContext) -> str:
        """Ask twice, one question after the other."""
        who = await ctx.elicit("Your name?", NAME)
        if who.action != "accept" or not who.content:
            return f"no trip ({who.action})"
        where = await ctx.elicit(f"Where to, {who.content['name']}?", CITY)
        if where.action != "accept" or not where.content:
            return f"no trip ({where.action})"
        return f"{who.content['name']} to {where.content['city']}"

    @server.tool()
    async def summarize(ctx: RequestContext, text: str) -> str:
        """Ask the client's model."""
        reply = await ctx.sample(f"Summarize: {text}", max_tokens=20)
        return f"{getattr(reply.content, 'text', '?')} by {reply.model}"

    @server.tool()
    async def roots(ctx: RequestContext) -> str:
        """List the client's roots."""
        listed = await ctx.list_roots()
        return ",".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def count(ctx: RequestContext, n: int) -> str:
        """Report progress n times and log each step."""
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
            await ctx.log("info", f"step {i}", logger="count")
        return f"counted {n}"

    @server.prompt()
    def haiku(topic: str) -> str:
        """A prompt with one argument."""
        return f"Write a haiku about {topic}."

    @server.resource("matrix://readme", mime_type="text/plain")
    def readme() -> str:
        """A static resource."""
        return "matrix readme"

    @server.resource_template("matrix://items/{item}", mime_type="text/plain")
    def item(item: str) -> str:
        """A resource template."""
        return f"item {item}"

    return server


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "http":
        build_matrix_server().run("http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        build_matrix_server().run("stdio")
