"""Legacy (`initialize`-based) sessions, message by message, against `Server.handle_message`.

A `LegacySession` stands for what a transport keeps; its `send` and each request's `notify`
record what the server writes. `Peer` plays the client's side of server-to-client requests:
it answers them through `session.deliver`, with a result, an error, garbage, or never.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from helpers.legacy_peer import CAPS, Error, Peer, error, initialized, result, send
from mrtr import InputRequiredResult, RequestContext, Server, ServerOptions, elicit_request
from mrtr.protocol import errors, jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.server import InputRequiredConfig
from mrtr.server.session import LegacySession

FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


class Region(BaseModel):
    region: str


def make_server(**input_required: Any) -> Server:
    options = ServerOptions(input_required=InputRequiredConfig(**input_required))
    server = Server("legacy-test", version="2.0.0", instructions="Be nice.", options=options)

    @server.tool(title="Add")
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    async def ask(ctx: RequestContext) -> str:
        answer = await ctx.elicit("Go?", FORM)
        return (
            f"{answer.action} {answer.content} replaying={ctx.replaying} flow={bool(ctx.flow_id)}"
        )

    @server.tool()
    async def region(ctx: RequestContext) -> str:
        answer = await ctx.elicit("Where?", Region)
        return answer.content.region if answer.content else "none"

    @server.tool()
    async def counted(ctx: RequestContext) -> str:
        calls: list[int] = []

        def side_effect() -> int:
            calls.append(1)
            return 7

        first = await ctx.once("effect", side_effect)
        second = await ctx.once("effect", side_effect)
        return f"{first} {second} calls={len(calls)}"

    @server.tool()
    async def chatty(ctx: RequestContext) -> str:
        await ctx.log("info", "informing")
        await ctx.log("error", "erring")
        await ctx.report_progress(1, 2)
        await ctx.report_progress(2, 2)
        return "said"

    @server.tool()
    async def forever(ctx: RequestContext) -> str | InputRequiredResult:
        return InputRequiredResult(
            input_requests={f"q{ctx.round}": elicit_request("Again?", FORM)},
            request_state=f"round {ctx.round}",
        )

    @server.prompt()
    def hello(name: str) -> str:
        return f"Hello {name}"

    @server.resource("file:///readme", mime_type="text/plain")
    def readme() -> str:
        return "read me"

    @server.resource_template("db://rows/{id}")
    def row(id: int) -> dict[str, int]:
        return {"id": id}

    @server.completion()
    def complete(ref: Any, argument: Any, context: Any) -> list[str]:
        return ["alpha", "beta"]

    return server


# --- lifecycle and negotiation ----------------------------------------------------------------


async def test_initialize_negotiates_fills_the_session_and_answers_the_legacy_shape() -> None:
    server, peer = make_server(), Peer()
    init = await initialized(server, peer)
    assert init == {
        "protocolVersion": "2025-11-25",
        "capabilities": {
            "logging": {},
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"listChanged": True, "subscribe": True},
            "completions": {},
        },
        "serverInfo": {"name": "legacy-test", "version": "2.0.0"},
        "instructions": "Be nice.",
    }
    session = peer.session
    assert session.protocol_version == "2025-11-25"
    assert session.client_capabilities == CAPS
    assert session.client_info == {"name": "raw", "version": "0"}
    assert session.initialized


@pytest.mark.parametrize(
    ("asked", "negotiated"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("1999-01-01", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
    ],
)
async def test_version_negotiation_echoes_a_legacy_version_else_the_newest(
    asked: str, negotiated: str
) -> None:
    server, peer = make_server(), Peer()
    assert (await initialized(server, peer, asked))["protocolVersion"] == negotiated


async def test_ping_is_served_before_initialize_but_nothing_else() -> None:
    server, peer = make_server(), Peer()
    assert result(await send(server, peer, "ping")) == {}
    refused = error(await send(server, peer, "tools/list"))
    assert refused["code"] == errors.INVALID_REQUEST
    assert "send initialize first" in refused["message"]


async def test_a_second_initialize_is_an_invalid_request() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    again = error(await send(server, peer, "initialize", {"protocolVersion": "2025-06-18"}, 2))
    assert again["code"] == errors.INVALID_REQUEST
    assert "already initialized" in again["message"]
    assert peer.session.protocol_version == "2025-11-25"


async def test_a_malformed_initialize_leaves_the_session_open_to_a_good_one() -> None:
    server, peer = make_server(), Peer()
    bad = error(await send(server, peer, "initialize", {"capabilities": {}}))
    assert bad["code"] == errors.INVALID_PARAMS and "protocolVersion" in bad["message"]
    bad = error(
        await send(server, peer, "initialize", {"protocolVersion": "2025-11-25", "capabilities": 3})
    )
    assert bad["code"] == errors.INVALID_PARAMS
    assert not peer.session.negotiated
    await initialized(server, peer)


async def test_initialize_without_a_session_or_with_the_shim_off_names_modern_versions() -> None:
    request = jsonrpc.request(1, "initialize", {"protocolVersion": "2025-11-25"})
    for response in (
        await make_server().handle_message(request),
        await make_server(legacy_shim=False).handle_message(request, session=LegacySession()),
    ):
        assert response is not None
        assert response["error"]["code"] == errors.UNSUPPORTED_PROTOCOL_VERSION
        assert response["error"]["data"]["supported"] == ["2026-07-28"]


async def test_initialize_with_modern_meta_is_a_removed_method_even_on_a_session() -> None:
    meta = {meta_keys.PROTOCOL_VERSION: "2026-07-28", meta_keys.CLIENT_CAPABILITIES: {}}
    request = jsonrpc.request(1, "initialize", {"_meta": meta})
    for session in (None, LegacySession()):
        response = await make_server().handle_message(request, session=session)
        assert response is not None
        assert response["error"]["code"] == errors.METHOD_NOT_FOUND


async def test_initialized_before_initialize_is_ignored() -> None:
    server, peer = make_server(), Peer()
    await server.handle_message(
        jsonrpc.notification("notifications/initialized"), session=peer.session
    )
    assert not peer.session.initialized
    assert (
        await server.handle_message(
            jsonrpc.notification("notifications/roots/list_changed"), session=peer.session
        )
        is None
    )


# --- every method, in the legacy shape ---------------------------------------------------------

MODERN_ONLY = {"resultType", "ttlMs", "cacheScope", "_meta"}


async def test_every_method_answers_without_modern_fields() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("ping", {}),
        ("tools/list", {}),
        ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}),
        ("prompts/list", {}),
        ("prompts/get", {"name": "hello", "arguments": {"name": "Ann"}}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "db://rows/4"}),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "hello"},
                "argument": {"name": "name", "value": "a"},
            },
        ),
        ("logging/setLevel", {"level": "warning"}),
        ("resources/subscribe", {"uri": "file:///readme"}),
        ("resources/unsubscribe", {"uri": "file:///readme"}),
    ]
    results = {}
    for number, (method, params) in enumerate(calls, start=10):
        results[method] = result(await send(server, peer, method, params, number))
        assert not MODERN_ONLY & results[method].keys(), (method, results[method])
    assert results["tools/call"] == {
        "content": [{"type": "text", "text": "3"}],
        "structuredContent": {"result": 3},
    }
    assert [t["name"] for t in results["tools/list"]["tools"]] == [
        "add",
        "ask",
        "region",
        "counted",
        "chatty",
        "forever",
    ]
    assert results["prompts/get"]["messages"][0]["content"]["text"] == "Hello Ann"
    assert results["resources/read"]["contents"][0]["text"] == '{"id":4}'
    assert results["completion/complete"]["completion"]["values"] == ["alpha", "beta"]
    assert peer.session.log_level == "warning"
    assert peer.session.subscriptions == set()


async def test_a_2025_03_26_session_gets_no_fields_that_revision_lacks() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer, "2025-03-26")
    tools = result(await send(server, peer, "tools/list"))["tools"]
    assert all("outputSchema" not in t and "title" not in t for t in tools)
    assert tools[0]["description"] == "Add two numbers."
    called = result(
        await send(server, peer, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 2}}, 2)
    )
    assert called == {"content": [{"type": "text", "text": "4"}]}
    # The registered listing is untouched for other sessions.
    assert server.tool_definition("add")["title"] == "Add"  # type: ignore[index]


async def test_a_2024_11_05_session_is_not_offered_completions() -> None:
    server, peer = make_server(), Peer()
    assert "completions" not in (await initialized(server, peer, "2024-11-05"))["capabilities"]


async def test_a_request_with_modern_meta_on_a_legacy_session_is_served_statelessly() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    meta = {meta_keys.PROTOCOL_VERSION: "2026-07-28", meta_keys.CLIENT_CAPABILITIES: {}}
    listed = result(await send(server, peer, "tools/list", {"_meta": meta}))
    assert listed["resultType"] == "complete" and "ttlMs" in listed


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("nope", {}, errors.METHOD_NOT_FOUND),
        ("server/discover", {}, errors.METHOD_NOT_FOUND),
        ("tools/call", {"name": 5}, errors.INVALID_PARAMS),
        ("tools/call", {"name": "missing"}, errors.INVALID_PARAMS),
        ("tools/call", {"name": "add", "arguments": [1]}, errors.INVALID_PARAMS),
        ("tools/call", {"name": "add", "_meta": "x"}, errors.INVALID_PARAMS),
        ("tools/call", {"name": "add", "_meta": {"progressToken": [1]}}, errors.INVALID_PARAMS),
        ("logging/setLevel", {"level": "loud"}, errors.INVALID_PARAMS),
        ("resources/subscribe", {"uri": "file:///nothing"}, errors.INVALID_PARAMS),
        ("resources/subscribe", {}, errors.INVALID_PARAMS),
        ("resources/read", {"uri": 3}, errors.INVALID_PARAMS),
    ],
)
async def test_bad_requests_get_clear_errors_and_the_session_goes_on(
    method: str, params: dict[str, Any], code: int
) -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    assert error(await send(server, peer, method, params, 5))["code"] == code
    assert result(await send(server, peer, "ping", {}, 6)) == {}


# --- the live asker -----------------------------------------------------------------------------


async def test_a_question_is_asked_live_on_the_request_stream() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    called = result(await send(server, peer, "tools/call", {"name": "ask"}, 7))
    assert called["content"][0]["text"] == "accept {'ok': True} replaying=False flow=True"
    [asked] = peer.requests()
    assert asked["method"] == "elicitation/create"
    assert asked["params"] == {"mode": "form", "message": "Go?", "requestedSchema": FORM}
    assert peer.on_session_sent == []  # the question went on the request's own stream


async def test_a_2025_06_18_session_is_asked_without_the_mode_field() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer, "2025-06-18", {"elicitation": {}})
    result(await send(server, peer, "tools/call", {"name": "ask"}))
    assert "mode" not in peer.requests()[0]["params"]


async def test_a_typed_elicitation_is_validated_into_the_model() -> None:
    server = make_server()
    peer = Peer(lambda m, p: {"action": "accept", "content": {"region": "eu"}})
    await initialized(server, peer)
    assert (
        result(await send(server, peer, "tools/call", {"name": "region"}))["content"][0]["text"]
        == "eu"
    )
    wrong = Peer(lambda m, p: {"action": "accept", "content": {"region": 5}})
    await initialized(server, wrong)
    assert (
        error(await send(server, wrong, "tools/call", {"name": "region"}))["code"]
        == errors.INVALID_PARAMS
    )


async def test_once_runs_once_per_request_on_a_legacy_session() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    called = result(await send(server, peer, "tools/call", {"name": "counted"}))
    assert called["content"][0]["text"] == "7 7 calls=1"


async def test_a_missing_capability_is_refused_before_anything_is_asked() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer, caps={"sampling": {}})
    refused = error(await send(server, peer, "tools/call", {"name": "ask"}))
    assert refused["code"] == errors.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused["data"] == {"requiredCapabilities": {"elicitation": {}}}
    assert peer.requests() == []


async def test_a_garbage_answer_is_an_invalid_params_error_naming_the_question() -> None:
    server = make_server()
    peer = Peer(lambda m, p: {"action": "maybe"})
    await initialized(server, peer)
    refused = error(await send(server, peer, "tools/call", {"name": "ask"}))
    assert refused["code"] == errors.INVALID_PARAMS
    assert "not a valid ElicitResult" in refused["message"] and "elicit-" in refused["message"]


async def test_a_client_error_is_reported_without_its_local_code() -> None:
    server = make_server()
    peer = Peer(lambda m, p: Error(-32601, "no elicitation here"))
    await initialized(server, peer)
    refused = error(await send(server, peer, "tools/call", {"name": "ask"}))
    assert refused["code"] == errors.INTERNAL_ERROR
    assert "no elicitation here" in refused["message"]


async def test_a_client_that_never_answers_hits_round_timeout_and_is_told() -> None:
    server = make_server(round_timeout=0.2)
    peer = Peer(lambda m, p: None)
    await initialized(server, peer)
    refused = error(await send(server, peer, "tools/call", {"name": "ask"}))
    assert refused["code"] == errors.INTERNAL_ERROR
    assert "round_timeout" in refused["message"]
    asked, cancelled = peer.on_request_sent
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == asked["id"]


async def test_cancelling_a_request_waiting_for_an_answer_cancels_the_question() -> None:
    server = make_server()
    peer = Peer(lambda m, p: None)
    await initialized(server, peer)
    task = asyncio.create_task(send(server, peer, "tools/call", {"name": "ask"}))
    for _ in range(100):
        if peer.requests():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    asked, cancelled = peer.on_request_sent
    assert cancelled == jsonrpc.notification(
        "notifications/cancelled", {"requestId": asked["id"], "reason": "request cancelled"}
    )
    assert result(await send(server, peer, "ping", {}, 9)) == {}


async def test_a_response_with_an_unknown_id_is_ignored() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    stray = jsonrpc.result_response("s-999", {"action": "accept"})
    assert await server.handle_message(stray, session=peer.session) is None
    assert peer.session.deliver(stray) is False
    assert result(await send(server, peer, "tools/call", {"name": "ask"}))["content"]


async def test_a_manual_handler_that_keeps_asking_stops_at_max_rounds() -> None:
    server, peer = make_server(max_rounds=3), Peer()
    await initialized(server, peer)
    refused = error(await send(server, peer, "tools/call", {"name": "forever"}))
    assert refused["code"] == errors.INTERNAL_ERROR and "max_rounds" in refused["message"]
    assert [r["method"] for r in peer.requests()] == ["elicitation/create"] * 3


# --- logging, progress, list changes ------------------------------------------------------------


async def test_logs_follow_set_level_and_progress_follows_the_token() -> None:
    server, peer = make_server(), Peer()
    await initialized(server, peer)
    result(
        await send(server, peer, "tools/call", {"name": "chatty", "_meta": {"progressToken": "p"}})
    )
    sent = [
        (m["method"], m["params"].get("level"), m["params"].get("progress"))
        for m in peer.on_request_sent
    ]
    assert sent == [
        ("notifications/message", "info", None),
        ("notifications/message", "error", None),
        ("notifications/progress", None, 1),
        ("notifications/progress", None, 2),
    ]
    peer.on_request_sent.clear()
    result(await send(server, peer, "logging/setLevel", {"level": "error"}, 2))
    result(await send(server, peer, "tools/call", {"name": "chatty"}, 3))
    assert [m["params"]["level"] for m in peer.on_request_sent] == ["error"]


async def test_list_changes_and_resource_updates_reach_attached_sessions() -> None:
    server, peer, other = make_server(), Peer(), Peer()
    await initialized(server, peer)
    await initialized(server, other)
    server.attach_session(peer.session)
    server.attach_session(other.session)
    result(await send(server, peer, "resources/subscribe", {"uri": "db://rows/1"}))
    server.notify_tools_changed()
    server.notify_resource_updated("db://rows/1")
    for _ in range(3):
        await asyncio.sleep(0)
    assert peer.on_session_sent == [
        jsonrpc.notification("notifications/tools/list_changed"),
        jsonrpc.notification("notifications/resources/updated", {"uri": "db://rows/1"}),
    ]
    assert other.on_session_sent == [jsonrpc.notification("notifications/tools/list_changed")]
    server.detach_session(peer.session)
    server.notify_prompts_changed()
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(peer.on_session_sent) == 2 and len(other.on_session_sent) == 2
