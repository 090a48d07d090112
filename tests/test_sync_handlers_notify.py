"""A sync (`def`) handler in a worker thread logs and reports progress by calling `ctx.log` and
`ctx.report_progress` (no `await`): over real HTTP on loopback the client gets every message, in
order and before the result, from our client (2026-07-28) and from the official one (a legacy
session); an async handler still awaits the same methods."""

from __future__ import annotations

import gc
import threading
import warnings
from typing import Any

import mcp
from mcp import types as mcp_types

from helpers.transport_flow import serve
from mrtr import Client, RequestContext, Server, TextContent
from mrtr.protocol import meta as meta_keys


def chatty_server() -> Server:
    server = Server("chatty-sync")

    @server.tool()
    def steps(ctx: RequestContext, n: int) -> str:
        """Reports each step as progress and logs it, from its worker thread."""
        for i in range(1, n + 1):
            ctx.report_progress(i, n, f"step {i}")
            ctx.log("info", {"step": i})
        ctx.log("debug", "below the level asked for")
        return threading.current_thread().name

    @server.tool()
    async def async_steps(ctx: RequestContext, n: int) -> str:
        """The same, awaited on the event loop."""
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
            await ctx.log("info", {"step": i})
        return threading.current_thread().name

    return server


def expected(n: int) -> list[Any]:
    seen: list[Any] = []
    for i in range(1, n + 1):
        seen += [("progress", i, n, f"step {i}"), ("log", {"step": i})]
    return seen


async def test_a_sync_tool_logs_and_reports_progress_over_http() -> None:
    seen: list[Any] = []

    def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", progress, total, message))

    server = chatty_server()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with (
            serve(server.asgi_app()) as url,
            Client.http(f"{url}/mcp", log_handler=lambda p: seen.append(("log", p["data"]))) as c,
        ):
            for tool in ("steps", "async_steps"):
                meta = {meta_keys.LOG_LEVEL: "info"}
                result = await c.call_tool(tool, {"n": 3}, progress_callback=on_progress, meta=meta)
                assert isinstance(result.content[0], TextContent)
                seen.append(("result", result.content[0].text.startswith("mrtr-chatty-sync")))
        gc.collect()  # a coroutine nobody awaited would warn now
    assert seen == [*expected(3), ("result", True), *expected(3), ("result", False)]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


async def test_the_official_client_gets_a_sync_tools_logs_and_progress_on_a_legacy_session() -> (
    None
):
    seen: list[Any] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        seen.append(("log", params.data))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", progress, total, message))

    server = chatty_server()
    async with (
        serve(server.asgi_app()) as url,
        mcp.Client(f"{url}/mcp", mode="legacy", logging_callback=on_log) as official,
    ):
        result = await official.call_tool("steps", {"n": 2}, progress_callback=on_progress)
    assert result.is_error is False
    # A legacy session that never chose a level (logging/setLevel) gets every level.
    assert seen == [*expected(2), ("log", "below the level asked for")]
