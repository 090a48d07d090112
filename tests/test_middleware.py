"""Middleware around every request (`@server.middleware`): order, every method on both eras,
MRTR rounds seen as rounds, refusals and rewrites, and the built-ins (timing log lines, the
rate limit, OpenTelemetry spans).

Real components: the in-memory client, `mrtr serve` in a child process driven by the official
SDK's legacy client over stdio, and a uvicorn server on loopback HTTP for the rate limit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
import uvicorn
from mcp.client.stdio import StdioServerParameters
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from helpers.loopback_process import free_port
from mrtr import Client, ElicitResult, McpError, RequestContext, Server, ServerOptions
from mrtr.middleware import (
    RATE_LIMITED,
    CallNext,
    OpenTelemetryMiddleware,
    RateLimitMiddleware,
    TimingMiddleware,
)
from mrtr.server.request_state import InvalidRequestState, StateBinding, VerifiedState

SCRIPT = Path(__file__).resolve().parent / "servers" / "lifespan_server.py"
GUARD = 20.0
EMPTY = {"type": "object", "properties": {}}


def accept(params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={})


def shop(**kwargs: Any) -> Server:
    server = Server("shop", **kwargs)

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    async def order(ctx: RequestContext, item: str) -> str:
        first = await ctx.elicit(f"Order {item}?", EMPTY)
        second = await ctx.elicit(f"Really order {item}?", EMPTY)
        return f"{item}: {first.action}/{second.action}"

    @server.tool()
    async def boom() -> str:
        raise ValueError("secret internals")

    return server


async def test_middleware_runs_in_order_around_every_method_and_sees_each_round() -> None:
    server = shop()
    trail: list[tuple[Any, ...]] = []

    @server.middleware
    async def outer(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        trail.append(("outer in", ctx.method, ctx.round, ctx.replaying))
        result = await call_next(ctx)
        trail.append(("outer out", ctx.method, result.get("resultType")))
        return result

    @server.middleware
    async def inner(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        trail.append(("inner in", ctx.method))
        return await call_next(ctx)

    flows: list[str] = []

    @server.middleware
    async def flow(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        if ctx.method == "tools/call":
            flows.append(ctx.flow_id)
        return await call_next(ctx)

    async with Client.in_memory(server, elicitation_handler=accept) as client:
        await client.discover()
        await client.list_tools()
        result = await client.call_tool("order", {"item": "pen"})
        assert result.content[0].text == "pen: accept/accept"  # type: ignore[union-attr]
    assert trail[:6] == [
        ("outer in", "server/discover", 0, False),
        ("inner in", "server/discover"),
        ("outer out", "server/discover", None),
        ("outer in", "tools/list", 0, False),
        ("inner in", "tools/list"),
        ("outer out", "tools/list", None),
    ]
    calls = [t for t in trail if t[1] == "tools/call" and t[0] != "inner in"]
    assert calls == [
        ("outer in", "tools/call", 0, False),
        ("outer out", "tools/call", "input_required"),
        ("outer in", "tools/call", 1, True),  # verified before the middleware: round 1
        ("outer out", "tools/call", "input_required"),
        ("outer in", "tools/call", 2, True),
        ("outer out", "tools/call", None),
    ]
    assert len(flows) == 3 and len(set(flows)) == 1  # one flow id across its rounds


async def test_a_middleware_may_refuse_or_rewrite_and_its_bugs_do_not_leak(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = shop()

    @server.middleware
    async def policy(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        name = ctx.params.get("name")
        if name == "add" and ctx.params.get("arguments", {}).get("a") == 13:
            raise McpError(-32001, "13 is not allowed here", {"why": "policy"})
        if name == "add" and ctx.params.get("arguments", {}).get("a") == 7:
            raise KeyError("a bug in the middleware")
        result = await call_next(ctx)
        if name == "add":
            result["content"][0]["text"] += " (checked)"
        return result

    async with Client.in_memory(server) as client:
        result = await client.call_tool("add", {"a": 1, "b": 2})
        assert result.content[0].text == "3 (checked)"  # type: ignore[union-attr]
        with pytest.raises(McpError) as refused:
            await client.call_tool("add", {"a": 13, "b": 0})
        assert (refused.value.code, refused.value.data) == (-32001, {"why": "policy"})
        with pytest.raises(McpError) as broken:
            await client.call_tool("add", {"a": 7, "b": 0})
        assert broken.value.code == -32603 and "KeyError" not in broken.value.message
        assert "a bug in the middleware" in caplog.text  # logged, not sent
        # The server goes on.
        assert (await client.call_tool("add", {"a": 2, "b": 2})).content[0].text == "4 (checked)"  # type: ignore[union-attr]


async def test_refusals_before_the_handler_pass_through_middleware(
    make_request: Any,
) -> None:
    server = shop()
    outcomes: list[tuple[str, int, Any]] = []

    @server.middleware
    async def watch(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        try:
            return await call_next(ctx)
        except McpError as exc:
            outcomes.append((ctx.method, ctx.round, exc.code))
            raise

    bad_state = make_request(
        "tools/call", {"name": "order", "arguments": {"item": "x"}, "requestState": "forged"}
    )
    assert (await server.handle_request(bad_state))["error"]["code"] == -32602
    unknown = make_request("no/such")
    assert (await server.handle_request(unknown))["error"]["code"] == -32601
    no_meta = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": "junk"}}
    assert (await server.handle_request(no_meta))["error"]["code"] == -32602
    assert outcomes == [
        ("tools/call", 0, -32602),
        ("no/such", 0, -32601),
        ("tools/list", 0, -32602),
    ]


async def test_the_request_state_guard_runs_once_per_round_under_middleware() -> None:
    seen: set[tuple[str, int]] = set()

    def single_use(state: VerifiedState, binding: StateBinding) -> None:
        if (state.flow_id, state.round) in seen:
            raise InvalidRequestState("replayed")
        seen.add((state.flow_id, state.round))

    server = shop(options=ServerOptions(request_state_guard=single_use))
    server.middleware(TimingMiddleware())
    async with Client.in_memory(server, elicitation_handler=accept) as client:
        result = await client.call_tool("order", {"item": "ink"})
    assert result.content[0].text == "ink: accept/accept"  # type: ignore[union-attr]
    assert sorted(r for _, r in seen) == [1, 2]


def test_a_middleware_must_be_an_async_callable() -> None:
    server = Server("strict")

    def sync_mw(ctx: RequestContext, call_next: CallNext) -> Any:
        return call_next(ctx)

    with pytest.raises(TypeError, match="must be async"):
        server.middleware(sync_mw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a callable"):
        server.middleware(42)  # type: ignore[type-var]


async def test_legacy_sessions_pass_through_middleware_too(tmp_path: Path) -> None:
    env = {"LIFESPAN_MARKER": str(tmp_path / "marks")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mrtr", "serve", f"{SCRIPT}:server"],
        env={**os.environ, **env},
    )

    async def elicit(context: Any, p: Any) -> Any:
        return mcp_types.ElicitResult(action="accept", content={})

    async with mcp.Client(params, mode="legacy", elicitation_callback=elicit) as client:
        confirmed = await client.call_tool("confirm", {"item": "pen"})
        assert confirmed.content[0].text == "pen: accept at round 0"  # type: ignore[union-attr]
        recorded = await client.call_tool("recorded", {})
    seen = recorded.structured_content["result"]  # type: ignore[index]
    methods = [entry[0] for entry in seen]
    assert methods[0] == "initialize" and "tools/call" in methods
    assert all(legacy for _, _, legacy in seen)  # every one on the session
    assert all(round_ == 0 for _, round_, _ in seen)  # a legacy request is one round


# --- built-ins ------------------------------------------------------------------------------


async def test_timing_middleware_logs_one_line_per_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = shop(middleware=[TimingMiddleware()])
    caplog.set_level(logging.INFO, logger="mrtr.requests")
    async with Client.in_memory(server, elicitation_handler=accept) as client:
        await client.list_tools()
        await client.call_tool("order", {"item": "cup"})
        await client.call_tool("boom", {})
        with pytest.raises(McpError):
            await client.call_tool("nothing", {})
    records = [r for r in caplog.records if r.name == "mrtr.requests"]
    lines = [r.getMessage() for r in records]
    assert len(lines) == 6
    assert lines[0].startswith("tools/list round=0 ") and lines[0].endswith(" ok")
    assert lines[1].startswith("tools/call 'order' round=0 flow=")
    assert lines[1].endswith(" input_required")
    assert " round=2 " in lines[3] and lines[3].endswith(" ok")
    assert lines[4].endswith(" tool_error") and lines[5].endswith(" error -32602")
    fields = records[3].mcp  # type: ignore[attr-defined]
    assert fields["method"] == "tools/call" and fields["target"] == "order"
    assert fields["round"] == 2 and fields["outcome"] == "ok" and fields["duration_ms"] >= 0
    assert fields["flow_id"] == records[1].mcp["flow_id"]  # type: ignore[attr-defined]


async def test_rate_limit_refuses_with_retry_after_and_refills() -> None:
    now = [100.0]
    limit = RateLimitMiddleware(rate=2, burst=2, clock=lambda: now[0])
    server = shop(middleware=[limit])
    async with Client.in_memory(server) as client:
        await client.call_tool("add", {"a": 1, "b": 1})
        await client.call_tool("add", {"a": 1, "b": 1})
        with pytest.raises(McpError) as refused:
            await client.call_tool("add", {"a": 1, "b": 1})
        assert refused.value.code == RATE_LIMITED
        assert refused.value.data == {"retryAfter": 0.5}
        assert "at most 2 requests per second" in refused.value.message
        now[0] += 0.5  # one token back
        await client.call_tool("add", {"a": 1, "b": 1})
        with pytest.raises(McpError):
            await client.call_tool("add", {"a": 1, "b": 1})


def test_rate_limit_memory_is_bounded_and_arguments_checked() -> None:
    limit = RateLimitMiddleware(rate=1, burst=1, max_keys=3, clock=lambda: 0.0)
    for caller in range(100):
        limit.take(f"caller-{caller}")
    assert len(limit) == 3
    limit.take("caller-0")  # evicted long ago: a full bucket again
    with pytest.raises(McpError):
        limit.take("caller-0")
    for bad in ({"rate": 0}, {"rate": float("inf")}, {"rate": 1, "burst": 0}):
        with pytest.raises(ValueError):
            RateLimitMiddleware(**bad)


async def test_rate_limit_over_http_per_client_address_and_only_named_methods() -> None:
    server = shop(middleware=[RateLimitMiddleware(rate=0.01, burst=2, methods={"tools/call"})])
    port = free_port()
    config = uvicorn.Config(server.asgi_app(), host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    serving = asyncio.create_task(uv.serve())
    try:
        for _ in range(1000):  # until it listens
            if uv.started:
                break
            await asyncio.sleep(0.02)
        async with Client.http(f"http://127.0.0.1:{port}/mcp") as client:
            for _ in range(5):
                await client.list_tools()  # not limited
            await client.call_tool("add", {"a": 1, "b": 1})
            await client.call_tool("add", {"a": 1, "b": 1})
            with pytest.raises(McpError) as refused:
                await client.call_tool("add", {"a": 1, "b": 1})
        assert refused.value.code == RATE_LIMITED
        assert refused.value.data["retryAfter"] == pytest.approx(100, abs=1)
    finally:
        uv.should_exit = True
        await asyncio.wait_for(serving, GUARD)


async def test_opentelemetry_spans_carry_method_target_round_and_flow() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = shop(middleware=[OpenTelemetryMiddleware(provider)])
    async with Client.in_memory(server, elicitation_handler=accept) as client:
        await client.list_tools()
        await client.call_tool("order", {"item": "pad"})
        await client.call_tool("boom", {})
        with pytest.raises(McpError):
            await client.call_tool("nothing", {})
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["tools/list"] + ["tools/call order"] * 3 + [
        "tools/call boom",
        "tools/call nothing",
    ]
    assert all(s.kind is SpanKind.SERVER for s in spans)
    rounds = [dict(s.attributes or {}) for s in spans[1:4]]
    assert [a["mcp.round"] for a in rounds] == [0, 1, 2]
    assert [a["mcp.replaying"] for a in rounds] == [False, True, True]
    assert [a["mcp.result.type"] for a in rounds] == ["input_required"] * 2 + ["complete"]
    assert len({a["mcp.flow.id"] for a in rounds}) == 1
    assert rounds[0]["gen_ai.tool.name"] == "order"
    assert rounds[0]["mcp.protocol.version"] == "2026-07-28"
    assert spans[4].status.status_code is StatusCode.ERROR  # a tool error
    assert spans[5].status.status_code is StatusCode.ERROR
    assert spans[5].attributes["rpc.jsonrpc.error_code"] == -32602  # type: ignore[index]


def test_opentelemetry_middleware_without_opentelemetry_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r'pip install "mrtr\[otel\]"'):
        OpenTelemetryMiddleware()
