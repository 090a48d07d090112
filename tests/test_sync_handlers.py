"""Sync handlers run in worker threads: a blocking tool never stalls other requests (over real
HTTP on loopback and over stdio with the official client), `round_timeout` and a tool's
`timeout=` fire on time, the pool is bounded by `sync_workers`, `run_in_thread=False` keeps a
tool on the loop, and a sync handler that tries to ask the client gets a clear error."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

from helpers.transport_flow import serve
from mrtr import Client, McpError, RequestContext, Server, ServerOptions, TextContent
from mrtr.protocol import errors
from mrtr.server import InputRequiredConfig

SCRIPT = Path(__file__).resolve().parent / "servers" / "author_server.py"
SERVE = ["-m", "mrtr", "serve", f"{SCRIPT}:server"]
FORM = {"elicitation": {"form": {}}}


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def sleepy_server(release: threading.Event | None = None, **options: Any) -> Server:
    """A server with a blocking sync tool (`nap`) and an async one (`quick`).

    With `release`, `nap` blocks its worker thread until the test sets it, so a test can show
    what else is served meanwhile without any wall-clock bound.
    """
    server = Server("sleepy", options=ServerOptions(**options))

    @server.tool()
    def nap(seconds: float) -> str:
        if release is not None:
            release.wait(GUARD)
        else:
            time.sleep(seconds)
        return threading.current_thread().name

    @server.tool()
    async def quick() -> str:
        return "quick"

    return server


#: Bounds a wait that only a bug would reach; no assertion measures time against it.
GUARD = 10.0


async def test_a_blocking_sync_tool_does_not_stall_other_requests_over_http() -> None:
    release = threading.Event()
    server = sleepy_server(release)
    async with serve(server.asgi_app()) as url, Client.http(f"{url}/mcp") as client:
        slow = asyncio.create_task(client.call_tool("nap", {"seconds": 0}))
        # The nap holds its thread until released: the quick call is answered while it does.
        fast = await asyncio.wait_for(client.call_tool("quick"), GUARD)
        assert not slow.done()
        release.set()
        napped = await slow
    assert text_of(fast) == "quick"
    assert text_of(napped).startswith("mrtr-sleepy")


async def test_run_in_thread_false_keeps_a_sync_tool_on_the_loop() -> None:
    server = Server("loop")
    loop_thread: list[int] = []

    @server.tool(run_in_thread=False)
    def here() -> bool:
        return threading.get_ident() == loop_thread[0]

    @server.tool()
    def there() -> bool:
        return threading.get_ident() == loop_thread[0]

    loop_thread.append(threading.get_ident())
    async with Client.in_memory(server) as client:
        on_loop = await client.call_tool("here")
        off_loop = await client.call_tool("there")
    assert on_loop.structured_content == {"result": True}
    assert off_loop.structured_content == {"result": False}


async def test_the_pool_is_bounded_by_sync_workers() -> None:
    server = sleepy_server(sync_workers=1)
    async with Client.in_memory(server) as client:
        started = time.monotonic()
        await asyncio.gather(*(client.call_tool("nap", {"seconds": 0.2}) for _ in range(3)))
        took = time.monotonic() - started
    assert took >= 0.55  # one thread: the three naps ran one after another


def test_sync_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="sync_workers must be a positive integer"):
        ServerOptions(sync_workers=0)


async def test_round_timeout_fires_on_time_for_a_blocked_sync_tool() -> None:
    release, finished = threading.Event(), threading.Event()
    server = Server(
        "t", options=ServerOptions(input_required=InputRequiredConfig(round_timeout=0.2))
    )

    @server.tool()
    def blocked() -> str:
        release.wait(GUARD)
        finished.set()  # the thread runs on to its end: Python cannot interrupt it
        return "late"

    async with Client.in_memory(server) as client:
        with pytest.raises(McpError) as raised:
            await asyncio.wait_for(client.call_tool("blocked"), GUARD)
        # The round timed out while the thread was still blocked, not when it ended.
        assert not finished.is_set()
        release.set()
    assert raised.value.code == errors.INTERNAL_ERROR
    assert "did not finish within round_timeout (0.2 s)" in raised.value.message
    assert await asyncio.to_thread(finished.wait, GUARD)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_a_tool_timeout_bounds_one_call_with_a_tool_error(sync: bool) -> None:
    server = Server("t")
    release = threading.Event()

    def blocked() -> str:
        release.wait(GUARD)
        return "late"

    async def stuck() -> str:
        await asyncio.sleep(GUARD)
        return "late"

    server.tool("slow", timeout=0.15)(blocked if sync else stuck)
    async with Client.in_memory(server) as client:
        # Answered while the tool is still blocked: the timeout, not the tool's end, ended it.
        result = await asyncio.wait_for(client.call_tool("slow"), GUARD)
        release.set()
    assert result.is_error is True
    assert text_of(result) == "Tool 'slow' did not finish within its timeout (0.15 s)"


async def test_a_tools_own_timeout_error_is_not_taken_for_its_timeout() -> None:
    server = Server("t", options=ServerOptions(mask_errors=False))

    @server.tool(timeout=5)
    async def upstream() -> str:
        raise TimeoutError("the upstream API timed out")

    async with Client.in_memory(server) as client:
        result = await client.call_tool("upstream")
    assert text_of(result) == "Error executing tool 'upstream': the upstream API timed out"


def test_a_timeout_must_be_positive() -> None:
    server = Server("t")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        server.tool(timeout=0)(lambda: None)


async def test_context_variables_reach_the_worker_thread() -> None:
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
    server = Server("t")

    @server.tool()
    def who() -> str:
        return tenant.get()

    tenant.set("acme")
    async with Client.in_memory(server) as client:
        result = await client.call_tool("who")
    assert text_of(result) == "acme"


async def test_a_sync_tool_asking_or_calling_once_gets_a_clear_error() -> None:
    server = Server("t")

    @server.tool()
    def asks(ctx: RequestContext) -> str:
        ctx.elicit("Sure?", {"type": "object", "properties": {}})
        return "asked"

    @server.tool()
    def once(ctx: RequestContext) -> str:
        ctx.once("id", lambda: 1)
        return "once"

    async with Client.in_memory(server, elicitation_handler=lambda p: None) as client:
        asked = await asyncio.wait_for(client.call_tool("asks"), 5)
        onced = await asyncio.wait_for(client.call_tool("once"), 5)
    assert asked.is_error is True
    assert "asks() is a sync handler running in a worker thread" in text_of(asked)
    assert "ctx.elicit" in text_of(asked) and "async def" in text_of(asked)
    assert onced.is_error is True and "cannot use ctx.once('id')" in text_of(onced)


async def test_both_eras_over_stdio_keep_serving_while_a_sync_tool_blocks() -> None:
    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=SERVE), mode="legacy"
    ) as official:
        slow = asyncio.create_task(official.call_tool("hold", {}))
        # `holding` is answered while `hold` blocks its thread (it returns only after `wake`).
        busy = await asyncio.wait_for(official.call_tool("holding", {}), GUARD)
        assert not slow.done()
        await official.call_tool("wake", {})
        held = await asyncio.wait_for(slow, GUARD)
        asks = await asyncio.wait_for(official.call_tool("sync_asks", {}), GUARD)
    assert busy.structured_content == {"result": True}
    assert held.content[0].text == "held in mrtr-author"  # type: ignore[union-attr]
    assert asks.is_error is True
    assert "sync_asks() is a sync handler" in asks.content[0].text  # type: ignore[union-attr]

    async with Client.stdio(sys.executable, SERVE) as modern:
        slow_modern = asyncio.create_task(modern.call_tool("hold"))
        busy_modern = await asyncio.wait_for(modern.call_tool("holding"), GUARD)
        assert not slow_modern.done()
        await modern.call_tool("wake")
        await asyncio.wait_for(slow_modern, GUARD)
        stuck = await modern.call_tool("stuck")
    assert busy_modern.structured_content == {"result": True}
    assert text_of(stuck) == "Tool 'stuck' did not finish within its timeout (0.2 s)"
