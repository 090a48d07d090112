"""The MRTR server engine: handlers that ask, the wire they produce, and bad retries.

Flows run through `Client.in_memory(server)`; where the exact wire matters, requests go to
`server.handle_message` as raw JSON-RPC.
"""

from __future__ import annotations

import asyncio
import logging
import re
import types
from typing import Any

import pytest
from pydantic import BaseModel

from helpers.mrtr_flows import (
    Answers,
    accept,
    call_tool,
    error_of,
    result_of,
    rpc,
    sampled,
)
from mrtr import (
    CallToolResult,
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
    InputRequiredResult,
    McpError,
    RequestContext,
    RoundInfo,
    Server,
    ServerOptions,
    TextContent,
    elicit_request,
    roots_request,
    sample_request,
)
from mrtr.protocol.errors import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from mrtr.server import InputRequiredConfig
from mrtr.server import request_state as request_state_module
from mrtr.server.request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    VerifiedState,
    verify_request_state,
)

OK_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
NAME_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}}
KEY = b"k" * 32
OLD_KEY = b"o" * 32
NEW_KEY = b"n" * 32
INVALID_STATE_MESSAGE = "Invalid requestState: retry the original request without requestState"


def recorder() -> tuple[list[RoundInfo], ClientOptions]:
    rounds: list[RoundInfo] = []
    return rounds, ClientOptions(on_round=rounds.append)


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


# --- await style through the client ----------------------------------------------------------


async def test_single_question_asks_once_then_completes() -> None:
    server = Server("shop")
    runs: list[int] = []

    @server.tool()
    async def buy(ctx: RequestContext, item: str) -> str:
        runs.append(ctx.round)
        answer = await ctx.elicit(f"Buy {item}?", OK_SCHEMA)
        return f"{item}: {answer.action} {answer.content}"

    answers = Answers()
    rounds, options = recorder()
    async with Client.in_memory(server, options=options, **answers.client_kwargs()) as client:
        result = await client.call_tool("buy", {"item": "book"})
    assert text_of(result) == "book: accept {'ok': True}"
    assert answers.messages == ["Buy book?"]
    assert runs == [0, 1]
    [(key,)] = [r.keys for r in rounds]
    assert re.fullmatch(r"elicit-[0-9a-f]{8}", key)  # an automatic key, from the question


async def test_ask_sends_several_questions_in_one_round() -> None:
    server = Server("planner")

    @server.tool()
    async def plan(ctx: RequestContext) -> str:
        got = await ctx.ask(
            {
                "name": elicit_request("Name?", NAME_SCHEMA),
                "idea": sample_request("Idea?"),
                "where": roots_request(),
            }
        )
        name = got["name"].content["name"]
        idea = got["idea"].content.text
        return f"{name} {idea} {got['where'].roots[0].uri}"

    answers = Answers(elicit={"name": "ann"}, sample="garden")
    rounds, options = recorder()
    async with Client.in_memory(server, options=options, **answers.client_kwargs()) as client:
        result = await client.call_tool("plan")
    assert text_of(result) == "ann garden file:///work"
    assert [r.keys for r in rounds] == [("name", "idea", "where")]
    assert sorted(m for m, _ in answers.asked) == [
        "elicitation/create",
        "roots/list",
        "sampling/createMessage",
    ]


async def test_gather_sends_questions_of_sibling_tasks_in_one_round() -> None:
    server = Server("planner")

    @server.tool()
    async def plan(ctx: RequestContext) -> str:
        async def ask_name() -> str:
            answer = await ctx.elicit("Name?", NAME_SCHEMA)
            assert answer.content is not None
            return str(answer.content["name"])

        async def ask_idea() -> str:
            answer = await ctx.sample("Idea?")
            assert isinstance(answer.content, TextContent)
            return answer.content.text

        name, idea, where = await asyncio.gather(ask_name(), ask_idea(), ctx.list_roots())
        return f"{name} {idea} {where.roots[0].uri}"

    answers = Answers(elicit={"name": "bo"}, sample="kites")
    rounds, options = recorder()
    async with Client.in_memory(server, options=options, **answers.client_kwargs()) as client:
        result = await client.call_tool("plan")
    assert text_of(result) == "bo kites file:///work"
    assert len(rounds) == 1
    keys = rounds[0].keys
    assert len(set(keys)) == 3
    assert {k.split("-")[0] for k in keys} == {"elicit", "sample", "roots"}


