"""The common case of the Streamable HTTP app, driven as ASGI with no sockets: a handler's first
step runs inline (one that then waits is resumed as `await` would), decoded header values are
remembered by their raw bytes within bounds, and a legacy request answered with JSON leaves
nothing in its session's event log."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator, MutableMapping
from typing import Any, cast

import orjson
import pytest

from helpers.http_calls import call, post
from mrtr import Server
from mrtr.stepping import resume
from mrtr.transport.http_app import StreamableHTTPApp

LEGACY = "2025-11-25"


def build_server() -> Server:
    server = Server("fast-path")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    async def slow_add(a: int, b: int) -> int:
        for _ in range(3):
            await asyncio.sleep(0)
        return a + b

    @server.tool()
    async def slow_fail() -> int:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    @server.tool()
    async def hang() -> int:
        await asyncio.Event().wait()
        return 0

    return server


@pytest.fixture
def app() -> StreamableHTTPApp:
    return StreamableHTTPApp(build_server())


async def test_a_handler_that_answers_at_once_is_answered_with_json(app: StreamableHTTPApp) -> None:
    status, headers, body = await post(app, call("add", {"a": 2, "b": 3}))
    assert status == 200 and headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert orjson.loads(body)["result"]["structuredContent"] == {"result": 5}
    assert app.inflight_body_bytes == 0


async def test_a_handler_that_waits_is_resumed_and_answered(app: StreamableHTTPApp) -> None:
    status, _, body = await post(app, call("slow_add", {"a": 4, "b": 5}))
    assert status == 200
    assert orjson.loads(body)["result"]["structuredContent"] == {"result": 9}
    status, _, body = await post(app, call("slow_fail", {}))
    assert status == 200 and orjson.loads(body)["result"]["isError"] is True
    assert app.inflight_body_bytes == 0


async def test_a_waiting_handler_is_cancelled_when_its_client_goes_away(
    app: StreamableHTTPApp,
) -> None:
    status, _, body = await post(app, call("hang", {}), then_disconnect=True)
    assert (status, body) == (0, b"")  # nothing is answered to a client that left
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert app.inflight_body_bytes == 0


async def test_resume_passes_on_what_the_task_sends_and_throws() -> None:
    @types.coroutine
    def suspend() -> Generator[Any, Any, Any]:
        return (yield "pending")

    async def handler() -> str:
        try:
            got = await suspend()
        except KeyError as exc:
            got = f"caught {exc.args[0]}"
        again = await suspend()
        return f"{got}, then {again}"

    def driven(coro: Coroutine[Any, Any, str]) -> Generator[Any, Any, str]:
        # A generator-based coroutine: driven here step by step, as a task would.
        return cast(Generator[Any, Any, str], resume(coro, coro.send(None)))

    steps = driven(handler())
    assert next(steps) == "pending"
    assert steps.throw(KeyError("k")) == "pending"
    with pytest.raises(StopIteration) as done:
        steps.send("value")
    assert done.value.value == "caught k, then value"

    closed = handler()
    steps = driven(closed)
    next(steps)
    steps.close()
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        closed.send(None)  # closed along with the resumer


async def test_header_values_are_checked_the_same_when_remembered(app: StreamableHTTPApp) -> None:
    for _ in range(2):
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"mcp-name": "other"})
        assert status == 400 and b"does not match body params.name" in body
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"mcp-name": " add\t"})
        assert status == 200, body
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"mcp-name": b"ad\x01"})
        assert status == 400 and b"characters not allowed" in body
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"mcp-method": "x"})
        assert status == 400 and b"Mcp-Method header value" in body
    long_name = "=?base64?" + "A" * 2000 + "?="
    status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"mcp-name": long_name})
    assert status == 400
    # Long values are never remembered, and at most a bounded number of short ones are.
    assert all(len(key) <= 512 for key in app.checks.name_cache)
    for n in range(600):
        await post(app, call("add", {"a": 1, "b": 1}), {"mcp-name": f"tool{n}"})
    assert len(app.checks.name_cache) <= 256


async def test_the_host_allowlist_answers_the_same_when_remembered() -> None:
    app = StreamableHTTPApp(build_server(), allowed_hosts=["api.example.com"])
    for _ in range(2):
        status, _, _ = await post(app, call("add", {"a": 1, "b": 1}), {"host": "api.example.com:8"})
        assert status == 200
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"host": "evil.com"})
        assert status == 403 and b"Host is not allowed" in body
        status, _, body = await post(app, call("add", {"a": 1, "b": 1}), {"host": "[::1"})
        assert status == 403


async def legacy_session(app: StreamableHTTPApp) -> dict[str, str | bytes]:
    """Initialize a legacy session; the headers its requests carry."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    status, headers, _ = await post(app, init)
    assert status == 200
    return {"mcp-session-id": headers[b"mcp-session-id"], "mcp-protocol-version": LEGACY}


