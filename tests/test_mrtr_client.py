"""The client's MRTR loop: input handlers, retries, options, observability.

Most tests run against `FakeServer`, a scripted transport that records exactly what the client
put on the wire; the rest run against a real `Server` in memory.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest

from helpers.fake_server import (
    NEVER,
    Delayed,
    Error,
    FakeServer,
    elicitation,
    input_required,
    roots,
    sampling,
    tool_text,
)
from helpers.mrtr_flows import Answers
from mrtr import (
    CallToolResult,
    Client,
    ClientOptions,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    InputHandlerError,
    InputRequiredError,
    ListRootsRequestParams,
    McpError,
    RequestContext,
    RoundInfo,
    Server,
    TextContent,
    elicit_request,
    input_response,
    sample_request,
)
from mrtr.client import InputRequiredConfig
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import (
    INPUT_HANDLER_FAILED,
    MAX_ROUNDS_EXCEEDED,
    NO_INPUT_HANDLER,
    REQUEST_TIMEOUT,
)
from mrtr.protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

#: What every request declares besides its handlers: the tasks extension (on by default).
TASKS = {"extensions": {TASKS_EXTENSION: {}}}

GUARD = 10.0  # seconds; only ever reached when a test is failing


def options(**config: Any) -> ClientOptions:
    return ClientOptions(input_required=InputRequiredConfig(**config))


def accept_ok(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(client: Client, name: str = "tool", **kw: Any) -> CallToolResult:
    return await asyncio.wait_for(client.call_tool(name, **kw), GUARD)


# --- capabilities ------------------------------------------------------------------------------


async def test_constructor_handlers_are_declared_on_every_request() -> None:
    fake = FakeServer(
        [input_required({"a": elicitation("A?")}, "s1"), input_required({"b": roots()}, "s2")],
        then=tool_text("done"),
    )
    answers = Answers()
    client = Client(fake, **answers.client_kwargs(), elicitation_modes=("form", "url"))
    async with client:
        assert text_of(await call(client)) == "done"
    assert len(fake.requests) == 3
    for sent in fake.requests:
        meta = sent.params["_meta"]
        assert meta[meta_keys.CLIENT_CAPABILITIES] == {
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
            **TASKS,
        }
        assert meta[meta_keys.PROTOCOL_VERSION] == LATEST_PROTOCOL_VERSION
        assert meta[meta_keys.CLIENT_INFO]["name"]


async def test_set_handler_methods_declare_capabilities() -> None:
    fake = FakeServer(then={"tools": []})
    client = Client(fake)
    declared: list[dict[str, Any]] = []

    async def list_and_record() -> None:
        await client.list_tools()
        declared.append(fake.requests[-1].params["_meta"][meta_keys.CLIENT_CAPABILITIES])

    async with client:
        await list_and_record()
        client.set_elicitation_handler(accept_ok)
        await list_and_record()
        client.set_sampling_handler(Answers().sampling)
        await list_and_record()
        client.set_roots_handler(Answers().roots)
        await list_and_record()
        client.set_elicitation_handler(accept_ok, modes=("url",))
        await list_and_record()
    assert declared == [
        {**TASKS},
        {"elicitation": {"form": {}}, **TASKS},
        {"elicitation": {"form": {}}, "sampling": {}, **TASKS},
        {"elicitation": {"form": {}}, "sampling": {}, "roots": {}, **TASKS},
        {"elicitation": {"url": {}}, "sampling": {}, "roots": {}, **TASKS},
    ]


@pytest.mark.parametrize("modes", [(), ("voice",), ("form", "sms")])
def test_unknown_elicitation_modes_are_refused(modes: tuple[str, ...]) -> None:
    client = Client(FakeServer())
    with pytest.raises(ValueError, match="elicitation modes"):
        client.set_elicitation_handler(accept_ok, modes=modes)
    assert client.capabilities == TASKS


# --- dispatch ----------------------------------------------------------------------------------


async def test_each_input_request_goes_to_its_handler_and_answers_are_bare() -> None:
    fake = FakeServer(
        [input_required({"e": elicitation("Ok?"), "s": sampling("Hi"), "r": roots()}, "st")],
        then=tool_text("done"),
    )
    seen: dict[str, Any] = {}

    def on_elicit(params: ElicitRequestParams) -> ElicitResult:
        seen["e"] = params
        return ElicitResult(action="accept", content={"ok": True})

    async def on_sample(params: CreateMessageRequestParams) -> CreateMessageResult:
        seen["s"] = params
        await asyncio.sleep(0)
        return CreateMessageResult(
            role="assistant",
            content=TextContent(text="hello"),
            model="m-1",
            stop_reason="endTurn",
            meta={"trace": "abc"},
        )

    def on_roots(params: ListRootsRequestParams) -> dict[str, Any]:
        seen["r"] = params
        return {"roots": [{"uri": "file:///a", "name": "a"}], "_meta": {"x": 1}}

    async with Client(
        fake, elicitation_handler=on_elicit, sampling_handler=on_sample, roots_handler=on_roots
    ) as client:
        assert text_of(await call(client)) == "done"
    assert isinstance(seen["e"], ElicitRequestParams) and seen["e"].message == "Ok?"
    assert isinstance(seen["s"], CreateMessageRequestParams) and seen["s"].max_tokens == 50
    assert isinstance(seen["r"], ListRootsRequestParams)
    retry = fake.requests[1].params
    assert retry["inputResponses"] == {
        "e": {"action": "accept", "content": {"ok": True}},
        "s": {
            "role": "assistant",
            "content": {"type": "text", "text": "hello"},
            "model": "m-1",
            "stopReason": "endTurn",
        },
        "r": {"roots": [{"uri": "file:///a", "name": "a"}]},
    }


@pytest.mark.parametrize(
    ("request_", "handlers"),
    [
        (elicitation("Ok?"), {"sampling_handler": Answers().sampling}),
        (sampling("Hi"), {"elicitation_handler": accept_ok}),
        (roots(), {}),
        ({"method": "tasks/run", "params": {}}, Answers().client_kwargs()),
    ],
)
async def test_unhandled_input_request_is_a_local_no_input_handler_error(
    request_: dict[str, Any], handlers: dict[str, Any]
) -> None:
    fake = FakeServer([input_required({"q1": request_}, "st")])
    async with Client(fake, **handlers) as client:
        with pytest.raises(InputHandlerError) as info:
            await call(client)
    error = info.value
    assert isinstance(error, McpError)
    assert error.code == NO_INPUT_HANDLER  # local: not the server's -32601
    assert (error.key, error.method) == ("q1", request_["method"])
    assert "'q1'" in error.message and request_["method"] in error.message
    assert error.data == {"key": "q1", "method": request_["method"]}
    assert len(fake.requests) == 1  # no retry with a missing answer


async def test_inputs_of_one_round_are_resolved_concurrently() -> None:
    fake = FakeServer(
        [input_required({"a": elicitation("A?"), "b": elicitation("B?")}, "st")],
        then=tool_text("done"),
    )
    arrived = {"A?": asyncio.Event(), "B?": asyncio.Event()}

    async def on_elicit(params: ElicitRequestParams) -> ElicitResult:
        # Each handler waits for the other: this completes only if both run at once.
        arrived[params.message].set()
        other = "B?" if params.message == "A?" else "A?"
        await arrived[other].wait()
        return ElicitResult(action="accept", content={"q": params.message})

    async with Client(fake, elicitation_handler=on_elicit) as client:
        assert text_of(await call(client)) == "done"
    assert fake.requests[1].params["inputResponses"] == {
        "a": {"action": "accept", "content": {"q": "A?"}},
        "b": {"action": "accept", "content": {"q": "B?"}},
    }


async def test_failing_handler_fails_the_call_attributed_to_its_input() -> None:
    fake = FakeServer([input_required({"name": elicitation("Name?"), "draft": sampling("Hi")})])
    other_cancelled = asyncio.Event()

    def on_elicit(params: ElicitRequestParams) -> ElicitResult:
        raise RuntimeError("the user closed the dialog")

    async def on_sample(params: CreateMessageRequestParams) -> CreateMessageResult:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            other_cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with Client(fake, elicitation_handler=on_elicit, sampling_handler=on_sample) as client:
        with pytest.raises(InputHandlerError) as info:
            await call(client)
    error = info.value
    assert (error.key, error.method) == ("name", "elicitation/create")
    assert error.code == INPUT_HANDLER_FAILED
    assert "'name'" in error.message and "the user closed the dialog" in error.message
    assert isinstance(error.__cause__, RuntimeError)
    assert other_cancelled.is_set()
    assert len(fake.requests) == 1


async def test_handler_raising_mcp_error_keeps_its_code_and_is_attributed() -> None:
    fake = FakeServer([input_required({"draft": sampling("Hi")})])

    def on_sample(params: CreateMessageRequestParams) -> CreateMessageResult:
        raise McpError(-1, "User rejected sampling request")

    async with Client(fake, sampling_handler=on_sample) as client:
        with pytest.raises(InputHandlerError) as info:
            await call(client)
    assert info.value.code == -1
    assert (info.value.key, info.value.method) == ("draft", "sampling/createMessage")
    assert "User rejected sampling request" in info.value.message


@pytest.mark.parametrize("answer", [None, "yes", 42, {"action": "perhaps"}, {"content": {}}])
async def test_handler_returning_a_wrong_answer_is_attributed(answer: Any) -> None:
    fake = FakeServer([input_required({"ask": elicitation("Ok?")})])
    async with Client(fake, elicitation_handler=lambda params: answer) as client:
        with pytest.raises(InputHandlerError) as info:
            await call(client)
    assert (info.value.key, info.value.method) == ("ask", "elicitation/create")
    assert "'ask'" in info.value.message
    assert len(fake.requests) == 1


async def test_malformed_input_request_params_are_attributed() -> None:
    fake = FakeServer(
        [input_required({"ask": {"method": "elicitation/create", "params": {"mode": "form"}}})]
    )
    async with Client(fake, elicitation_handler=accept_ok) as client:
        with pytest.raises(InputHandlerError) as info:
            await call(client)
    assert (info.value.key, info.value.method) == ("ask", "elicitation/create")
    assert "invalid params" in info.value.message


# --- the loop ----------------------------------------------------------------------------------


async def test_every_retry_has_a_new_id_and_the_original_params() -> None:
    fake = FakeServer(
        [
            input_required({"a": elicitation("A?")}, "s1"),
            input_required({"b": elicitation("B?")}, "s2"),
        ],
        then=tool_text("done"),
    )
    async with Client(fake, elicitation_handler=accept_ok) as client:
        await call(client, "book", arguments={"from": "SFO", "n": 2})
    ids = [r.id for r in fake.requests]
    assert len(ids) == 3 and len(set(ids)) == 3
    for sent in fake.requests:
        assert sent.method == "tools/call"
        assert sent.params["name"] == "book"
        assert sent.params["arguments"] == {"from": "SFO", "n": 2}
    assert "inputResponses" not in fake.requests[0].params
    assert "requestState" not in fake.requests[0].params
    assert [r.params.get("requestState") for r in fake.requests] == [None, "s1", "s2"]
    assert set(fake.requests[1].params["inputResponses"]) == {"a"}
    assert set(fake.requests[2].params["inputResponses"]) == {"b"}


UNUSUAL_STATES = [
    "plain",
    " leading and trailing spaces  ",
    "quotes \" and ' and `backticks`",
    "back\\slashes \\\\ and \\u0041 and \\n literally",
    "line\nbreaks\r\nand\ttabs\x00nul\x1fcontrol\x7f",
    "unicode: héllo, e\u0301 (decomposed), 日本語, עברית, 🙂👩‍👩‍👧, \u200b zero-width",
    "\ufeffBOM and \u2028 line separator and \U0010ffff",
    '{"looks": ["like", "json"], "n": null}',
    "null",
    "==padding==",
    "x" * 200_000,
    "".join(chr(c) for c in range(0x20, 0x2FF)) * 50,
]


@pytest.mark.parametrize("state", UNUSUAL_STATES, ids=range(len(UNUSUAL_STATES)))
async def test_request_state_is_echoed_byte_for_byte(state: str) -> None:
    fake = FakeServer([input_required({"a": elicitation("A?")}, state)], then=tool_text("done"))
    async with Client(fake, elicitation_handler=accept_ok) as client:
        await call(client)
    echoed = fake.requests[1].params["requestState"]
    assert type(echoed) is str
    assert echoed == state
    assert len(echoed) == len(state)
    assert orjson.dumps(state) in fake.requests[1].raw


async def test_state_only_round_is_echoed_too() -> None:
    weird = 'state-only "round" \\ 🙂'
    fake = FakeServer([input_required(state=weird)], then=tool_text("done"))
    async with Client(fake) as client:
        await call(client)
    retry = fake.requests[1].params
    assert retry["requestState"] == weird
    assert "inputResponses" not in retry


async def test_no_request_state_on_a_retry_when_the_server_sent_none() -> None:
    fake = FakeServer(
        [
            input_required({"a": elicitation("A?")}),
            input_required({"b": elicitation("B?")}, "s2"),
            input_required({"c": elicitation("C?")}),
        ],
        then=tool_text("done"),
    )
    async with Client(fake, elicitation_handler=accept_ok) as client:
        await call(client)
    states = ["requestState" in r.params for r in fake.requests]
    assert states == [False, False, True, False]
    assert fake.requests[2].params["requestState"] == "s2"


async def test_answers_are_not_carried_into_a_later_round() -> None:
    fake = FakeServer(
        [input_required({"a": elicitation("A?")}, "s1"), input_required(state="s2")],
        then=tool_text("done"),
    )
    async with Client(fake, elicitation_handler=accept_ok) as client:
        await call(client)
    assert set(fake.requests[1].params["inputResponses"]) == {"a"}
    assert "inputResponses" not in fake.requests[2].params
    assert fake.requests[2].params["requestState"] == "s2"


async def test_state_only_round_is_retried_after_a_backoff() -> None:
    fake = FakeServer([input_required(state="later")], then=tool_text("done"))
    async with Client(fake) as client:
        assert text_of(await call(client)) == "done"
    first, retry = fake.requests
    assert first.answered_at is not None
    # A lower bound only: the client waited before polling again instead of busy-looping.
    assert retry.at - first.answered_at >= 0.04


async def test_concurrent_flows_on_one_client_do_not_share_answers_or_state() -> None:
    both_asked = asyncio.Event()
    asked: list[str] = []

    def route(message: dict[str, Any]) -> Any:
        params = message["params"]
        name = params["name"]
        if "requestState" not in params:
            # Same key in both flows, so a leak would go unnoticed by key alone.
            return Delayed(0.01, input_required({"k": elicitation(f"{name}?")}, f"state-{name}"))
        return tool_text(f"{name} done")

    async def on_elicit(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        if len(asked) == 2:
            both_asked.set()
        await both_asked.wait()  # both flows are mid-round at the same time
        return ElicitResult(action="accept", content={"who": params.message})

    fake = FakeServer(then=route)
    async with Client(fake, elicitation_handler=on_elicit) as client:
        one, two = await asyncio.gather(call(client, "one"), call(client, "two"))
    assert (text_of(one), text_of(two)) == ("one done", "two done")
    retries = {r.params["name"]: r.params for r in fake.requests if "requestState" in r.params}
    for name in ("one", "two"):
        assert retries[name]["requestState"] == f"state-{name}"
        assert retries[name]["inputResponses"] == {
            "k": {"action": "accept", "content": {"who": f"{name}?"}}
        }
    assert len(fake.requests) == 4


async def test_initial_input_responses_and_state_are_sent_as_given() -> None:
    fake = FakeServer(then=tool_text("done"))
    answer = {"action": "accept", "content": {"ok": True}}
    async with Client(fake) as client:
        await call(client, input_responses={"k": answer}, request_state="given \u00e9")
    sent = fake.requests[0].params
    assert sent["inputResponses"] == {"k": answer}
    assert sent["requestState"] == "given \u00e9"


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ({"resultType": "input_required"}, "neither inputRequests nor requestState"),
        (input_required({}), "neither inputRequests nor requestState"),
        (input_required(["not", "a", "map"], "s"), "inputRequests"),
        ({"resultType": "input_required", "requestState": 12345}, "requestState"),
        ({"resultType": "eventually"}, "resultType"),
    ],
)
async def test_malformed_server_results_fail_clearly(result: dict[str, Any], words: str) -> None:
    fake = FakeServer([result])
    async with Client(fake, elicitation_handler=accept_ok) as client:
        with pytest.raises(McpError) as info:
            await call(client)
    assert words in info.value.message
    assert len(fake.requests) == 1


async def test_server_error_is_raised_with_its_code_and_data() -> None:
    fake = FakeServer(
        [
            input_required({"a": elicitation("A?")}, "s1"),
            Error(-32602, "Invalid requestState", {"reason": "invalid_request_state"}),
        ]
    )
    async with Client(fake, elicitation_handler=accept_ok) as client:
        with pytest.raises(McpError) as info:
            await call(client)
    assert (info.value.code, info.value.message) == (-32602, "Invalid requestState")
    assert info.value.data == {"reason": "invalid_request_state"}


# --- options -----------------------------------------------------------------------------------


async def test_max_rounds_stops_a_server_that_never_completes() -> None:
    fake = FakeServer(then=input_required({"a": elicitation("Again?")}, "s"))
    async with Client(fake, elicitation_handler=accept_ok, options=options(max_rounds=3)) as c:
        with pytest.raises(McpError) as info:
            await call(c)
    assert info.value.code == MAX_ROUNDS_EXCEEDED
    assert "3 rounds" in info.value.message and "max_rounds" in info.value.message
    assert len(fake.requests) == 4  # three answered rounds, then the fourth ask is refused


async def test_round_timeout_cancels_an_unanswered_request() -> None:
    fake = FakeServer([NEVER])
    async with Client(fake, options=options(round_timeout=0.05)) as client:
        with pytest.raises(McpError) as info:
            await call(client)
    assert info.value.code == REQUEST_TIMEOUT
    assert "0.05" in info.value.message
    [sent] = fake.requests
    assert fake.cancelled_ids() == [sent.id]


async def test_round_timeout_applies_to_each_retry() -> None:
    fake = FakeServer([input_required({"a": elicitation("A?")}, "s1"), NEVER])
    async with Client(
        fake, elicitation_handler=accept_ok, options=options(round_timeout=0.05)
    ) as client:
        with pytest.raises(McpError) as info:
            await call(client)
    assert info.value.code == REQUEST_TIMEOUT
    assert fake.cancelled_ids() == [fake.requests[1].id]


async def test_max_total_timeout_bounds_a_slow_server_that_keeps_asking() -> None:
    slow = Delayed(0.02, input_required({"a": elicitation("Again?")}, "s"))
    fake = FakeServer(then=slow)
    config = options(round_timeout=5, max_total_timeout=0.3, max_rounds=1000)
    async with Client(fake, elicitation_handler=accept_ok, options=config) as client:
        with pytest.raises(McpError) as info:
            await call(client)
    assert info.value.code == REQUEST_TIMEOUT
    assert "max_total_timeout" in info.value.message
    assert len(fake.requests) >= 2  # several rounds, each well within round_timeout
    assert fake.cancelled_ids() == [fake.requests[-1].id]


async def test_auto_fulfill_off_raises_with_the_input_required_result() -> None:
    state = 'opaque "state" 🙂'
    fake = FakeServer([input_required({"a": elicitation("A?"), "b": roots()}, state)])
    async with Client(
        fake, elicitation_handler=accept_ok, options=options(auto_fulfill=False)
    ) as client:
        with pytest.raises(InputRequiredError) as info:
            await call(client)
    asked = info.value.result
    assert asked.request_state == state
    assert asked.input_requests is not None
    assert set(asked.input_requests) == {"a", "b"}
    assert asked.input_requests["b"].method == "roots/list"
    assert len(fake.requests) == 1


def _two_round_server() -> Server:
    server = Server("shop")

    @server.tool()
    async def checkout(ctx: RequestContext, item: str) -> str:
        first = await ctx.ask(
            {"size": elicit_request("Size?", {"type": "object"}), "note": sample_request("Note?")}
        )
        where = await ctx.list_roots()
        size = first["size"].content["size"]
        note = first["note"].content.text
        return f"{item} size {size}, note {note!r}, {len(where.roots)} root(s)"

    return server


async def test_auto_fulfill_off_is_driven_by_hand_across_processes() -> None:
    server = _two_round_server()
    manual = options(auto_fulfill=False)
    # Handlers declare the capabilities; with auto_fulfill off they are never called.
    untouched = Answers()

    async with Client.in_memory(server, options=manual, **untouched.client_kwargs()) as first:
        with pytest.raises(InputRequiredError) as info:
            await first.call_tool("checkout", {"item": "shirt"})
    asked = info.value.result
    assert asked.input_requests is not None and set(asked.input_requests) == {"size", "note"}
    # The state survives a trip through plain JSON, as it would between processes.
    carried = json.loads(json.dumps({"state": asked.request_state}))["state"]
    responses = {
        "size": input_response(ElicitResult(action="accept", content={"size": "M"})),
        "note": {"role": "assistant", "content": {"type": "text", "text": "gift"}, "model": "x"},
    }
    async with Client.in_memory(server, options=manual, **untouched.client_kwargs()) as second:
        with pytest.raises(InputRequiredError) as info:
            await second.call_tool(
                "checkout", {"item": "shirt"}, input_responses=responses, request_state=carried
            )
    asked = info.value.result
    assert asked.input_requests is not None
    [roots_key] = asked.input_requests  # an automatic key, taken from the question
    assert asked.input_requests[roots_key].method == "roots/list"
    async with Client.in_memory(server, options=manual, **untouched.client_kwargs()) as third:
        result = await third.call_tool(
            "checkout",
            {"item": "shirt"},
            input_responses={roots_key: {"roots": [{"uri": "file:///home"}]}},
            request_state=str(asked.request_state),
        )
    assert text_of(result) == "shirt size M, note 'gift', 1 root(s)"
    assert untouched.asked == []


async def test_on_round_reports_each_round() -> None:
    fake = FakeServer(
        [
            input_required({"a": elicitation("A?"), "b": sampling("B?")}, "s" * 10),
            input_required(state="xyz"),
            input_required({"c": roots()}),
        ],
        then=tool_text("done"),
    )
    rounds: list[RoundInfo] = []
    answers = Answers()
    async with Client(
        fake, options=ClientOptions(on_round=rounds.append), **answers.client_kwargs()
    ) as client:
        await call(client, "report")
    assert [(r.round, r.keys, r.state_size) for r in rounds] == [
        (1, ("a", "b"), 10),
        (2, (), 3),
        (3, ("c",), 0),
    ]
    for info in rounds:
        assert (info.method, info.target) == ("tools/call", "report")
        assert isinstance(info.elapsed, float) and info.elapsed >= 0


async def test_real_server_three_questions_in_two_rounds() -> None:
    rounds: list[RoundInfo] = []
    answers = Answers(elicit={"size": "L"}, sample="for dad", root_uris=("file:///a",))
    async with Client.in_memory(
        _two_round_server(),
        options=ClientOptions(on_round=rounds.append),
        **answers.client_kwargs(),
    ) as client:
        result = await client.call_tool("checkout", {"item": "tie"})
    assert text_of(result) == "tie size L, note 'for dad', 1 root(s)"
    first_keys, (roots_key,) = [r.keys for r in rounds]
    assert first_keys == ("size", "note")
    assert roots_key.startswith("roots-")  # an automatic key, taken from the question
    assert sorted(m for m, _ in answers.asked) == [
        "elicitation/create",
        "roots/list",
        "sampling/createMessage",
    ]


async def test_real_server_prompt_and_resource_through_the_loop() -> None:
    server = Server("mixed")

    @server.prompt()
    async def haiku(ctx: RequestContext, topic: str) -> str:
        line = await ctx.sample(f"A line about {topic}")
        assert isinstance(line.content, TextContent)
        return line.content.text

    @server.resource("config://user")
    async def config(ctx: RequestContext) -> str:
        found = await ctx.list_roots()
        return found.roots[0].uri

    answers = Answers(sample="autumn leaves fall", root_uris=("file:///cfg",))
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        prompt = await client.get_prompt("haiku", {"topic": "fall"})
        resource = await client.read_resource("config://user")
    block = prompt.messages[0].content
    assert isinstance(block, TextContent) and block.text == "autumn leaves fall"
    assert getattr(resource.contents[0], "text", None) == "file:///cfg"


async def test_client_without_the_needed_handler_gets_the_servers_refusal() -> None:
    async with Client.in_memory(_two_round_server(), elicitation_handler=accept_ok) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("checkout", {"item": "tie"})
    assert info.value.code == -32021
    assert info.value.data == {"requiredCapabilities": {"sampling": {}}}


async def test_capabilities_can_be_declared_without_handlers_for_manual_driving() -> None:
    fake = FakeServer(script=[tool_text("done")])
    client = Client(fake, capabilities={"elicitation": {"form": {}}, "roots": {}})
    async with client:
        await client.call_tool("t", {})
    declared = fake.requests[0].params["_meta"][meta_keys.CLIENT_CAPABILITIES]
    assert declared == {"elicitation": {"form": {}}, "roots": {}, **TASKS}