async def test_sequential_questions_take_one_round_each() -> None:
    server = Server("wizard")
    runs: list[int] = []

    @server.tool()
    async def wizard(ctx: RequestContext) -> str:
        runs.append(ctx.round)
        name = await ctx.elicit("Name?", NAME_SCHEMA)
        draft = await ctx.sample(f"Greet {name.content}")
        where = await ctx.list_roots()
        assert isinstance(draft.content, TextContent)
        return f"{draft.content.text} @ {len(where.roots)} roots"

    answers = Answers(elicit={"name": "cy"}, sample="hello", root_uris=("file:///a", "file:///b"))
    rounds, options = recorder()
    async with Client.in_memory(server, options=options, **answers.client_kwargs()) as client:
        result = await client.call_tool("wizard")
    assert text_of(result) == "hello @ 2 roots"
    assert [tuple(k.split("-")[0] for k in r.keys) for r in rounds] == [
        ("elicit",),
        ("sample",),
        ("roots",),
    ]
    assert [r.round for r in rounds] == [1, 2, 3]
    assert runs == [0, 1, 2, 3]


async def test_sampling_question_carries_its_params_and_returns_the_message() -> None:
    server = Server("writer")

    @server.tool()
    async def summarize(ctx: RequestContext, text: str) -> str:
        reply = await ctx.sample(f"Summarize: {text}", max_tokens=42, system_prompt="Be brief")
        assert isinstance(reply.content, TextContent)
        return f"{reply.model}: {reply.content.text}"

    answers = Answers(sample="short")
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("summarize", {"text": "long story"})
    assert text_of(result) == "test: short"
    [(method, params)] = answers.asked
    assert method == "sampling/createMessage"
    assert params.max_tokens == 42
    assert params.system_prompt == "Be brief"
    assert params.messages[0].content.text == "Summarize: long story"


async def test_roots_question_returns_the_clients_roots() -> None:
    server = Server("files")

    @server.tool()
    async def where(ctx: RequestContext) -> str:
        found = await ctx.list_roots()
        return ",".join(root.uri for root in found.roots)

    answers = Answers(root_uris=("file:///x", "file:///y"))
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("where")
    assert text_of(result) == "file:///x,file:///y"


async def test_prompt_can_ask() -> None:
    server = Server("prompts")
    runs: list[int] = []

    @server.prompt()
    async def greet(ctx: RequestContext, tone: str) -> str:
        runs.append(ctx.round)
        who = await ctx.elicit("Who?", NAME_SCHEMA)
        assert who.content is not None
        return f"Greet {who.content['name']} in a {tone} tone"

    answers = Answers(elicit={"name": "dee"})
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.get_prompt("greet", {"tone": "warm"})
    block = result.messages[0].content
    assert isinstance(block, TextContent)
    assert block.text == "Greet dee in a warm tone"
    assert runs == [0, 1]


async def test_resource_template_can_ask() -> None:
    server = Server("notes")
    runs: list[int] = []

    @server.resource_template("notes://{user}/today", mime_type="text/plain")
    async def notes(ctx: RequestContext, user: str) -> str:
        runs.append(ctx.round)
        ok = await ctx.elicit(f"Show {user}'s notes?", OK_SCHEMA)
        return f"notes of {user}" if ok.is_accepted() else "hidden"

    answers = Answers()
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.read_resource("notes://eve/today")
    contents = result.contents[0]
    assert contents.uri == "notes://eve/today"
    assert getattr(contents, "text", None) == "notes of eve"
    assert answers.messages == ["Show eve's notes?"]
    assert runs == [0, 1]


# --- manual style ------------------------------------------------------------------------------


async def test_manual_style_returned_input_required_result() -> None:
    server = Server("manual")
    seen: list[tuple[str | None, dict[str, Any]]] = []

    @server.tool()
    async def paint(ctx: RequestContext) -> InputRequiredResult | str:
        seen.append((ctx.request_state, dict(ctx.input_responses)))
        if ctx.request_state is None:
            return InputRequiredResult(
                input_requests={"color": elicit_request("Color?", NAME_SCHEMA)},
                request_state="step-1",
            )
        return f"painted {ctx.input_responses['color']['content']['name']}"

    answers = Answers(elicit={"name": "teal"})
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("paint")
    assert text_of(result) == "painted teal"
    assert seen == [
        (None, {}),
        ("step-1", {"color": {"action": "accept", "content": {"name": "teal"}}}),
    ]


async def test_manual_style_call_tool_result_input_required() -> None:
    server = Server("manual")
    seen: list[str | None] = []

    @server.tool()
    async def paint(ctx: RequestContext) -> CallToolResult:
        seen.append(ctx.request_state)
        if ctx.request_state is None:
            return CallToolResult(
                input_required=InputRequiredResult(
                    input_requests={"size": sample_request("Size?")}, request_state="plain text"
                )
            )
        answer = ctx.input_responses["size"]
        return CallToolResult(content=[TextContent(text=f"size {answer['content']['text']}")])

    answers = Answers(sample="XL")
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("paint")
    assert text_of(result) == "size XL"
    assert seen == [None, "plain text"]


