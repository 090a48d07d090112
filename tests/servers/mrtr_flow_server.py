"""An MCP server on stdio for the stdio transport tests.

It serves a slow and a fast tool, a tool that blocks until cancelled (and says so in a marker
file), a tool that kills the process, and tools that write to stderr or print to stdout.
`--max-message-size N` serves with that line limit instead of the default; `--eof-grace S`
gives requests in flight at end of input S seconds instead of the default. (The full MRTR flow
over stdio is `flow_stdio_server.py`.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from mrtr import RequestContext, Server
from mrtr.transport.stdio_server import serve_stdio

server = Server("stdio-test-server", version="1.0.0")


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
    parser.add_argument("--eof-grace", type=float, default=None)
    args = parser.parse_args()
    options: dict[str, float] = {}
    if args.eof_grace is not None:
        options["eof_grace"] = args.eof_grace
    if args.max_message_size is None:
        server.run("stdio", **options)
    else:
        asyncio.run(serve_stdio(server, max_message_size=args.max_message_size, **options))


if __name__ == "__main__":
    main()
