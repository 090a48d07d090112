"""A tool that takes no context cannot ask, so `tools/call` runs its first round without a
context or the replay engine. Whatever the tool does, the answer must be the one the full
path gives: the same server with a pass-through middleware always takes the full path, and
every case here is answered by both and compared."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from helpers.legacy_peer import Peer, initialized, send
from helpers.mrtr_flows import call_tool, error_of, result_of
from mrtr import InputRequiredResult, McpError, RequestContext, Server, ServerOptions, ToolError
from mrtr.inputs import elicit_request
from mrtr.server import InputRequiredConfig
from mrtr.server import context as context_module
from mrtr.server.input_bounds import MAX_DEPTH


class Halt(BaseException):
    """Not an `Exception`: never a tool's own result."""


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _server(*, full_path: bool) -> Server:
    server = Server("direct")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    def add_in_thread(a: int, b: int) -> int:
        return a + b

    @server.tool(run_in_thread=False)
    def add_on_loop(a: int, b: int) -> int:
        return a + b

    @server.tool(structured_output=False)
    async def echo(value: Any = None) -> str:
        return repr(value)

    @server.tool()
    async def fails() -> str:
        raise ValueError("a secret detail")

    @server.tool()
    async def refuses() -> str:
        raise ToolError("shown to the client")

    @server.tool()
    async def protocol_error() -> str:
        raise McpError(-32602, "bad input, as the tool says")

    @server.tool()
    async def halts() -> str:
        raise Halt

    @server.tool()
    async def asks_by_hand() -> InputRequiredResult:
        return InputRequiredResult(
            input_requests={"color": elicit_request("Color?", {"type": "object"})},
            request_state="step-1",
        )

    @server.tool(tags={"beta"})
    async def tagged() -> str:
        return "tagged"

    if full_path:

        @server.middleware
        async def passthrough(ctx: RequestContext, call_next: Any) -> dict[str, Any]:
            return await call_next(ctx)  # type: ignore[no-any-return]

    return server


CASES: list[tuple[str, dict[str, Any] | None]] = [
    ("add", {"a": 2, "b": 3}),
    ("add_in_thread", {"a": 2, "b": 3}),
    ("add_on_loop", {"a": 2, "b": 3}),
    ("add", {"a": "two", "b": 3}),  # invalid arguments: a tool error
    ("add", None),
    ("echo", {"value": {"nested": [1, {"x": None}]}}),
    ("echo", {"value": _nested(MAX_DEPTH + 5)}),  # too deep: -32602
    ("echo", None),
    ("fails", None),
    ("refuses", None),
    ("protocol_error", None),
    ("halts", None),
    ("asks_by_hand", None),
    ("tagged", None),
    ("unknown", None),
]


def _comparable(response: dict[str, Any]) -> Any:
    """The response without what differs on every call (ids, sealed tokens, the id of a
    logged failure)."""
    response = dict(response)
    response.pop("id", None)
    result = response.get("result")
    if isinstance(result, dict) and isinstance(result.get("requestState"), str):
        response["result"] = {**result, "requestState": "<sealed>"}
    text = json.dumps(response, sort_keys=True)
    return json.loads(re.sub(r"logged on the server as [0-9a-f]+", "logged as <id>", text))


@pytest.mark.parametrize(("name", "arguments"), CASES)
async def test_the_direct_path_answers_as_the_full_path(
    name: str, arguments: dict[str, Any] | None
) -> None:
    direct = await call_tool(_server(full_path=False), name, arguments)
    full = await call_tool(_server(full_path=True), name, arguments)
    assert _comparable(direct) == _comparable(full)


async def _call_legacy(server: Server, name: str, arguments: dict[str, Any] | None) -> Any:
    peer = Peer()
    await initialized(server, peer)
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    response = await asyncio.wait_for(send(server, peer, "tools/call", params, id=2), 10)
    # A result asked by hand is asked of the client live: the same questions either way.
    return response, [(m["method"], m["params"]) for m in peer.requests()]


@pytest.mark.parametrize(("name", "arguments"), CASES)
async def test_on_a_legacy_session_the_direct_path_answers_as_the_full_path(
    name: str, arguments: dict[str, Any] | None
) -> None:
    direct, direct_asked = await _call_legacy(_server(full_path=False), name, arguments)
    full, full_asked = await _call_legacy(_server(full_path=True), name, arguments)
    assert _comparable(direct) == _comparable(full)
    assert direct_asked == full_asked


async def test_a_context_free_tool_runs_without_a_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []

    class Counted(RequestContext):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(args[2])
            super().__init__(*args, **kwargs)

    # The server makes its contexts through `context_factory`, which reads the class here.
    monkeypatch.setattr(context_module, "RequestContext", Counted)
    server = _server(full_path=False)
    assert result_of(await call_tool(server, "add", {"a": 1, "b": 2}))["structuredContent"] == {
        "result": 3
    }
    assert made == []
    # A result asking by hand is sealed as any round's: that takes a context, made then.
    asked = result_of(await call_tool(server, "asks_by_hand"))
    assert asked["resultType"] == "input_required"
    assert set(asked["inputRequests"]) == {"color"}
    assert isinstance(asked["requestState"], str) and asked["requestState"] != "step-1"
    assert made == ["tools/call"]

    # The same on a legacy session, whose hand-made question is asked live.
    made.clear()
    response, asked_live = await _call_legacy(server, "add", {"a": 1, "b": 2})
    assert result_of(response)["structuredContent"] == {"result": 3}
    assert made == [] and asked_live == []
    response, asked_live = await _call_legacy(server, "asks_by_hand", None)
    # It asks again on every round, so it is asked live until `max_rounds` stops it.
    assert "max_rounds" in error_of(response)["message"]
    assert asked_live and {method for method, _ in asked_live} == {"elicitation/create"}
    assert made == ["tools/call"]


async def test_a_state_sent_to_a_context_free_tool_is_still_verified() -> None:
    server = _server(full_path=False)
    error = error_of(await call_tool(server, "add", {"a": 1, "b": 2}, state="forged"))
    assert error["code"] == -32602
    malformed = error_of(await call_tool(server, "add", {"a": 1, "b": 2}, responses=[1]))
    assert malformed["code"] == -32602


async def test_round_timeout_and_cancellation_reach_a_context_free_tool() -> None:
    server = Server(
        "slow", options=ServerOptions(input_required=InputRequiredConfig(round_timeout=0.05))
    )
    cancelled = asyncio.Event()

    @server.tool()
    async def slow() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    timed_out = error_of(await asyncio.wait_for(call_tool(server, "slow"), 10))
    assert timed_out["code"] == -32603
    assert "round_timeout" in timed_out["message"]
    assert cancelled.is_set()

    # On a legacy session a round is every round a call may take: the limit says so.
    legacy, _ = await _call_legacy(server, "slow", None)
    assert error_of(legacy)["code"] == -32603
    assert "round_timeout * max_rounds" in error_of(legacy)["message"]

    # The request's own cancellation is let through, not answered.
    patient = Server("patient")
    started = asyncio.Event()

    @patient.tool()
    async def waits() -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    request = asyncio.ensure_future(call_tool(patient, "waits"))
    await asyncio.wait_for(started.wait(), 10)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
