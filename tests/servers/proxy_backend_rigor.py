"""An mrtr stdio backend for the proxy's routing and exactly-once tests.

`book` asks the size and a confirmation, then records its effect in the ledger file named by
`PROXY_LEDGER` (once per backend call, however often it is replayed) and, after
`PROXY_EFFECT_DELAY` seconds, answers: a test can drop the round in that window. `pair` asks
two questions at once. The prompt `greet` logs, then asks a question during `prompts/get`.
Every question names the call's own item or person, so a test can tell whose it is.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from mrtr import RequestContext, Server

server = Server("proxy-rigor-backend", version="1.0.0")


class Size(BaseModel):
    size: str


class Confirm(BaseModel):
    ok: bool


class Greeting(BaseModel):
    text: str


def _record(line: str) -> None:
    with Path(os.environ["PROXY_LEDGER"]).open("a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")


async def _effect(ctx: RequestContext, item: str) -> str:
    def record() -> str:
        _record(f"effect {item}")
        return item

    done: str = await ctx.once("effect", record)
    await asyncio.sleep(float(os.environ.get("PROXY_EFFECT_DELAY", "0")))
    return done


@server.tool()
async def book(item: str, ctx: RequestContext) -> str:
    """Ask the size of `item` and a confirmation, then book it (one effect)."""
    size = await ctx.elicit(f"Size of {item}?", Size)
    confirm = await ctx.elicit(f"Book {item}?", Confirm)
    if size.action != "accept" or confirm.action != "accept":
        return f"not booked {item}"
    await _effect(ctx, item)
    return f"booked {item} ({size.content.size})"


@server.tool()
async def pair(item: str, ctx: RequestContext) -> str:
    """Ask two questions at once about `item`, then book it (one effect)."""
    size, _ = await asyncio.gather(
        ctx.elicit(f"Size of {item}?", Size), ctx.elicit(f"Book {item}?", Confirm)
    )
    await _effect(ctx, item)
    return f"paired {item} ({size.content.size})"


@server.prompt()
async def greet(who: str, ctx: RequestContext) -> str:
    """Log, then ask how to greet `who`."""
    await ctx.log("info", f"greeting {who}")
    greeting = await ctx.elicit(f"Greeting for {who}?", Greeting)
    return f"{greeting.content.text}, {who}" if greeting.action == "accept" else f"hi {who}"


if __name__ == "__main__":
    server.run()