async def test_manual_style_state_only_round_is_retried_with_the_plaintext() -> None:
    server = Server("manual")
    seen: list[str | None] = []

    @server.tool()
    async def poll(ctx: RequestContext) -> InputRequiredResult | str:
        seen.append(ctx.request_state)
        if ctx.request_state is None:
            return InputRequiredResult(request_state="waiting")
        return f"done after {ctx.request_state}"

    rounds, options = recorder()
    async with Client.in_memory(server, options=options) as client:
        result = await client.call_tool("poll")
    assert text_of(result) == "done after waiting"
    assert seen == [None, "waiting"]
    assert [r.keys for r in rounds] == [()]


async def test_manual_state_is_sealed_on_the_wire() -> None:
    server = Server("manual")

    @server.tool()
    async def paint(ctx: RequestContext) -> InputRequiredResult | str:
        if ctx.request_state is None:
            return InputRequiredResult(
                input_requests={"color": elicit_request("Color?", NAME_SCHEMA)},
                request_state="secret-plaintext-42",
            )
        return f"{ctx.request_state}"

    first = result_of(await call_tool(server, "paint"))
    token = first["requestState"]
    assert isinstance(token, str)
    assert "secret-plaintext-42" not in token
    assert "Color?" not in token
    done = result_of(
        await call_tool(server, "paint", responses={"color": accept(name="x")}, state=token)
    )
    assert done["content"][0]["text"] == "secret-plaintext-42"


# --- ctx.once, pinning, keys -------------------------------------------------------------------


async def test_once_runs_sync_and_async_callables_exactly_once() -> None:
    server = Server("orders")
    calls = {"charge": 0, "reserve": 0}

    def charge() -> dict[str, str]:
        calls["charge"] += 1
        return {"id": f"ch_{calls['charge']}"}

    async def reserve() -> tuple[str, int]:
        calls["reserve"] += 1
        await asyncio.sleep(0)
        return ("seat", calls["reserve"])

    @server.tool()
    async def order(ctx: RequestContext) -> str:
        receipt = await ctx.once("charge", charge)
        await ctx.elicit("Window seat?", OK_SCHEMA)
        seat = await ctx.once("reserve", reserve)
        await ctx.elicit("Meal?", OK_SCHEMA)
        return f"{receipt['id']} {seat}"

    rounds, options = recorder()
    answers = Answers()
    async with Client.in_memory(server, options=options, **answers.client_kwargs()) as client:
        result = await client.call_tool("order")
    assert len(rounds) == 2  # the handler ran three times
    assert calls == {"charge": 1, "reserve": 1}
    assert text_of(result) == "ch_1 ('seat', 1)"  # restored through `-> tuple[str, int]`


async def test_a_different_question_under_the_same_key_is_asked_again() -> None:
    server = Server("fickle")
    runs = 0

    @server.tool()
    async def fickle(ctx: RequestContext) -> str:
        nonlocal runs
        runs += 1
        # Not deterministic on purpose: the first run asks something else than later runs.
        message = "First question?" if runs == 1 else "Second question?"
        answer = await ctx.elicit(message, NAME_SCHEMA, key="confirm")
        assert answer.content is not None
        return f"answer={answer.content['name']}"

    asked: list[str] = []

    def elicitation(params: ElicitRequestParams) -> Any:
        asked.append(params.message)
        return {"action": "accept", "content": {"name": f"reply to {params.message}"}}

    rounds, options = recorder()
    async with Client.in_memory(server, options=options, elicitation_handler=elicitation) as client:
        result = await client.call_tool("fickle")
    assert asked == ["First question?", "Second question?"]
    assert text_of(result) == "answer=reply to Second question?"
    assert [r.keys for r in rounds] == [("confirm",), ("confirm",)]


async def test_stale_answer_is_not_handed_to_a_changed_question_on_the_wire() -> None:
    server = Server("fickle")
    runs = 0

    @server.tool()
    async def fickle(ctx: RequestContext) -> str:
        nonlocal runs
        runs += 1
        message = "Delete draft?" if runs == 1 else "Delete EVERYTHING?"
        answer = await ctx.elicit(message, OK_SCHEMA, key="confirm")
        return f"deleted={answer.content}"

    first = result_of(await call_tool(server, "fickle"))
    assert first["inputRequests"]["confirm"]["params"]["message"] == "Delete draft?"
    second = result_of(
        await call_tool(
            server, "fickle", responses={"confirm": accept(ok=True)}, state=first["requestState"]
        )
    )
    assert second["resultType"] == "input_required"
    assert second["inputRequests"]["confirm"]["params"]["message"] == "Delete EVERYTHING?"


