"""A server with typed outputs and lists longer than one page, for the client conveniences.

Served by `mrtr serve tests/servers/conveniences_server.py:server` (stdio or HTTP): two items
per page, so every list takes several `nextCursor`s.
"""

from __future__ import annotations

from pydantic import BaseModel

from mrtr import RequestContext, Server, ServerOptions

server = Server("conveniences", version="1.0.0", options=ServerOptions(page_size=2))


class Point(BaseModel):
    x: int
    y: int


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def point(x: int, y: int) -> Point:
    """A point."""
    return Point(x=x, y=y)


@server.tool()
def evens(n: int) -> list[int]:
    """The first n even numbers."""
    return [2 * i for i in range(n)]


@server.tool()
def shout(text: str) -> str:
    """Upper-case text (no structured output)."""
    return text.upper()


@server.tool()
async def count(ctx: RequestContext, item: str) -> int:
    """Ask how many of an item to order, and say how many were ordered."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    answer = await ctx.elicit(f"How many {item}?", schema)
    return int((answer.content or {}).get("n", 0))


@server.tool()
def broken() -> int:
    """Always fails."""
    raise RuntimeError("out of order")


def _register(number: int) -> None:
    @server.prompt(name=f"prompt-{number}")
    def make() -> str:
        return f"prompt {number}"

    @server.resource(f"file:///r{number}", name=f"r{number}")
    def read() -> str:
        return f"resource {number}"

    @server.resource_template(f"db://t{number}/{{id}}", name=f"t{number}")
    def row(id: int) -> str:
        return f"table {number} row {id}"


for _number in range(5):
    _register(_number)
