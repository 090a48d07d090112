"""The client on legacy (`initialize`-based) servers, and how it finds out the era, against
scripted fakes: the edge cases a real server will not produce on demand."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.fake_server import (
    NEVER,
    Delayed,
    Error,
    Raise,
    Raw,
    SessionFakeServer,
    elicitation,
    initialize_result,
    tool_text,
)
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client import era as eras
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import (
    HTTP_ERROR,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LEGACY_ONLY_SERVER,
    METHOD_NOT_FOUND,
    PROTOCOL_VIOLATION,
    SESSION_EXPIRED,
    McpError,
)
from mrtr.protocol.types import ElicitRequestParams

LEGACY = ClientOptions(protocol="legacy")


def legacy_tool(text: str) -> dict[str, Any]:
    """A legacy `CallToolResult`: no `resultType`."""
    return {"content": [{"type": "text", "text": text}], "isError": False}


def methods(fake: SessionFakeServer) -> list[str]:
    return [r.method for r in fake.received]


def region(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"region": "eu"})


# --- the handshake ---------------------------------------------------------------------------


async def test_legacy_session_opens_with_initialize_then_initialized_and_the_hook() -> None:
    fake = SessionFakeServer([initialize_result(), {"tools": []}])
    async with Client(
        fake,
        options=LEGACY,
        elicitation_handler=region,
        elicitation_modes=("form", "url"),
        sampling_handler=lambda p: None,  # type: ignore[arg-type,return-value]
        roots_handler=lambda p: None,  # type: ignore[arg-type,return-value]
    ) as client:
        assert client.era is None
        await client.list_tools()
        assert client.era == "legacy" and client.protocol_version == "2025-11-25"
    assert methods(fake) == ["initialize", "notifications/initialized", "tools/list"]
    params = fake.received[0].params
    assert params["protocolVersion"] == "2025-11-25"
    assert params["capabilities"] == {
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
        "roots": {"listChanged": True},
    }
    assert params["clientInfo"] == {"name": "mrtr-client", "version": "0.1.0"}
    assert "_meta" not in params
    assert fake.sessions_started == ["2025-11-25"] and fake.sessions_ended == 1


async def test_a_version_the_client_does_not_speak_is_refused_naming_both() -> None:
    fake = SessionFakeServer([initialize_result("2099-01-01")])
    async with Client(fake, options=LEGACY) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == PROTOCOL_VIOLATION
    assert "'2099-01-01'" in raised.value.message and "2025-11-25" in raised.value.message
    assert methods(fake) == ["initialize"]  # no initialized, no request on a session not open
    assert client.era is None and fake.sessions_started == []


async def test_concurrent_calls_during_the_handshake_send_exactly_one_initialize() -> None:
    fake = SessionFakeServer([Delayed(0.05, initialize_result())], then={"tools": []})
    async with Client(fake, options=LEGACY) as client:
        await asyncio.gather(*(client.list_tools() for _ in range(5)))
    assert methods(fake).count("initialize") == 1
    assert methods(fake).count("tools/list") == 5
    assert methods(fake).index("notifications/initialized") < methods(fake).index("tools/list")


async def test_legacy_requests_carry_no_modern_meta_and_results_without_result_type_complete() -> (
    None
):
    fake = SessionFakeServer([initialize_result(), legacy_tool("done")])
    steps: list[float] = []
    async with Client(fake, options=LEGACY) as client:
        result = await client.call_tool(
            "slow",
            {"n": 1},
            progress_callback=lambda done, total, text: steps.append(done),
            meta={"app/trace": "t-1", meta_keys.CLIENT_INFO: {"name": "spoof", "version": "1"}},
        )
    assert result.result_type == "complete" and result.content[0].text == "done"  # type: ignore[union-attr]
    sent_meta = fake.received[-1].params["_meta"]
    assert set(sent_meta) == {"progressToken", "app/trace"}


async def test_session_expired_initializes_again_once_and_retries() -> None:
    expired = Raise(McpError(SESSION_EXPIRED, "the server no longer knows session abc"))
    fake = SessionFakeServer([initialize_result(), expired, initialize_result(), {"tools": []}])
    async with Client(fake, options=LEGACY) as client:
        await client.list_tools()
    assert methods(fake) == [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    assert fake.sessions_started == ["2025-11-25", "2025-11-25"]
    assert fake.requests[1].id != fake.requests[3].id  # the retry is a new request


async def test_session_expired_twice_in_a_row_is_raised_not_looped() -> None:
    expired = Raise(McpError(SESSION_EXPIRED, "gone"))
    fake = SessionFakeServer([initialize_result(), expired, initialize_result(), expired])
    async with Client(fake, options=LEGACY) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == SESSION_EXPIRED
    assert methods(fake).count("initialize") == 2


async def test_concurrent_expiries_reinitialize_once() -> None:
    expired = Raise(McpError(SESSION_EXPIRED, "gone"))
    fake = SessionFakeServer([initialize_result(), {"tools": []}], then={"tools": []})
    async with Client(fake, options=LEGACY) as client:
        await client.list_tools()  # opens the session first
        # Both requests are in flight before either learns the session is gone.
        late = Delayed(0.02, expired)
        fake.script[:] = [late, late, Delayed(0.05, initialize_result())]
        await asyncio.gather(client.list_tools(), client.list_tools())
    assert methods(fake).count("initialize") == 2


# --- requests from the server ----------------------------------------------------------------


async def test_server_requests_go_to_the_same_handlers_as_mrtr_questions() -> None:
    asked: list[str] = []

    def answer(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"ok": True})

    fake = SessionFakeServer([initialize_result(), {"tools": []}])
    async with Client(fake, options=LEGACY, elicitation_handler=answer) as client:
        await client.list_tools()
        response = await fake.server_request(
            "elicitation/create", elicitation("Proceed?")["params"]
        )
    assert asked == ["Proceed?"]
    assert response == {
        "jsonrpc": "2.0",
        "id": "s-1",
        "result": {"action": "accept", "content": {"ok": True}},
    }


async def test_a_request_for_an_unregistered_handler_is_answered_32601_at_once() -> None:
    fake = SessionFakeServer([initialize_result(), {"tools": []}])
    async with Client(fake, options=LEGACY) as client:
        await client.list_tools()
        sampling = await fake.server_request(
            "sampling/createMessage", {"messages": [], "maxTokens": 5}, request_id=7
        )
        unknown = await fake.server_request("tasks/get", {}, request_id=8)
    assert sampling["id"] == 7 and sampling["error"]["code"] == METHOD_NOT_FOUND
    assert "no sampling handler is registered" in sampling["error"]["message"]
    assert unknown["error"] == {"code": METHOD_NOT_FOUND, "message": "Method not found: tasks/get"}


async def test_invalid_params_and_failing_handlers_get_json_rpc_errors_without_internals() -> None:
    def broken(params: ElicitRequestParams) -> ElicitResult:
        raise RuntimeError("secret path /home/me/.token")

    fake = SessionFakeServer([initialize_result(), {"tools": []}])
    async with Client(fake, options=LEGACY, elicitation_handler=broken) as client:
        await client.list_tools()
        bad = await fake.server_request("elicitation/create", {"mode": "form"})
        failed = await fake.server_request("elicitation/create", elicitation("Hi")["params"])
    assert bad["error"]["code"] == INVALID_PARAMS
    assert "has invalid params" in bad["error"]["message"]
    assert failed["error"] == {
        "code": INTERNAL_ERROR,
        "message": "the client's elicitation handler failed",
    }


async def test_a_ping_from_the_server_is_answered_and_the_client_can_ping() -> None:
    fake = SessionFakeServer([initialize_result(), {}])
    async with Client(fake, options=LEGACY) as client:
        await client.ping()
        pong = await fake.server_request("ping", request_id=3)
    assert pong == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert methods(fake)[-1] == "ping" and "_meta" not in fake.received[-1].params


async def test_the_server_cancelling_its_request_cancels_the_handler() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow(params: ElicitRequestParams) -> ElicitResult:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ElicitResult(action="decline")  # pragma: no cover

    fake = SessionFakeServer([initialize_result(), {"tools": []}])
    async with Client(fake, options=LEGACY, elicitation_handler=slow) as client:
        await client.list_tools()
        pending = asyncio.ensure_future(
            fake.server_request("elicitation/create", elicitation("Wait")["params"], "e-9")
        )
        await started.wait()
        await fake.server_notify("notifications/cancelled", {"requestId": "e-9"})
        response = await asyncio.wait_for(pending, 2)
    assert cancelled.is_set() and response["error"]["code"] == INTERNAL_ERROR


# --- era detection ---------------------------------------------------------------------------

#: How a legacy HTTP server refuses a request without a session: before reading it, so the
#: error answers no request id.
NOT_INITIALIZED = Raw(
    {"id": None, "error": {"code": -32000, "message": "Bad Request: Server not initialized"}}
)
#: How a 2026-07-28 server answers the `ping` the stdio probe starts with: it has no ping.
NO_PING = Error(-32601, "Method not found: ping")


async def test_auto_inline_falls_back_on_a_session_error_and_sends_the_request_again() -> None:
    # A legacy transport refuses a request without a session before reading it: no id.
    missing_session = Raw(
        {"id": None, "error": {"code": -32600, "message": "Bad Request: Missing session ID"}}
    )
    fake = SessionFakeServer([missing_session, initialize_result(), legacy_tool("hi")])
    async with Client(fake) as client:
        result = await client.call_tool("greet")
        assert client.era == "legacy"
    assert result.content[0].text == "hi"  # type: ignore[union-attr]
    assert methods(fake) == ["tools/call", "initialize", "notifications/initialized", "tools/call"]
    assert meta_keys.PROTOCOL_VERSION in fake.requests[0].params["_meta"]
    assert "_meta" not in fake.requests[2].params


@pytest.mark.parametrize(
    "first",
    [
        NOT_INITIALIZED,
        Error(-32022, "Unsupported protocol version", {"supported": ["2025-06-18"]}),
        Raise(McpError(HTTP_ERROR, "HTTP 404", {"status": 404})),
        Raise(McpError(HTTP_ERROR, "HTTP 405", {"status": 405})),
    ],
    ids=["not-initialized", "legacy-only-versions", "404", "405"],
)
async def test_auto_inline_takes_each_legacy_signal_for_a_legacy_server(first: Any) -> None:
    fake = SessionFakeServer([first, initialize_result(), {"tools": []}])
    async with Client(fake) as client:
        await client.list_tools()
        assert client.era == "legacy"
    assert methods(fake)[1] == "initialize"


@pytest.mark.parametrize(
    "first",
    [
        Error(-32602, "Unknown tool: nope"),
        Error(-32021, "Missing capability", {"requiredCapabilities": {"roots": {}}}),
        Raise(McpError(HTTP_ERROR, "HTTP 401", {"status": 401})),
        Raise(McpError(HTTP_ERROR, "HTTP 503", {"status": 503})),
    ],
    ids=["plain-error", "modern-capability-error", "401", "503"],
)
async def test_auto_inline_never_falls_back_on_an_answer_or_an_outage(first: Any) -> None:
    fake = SessionFakeServer([first])
    async with Client(fake) as client:
        with pytest.raises(McpError):
            await client.call_tool("nope")
    assert methods(fake) == ["tools/call"]


@pytest.mark.parametrize(
    "answer",
    [
        Error(-32000, "Bad Request: Server not initialized"),
        Error(-32602, "checkout session expired; initialize a new one"),
        Error(-32603, "unsupported protocol version of the payment gateway"),
    ],
    ids=["not-initialized", "session", "protocol-version"],
)
async def test_an_error_answering_the_request_id_is_never_taken_for_the_era(answer: Any) -> None:
    url = "http://answers.invalid/mcp"
    eras.forget(url)
    fake = SessionFakeServer([answer], url=url)
    async with Client(fake) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("checkout")
        assert client.era is None  # no verdict drawn from it: the next exchange looks again
    assert raised.value.message == answer.message
    assert methods(fake) == ["tools/call"]  # neither initialize nor the call sent again
    assert eras.cached(url) is None


async def test_a_server_that_refuses_initialize_too_gets_its_first_answer_raised() -> None:
    fake = SessionFakeServer([NOT_INITIALIZED, Error(-32601, "Method not found")])
    async with Client(fake) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
        assert client.era is None  # nothing settled: the next request looks again
    assert raised.value.message == "Bad Request: Server not initialized"


async def test_stdio_style_probe_goes_legacy_on_any_other_error() -> None:
    fake = SessionFakeServer(
        [NO_PING, Error(-32601, "Method not found"), initialize_result(), {"tools": []}],
        era_probe="discover",
    )
    async with Client(fake) as client:
        await client.list_tools()
        assert client.era == "legacy"
    assert methods(fake) == [
        "ping",
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]


async def test_stdio_style_probe_asks_no_discover_of_a_server_that_answers_ping() -> None:
    # A legacy server answers ping before initialize; an unknown request (the discover probe)
    # would make mcp 1.x log a long validation error on its stderr.
    fake = SessionFakeServer([{}, initialize_result(), {"tools": []}], era_probe="discover")
    async with Client(fake) as client:
        await client.list_tools()
        assert client.era == "legacy"
    assert methods(fake) == ["ping", "initialize", "notifications/initialized", "tools/list"]
    assert fake.requests[0].params["_meta"][meta_keys.PROTOCOL_VERSION] == "2026-07-28"


async def test_stdio_style_probe_stays_modern_on_a_modern_version_error() -> None:
    refused = Error(-32022, "Unsupported protocol version", {"supported": ["2026-07-28"]})
    fake = SessionFakeServer([NO_PING, refused, {"tools": []}], era_probe="discover")
    async with Client(fake) as client:
        await client.list_tools()
        assert client.era == "modern"
    assert methods(fake) == ["ping", "server/discover", "tools/list"]


async def test_a_silent_probe_times_out_into_initialize_on_the_same_process() -> None:
    fake = SessionFakeServer(
        [NO_PING, NEVER, initialize_result(), {"tools": []}], era_probe="discover"
    )
    options = ClientOptions(probe_timeout=0.05)
    async with Client(fake, options=options) as client:
        await client.list_tools()
        assert client.era == "legacy"
    assert fake.cancelled_ids() == [fake.requests[1].id]


async def test_a_discover_listing_only_legacy_versions_is_a_legacy_server() -> None:
    discover = {"supportedVersions": ["2025-06-18"], "capabilities": {}}
    fake = SessionFakeServer([NO_PING, discover, initialize_result()], era_probe="discover")
    async with Client(fake) as client:
        info = await client.discover()
        assert client.era == "legacy"
    assert info.supported_versions == ["2025-11-25"]  # what the session negotiated
    assert info.meta == {meta_keys.SERVER_INFO: {"name": "legacy-fake", "version": "1.0"}}


async def test_explicit_modern_names_the_legacy_versions_of_a_legacy_only_server() -> None:
    refused = Error(-32000, "Server not initialized")
    fake = SessionFakeServer(
        [refused, Error(-32601, "Method not found"), initialize_result()], era_probe="discover"
    )
    async with Client(fake, options=ClientOptions(protocol="modern")) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
        assert client.era is None  # never claimed "modern"
        with pytest.raises(McpError) as again:
            await client.call_tool("t")  # refused at once, unsent
    assert methods(fake) == ["tools/list", "server/discover", "initialize"]
    assert "_meta" in fake.requests[0].params  # the request itself went in the modern shape
    assert raised.value.code == LEGACY_ONLY_SERVER and again.value is raised.value
    assert "speaks only initialize-based (legacy) protocol revisions (2025-11-25)" in (
        raised.value.message
    )
    assert raised.value.data == {
        "supported": ["2025-11-25"],
        "requested": "2026-07-28",
        "era": "legacy",
    }


async def test_explicit_modern_keeps_a_modern_servers_plain_error() -> None:
    discover = {"supportedVersions": ["2026-07-28"], "capabilities": {}}
    fake = SessionFakeServer(
        [Error(-32602, "Unknown tool: nope"), discover, {"tools": []}], era_probe="discover"
    )
    async with Client(fake, options=ClientOptions(protocol="modern")) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("nope")
        assert client.era == "modern"
        await client.list_tools()
    assert raised.value.message == "Unknown tool: nope"
    assert methods(fake) == ["tools/call", "server/discover", "tools/list"]


async def test_explicit_modern_sends_no_probe_to_a_server_that_answers() -> None:
    fake = SessionFakeServer([{"tools": []}], era_probe="discover")
    async with Client(fake, options=ClientOptions(protocol="modern")) as client:
        await client.list_tools()
        assert client.era == "modern"
    assert methods(fake) == ["tools/list"]


def test_protocol_option_is_checked() -> None:
    with pytest.raises(ValueError, match="protocol must be"):
        ClientOptions(protocol="newest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="probe_timeout"):
        ClientOptions(probe_timeout=0)


async def test_the_verdict_is_cached_per_endpoint_and_reexamined_when_wrong() -> None:
    url = "http://legacy.invalid/mcp"
    eras.forget(url)
    first = SessionFakeServer([NOT_INITIALIZED, initialize_result(), {"tools": []}], url=url)
    async with Client(first) as client:
        await client.list_tools()
    second = SessionFakeServer([initialize_result(), {"tools": []}], url=url + "?x=1")
    async with Client(second) as client:
        await client.list_tools()
    assert methods(second)[0] == "initialize"  # no modern attempt: the verdict was cached
    # The server was upgraded meanwhile: initialize names modern versions, so go modern.
    upgraded = Error(-32022, "Unsupported protocol version", {"supported": ["2026-07-28"]})
    third = SessionFakeServer([upgraded, {"tools": []}], url=url)
    async with Client(third) as client:
        await client.list_tools()
        assert client.era == "modern"
    assert methods(third) == ["initialize", "tools/list"]
    assert eras.cached(url) == "modern"
    eras.forget(url)


# --- the same features on both eras ----------------------------------------------------------


async def test_log_level_is_set_with_logging_set_level_on_a_legacy_session() -> None:
    caps = {"tools": {}, "logging": {}}
    fake = SessionFakeServer([initialize_result(capabilities=caps), {}, {"tools": []}, {}, {}])
    logs: list[dict[str, Any]] = []
    async with Client(fake, options=LEGACY, log_level="info", log_handler=logs.append) as client:
        await client.list_tools()
        await fake.server_notify("notifications/message", {"level": "info", "data": "hello"})
        fake.script.append(legacy_tool("ok"))
        await client.call_tool("t", meta={meta_keys.LOG_LEVEL: "error"})
    assert methods(fake)[2:4] == ["logging/setLevel", "tools/list"]
    assert fake.requests[1].params == {"level": "info"}
    assert [r.params for r in fake.requests if r.method == "logging/setLevel"][1] == {
        "level": "error"
    }
    assert logs == [{"level": "info", "data": "hello"}]


async def test_log_level_goes_in_every_modern_request_meta() -> None:
    fake = SessionFakeServer([{"tools": []}])
    async with Client(fake, log_level="warning") as client:
        await client.list_tools()
    assert fake.requests[0].params["_meta"][meta_keys.LOG_LEVEL] == "warning"


async def test_listen_on_a_legacy_session_subscribes_and_delivers_changes() -> None:
    caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True}}
    fake = SessionFakeServer([initialize_result(capabilities=caps), {}, {}])
    client = Client(fake, options=LEGACY)
    async with (
        client,
        client.listen(tools=True, prompts=True, resource_uris=["file:///a"]) as changes,
    ):
        assert changes.honoured == {
            "toolsListChanged": True,
            "resourceSubscriptions": ["file:///a"],
        }
        await fake.server_notify("notifications/prompts/list_changed")
        await fake.server_notify("notifications/resources/updated", {"uri": "file:///b"})
        await fake.server_notify("notifications/tools/list_changed")
        await fake.server_notify("notifications/resources/updated", {"uri": "file:///a"})
        seen = [await anext(aiter(changes)) for _ in range(2)]
    assert [(c.kind, c.uri) for c in seen] == [("tools", None), ("resource", "file:///a")]
    assert [r.method for r in fake.requests] == [
        "initialize",
        "resources/subscribe",
        "resources/unsubscribe",
    ]


async def test_mrtr_loop_still_answers_questions_on_a_modern_server() -> None:
    question = {
        "resultType": "input_required",
        "inputRequests": {"r": elicitation("Where?")},
        "requestState": "s",
    }
    fake = SessionFakeServer([question, tool_text("done")])
    async with Client(fake, elicitation_handler=region) as client:
        result = await client.call_tool("order")
        assert client.era == "modern"
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    assert fake.requests[1].params["inputResponses"]["r"]["content"] == {"region": "eu"}