async def test_explicit_keys_appear_on_the_wire() -> None:
    server = Server("keys")

    @server.tool()
    async def keyed(ctx: RequestContext) -> str:
        await asyncio.gather(
            ctx.elicit("Really?", OK_SCHEMA, key="confirm"),
            ctx.sample("Draft it", key="draft"),
            ctx.list_roots(key="where"),
        )
        return "ok"

    first = result_of(await call_tool(server, "keyed"))
    assert set(first["inputRequests"]) == {"confirm", "draft", "where"}
    assert first["inputRequests"]["confirm"]["method"] == "elicitation/create"
    assert first["inputRequests"]["draft"]["method"] == "sampling/createMessage"
    assert first["inputRequests"]["where"]["method"] == "roots/list"


# --- the wire ----------------------------------------------------------------------------------


async def test_input_required_wire_shape_and_bare_answers() -> None:
    server = Server("wire")

    @server.tool(name="buy2")
    async def buy2(ctx: RequestContext, item: str) -> str:
        got = await ctx.ask(
            {"ok": elicit_request(f"Buy {item}?", OK_SCHEMA), "note": sample_request("Note?")}
        )
        return f"{got['ok'].content} {got['note'].content.text}"

    first = result_of(await call_tool(server, "buy2", {"item": "lamp"}))
    assert first["resultType"] == "input_required"
    requests = first["inputRequests"]
    assert set(requests) == {"ok", "note"}
    for value in requests.values():
        assert set(value) == {"method", "params"}
    assert requests["ok"] == {
        "method": "elicitation/create",
        "params": {"message": "Buy lamp?", "requestedSchema": OK_SCHEMA},
    }
    assert requests["note"]["method"] == "sampling/createMessage"
    assert requests["note"]["params"]["messages"][0]["content"]["text"] == "Note?"
    token = first["requestState"]
    assert isinstance(token, str) and token
    assert "lamp" not in token

    done = result_of(
        await call_tool(
            server,
            "buy2",
            {"item": "lamp"},
            responses={"ok": accept(ok=True), "note": sampled("fragile")},
            state=token,
        )
    )
    assert done["resultType"] == "complete"
    assert done["content"] == [{"type": "text", "text": "{'ok': True} fragile"}]


async def test_completion_handler_cannot_ask() -> None:
    server = Server("complete")

    @server.prompt()
    def greet(name: str) -> str:
        return f"hi {name}"

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any, ctx: RequestContext) -> list[str]:
        await ctx.elicit("Which names?", NAME_SCHEMA)
        return ["ann"]

    params = {
        "ref": {"type": "ref/prompt", "name": "greet"},
        "argument": {"name": "name", "value": "a"},
    }
    response = await asyncio.wait_for(rpc(server, "completion/complete", params), 5)
    error = error_of(response)
    assert error["code"] == -32603
    assert "completion/complete" in error["message"]
    # The server still serves the next request.
    listed = result_of(await rpc(server, "prompts/list", {}))
    assert listed["resultType"] == "complete"


async def test_list_and_discover_ignore_mrtr_params() -> None:
    server = Server("lists")

    @server.tool()
    async def ask(ctx: RequestContext) -> str:
        await ctx.elicit("?", OK_SCHEMA)
        return "x"

    for method in ("tools/list", "server/discover", "prompts/list", "resources/list"):
        response = await rpc(
            server, method, {"inputResponses": {"a": accept()}, "requestState": "junk"}
        )
        assert result_of(response)["resultType"] == "complete", method


# --- client capabilities -----------------------------------------------------------------------


def _asking_server() -> Server:
    server = Server("caps")

    @server.tool()
    async def form(ctx: RequestContext) -> str:
        await ctx.elicit("Name?", NAME_SCHEMA)
        return "x"

    @server.tool()
    async def url(ctx: RequestContext) -> str:
        await ctx.elicit_url("Sign in", "https://example.com/login")
        return "x"

    @server.tool()
    async def sample(ctx: RequestContext) -> str:
        await ctx.sample("Hi")
        return "x"

    @server.tool()
    async def roots(ctx: RequestContext) -> str:
        await ctx.list_roots()
        return "x"

    @server.tool()
    async def manual(ctx: RequestContext) -> InputRequiredResult:
        return InputRequiredResult(input_requests={"s": sample_request("Hi")})

    return server


