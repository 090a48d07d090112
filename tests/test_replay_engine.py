"""The replay engine's rules (`mrtr/server/_engine/replay.py`), one behaviour per test.

Flows run through `Client.in_memory(server)` or, where the exact wire matters, as raw JSON-RPC
to `server.handle_message`. Tests that would spin forever on a broken engine carry a timeout
(pytest-timeout interrupts a busy loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import re
from typing import Any

import pytest
from pydantic import BaseModel

from helpers.mrtr_flows import Answers, accept, call_tool, error_of, result_of, rpc
from helpers.transport_flow import serve
from mrtr import (
    CallToolResult,
    Client,
    ElicitResult,
    InputRequest,
    InputRequiredResult,
    McpError,
    RequestContext,
    Server,
    ServerOptions,
    TextContent,
    ToolError,
)
from mrtr.protocol.errors import INTERNAL_ERROR
from mrtr.server import InputRequiredConfig
from mrtr.server._engine.outcome import ReplayError
from mrtr.server.connection import ServerConnection

OK: dict[str, Any] = {"type": "object", "properties": {}}
KEY = b"replay-engine-test-key-32-bytes!"


def server_with(**input_required: Any) -> Server:
    options = ServerOptions(
        request_state_key=KEY, input_required=InputRequiredConfig(**input_required)
    )
    return Server("engine", options=options)


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def tool_text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def answer_all(server: Server, name: str, first: dict[str, Any]) -> dict[str, Any]:
    """Retry `name` answering every question of `first` with accept."""
    responses = {key: accept() for key in first["inputRequests"]}
    return await call_tool(server, name, responses=responses, state=first["requestState"])


# --- 1. the dispatcher is total ----------------------------------------------------------------


async def test_questions_in_a_task_group_ask_in_one_round() -> None:
    server = server_with()

    @server.tool()
    async def pair(ctx: RequestContext) -> str:
        async def ask(text: str) -> str:
            return (await ctx.elicit(text, OK)).action

        async with asyncio.TaskGroup() as group:
            first = group.create_task(ask("First?"))
            second = group.create_task(ask("Second?"))
        return f"{first.result()} {second.result()}"

    asked = result_of(await call_tool(server, "pair"))
    assert asked["resultType"] == "input_required"
    assert sorted(q["params"]["message"] for q in asked["inputRequests"].values()) == [
        "First?",
        "Second?",
    ]
    done = result_of(await answer_all(server, "pair", asked))
    assert tool_text(done) == "accept accept"


async def test_a_task_group_mixing_a_question_and_a_failure_is_a_tool_error() -> None:
    server = server_with()

    @server.tool()
    async def mixed(ctx: RequestContext) -> str:
        async def ask() -> ElicitResult:
            return await ctx.elicit("Sure?", OK)

        async def fail() -> None:
            raise ToolError("the stock service is down")

        async with asyncio.TaskGroup() as group:
            group.create_task(ask())
            group.create_task(fail())
        return "never"

    result = result_of(await call_tool(server, "mixed"))
    assert result["isError"] is True
    assert "the stock service is down" in tool_text(result)


class Interrupted(BaseException):
    """A `BaseException` that is not an `Exception`, as some libraries raise."""


@pytest.mark.parametrize(
    "raised",
    [Interrupted("stop"), KeyboardInterrupt(), SystemExit(2), asyncio.CancelledError()],
    ids=["base-exception", "keyboard-interrupt", "system-exit", "cancelled-error"],
)
async def test_a_handler_raising_a_base_exception_gets_an_internal_error(
    raised: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_with()

    @server.tool()
    async def explode(ctx: RequestContext) -> str:
        raise raised

    @server.prompt()
    async def prompt_explode(ctx: RequestContext) -> str:
        raise raised

    with caplog.at_level(logging.ERROR, logger="mrtr.server"):
        tool = error_of(await call_tool(server, "explode"))
        prompt = error_of(await rpc(server, "prompts/get", {"name": "prompt_explode"}))
    for error in (tool, prompt):
        assert error["code"] == INTERNAL_ERROR
        assert "Traceback" not in error["message"]
        assert type(raised).__name__ not in error["message"]  # the internals stay in the log
    assert type(raised).__name__ in caplog.text
    # The server goes on serving.
    assert result_of(await rpc(server, "tools/list", {}))["tools"]


async def test_a_base_exception_group_from_a_handler_never_escapes() -> None:
    server = server_with()

    @server.tool()
    async def grouped(ctx: RequestContext) -> str:
        async def interrupt() -> None:
            raise Interrupted("stop")

        async with asyncio.TaskGroup() as group:
            group.create_task(interrupt())
        return "never"

    error = error_of(await call_tool(server, "grouped"))
    assert error["code"] == INTERNAL_ERROR


async def test_over_http_a_task_group_and_a_base_exception_are_answered_not_500s() -> None:
    server = server_with()

    @server.tool()
    async def pair(ctx: RequestContext) -> str:
        async def ask(text: str) -> str:
            return (await ctx.elicit(text, OK)).action

        async with asyncio.TaskGroup() as group:
            first = group.create_task(ask("First?"))
            second = group.create_task(ask("Second?"))
        return f"{first.result()} {second.result()}"

    @server.tool()
    async def explode(ctx: RequestContext) -> str:
        raise Interrupted("stop")

    answers = Answers()
    async with (
        serve(server.asgi_app()) as base,
        Client.http(base + "/mcp", **answers.client_kwargs()) as client,
    ):
        result = await asyncio.wait_for(client.call_tool("pair"), 10)
        assert text_of(result) == "accept accept"
        with pytest.raises(McpError) as raised:
            await asyncio.wait_for(client.call_tool("explode"), 10)
        assert raised.value.code == INTERNAL_ERROR
        assert text_of(await client.call_tool("pair")) == "accept accept"  # still serving


async def test_cancelling_the_request_is_not_turned_into_a_response() -> None:
    server = server_with()
    started, cancelled = asyncio.Event(), asyncio.Event()

    @server.tool()
    async def wait(ctx: RequestContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    connection = ServerConnection(server, send)
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    await connection.feed(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "wait", "_meta": meta},
        }
    )
    await asyncio.wait_for(started.wait(), 5)
    await connection.feed(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    )
    await asyncio.wait_for(cancelled.wait(), 5)
    await connection.aclose()
    assert sent == []


# --- 2. no orphans -------------------------------------------------------------------------------


async def test_a_once_still_running_when_the_run_stops_is_recorded_not_repeated() -> None:
    server = server_with()
    charges: list[int] = []

    async def charge() -> str:
        await asyncio.sleep(0.05)  # the payment service is slow
        charges.append(1)
        return f"ch_{len(charges)}"

    @server.tool()
    async def checkout(ctx: RequestContext) -> str:
        async def pay() -> str:
            return str(await ctx.once("charge", charge))

        confirmed, receipt = await asyncio.gather(ctx.elicit("Confirm?", OK), pay())
        return f"{confirmed.action} {receipt}"

    answers = Answers()
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("checkout")
    assert text_of(result) == "accept ch_1"
    assert charges == [1]  # charged once, though the first round stopped while it ran


async def test_tasks_of_a_run_stopped_for_input_are_cancelled_before_it_answers() -> None:
    server = server_with()
    cancelled = asyncio.Event()

    @server.tool()
    async def busy(ctx: RequestContext) -> str:
        async def watcher() -> None:
            await ctx.report_progress(1)  # uses the context: the run knows this task
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        await asyncio.gather(watcher(), ctx.elicit("Go on?", OK))
        return "done"

    first = result_of(await call_tool(server, "busy"))
    assert first["resultType"] == "input_required"
    assert cancelled.is_set()  # cancelled and awaited before the response was made


async def test_no_once_starts_after_a_question_is_pending() -> None:
    server = server_with()
    charges: list[int] = []

    def charge() -> str:
        charges.append(1)
        return "charged"

    @server.tool()
    async def checkout(ctx: RequestContext) -> str:
        async def pay_later() -> str:
            await asyncio.sleep(0.01)  # by now the other branch stopped the run
            return str(await ctx.once("charge", charge))

        confirmed, receipt = await asyncio.gather(ctx.elicit("Confirm?", OK), pay_later())
        return f"{confirmed.action} {receipt}"

    first = result_of(await call_tool(server, "checkout"))
    assert first["resultType"] == "input_required"
    await asyncio.sleep(0.05)  # the branch left running reaches its once
    assert charges == []
    done = result_of(await answer_all(server, "checkout", first))
    assert tool_text(done) == "accept charged"
    assert charges == [1]


async def test_a_task_asking_after_the_handler_returned_gets_an_error_that_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = server_with()
    late: list[asyncio.Task[Any]] = []

    @server.tool()
    async def hurry(ctx: RequestContext) -> str:
        async def ask_later() -> Any:
            await asyncio.sleep(0.01)
            return await ctx.elicit("Too late?", OK)

        late.append(asyncio.create_task(ask_later()))
        return "done"

    with caplog.at_level(logging.ERROR, logger="mrtr.server"):
        done = result_of(await call_tool(server, "hurry"))
        assert tool_text(done) == "done"
        with pytest.raises(ReplayError, match="after the handler"):
            await asyncio.wait_for(late[0], 5)
    assert "after the handler of tools/call 'hurry' ended" in caplog.text


# --- 3. never blocks the loop ----------------------------------------------------------------


@pytest.mark.timeout(20)
async def test_asking_again_under_an_awaited_key_is_a_tool_error_naming_it() -> None:
    server = server_with()

    @server.tool()
    async def more(ctx: RequestContext) -> str:
        count = 0
        while (await ctx.elicit("More?", OK, key="more")).action == "accept":
            count += 1
        return f"{count} more"

    answers = Answers()
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await asyncio.wait_for(client.call_tool("more"), 10)
    assert result.is_error
    text = text_of(result)
    assert "'more'" in text
    assert 'key=f"more-{i}"' in text


@pytest.mark.timeout(20)
@pytest.mark.parametrize("loop_over", ["answer", "once"])
async def test_round_timeout_stops_a_handler_looping_over_recorded_results(
    loop_over: str,
) -> None:
    server = server_with(round_timeout=0.3)

    @server.tool()
    async def spin(ctx: RequestContext) -> str:
        question = ctx.elicit("Ready?", OK)
        await question
        while True:  # never suspends on its own: every value is already recorded
            if loop_over == "answer":
                await question
            else:
                await ctx.once("n", lambda: 1)

    first = result_of(await call_tool(server, "spin"))
    error = error_of(await asyncio.wait_for(answer_all(server, "spin", first), 10))
    assert error["code"] == INTERNAL_ERROR
    assert "round_timeout" in error["message"]


# --- 4. non-determinism is visible -------------------------------------------------------------


async def test_automatic_keys_follow_the_question_when_branches_reorder() -> None:
    server = server_with(max_rounds=20)

    @server.tool()
    async def survey(ctx: RequestContext) -> str:
        async def branch(name: str, slow_on: int) -> str:
            got = []
            for i in range(3):
                # The branches take turns being slower, so the order in which they reach
                # their questions flips from one round to the next.
                await asyncio.sleep(0.004 if ctx.round % 2 == slow_on else 0)
                got.append((await ctx.elicit(f"{name} {i}?", OK)).action)
            return name

        return " ".join(await asyncio.gather(branch("left", 0), branch("right", 1)))

    answers = Answers()
    async with Client.in_memory(server, **answers.client_kwargs()) as client:
        result = await client.call_tool("survey")
    assert text_of(result) == "left right"
    assert sorted(answers.messages) == sorted(
        f"{name} {i}?" for name in ("left", "right") for i in range(3)
    )  # every question asked exactly once


async def test_the_same_question_asked_twice_gets_two_stable_keys() -> None:
    server = server_with()

    @server.tool()
    async def twice(ctx: RequestContext) -> str:
        first = await ctx.elicit("Sure?", OK)
        second = await ctx.elicit("Sure?", OK)
        return f"{first.action} {second.action}"

    one = result_of(await call_tool(server, "twice"))
    [first_key] = one["inputRequests"]
    two = result_of(await answer_all(server, "twice", one))
    [second_key] = two["inputRequests"]
    assert re.fullmatch(r"elicit-[0-9a-f]{8}", first_key)
    assert second_key == f"{first_key}-2"
    done = result_of(await answer_all(server, "twice", two))
    assert tool_text(done) == "accept accept"


async def test_a_question_that_changed_under_its_key_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = server_with()
    runs = 0

    @server.tool()
    async def fickle(ctx: RequestContext) -> str:
        nonlocal runs
        runs += 1
        await ctx.elicit(f"Delete the drafts (run {runs})?", OK, key="confirm")
        return "deleted"

    first = result_of(await call_tool(server, "fickle"))
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        again = result_of(await answer_all(server, "fickle", first))
    assert again["resultType"] == "input_required"
    [record] = [r for r in caplog.records if "changed since the client answered" in r.message]
    assert "'confirm'" in record.message
    assert "Delete the drafts (run 2)?" in record.message  # what it asks now


async def test_a_question_changing_every_run_without_a_key_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = server_with()
    runs = 0

    @server.tool()
    async def stamped(ctx: RequestContext) -> str:
        nonlocal runs
        runs += 1
        await ctx.elicit(f"Proceed? (asked at tick {runs})", OK)
        return "done"

    first = result_of(await call_tool(server, "stamped"))
    [old_key] = first["inputRequests"]
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        again = result_of(await answer_all(server, "stamped", first))
    [new_key] = again["inputRequests"]
    assert new_key != old_key
    [record] = [r for r in caplog.records if "did not ask it again" in r.message]
    assert repr(old_key) in record.message and repr(new_key) in record.message
    assert "tick 2" in record.message


# --- 5. the manual style keeps its logs and progress --------------------------------------------


async def test_a_manual_style_retry_sends_its_logs_and_progress() -> None:
    server = server_with()

    @server.tool()
    async def rename(ctx: RequestContext) -> str | InputRequiredResult:
        answer = ctx.input_responses.get("name")
        if answer is None:
            return InputRequiredResult(
                input_requests={
                    "name": InputRequest(
                        method="elicitation/create",
                        params={"mode": "form", "message": "New name?", "requestedSchema": OK},
                    )
                },
                request_state="asked",
            )
        await ctx.log("info", "renaming")
        await ctx.report_progress(1, 1)
        return "renamed"

    logs: list[Any] = []
    progress: list[float] = []
    async with Client.in_memory(
        server,
        elicitation_handler=lambda p: ElicitResult(action="accept", content={}),
        log_handler=lambda params: logs.append(params["data"]),
    ) as client:
        result = await client.call_tool(
            "rename",
            {},
            progress_callback=lambda done, total, message: progress.append(done),
            meta={"io.modelcontextprotocol/logLevel": "info"},
        )
    assert text_of(result) == "renamed"
    assert logs == ["renaming"]
    assert progress == [1]


# --- 6. the pending question wins over an error raised from it ---------------------------------


@pytest.mark.parametrize("style", ["raise-from", "raise-in-except", "raise-in-finally"])
async def test_an_error_raised_from_a_pending_question_still_asks(style: str) -> None:
    server = server_with()

    @server.tool()
    async def wrapped(ctx: RequestContext) -> str:
        if style == "raise-from":
            try:
                answer = await ctx.elicit("Proceed?", OK)
            except BaseException as exc:
                raise RuntimeError("could not get an answer") from exc
        elif style == "raise-in-except":
            try:
                answer = await ctx.elicit("Proceed?", OK)
            except BaseException:
                raise RuntimeError("could not get an answer")  # noqa: B904
        else:
            try:
                answer = await ctx.elicit("Proceed?", OK)
            finally:
                if ctx.round == 0:
                    raise RuntimeError("cleanup failed while interrupted")
        return answer.action

    first = result_of(await call_tool(server, "wrapped"))
    assert first["resultType"] == "input_required"
    done = result_of(await answer_all(server, "wrapped", first))
    assert tool_text(done) == "accept"


# --- 7. ctx.once gives back what it recorded ---------------------------------------------------


class Receipt(BaseModel):
    id: str
    cents: int


@dataclasses.dataclass
class Seat:
    row: int
    letter: str


async def test_once_results_come_back_as_their_annotated_types_on_every_round() -> None:
    server = server_with()
    seen: list[tuple[Any, ...]] = []
    calls: list[str] = []

    def receipt() -> Receipt:
        calls.append("receipt")
        return Receipt(id="r1", cents=1250)

    async def booked_at() -> datetime.datetime:
        calls.append("booked_at")
        return datetime.datetime(2026, 7, 28, 9, 30, tzinfo=datetime.UTC)

    def seat() -> Seat:
        calls.append("seat")
        return Seat(12, "C")

    def pair() -> tuple[str, int]:
        calls.append("pair")
        return ("gate", 4)

    @server.tool()
    async def book(ctx: RequestContext) -> str:
        got = (
            await ctx.once("receipt", receipt),
            await ctx.once("booked_at", booked_at),
            await ctx.once("seat", seat),
            await ctx.once("pair", pair),
            await ctx.once("when", lambda: datetime.date(2026, 7, 28), type=datetime.date),
        )
        seen.append(got)
        await ctx.elicit("Confirm?", OK)
        return "booked"

    first = result_of(await call_tool(server, "book"))
    result_of(await answer_all(server, "book", first))
    assert len(seen) == 2
    assert seen[0] == seen[1]
    assert [type(value) for value in seen[1]] == [
        Receipt,
        datetime.datetime,
        Seat,
        tuple,
        datetime.date,
    ]
    assert calls == ["receipt", "booked_at", "seat", "pair"]  # each ran once


@pytest.mark.parametrize(
    "value",
    [
        datetime.datetime(2026, 7, 28),
        ("a", 1),
        Receipt(id="r", cents=1),
        {1: "int key"},
        {"nested": [float("nan")]},
    ],
    ids=["datetime", "tuple", "model", "int-key", "nan"],
)
async def test_an_unannotated_once_result_that_is_not_plain_json_is_refused(value: Any) -> None:
    server = server_with()
    calls: list[int] = []

    def produce() -> Any:
        calls.append(1)
        return value

    @server.tool()
    async def record(ctx: RequestContext) -> str:
        await ctx.once("result", lambda: produce())
        await ctx.elicit("Next?", OK)
        return "done"

    result = result_of(await call_tool(server, "record"))
    assert result["isError"] is True
    assert "ctx.once('result')" in tool_text(result)
    assert "annotate" in tool_text(result)
    assert calls == [1]


async def test_a_refused_once_result_stops_the_round_even_when_the_handler_swallows_it() -> None:
    server = server_with()
    calls: list[int] = []

    def stamp() -> Any:
        calls.append(1)
        return datetime.datetime(2026, 7, 28)

    @server.tool()
    async def careless(ctx: RequestContext) -> str:
        # The error is swallowed, but the round must not be sealed without the result.
        with contextlib.suppress(Exception):
            await ctx.once("stamp", lambda: stamp())
        await ctx.elicit("Next?", OK)
        return "done"

    result = result_of(await call_tool(server, "careless"))
    assert result.get("isError") is True
    assert "ctx.once('stamp')" in tool_text(result)
    assert calls == [1]


async def test_a_once_result_the_handler_changes_is_recorded_as_returned() -> None:
    server = server_with()
    seen: list[list[str]] = []

    @server.tool()
    async def cart(ctx: RequestContext) -> str:
        items = await ctx.once("items", lambda: ["apple"])
        seen.append(list(items))
        items.append("changed by the handler")
        await ctx.elicit("Buy?", OK)
        return "bought"

    first = result_of(await call_tool(server, "cart"))
    result_of(await answer_all(server, "cart", first))
    assert seen == [["apple"], ["apple"]]


async def test_once_with_one_key_and_two_functions_is_an_error() -> None:
    server = server_with()

    @server.tool()
    async def clash(ctx: RequestContext) -> str:
        await ctx.once("id", lambda: "order")
        await ctx.once("id", lambda: "invoice")
        return "never"

    result = result_of(await call_tool(server, "clash"))
    assert result["isError"] is True
    assert "ctx.once('id')" in tool_text(result)
    assert "different functions" in tool_text(result)


async def test_concurrent_once_calls_with_one_key_share_one_run() -> None:
    server = server_with()
    calls: list[int] = []

    async def reserve() -> int:
        calls.append(1)
        await asyncio.sleep(0.01)
        return len(calls)

    @server.tool()
    async def seats(ctx: RequestContext) -> str:
        got = await asyncio.gather(*(ctx.once("reserve", reserve) for _ in range(3)))
        return str(got)

    result = result_of(await call_tool(server, "seats"))
    assert tool_text(result) == "[1, 1, 1]"
    assert calls == [1]


# --- 9. asking an unsupported method --------------------------------------------------------


@pytest.mark.parametrize("key", [None, "job"])
async def test_asking_an_unsupported_method_is_a_clear_error(key: str | None) -> None:
    server = server_with()

    @server.tool()
    async def task(ctx: RequestContext) -> str:
        await ctx.question(InputRequest(method="tasks/run", params={}), key=key)
        return "never"

    result = result_of(await call_tool(server, "task"))
    assert result["isError"] is True
    text = tool_text(result)
    assert "cannot ask 'tasks/run'" in text
    assert "elicitation/create" in text


async def test_an_mcp_error_raised_in_a_branch_stays_a_protocol_error() -> None:
    server = server_with()

    @server.tool()
    async def picky(ctx: RequestContext) -> str:
        async def refuse() -> None:
            raise McpError(-32602, "that answer is not acceptable")

        async with asyncio.TaskGroup() as group:
            group.create_task(refuse())
        return "never"

    error = error_of(await call_tool(server, "picky"))
    assert error == {"code": -32602, "message": "that answer is not acceptable"}


async def test_awaiting_another_requests_question_is_an_internal_error() -> None:
    server = server_with()
    kept: list[RequestContext] = []

    @server.tool()
    async def first(ctx: RequestContext) -> str:
        kept.append(ctx)
        await ctx.elicit("Name?", OK)
        return "never"

    @server.tool()
    async def borrow(ctx: RequestContext) -> str:
        await kept[0].elicit("Name?", OK)  # a question of a request that already stopped
        return "never"

    result_of(await call_tool(server, "first"))
    error = error_of(await call_tool(server, "borrow"))
    assert error["code"] == INTERNAL_ERROR
    assert "InputPending" not in error["message"]
