"""A stdio server with a small bound on requests in flight, for the backpressure tests.

`gate()` reports on stderr that it started, then waits until the process gets SIGUSR1;
`ask()` asks the client a question (live, on a legacy session); `peak()` says how many
handlers were running at once at most. Run as `python backpressure_server.py LIMIT`; input
lines are limited to 4 KiB so that little unread input is buffered in the process.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from mrtr import RequestContext, Server, ServerOptions
from mrtr.server import Budgets
from mrtr.transport.stdio_server import serve_stdio

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 8
server = Server("backpressure", options=ServerOptions(budgets=Budgets(connection_requests=LIMIT)))
running = 0
peak_running = 0


opened = asyncio.Event()


@server.tool()
async def gate() -> str:
    """Wait until the gate is opened (SIGUSR1)."""
    global running, peak_running
    running += 1
    peak_running = max(peak_running, running)
    print("started", file=sys.stderr, flush=True)
    try:
        await opened.wait()
    finally:
        running -= 1
    return "passed"


@server.tool()
async def ask(ctx: RequestContext) -> str:
    """Ask the client for a name."""
    answer = await ctx.elicit(
        "Name?", {"type": "object", "properties": {"name": {"type": "string"}}}
    )
    return f"hello {answer.content['name']}"  # type: ignore[index]


@server.tool()
def peak() -> int:
    """The most handlers running at once so far."""
    return peak_running


async def main() -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, opened.set)
    await serve_stdio(server, max_message_size=4096)


if __name__ == "__main__":
    asyncio.run(main())