@pytest.mark.parametrize(
    ("tool", "caps", "required"),
    [
        ("form", {}, {"elicitation": {}}),
        ("form", {"sampling": {}, "roots": {}}, {"elicitation": {}}),
        ("url", {"elicitation": {"form": {}}}, {"elicitation": {"url": {}}}),
        ("url", {"elicitation": {}}, {"elicitation": {"url": {}}}),
        ("sample", {"elicitation": {"form": {}, "url": {}}, "roots": {}}, {"sampling": {}}),
        ("roots", {"elicitation": {}, "sampling": {}}, {"roots": {}}),
        ("manual", {"elicitation": {}}, {"sampling": {}}),
    ],
)
async def test_undeclared_capability_is_refused(
    tool: str, caps: dict[str, Any], required: dict[str, Any]
) -> None:
    response = await call_tool(_asking_server(), tool, caps=caps)
    error = error_of(response)
    assert error["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert error["data"] == {"requiredCapabilities": required}


async def test_form_elicitation_is_refused_to_a_url_only_client() -> None:
    response = await call_tool(_asking_server(), "form", caps={"elicitation": {"url": {}}})
    error = error_of(response)
    assert error["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert "elicitation" in error["data"]["requiredCapabilities"]


async def test_declared_capabilities_are_asked() -> None:
    server = _asking_server()
    for tool, caps in [
        ("form", {"elicitation": {}}),
        ("form", {"elicitation": {"form": {}}}),
        ("url", {"elicitation": {"url": {}}}),
        ("sample", {"sampling": {}}),
        ("roots", {"roots": {}}),
    ]:
        result = result_of(await call_tool(server, tool, caps=caps))
        assert result["resultType"] == "input_required", (tool, caps)


async def test_client_without_handlers_gets_missing_capability() -> None:
    async with Client.in_memory(_asking_server()) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("sample")
    assert info.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert info.value.data == {"requiredCapabilities": {"sampling": {}}}


# --- requestState protection -------------------------------------------------------------------


class Counted:
    """A server with one asking tool (and look-alikes), counting every handler run."""

    def __init__(self, name: str = "bookings", **options: Any) -> None:
        options.setdefault("request_state_key", KEY)
        self.server = Server(name, options=ServerOptions(**options))
        self.runs = 0

        async def body(ctx: RequestContext, item: str) -> str:
            self.runs += 1
            answer = await ctx.elicit(f"Book {item}?", OK_SCHEMA, key="booking")
            return f"booked {item}: {answer.action}"

        self.server.tool(name="book")(body)
        self.server.tool(name="cancel")(body)
        self.server.prompt(name="book")(body)

    async def start(self, item: str = "room", **kw: Any) -> str:
        first = result_of(await call_tool(self.server, "book", {"item": item}, **kw))
        assert first["resultType"] == "input_required"
        token = first["requestState"]
        assert isinstance(token, str)
        return token

    async def retry(
        self, token: Any, item: str = "room", tool: str = "book", **kw: Any
    ) -> dict[str, Any]:
        return await call_tool(
            self.server,
            tool,
            {"item": item},
            responses={"booking": accept(ok=True)},
            state=token,
            **kw,
        )


def assert_invalid_state(response: dict[str, Any]) -> None:
    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == INVALID_STATE_MESSAGE
    assert error["data"] == {"reason": "invalid_request_state"}


def _flip(token: str, at: int) -> str:
    old = token[at]
    return token[:at] + ("A" if old != "A" else "B") + token[at + 1 :]


async def test_valid_state_completes() -> None:
    app = Counted()
    token = await app.start()
    done = result_of(await app.retry(token))
    assert done["content"][0]["text"] == "booked room: accept"
    assert app.runs == 2


@pytest.mark.parametrize(
    ("case", "causes"),
    [
        ("tampered", {"decrypt_failed"}),
        ("truncated", {"malformed", "decrypt_failed"}),
        ("extended", {"malformed", "decrypt_failed"}),
        ("other_tool", {"binding_mismatch"}),
        ("other_arguments", {"binding_mismatch"}),
        ("not_a_string", {"not_a_string"}),
        ("empty", {"malformed"}),
        ("foreign_version", {"unknown_version"}),
    ],
)
async def test_bad_state_is_refused_before_the_handler_runs(
    case: str, causes: set[str], caplog: pytest.LogCaptureFixture
) -> None:
    app = Counted()
    token = await app.start()
    runs_before = app.runs
    retry_kw: dict[str, Any] = {}
    bad: Any = {
        "tampered": _flip(token, len(token) // 2),
        "truncated": token[:-7],
        "extended": token + "AAAA",
        "other_tool": token,
        "other_arguments": token,
        "not_a_string": 12345,
        "empty": "",
        "foreign_version": "9." + token[2:],
    }[case]
    if case == "other_tool":
        retry_kw["tool"] = "cancel"
    if case == "other_arguments":
        retry_kw["item"] = "suite"
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        response = await app.retry(bad, **retry_kw)
    assert_invalid_state(response)
    assert app.runs == runs_before
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "mrtr.server")
    assert any(cause in logged for cause in causes), logged
    assert not any(cause in response["error"]["message"] for cause in causes)


async def test_state_minted_for_a_tool_is_refused_by_a_prompt_of_the_same_name() -> None:
    app = Counted()
    token = await app.start()
    runs_before = app.runs
    response = await rpc(
        app.server,
        "prompts/get",
        {
            "name": "book",
            "arguments": {"item": "room"},
            "inputResponses": {"booking": accept(ok=True)},
            "requestState": token,
        },
    )
    assert_invalid_state(response)
    assert app.runs == runs_before


async def test_state_minted_by_another_server_name_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Same key, same tool: only the audience (server name) differs.
    minting, other = Counted("bookings"), Counted("billing")
    token = await minting.start()
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        response = await other.retry(token)
    assert_invalid_state(response)
    assert other.runs == 0
    assert "binding_mismatch" in caplog.text


async def test_expired_state_is_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1_800_000_000.0]
    monkeypatch.setattr(request_state_module, "time", types.SimpleNamespace(time=lambda: clock[0]))
    app = Counted(request_state_ttl=30)
    token = await app.start()
    clock[0] += 29
    still_valid = await app.retry(token)
    assert result_of(still_valid)["resultType"] == "complete"
    clock[0] += 2
    runs_before = app.runs
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        response = await app.retry(token)
    assert_invalid_state(response)
    assert app.runs == runs_before
    assert "expired" in caplog.text


async def test_zero_ttl_state_never_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_800_000_000.0]
    monkeypatch.setattr(request_state_module, "time", types.SimpleNamespace(time=lambda: clock[0]))
    app = Counted(request_state_ttl=0)
    token = await app.start()
    clock[0] += 10 * 365 * 86400
    assert result_of(await app.retry(token))["resultType"] == "complete"


