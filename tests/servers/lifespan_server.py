"""A server with a lifespan and a middleware, for the subprocess tests of both.

The lifespan appends `start` and `stop` to the file named by `$LIFESPAN_MARKER` (so the test
sees that shutdown ran) and fails at startup when `$LIFESPAN_FAIL` is set. A middleware records
every request it sees, which the `seen` tool gives back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from mrtr import RequestContext, Server, State
from mrtr.middleware import CallNext


@dataclass
class Resources:
    """What the lifespan opens: stands for a database pool or an HTTP client."""

    name: str
    calls: list[str] = field(default_factory=list)


def _mark(event: str) -> None:
    with open(os.environ["LIFESPAN_MARKER"], "a") as marker:
        marker.write(event + "\n")


@contextlib.asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[Resources]:
    if os.environ.get("LIFESPAN_FAIL"):
        raise ConnectionRefusedError("database at db.invalid:5432 refused the connection")
    _mark("start")
    try:
        yield Resources(name=f"pool of {server.name}")
    finally:
        _mark("stop")


server = Server("lifespan-demo", lifespan=lifespan)
seen: list[list[Any]] = []


@server.middleware
async def record(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
    seen.append([ctx.method, ctx.round, ctx.session is not None])
    return await call_next(ctx)


@server.tool()
async def whoami(ctx: RequestContext, resources: State[Resources], caller: str) -> str:
    """Say which pool served the call."""
    resources.calls.append(caller)
    assert ctx.state is resources
    return f"{resources.name} served {caller} ({len(resources.calls)} calls)"


@server.tool()
async def confirm(ctx: RequestContext, item: str) -> str:
    """Ask the user, then answer."""
    answer = await ctx.elicit(f"Order {item}?", {"type": "object", "properties": {}})
    return f"{item}: {answer.action} at round {ctx.round}"


@server.tool()
def recorded() -> list[list[Any]]:
    """What the middleware saw so far."""
    return seen