async def test_a_legacy_request_answered_with_json_leaves_no_stream_behind(
    app: StreamableHTTPApp,
) -> None:
    session = await legacy_session(app)
    for n in range(1, 80):  # past the bound on streams kept
        message = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": n, "b": 1}},
        }
        status, _, body = await post(app, message, session)
        assert status == 200 and orjson.loads(body)["result"]["structuredContent"] == {
            "result": n + 1
        }
    (channel,) = app.sessions._channels.values()
    # The ids of a JSON answer's stream were never sent, so none can be asked for again.
    assert channel.log.streams() == [channel.log.standalone]
    assert channel.log.size == 0


def legacy_call(id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A `tools/call` as a legacy session sends it (no modern `_meta`)."""
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


@pytest.mark.parametrize("tool", ["add", "slow_add"])
async def test_a_legacy_request_id_is_free_once_answered(app: StreamableHTTPApp, tool: str) -> None:
    # Whether the handler answers in its first step or waits first, its id is released before
    # the answer goes out: the same id sent right after is a new request, not "in use".
    session = await legacy_session(app)
    (channel,) = app.sessions._channels.values()
    message = legacy_call(7, tool, {"a": 1, "b": 2})
    running_at_answer: list[bool] = []

    def on_send(event: MutableMapping[str, Any]) -> None:
        if event["type"] == "http.response.body":
            running_at_answer.append(bool(channel.tasks))

    for _ in range(3):
        status, _, body = await post(app, message, session, on_send=on_send)
        assert status == 200, body
        assert orjson.loads(body)["result"]["structuredContent"] == {"result": 3}
    assert running_at_answer == [False] * 3


@pytest.mark.parametrize("tool", ["add", "hang"])
async def test_a_legacy_request_cancelled_at_once_frees_its_id(
    app: StreamableHTTPApp, tool: str
) -> None:
    # The cancellation is handled right after the request's POST, before the request's own
    # task has taken a step (where tasks start lazily, its body never runs): the POST is
    # still answered, and the id is free for the next request.
    session = await legacy_session(app)
    (channel,) = app.sessions._channels.values()
    message = legacy_call(9, tool, {} if tool == "hang" else {"a": 1, "b": 2})
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "changed my mind"},
    }
    request = asyncio.ensure_future(post(app, message, session))
    cancelled = asyncio.ensure_future(post(app, cancel, session))
    status, _, body = await request
    assert status == 200, body
    answer = orjson.loads(body)
    # Either the cancellation came in time (an error, no result) or the call had answered.
    assert ("error" in answer) != ("result" in answer), answer
    assert tool == "add" or "error" in answer
    assert (await cancelled)[0] == 202
    assert channel.tasks == {}
    status, _, body = await post(app, legacy_call(9, "add", {"a": 1, "b": 2}), session)
    assert status == 200, body
    assert orjson.loads(body)["result"]["structuredContent"] == {"result": 3}