async def test_key_rotation_accepts_old_states_until_the_old_key_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = Counted(request_state_key=OLD_KEY)
    rotating = Counted(request_state_key=[NEW_KEY, OLD_KEY])
    rotated_out = Counted(request_state_key=[NEW_KEY])
    token = await before.start()
    assert result_of(await rotating.retry(token))["resultType"] == "complete"
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        response = await rotated_out.retry(token)
    assert_invalid_state(response)
    assert rotated_out.runs == 0
    assert "unknown_key" in caplog.text
    # States sealed during the rotation use the new key, which the old server does not know.
    new_token = await rotating.start()
    assert_invalid_state(await before.retry(new_token))
    assert result_of(await rotated_out.retry(new_token))["resultType"] == "complete"


async def test_states_from_a_random_key_server_do_not_cross_instances() -> None:
    first, second = Counted(request_state_key=None), Counted(request_state_key=None)
    token = await first.start()
    assert_invalid_state(await second.retry(token))
    assert result_of(await first.retry(token))["resultType"] == "complete"


async def test_request_state_verifier_replaces_verification() -> None:
    ring = RequestStateKeyRing(KEY)
    seen: list[tuple[str, StateBinding]] = []
    used: set[str] = set()

    def single_use(token: str, binding: StateBinding) -> VerifiedState:
        seen.append((token, binding))
        if token in used:
            raise InvalidRequestState("already_used")
        verified = verify_request_state(ring, binding, token)
        used.add(token)
        return verified

    app = Counted(request_state_verifier=single_use)
    token = await app.start()
    assert result_of(await app.retry(token))["resultType"] == "complete"
    [(got, binding)] = seen
    assert got == token
    assert (binding.method, binding.target, binding.audience) == ("tools/call", "book", "bookings")
    runs_before = app.runs
    assert_invalid_state(await app.retry(token))
    assert app.runs == runs_before


async def test_async_verifier_and_failing_verifier(caplog: pytest.LogCaptureFixture) -> None:
    ring = RequestStateKeyRing(KEY)

    async def verifier(token: str, binding: StateBinding) -> VerifiedState:
        await asyncio.sleep(0)
        return verify_request_state(ring, binding, token)

    app = Counted(request_state_verifier=verifier)
    assert result_of(await app.retry(await app.start()))["resultType"] == "complete"

    def broken(token: str, binding: StateBinding) -> VerifiedState:
        raise RuntimeError("kms unreachable")

    broken_app = Counted(request_state_verifier=broken)
    token = await broken_app.start()
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        response = await broken_app.retry(token)
    assert_invalid_state(response)
    assert broken_app.runs == 1
    assert "kms unreachable" not in response["error"]["message"]
    assert "RuntimeError" in caplog.text


async def test_state_is_bound_to_the_principal() -> None:
    def principal(info: Any) -> str | None:
        return info.get("user") if isinstance(info, dict) else None

    app = Counted(principal=principal)
    token = await app.start(transport_info={"user": "alice"})
    runs_before = app.runs
    assert_invalid_state(await app.retry(token, transport_info={"user": "bob"}))
    assert_invalid_state(await app.retry(token, transport_info=None))
    assert app.runs == runs_before
    done = await app.retry(token, transport_info={"user": "alice"})
    assert result_of(done)["resultType"] == "complete"
    anonymous = await app.start()
    assert_invalid_state(await app.retry(anonymous, transport_info={"user": "alice"}))


