"""The short ways through the engine that a plain call takes give what the long ways give:
flat arguments skip only a measurement, a text result is still checked against a declared
output type, a common `_meta` skips only checks it passes, an async tool's arguments can
start it again unchanged, and a round's deadline is armed only once its handler waits."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from mrtr import RequestContext, Server, ServerOptions
from mrtr import deadline as deadline_module
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server import InputRequiredConfig
from mrtr.server.input_bounds import MAX_DEPTH

CAPS = {"elicitation": {"form": {}}}


def _meta(**extra: Any) -> dict[str, Any]:
    return {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_CAPABILITIES: CAPS,
        **extra,
    }


def _call(name: str, arguments: Any, meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": _meta() if meta is None else meta}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def _server() -> Server:
    server = Server("fast")

    @server.tool(structured_output=False)
    async def echo(value: Any = None) -> str:
        return repr(value)

    @server.tool()
    async def pick(ok: bool) -> Literal["yes", "no"]:
        return "yes" if ok else "maybe"  # type: ignore[return-value]  # the mistake under test

    @server.tool()
    async def seen(a: int, ctx: RequestContext) -> str:
        return f"{a} {ctx.request_id}"

    return server


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_deep_arguments_are_refused_and_flat_or_shallow_ones_pass() -> None:
    server = _server()
    deep = await server.handle_request(_call("echo", {"value": _nested(MAX_DEPTH + 5)}))
    assert deep["error"]["code"] == -32602
    assert "nested" in deep["error"]["message"]
    for arguments in ({"value": 1}, {"value": "x"}, {"value": {"a": [1, 2]}}, None, {}):
        response = await server.handle_request(_call("echo", arguments))
        assert "error" not in response, response
        assert response["result"]["resultType"] == "complete"


async def test_a_text_result_is_checked_against_a_declared_output_type() -> None:
    server = _server()
    good = await server.handle_request(_call("pick", {"ok": True}))
    assert good["result"]["structuredContent"] == {"result": "yes"}
    bad = await server.handle_request(_call("pick", {"ok": False}))
    assert bad["result"]["isError"] is True


async def test_meta_outside_the_common_shape_gets_the_full_check() -> None:
    server = _server()
    cases = [
        (_meta(**{meta_keys.LOG_LEVEL: "loud"}), -32602),
        (_meta(**{meta_keys.PROGRESS_TOKEN: 1.5}), -32602),
        ({meta_keys.PROTOCOL_VERSION: "1999-01-01", meta_keys.CLIENT_CAPABILITIES: {}}, -32022),
        ({meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION}, -32602),
        ({meta_keys.PROTOCOL_VERSION: [LATEST_PROTOCOL_VERSION]}, -32602),
        ("not an object", -32602),
    ]
    for meta, code in cases:
        response = await server.handle_request(_call("echo", {}, meta))
        assert response["error"]["code"] == code, (meta, response)
    ok = _meta(**{meta_keys.LOG_LEVEL: "info", meta_keys.PROGRESS_TOKEN: "t"})
    assert "result" in await server.handle_request(_call("echo", {}, ok))


async def test_arguments_start_a_tool_again_unchanged() -> None:
    server = _server()
    signature = server._registry.tools["seen"].signature
    kwargs = signature.bind({"a": 3})
    ctx = RequestContext(server, 7, "tools/call", {"_meta": _meta()})
    assert await signature.start(kwargs, ctx) == "3 7"
    assert kwargs == {"a": 3}  # the context was not left in them
    assert await signature.start(kwargs, ctx) == "3 7"


def _live_deadlines() -> int:
    """Deadlines the running loop's watchdog holds now."""
    return len(deadline_module._watchdog(asyncio.get_running_loop()).live)


async def test_a_round_arms_its_deadline_only_once_it_waits() -> None:
    server = Server("waits")
    seen: dict[str, int] = {}

    @server.tool(structured_output=False)
    async def quick() -> str:
        seen["quick"] = _live_deadlines()
        return "ok"

    @server.tool(structured_output=False)
    async def waits() -> str:
        seen["before"] = _live_deadlines()
        await asyncio.sleep(0)
        seen["after"] = _live_deadlines()
        return "ok"

    baseline = _live_deadlines()
    for name in ("quick", "waits"):
        response = await server.handle_request(_call(name, None))
        assert response["result"]["content"][0]["text"] == "ok"
    # The first step ran with no deadline; once the handler waited, the round's one was live.
    assert seen == {"quick": baseline, "before": baseline, "after": baseline + 1}
    assert _live_deadlines() == baseline  # and gone with the round


async def test_round_timeout_counts_from_the_round_start_not_from_its_first_wait() -> None:
    server = Server(
        "slow", options=ServerOptions(input_required=InputRequiredConfig(round_timeout=1.0))
    )
    wait_began: list[float] = []

    @server.tool(structured_output=False)
    async def busy_then_waits() -> str:
        # Work before the first wait (0.9 s of the loop's time) counts toward round_timeout.
        time.sleep(0.9)  # noqa: ASYNC251 - blocking on purpose: it is the work before the wait
        wait_began.append(time.monotonic())
        await asyncio.sleep(30)
        return "late"

    response = await server.handle_request(_call("busy_then_waits", None))
    fired = time.monotonic()
    assert response["error"]["code"] == -32603
    assert "round_timeout" in response["error"]["message"]
    # It fired about 0.1 s into the wait (the round's 1 s), sooner than a whole round_timeout
    # after the wait began: a slow machine only delays it, which leaves 0.9 s of room.
    assert fired - wait_began[0] < 1.0, fired - wait_began[0]
