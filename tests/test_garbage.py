"""What kept the legacy-session p99 at about 10x the p50 under 32 clients, and its fixes.

A full collection of CPython's cycle collector walks every tracked object; run every half
second (requests in flight promoted by the young collections) over a server's whole startup
heap, it paused every session at once. Two things hold it off: a legacy request leaves no
reference cycle behind (its objects go with their last reference), and `serve_http` freezes
the startup heap out of the collector.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.loopback_process import free_port
from mrtr import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import ours, tool_calls  # noqa: E402


@contextmanager
def saved_garbage() -> Iterator[list[object]]:
    """What the collector finds unreachable among the objects made inside the block."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[object] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _ours(garbage: list[object]) -> list[str]:
    return sorted({type(o).__qualname__ for o in garbage if type(o).__module__.startswith("mrtr")})


async def test_legacy_requests_leave_no_reference_cycle() -> None:
    async with ours.http_server() as url, ours.legacy_http_client(url) as client:
        await tool_calls.live_flow_once(client)
        with saved_garbage() as garbage:
            for _ in range(20):
                await tool_calls.live_flow_once(client)  # a question asked live, then the result
                await tool_calls.plain_call_once(client)
    # Before the live asker let go of its context, each request left its context, engine,
    # asker and round state (and its task, through the engine) for the collector.
    assert _ours(garbage) == []


async def test_modern_flows_leave_no_reference_cycle() -> None:
    async with ours.http_server() as url, ours.http_client(url) as client:
        await tool_calls.mrtr_flow_once(client)
        with saved_garbage() as garbage:
            for _ in range(20):
                await tool_calls.mrtr_flow_once(client)
                await tool_calls.plain_call_once(client)
    assert _ours(garbage) == []


SERVER = textwrap.dedent(
    """
    import gc, sys
    from mrtr import Server

    server = Server("gc")

    @server.tool()
    async def frozen() -> str:
        return str(gc.get_freeze_count())

    server.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]))
    """
)


async def test_serve_http_freezes_the_startup_heap() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVER,
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                async with Client.http(f"http://127.0.0.1:{port}/mcp") as client:
                    result = await client.call_tool("frozen", {})
                break
            except Exception:
                if time.monotonic() > deadline or proc.returncode is not None:
                    raise
                await asyncio.sleep(0.1)
        # The server process's count: its modules and server, built before serving.
        assert int(result.content[0].text) > 10_000
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