# --- inputResponses ----------------------------------------------------------------------------


def _two_question_server() -> tuple[Server, list[int]]:
    server = Server("pair", options=ServerOptions(request_state_key=KEY))
    runs: list[int] = []

    @server.tool()
    async def pair(ctx: RequestContext) -> str:
        runs.append(ctx.round)
        got = await ctx.ask({"a": elicit_request("A?", NAME_SCHEMA), "b": sample_request("B?")})
        return f"{got['a'].content['name']} {got['b'].content.text}"

    return server, runs


@pytest.mark.parametrize("value", [["a"], "a", 3, True])
async def test_input_responses_must_be_an_object(value: Any) -> None:
    server, runs = _two_question_server()
    first = result_of(await call_tool(server, "pair"))
    runs_before = len(runs)
    error = error_of(await call_tool(server, "pair", responses=value, state=first["requestState"]))
    assert error["code"] == INVALID_PARAMS
    assert "inputResponses" in error["message"]
    assert len(runs) == runs_before
    # Even without a state.
    error = error_of(await call_tool(server, "pair", responses=value))
    assert error["code"] == INVALID_PARAMS


@pytest.mark.parametrize(
    ("key", "answer"),
    [
        ("a", {"action": "maybe"}),
        ("a", {"content": {"name": "x"}}),
        ("a", "accept"),
        ("a", {"result": {"action": "accept", "content": {"name": "x"}}}),
        ("b", {"role": "assistant"}),
        ("b", {"role": "robot", "content": {"type": "text", "text": "x"}, "model": "m"}),
    ],
)
async def test_wrong_shape_answer_is_refused_naming_its_key(key: str, answer: Any) -> None:
    server, runs = _two_question_server()
    first = result_of(await call_tool(server, "pair"))
    responses = {"a": accept(name="x"), "b": sampled("y"), key: answer}
    runs_before = len(runs)
    error = error_of(
        await call_tool(server, "pair", responses=responses, state=first["requestState"])
    )
    assert error["code"] == INVALID_PARAMS
    assert f"inputResponses[{key!r}]" in error["message"]
    assert len(runs) == runs_before


async def test_missing_answers_are_asked_again() -> None:
    server, _ = _two_question_server()
    first = result_of(await call_tool(server, "pair"))
    state = first["requestState"]

    none = result_of(await call_tool(server, "pair", responses={}, state=state))
    assert none["resultType"] == "input_required"
    assert set(none["inputRequests"]) == {"a", "b"}

    # Each state is redeemed once: the next answers go with the state that asked again.
    half = result_of(
        await call_tool(
            server, "pair", responses={"a": accept(name="x")}, state=none["requestState"]
        )
    )
    assert half["resultType"] == "input_required"
    assert set(half["inputRequests"]) == {"b"}
    assert half["inputRequests"]["b"] == first["inputRequests"]["b"]

    done = result_of(
        await call_tool(server, "pair", responses={"b": sampled("y")}, state=half["requestState"])
    )
    assert done["content"][0]["text"] == "x y"


async def test_unknown_answer_keys_are_ignored() -> None:
    server, _ = _two_question_server()
    first = result_of(await call_tool(server, "pair"))
    responses = {
        "a": accept(name="x"),
        "b": sampled("y"),
        "bogus": {"anything": [1, 2]},
        "elicit-9": "not even an object",
    }
    done = result_of(
        await call_tool(server, "pair", responses=responses, state=first["requestState"])
    )
    assert done["content"][0]["text"] == "x y"


async def test_answers_sent_without_a_state_answer_the_questions_asked_under_their_keys() -> None:
    # Replay rule 6: a first attempt may carry answers; each is checked against the question
    # asked under its key in this run, and keys nothing asks for are ignored.
    server, runs = _two_question_server()
    done = result_of(
        await call_tool(
            server,
            "pair",
            responses={"a": accept(name="x"), "b": sampled("y"), "zzz": accept(name="ignored")},
        )
    )
    assert done["resultType"] == "complete"
    assert done["content"][0]["text"] == "x y"
    assert runs == [0]


async def test_an_answer_sent_without_a_state_is_validated_against_its_question() -> None:
    server, _ = _two_question_server()
    error = error_of(await call_tool(server, "pair", responses={"a": 12345, "b": sampled("y")}))
    assert error["code"] == INVALID_PARAMS
    assert "'a'" in error["message"]


