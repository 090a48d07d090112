"""An MCP server on stdio for the stdio transport tests.

It serves MRTR flows (a tool, a prompt and a resource template that elicit, sample and list
roots over several rounds), a slow and a fast tool, a tool that blocks until cancelled (and
says so in a marker file), a tool that kills the process, and tools that write to stderr or
print to stdout. `--max-message-size N` serves with that line limit instead of the default.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from pydantic import BaseModel

from mrtr import ElicitRequestParams, RequestContext, Server
from mrtr.transport.stdio import serve_stdio

server = Server("stdio-test-server", version="1.0.0")


class Region(BaseModel):
    region: str


class Tone(BaseModel):
    tone: str


class Confirm(BaseModel):
    ok: bool


@server.tool()
async def order(ctx: RequestContext, item: str) -> str:
    """Order an item: confirm, ask for a region, then sample and list roots together."""
    confirm = await ctx.elicit(
        ElicitRequestParams(
            message=f"Order {item}?",
            requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        )
    )
    if confirm.action != "accept":
        return "Cancelled"
    region = await ctx.elicit("Ship to which region?", Region)
    reply, roots = await asyncio.gather(ctx.sample("Say hi"), ctx.list_roots())
    return (
        f"Ordered {item} to {region.content.region}; "
        f"model said {reply.content.text!r}; {len(roots.roots)} root(s)"
    )


@server.prompt()
async def briefing(ctx: RequestContext, topic: str) -> str:
    """A briefing whose tone the user picks and whose summary the client's model writes."""
    tone = await ctx.elicit(f"Tone for the {topic} briefing?", Tone)
    summary = await ctx.sample(f"Summarize {topic}")
    return f"Brief on {topic}, {tone.content.tone}: {summary.content.text}"


@server.resource_template("notes://{topic}")
async def notes(ctx: RequestContext, topic: str) -> str:
    """Notes on a topic, read from the client's first root once the user agrees."""
    roots = await ctx.list_roots()
    confirm = await ctx.elicit(f"Read notes on {topic}?", Confirm)
    if not confirm.content.ok:
        return "declined"
    return f"notes on {topic} from {roots.roots[0].uri}"


@server.tool()
async def fast() -> str:
    """Answer at once."""
    return "fast"


@server.tool()
async def slow(ctx: RequestContext) -> str:
    """Take a long time (the tests cancel it)."""
    await ctx.report_progress(1, message="started")
    await asyncio.sleep(120)
    return "slow"


def _mark(path: str, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


@server.tool()
async def block(ctx: RequestContext, marker: str) -> str:
    """Wait until cancelled, then write "cancelled" to `marker`."""
    await ctx.report_progress(1, message="started")
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        _mark(marker, "cancelled")
        print(f"block cancelled ({marker})", file=sys.stderr, flush=True)
        raise
    return "not cancelled"


@server.tool()
async def die(code: int) -> str:
    """Exit the process at once with `code`."""
    print(f"dying with code {code}", file=sys.stderr, flush=True)
    os._exit(code)


@server.tool()
async def shout(text: str) -> str:
    """Write `text` to stderr."""
    print(text, file=sys.stderr, flush=True)
    return "shouted"


@server.tool()
async def stray_print(text: str) -> str:
    """print() to stdout, as careless code does."""
    print(text, flush=True)
    return "printed"


@server.tool()
async def big(size: int) -> str:
    """A text result of `size` characters."""
    return "x" * size


@server.tool()
async def steps(ctx: RequestContext, count: int) -> str:
    """Report progress `count` times, then finish."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, count)
    return f"{count} steps"


@server.tool()
async def environment(name: str) -> str:
    """The value of an environment variable ("<unset>" when it is not set)."""
    return os.environ.get(name, "<unset>")


@server.tool()
async def working_directory() -> str:
    """The process's working directory."""
    return os.getcwd()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-message-size", type=int, default=None)
    limit = parser.parse_args().max_message_size
    if limit is None:
        server.run("stdio")
    else:
        asyncio.run(serve_stdio(server, max_message_size=limit))


if __name__ == "__main__":
    main()