async def test_a_partial_answer_without_a_state_asks_for_the_rest() -> None:
    server, _ = _two_question_server()
    first = result_of(await call_tool(server, "pair", responses={"a": accept(name="x")}))
    assert first["resultType"] == "input_required"
    assert set(first["inputRequests"]) == {"b"}


class Age(BaseModel):
    age: int


async def test_typed_elicit_content_must_fit_the_model() -> None:
    server = Server("typed", options=ServerOptions(request_state_key=KEY))

    @server.tool()
    async def birthday(ctx: RequestContext) -> str:
        answer = await ctx.elicit("How old?", Age)
        assert answer.content is not None
        return f"next year {answer.content.age + 1}"

    first = result_of(await call_tool(server, "birthday"))
    [key] = first["inputRequests"]
    assert first["inputRequests"][key]["params"]["requestedSchema"]["properties"] == {
        "age": {"title": "Age", "type": "integer"}
    }
    state = first["requestState"]
    error = error_of(
        await call_tool(server, "birthday", responses={key: accept(age="old")}, state=state)
    )
    assert error["code"] == INVALID_PARAMS
    assert f"inputResponses[{key!r}]" in error["message"]
    done = result_of(
        await call_tool(server, "birthday", responses={key: accept(age=41)}, state=state)
    )
    assert done["content"][0]["text"] == "next year 42"


# --- limits ------------------------------------------------------------------------------------


async def test_server_max_rounds_stops_a_handler_that_keeps_asking() -> None:
    server = Server("nag", options=ServerOptions(input_required=InputRequiredConfig(max_rounds=2)))
    runs: list[int] = []

    @server.tool()
    async def nag(ctx: RequestContext) -> str:
        runs.append(ctx.round)
        for i in range(100):
            await ctx.elicit(f"Question {i}?", OK_SCHEMA)
        return "never"

    answers = Answers()
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("nag")
    assert "max_rounds" in info.value.message
    assert "2 rounds" in info.value.message
    assert runs == [0, 1, 2]
    assert answers.messages == ["Question 0?", "Question 1?"]


async def test_server_round_timeout_cancels_a_slow_handler() -> None:
    server = Server(
        "slow", options=ServerOptions(input_required=InputRequiredConfig(round_timeout=0.05))
    )
    cancelled = asyncio.Event()

    @server.tool()
    async def slow(ctx: RequestContext) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async with Client.in_memory(server) as client:
        with pytest.raises(McpError) as info:
            await asyncio.wait_for(client.call_tool("slow"), 10)
    assert "round_timeout" in info.value.message
    assert cancelled.is_set()


async def test_other_requests_are_served_while_one_waits_for_input() -> None:
    server, _ = _two_question_server()

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    first = result_of(await call_tool(server, "pair"))
    assert result_of(await call_tool(server, "add", {"a": 2, "b": 3}))["structuredContent"] == {
        "result": 5
    }
    done = result_of(
        await call_tool(
            server,
            "pair",
            responses={"a": accept(name="x"), "b": sampled("y")},
            state=first["requestState"],
        )
    )
    assert done["content"][0]["text"] == "x y"


async def test_logs_and_progress_from_replayed_code_are_sent_once() -> None:
    # Replay rule 7: code before the question the last round asked already ran, so its log
    # messages and progress notifications reached the client then and are not sent again.
    server = Server("replay-notes", options=ServerOptions(request_state_key=KEY))
    replaying: list[tuple[int, str, bool]] = []

    @server.tool()
    async def steps(ctx: RequestContext) -> str:
        replaying.append((ctx.round, "start", ctx.replaying))
        await ctx.log("info", "before")
        await ctx.report_progress(1, 3)
        first = await ctx.elicit("First?", NAME_SCHEMA, key="first")
        replaying.append((ctx.round, "after first", ctx.replaying))
        await ctx.log("info", "between")
        await ctx.report_progress(2, 3)
        second = await ctx.elicit("Second?", NAME_SCHEMA, key="second")
        await ctx.log("info", "after")
        await ctx.report_progress(3, 3)
        return f"{(first.content or {})['name']} {(second.content or {})['name']}"

    logs: list[Any] = []
    progress: list[float] = []

    def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client.in_memory(
        server,
        elicitation_handler=lambda p: ElicitResult(action="accept", content={"name": "n"}),
        log_handler=lambda params: logs.append(params["data"]),
    ) as client:
        result = await client.call_tool(
            "steps",
            {},
            progress_callback=on_progress,
            meta={"io.modelcontextprotocol/logLevel": "info"},
        )
    assert result.content[0].text == "n n"  # type: ignore[union-attr]
    assert logs == ["before", "between", "after"]
    assert progress == [1, 2, 3]
    assert replaying == [
        (0, "start", False),
        (1, "start", True),
        (1, "after first", False),
        (2, "start", True),
        (2, "after first", True),
    ]
