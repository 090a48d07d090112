"""The client's side of the tasks extension, against a scripted server that may lie.

`TaskPlay` plays a 2026-07-28 server whose `tools/call` answers with a task; each test scripts
what `tasks/get` shows (and whether `subscriptions/listen` streams `notifications/tasks`), then
checks what the client sent and what it made of the answers: the transparent `call_tool`, the
`TaskHandle`, and the rules of `mrtr.client.tasks` (dedupe, ordering, retries, deadlines, TTL,
cancellation).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from helpers.fake_server import FakeServer, Received
from mrtr import Client, ClientOptions, ElicitResult, McpError
from mrtr.client.options import InputRequiredConfig, TaskOptions
from mrtr.protocol import errors
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.tasks import EXTENSION_ID

TASK_ID = "t-1f3a"
ASK_NAME = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
DONE = {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False}
FAST = TaskOptions(min_poll_interval=0.01, default_poll_interval=0.01, backstop_interval=0.05)


def stamp(offset: float = 0.0) -> str:
    """An ISO 8601 time `offset` seconds from now."""
    return datetime.fromtimestamp(time.time() + offset, tz=UTC).isoformat()


def snap(status: str, *, at: float = 0.0, poll_ms: int | None = 10, **extra: Any) -> dict[str, Any]:
    """A `DetailedTask` of TASK_ID, last updated `at` seconds from now."""
    task: dict[str, Any] = {
        "taskId": TASK_ID,
        "status": status,
        "createdAt": stamp(-1),
        "lastUpdatedAt": stamp(at),
        "ttlMs": 60_000,
        **extra,
    }
    if poll_ms is not None:
        task["pollIntervalMs"] = poll_ms
    return task


@dataclass
class TaskPlay:
    """The scripted server: `tools/call` creates the task; `tasks/get` answers from `polls`
    (the last one repeats); `tasks/update` and `tasks/cancel` are acknowledged, or answered by
    `update_reply`/`cancel_reply`; `subscriptions/listen` is refused unless `stream` is set,
    in which case it is acknowledged (listing the task ids in `honour`) and left open."""

    polls: list[Any] = field(default_factory=list)
    created: dict[str, Any] = field(
        default_factory=lambda: {"resultType": "task", **snap("working")}
    )
    update_reply: Any = None
    stream: bool = False
    honour: list[str] = field(default_factory=lambda: [TASK_ID])
    fake: FakeServer = field(init=False)
    listen_id: Any = None
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.fake = FakeServer(then=self.reply)

    async def until_sent(self, method: str, count: int = 1) -> None:
        """Wait until the client sent `method` `count` times."""
        async with asyncio.timeout(2):
            while len(self.sent(method)) < count:
                self.arrived.clear()
                await self.arrived.wait()

    async def reply(self, message: dict[str, Any]) -> Any:
        method = message["method"]
        self.arrived.set()
        if method in ("tools/call", "prompts/get"):
            return self.created
        if method == "tasks/get":
            answer = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
            return answer(message) if callable(answer) else answer
        if method == "tasks/update":
            return self.update_reply if self.update_reply is not None else {}
        if method == "tasks/cancel":
            return {}
        if method == "subscriptions/listen":
            if not self.stream:
                return _error(errors.METHOD_NOT_FOUND, "Method not found: subscriptions/listen")
            self.listen_id = message["id"]
            await self.push(
                "notifications/subscriptions/acknowledged",
                {"notifications": {"taskIds": self.honour}},
            )
            self.listening.set()
            await asyncio.Event().wait()  # open until the client cancels it
        raise AssertionError(f"unexpected {method}")

    async def push(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification on the listen stream."""
        meta = {meta_keys.SUBSCRIPTION_ID: self.listen_id}
        await self.fake.server_notify(method, {**params, "_meta": meta})

    def sent(self, method: str) -> list[Received]:
        return [r for r in self.fake.requests if r.method == method]


def _error(code: int, message: str) -> Any:
    from helpers.fake_server import Error

    return Error(code, message)


def client_for(play: TaskPlay, tasks: TaskOptions = FAST, **kwargs: Any) -> Client:
    options = ClientOptions(protocol="modern", tasks=tasks, **kwargs)
    return Client(play.fake, options=options, elicitation_handler=kwargs_handler(kwargs))


def kwargs_handler(_: Any) -> Callable[[Any], ElicitResult]:
    def answer(params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Ada"})

    return answer


# --- capability and the transparent call --------------------------------------------------


async def test_the_extension_is_declared_on_every_request_by_default() -> None:
    play = TaskPlay(polls=[snap("completed", result=DONE)])
    async with client_for(play) as client:
        await client.call_tool("greet", {})
    caps = play.sent("tools/call")[0].params["_meta"][meta_keys.CLIENT_CAPABILITIES]
    assert caps["extensions"] == {EXTENSION_ID: {}}
    assert caps["elicitation"] == {"form": {}}


async def test_a_client_that_turned_tasks_off_neither_declares_nor_accepts_a_task() -> None:
    play = TaskPlay(polls=[snap("completed", result=DONE)])
    async with client_for(play, tasks=TaskOptions(enabled=False)) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    caps = play.sent("tools/call")[0].params["_meta"][meta_keys.CLIENT_CAPABILITIES]
    assert "extensions" not in caps
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert "'task'" in caught.value.message
    assert not play.sent("tasks/get")


async def test_extensions_given_at_construction_are_kept_beside_tasks() -> None:
    play = TaskPlay(polls=[snap("completed", result=DONE)])
    options = ClientOptions(protocol="modern", tasks=FAST)
    other = {"extensions": {"com.example/x": {"v": 1}}}
    async with Client(play.fake, options=options, capabilities=other) as client:
        await client.call_tool("greet", {})
    caps = play.sent("tools/call")[0].params["_meta"][meta_keys.CLIENT_CAPABILITIES]
    assert caps["extensions"] == {EXTENSION_ID: {}, "com.example/x": {"v": 1}}


async def test_call_tool_drives_a_task_through_its_questions_to_the_result() -> None:
    asked = snap("input_required", at=0.1, inputRequests={"name": ASK_NAME})
    working = snap("working")
    play = TaskPlay(
        created={"resultType": "task", **working},
        polls=[
            {"resultType": "complete", **working},  # the same state again: no news
            asked,
            asked,  # shown again before the server took the answer in: not asked twice
            snap("working", at=0.2),
            snap("completed", at=0.3, result=DONE),
        ],
    )
    seen: list[str] = []
    calls: list[str] = []

    def answer(params: Any) -> ElicitResult:
        calls.append(params.message)
        return ElicitResult(action="accept", content={"name": "Ada"})

    options = ClientOptions(protocol="modern", tasks=FAST)
    async with Client(play.fake, options=options, elicitation_handler=answer) as client:
        result = await client.call_tool(
            "greet", {}, on_task_status=lambda task: seen.append(task.status)
        )
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]
    assert calls == ["Your name?"]
    updates = play.sent("tasks/update")
    assert [u.params["inputResponses"] for u in updates] == [
        {"name": {"action": "accept", "content": {"name": "Ada"}}}
    ]
    assert updates[0].params["taskId"] == TASK_ID
    assert seen == ["working", "input_required", "working", "completed"]
    assert all(r.params["taskId"] == TASK_ID for r in play.sent("tasks/get"))
    assert not play.sent("tasks/cancel")


async def test_the_poll_interval_follows_the_server_within_the_clients_bounds() -> None:
    play = TaskPlay(polls=[snap("working", poll_ms=150), snap("completed", result=DONE)])
    play.created = {"resultType": "task", **snap("working", poll_ms=150)}
    async with client_for(play) as client:
        await client.call_tool("slow", {})
    gets = play.sent("tasks/get")
    assert len(gets) == 2
    assert gets[1].at - gets[0].at >= 0.14

    # A server asking for a poll every 0 ms gets one per min_poll_interval; one asking for an
    # hour gets one per max_poll_interval.
    for hint, bounds, least, most in (
        (0, (0.05, 1.0), 0.045, 0.5),
        (3_600_000, (0.01, 0.1), 0.09, 0.5),
    ):
        play = TaskPlay(
            polls=[snap("working", poll_ms=hint)] * 2 + [snap("completed", result=DONE)]
        )
        play.created = {"resultType": "task", **snap("working", poll_ms=hint)}
        tasks = TaskOptions(min_poll_interval=bounds[0], max_poll_interval=bounds[1])
        async with client_for(play, tasks=tasks) as client:
            await client.call_tool("slow", {})
        gets = play.sent("tasks/get")
        gaps = [b.at - a.at for a, b in itertools.pairwise(gets)]
        assert gaps and all(least <= gap <= most for gap in gaps), (hint, gaps)


async def test_a_task_that_fails_raises_the_error_the_call_would_have() -> None:
    error = {"code": -32603, "message": "API rate limit exceeded", "data": {"retry": 5}}
    play = TaskPlay(polls=[snap("failed", error=error, statusMessage="rate limited")])
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert (caught.value.code, caught.value.message) == (-32603, "API rate limit exceeded")
    assert caught.value.data == {"retry": 5}
    assert not play.sent("tasks/cancel")


async def test_a_cancelled_task_raises_task_cancelled_with_the_servers_reason() -> None:
    play = TaskPlay(polls=[snap("cancelled", statusMessage="operator stopped it")])
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.TASK_CANCELLED
    assert "operator stopped it" in caught.value.message
    assert caught.value.data == {"taskId": TASK_ID}


async def test_a_tool_error_result_is_a_completed_task_not_a_failure() -> None:
    failed_tool = {"content": [{"type": "text", "text": "bad input"}], "isError": True}
    play = TaskPlay(polls=[snap("completed", result=failed_tool)])
    async with client_for(play) as client:
        result = await client.call_tool("greet", {})
    assert result.is_error is True


# --- a lying or flaky server ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        (snap("paused"), "unknown task status 'paused'"),
        ({**snap("working"), "taskId": "t-other"}, "answered about 't-other'"),
        (snap("completed"), "completed task has no result"),
        (snap("input_required"), "input_required task has no inputRequests"),
        ({**snap("working"), "createdAt": 5}, "not valid"),
        ("working", "not an object"),
    ],
)
async def test_a_task_the_server_misreports_fails_the_call_and_is_cancelled(
    shown: Any, expected: str
) -> None:
    play = TaskPlay(polls=[shown])
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert expected in caught.value.message
    assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]


async def test_a_completed_task_whose_result_is_not_complete_is_refused() -> None:
    play = TaskPlay(polls=[snap("completed", result={"resultType": "input_required"})])
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert "resultType 'input_required'" in caught.value.message
    assert not play.sent("tasks/cancel")  # it ended: nothing left to cancel


async def test_a_create_task_result_without_a_task_id_is_a_protocol_violation() -> None:
    play = TaskPlay()
    play.created = {"resultType": "task", "status": "working"}
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert not play.sent("tasks/get")


async def test_transient_poll_failures_are_retried_and_then_given_up() -> None:
    from helpers.fake_server import Error

    flaky = Error(errors.INTERNAL_ERROR, "database hiccup")
    play = TaskPlay(polls=[flaky, flaky, snap("completed", result=DONE)])
    async with client_for(play) as client:
        result = await client.call_tool("greet", {})
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]

    play = TaskPlay(polls=[flaky])
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.INTERNAL_ERROR
    assert "failed 3 times in a row" in caught.value.message
    assert len(play.sent("tasks/get")) == 3


async def test_a_task_the_server_no_longer_knows_ends_the_call_without_a_cancel() -> None:
    from helpers.fake_server import Error

    play = TaskPlay(
        polls=[Error(errors.INVALID_PARAMS, "Failed to retrieve task: Task has expired")]
    )
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.INVALID_PARAMS
    assert "no longer knows task" in caught.value.message
    assert "Task has expired" in caught.value.message
    assert len(play.sent("tasks/get")) == 1
    assert not play.sent("tasks/cancel")


async def test_a_task_that_never_ends_is_bounded_by_the_calls_deadline_and_cancelled() -> None:
    play = TaskPlay(polls=[snap("working")])
    config = InputRequiredConfig(max_total_timeout=0.3)
    started = time.monotonic()
    async with client_for(play, input_required=config) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("forever", {})
    assert caught.value.code == errors.REQUEST_TIMEOUT
    assert time.monotonic() - started < 2
    assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]


def endless() -> dict[str, Any]:
    """A working task with no TTL: nothing but the client's own bound ends the wait."""
    task = snap("working", poll_ms=0)
    del task["ttlMs"]
    return task


async def test_a_task_that_never_ends_is_given_up_after_max_wait_and_cancelled() -> None:
    assert TaskOptions().max_wait == 3600  # finite by default
    play = TaskPlay(polls=[endless()])
    play.created = {"resultType": "task", **endless()}
    started = time.monotonic()
    async with client_for(play, tasks=TaskOptions(min_poll_interval=0.01, max_wait=0.4)) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("forever", {})
        assert time.monotonic() - started < 2
        assert caught.value.code == errors.REQUEST_TIMEOUT
        assert "did not end within 0.4 s (TaskOptions.max_wait)" in caught.value.message
        assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]
        # A handle's wait without a timeout of its own is bounded the same way, and the task
        # is left running (a handle cancels only when asked).
        handle = await client.call_tool_as_task("forever", {})
        with pytest.raises(McpError) as caught:
            await handle.result()
        assert "(TaskOptions.max_wait)" in caught.value.message
        assert "cancel() stops it" in caught.value.message
        assert len(play.sent("tasks/cancel")) == 1


async def test_polls_of_a_task_that_does_not_change_back_off() -> None:
    # The server asks for a poll every 0 ms, forever: the client's floor (10 ms) doubles with
    # each unchanged poll up to backstop_interval, instead of 100 polls a second.
    play = TaskPlay(polls=[endless()])
    play.created = {"resultType": "task", **endless()}
    tasks = TaskOptions(min_poll_interval=0.01, backstop_interval=0.2, notifications=False)
    config = InputRequiredConfig(max_total_timeout=1.5)
    async with client_for(play, tasks=tasks, input_required=config) as client:
        with pytest.raises(McpError):
            await client.call_tool("forever", {})
    gets = play.sent("tasks/get")
    gaps = [b.at - a.at for a, b in itertools.pairwise(gets)]
    assert len(gets) < 20, len(gets)  # without backoff: about 150
    assert gaps[-1] >= 0.18 and all(gap <= 0.3 for gap in gaps), gaps
    assert all(b >= a * 0.9 for a, b in itertools.pairwise(gaps)), gaps  # never shorter again


async def test_a_task_that_outlives_its_ttl_is_given_up() -> None:
    expired = {**snap("working"), "createdAt": stamp(-1), "ttlMs": 100}
    play = TaskPlay(polls=[expired])
    play.created = {"resultType": "task", **expired}
    tasks = TaskOptions(min_poll_interval=0.01, default_poll_interval=0.01, ttl_grace=0.2)
    async with client_for(play, tasks=tasks) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("forever", {})
    assert caught.value.code == errors.TASK_EXPIRED
    assert "ttlMs (100 ms)" in caught.value.message


async def test_a_key_reused_for_another_question_is_refused() -> None:
    other = {**ASK_NAME, "params": {**ASK_NAME["params"], "message": "Your bank PIN?"}}
    play = TaskPlay(
        polls=[
            snap("input_required", at=0.1, inputRequests={"name": ASK_NAME}),
            snap("input_required", at=0.2, inputRequests={"name": other}),
        ]
    )
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert "asked input 'name' again as another request" in caught.value.message
    assert len(play.sent("tasks/update")) == 1


async def test_a_task_asking_more_than_max_input_requests_at_once_is_refused() -> None:
    many = {f"q{i}": ASK_NAME for i in range(3)}
    play = TaskPlay(polls=[snap("input_required", inputRequests=many)])
    config = InputRequiredConfig(max_input_requests=2)
    async with client_for(play, input_required=config) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.MAX_INPUT_REQUESTS_EXCEEDED
    assert not play.sent("tasks/update")
    assert play.sent("tasks/cancel")


async def test_a_failing_input_handler_fails_the_call_and_cancels_the_task() -> None:
    play = TaskPlay(polls=[snap("input_required", inputRequests={"name": ASK_NAME})])

    def broken(params: Any) -> ElicitResult:
        raise RuntimeError("the form crashed")

    options = ClientOptions(protocol="modern", tasks=FAST)
    async with Client(play.fake, options=options, elicitation_handler=broken) as client:
        with pytest.raises(McpError) as caught:
            await client.call_tool("greet", {})
    assert caught.value.code == errors.INPUT_HANDLER_FAILED
    assert play.sent("tasks/cancel")


async def test_cancelling_the_call_cancels_the_task_on_the_server() -> None:
    play = TaskPlay(polls=[snap("working")])
    async with client_for(play) as client:
        call = asyncio.create_task(client.call_tool("forever", {}))
        await play.until_sent("tasks/get", 2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]


async def test_a_task_result_for_a_prompt_is_refused() -> None:
    play = TaskPlay()
    async with client_for(play) as client:
        with pytest.raises(McpError) as caught:
            await client.get_prompt("p")
    assert caught.value.code == errors.PROTOCOL_VIOLATION
    assert not play.sent("tasks/get")


# --- notifications ------------------------------------------------------------------------------


async def test_notifications_end_the_wait_and_stale_or_repeated_ones_change_nothing() -> None:
    play = TaskPlay(stream=True, polls=[snap("working")])
    seen: list[str] = []
    slow = TaskOptions(min_poll_interval=0.01, default_poll_interval=5.0, backstop_interval=5.0)
    async with client_for(play, tasks=slow) as client:
        call = asyncio.create_task(
            client.call_tool("greet", {}, on_task_status=lambda t: seen.append(t.status))
        )
        await asyncio.wait_for(play.listening.wait(), 2)
        await play.until_sent("tasks/get")
        asked = snap("input_required", at=1, inputRequests={"name": ASK_NAME}, poll_ms=5000)
        await play.push("notifications/tasks", asked)
        await play.push("notifications/tasks", asked)  # a duplicate
        await play.push("notifications/tasks", snap("working", at=-5, poll_ms=5000))  # late
        await play.push("notifications/tasks", {**snap("working"), "taskId": "t-other"})
        await play.until_sent("tasks/update")
        await play.push("notifications/tasks", snap("completed", at=2, result=DONE))
        result = await asyncio.wait_for(call, 2)
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]
    assert seen == ["working", "input_required", "completed"]
    assert len(play.sent("tasks/update")) == 1
    # One look right after the stream was acknowledged; the rest came by notification.
    assert len(play.sent("tasks/get")) == 1
    listen = play.sent("subscriptions/listen")[0]
    assert listen.params["notifications"] == {"taskIds": [TASK_ID]}
    assert listen.id in play.fake.cancelled_ids()  # the stream was closed after the call


async def test_progress_and_logs_on_the_tasks_stream_reach_the_callbacks() -> None:
    play = TaskPlay(stream=True, polls=[snap("working")])
    steps: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []
    slow = TaskOptions(min_poll_interval=0.01, default_poll_interval=5.0, backstop_interval=5.0)
    options = ClientOptions(protocol="modern", tasks=slow)
    async with Client(play.fake, options=options, log_handler=logs.append) as client:
        call = asyncio.create_task(
            client.call_tool("greet", {}, progress_callback=lambda *a: steps.append(a))
        )
        await asyncio.wait_for(play.listening.wait(), 2)
        token = play.sent("tools/call")[0].params["_meta"]["progressToken"]
        await play.push(
            "notifications/progress", {"progressToken": token, "progress": 1, "total": 2}
        )
        await play.push("notifications/message", {"level": "info", "data": "packing"})
        await play.push("notifications/tasks", snap("completed", at=1, result=DONE))
        await asyncio.wait_for(call, 2)
    assert steps == [(1, 2, None)]
    assert [entry["data"] for entry in logs] == ["packing"]


async def test_a_stream_that_does_not_honour_the_task_means_polling() -> None:
    play = TaskPlay(stream=True, honour=[], polls=[snap("working"), snap("completed", result=DONE)])
    async with client_for(play) as client:
        result = await asyncio.wait_for(client.call_tool("greet", {}), 2)
    assert not result.is_error
    assert len(play.sent("tasks/get")) == 2
    assert play.sent("subscriptions/listen")[0].id in play.fake.cancelled_ids()


async def test_a_server_without_subscriptions_is_polled() -> None:
    play = TaskPlay(polls=[snap("working"), snap("completed", result=DONE)])
    async with client_for(play) as client:
        result = await client.call_tool("greet", {})
    assert not result.is_error
    assert play.sent("subscriptions/listen")  # it asked, was refused, and polled
    assert len(play.sent("tasks/get")) == 2


async def test_notifications_can_be_turned_off() -> None:
    play = TaskPlay(stream=True, polls=[snap("completed", result=DONE)])
    tasks = TaskOptions(min_poll_interval=0.01, default_poll_interval=0.01, notifications=False)
    async with client_for(play, tasks=tasks) as client:
        await client.call_tool("greet", {})
    assert not play.sent("subscriptions/listen")


# --- the handle -------------------------------------------------------------------------------


async def test_a_handle_shows_status_waits_for_the_result_and_cancels() -> None:
    play = TaskPlay(
        polls=[
            snap("working", statusMessage="step 1 of 3"),
            snap("input_required", at=0.1, inputRequests={"name": ASK_NAME}),
            snap("completed", at=0.2, result=DONE),
        ]
    )
    async with client_for(play) as client:
        handle = await client.call_tool_as_task("greet", {})
        assert handle.task_id == TASK_ID
        assert not play.sent("tasks/get")  # nothing is waited for until asked
        status = await handle.status()
        assert (status.status, status.status_message) == ("working", "step 1 of 3")
        seen: list[str] = []
        result = await handle.result(on_status=lambda t: seen.append(t.status))
        assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]
        assert seen == ["input_required", "completed"]
        assert await handle.result() is result  # kept, not fetched again
        await handle.cancel()  # the task ended: nothing to cancel
    assert not play.sent("tasks/cancel")
    assert len(play.sent("tasks/update")) == 1


async def test_a_handle_times_out_without_cancelling_and_cancels_when_asked() -> None:
    play = TaskPlay(polls=[snap("working")])
    async with client_for(play) as client:
        handle = await client.call_tool_as_task("forever", {})
        with pytest.raises(McpError) as caught:
            await handle.result(timeout=0.2)
        assert caught.value.code == errors.REQUEST_TIMEOUT
        assert "cancel() stops it" in caught.value.message
        assert not play.sent("tasks/cancel")
        await handle.cancel()
    assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]


async def test_a_call_answered_at_once_gives_a_finished_handle() -> None:
    fake = FakeServer(then={"content": [{"type": "text", "text": "now"}]})
    async with Client(fake, options=ClientOptions(protocol="modern")) as client:
        handle = await client.call_tool_as_task("quick", {})
        assert handle.task_id is None
        assert (await handle.result()).content[0].text == "now"  # type: ignore[union-attr]
        status = await handle.status()
        assert status.status == "completed"
        assert status.result == {"content": [{"type": "text", "text": "now"}]}
        await handle.cancel()
    assert [r.method for r in fake.requests] == ["tools/call", "tools/call"][:1]


async def test_a_handle_by_id_sends_nothing_until_used() -> None:
    play = TaskPlay(polls=[snap("completed", result=DONE)])
    async with client_for(play) as client:
        handle = client.task(TASK_ID)
        assert not play.fake.requests
        result = await handle.result()
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]
    assert [r.method for r in play.fake.requests if r.method != "subscriptions/listen"] == [
        "tasks/get"
    ]
    with pytest.raises(ValueError, match="non-empty string"):
        client.task("")


async def test_questions_answered_by_hand_are_not_asked_again() -> None:
    asked = snap("input_required", at=0.1, inputRequests={"name": ASK_NAME})
    play = TaskPlay(polls=[asked, asked, snap("completed", at=0.2, result=DONE)])

    def must_not_ask(params: Any) -> ElicitResult:
        raise AssertionError("answered by hand already")

    options = ClientOptions(protocol="modern", tasks=FAST)
    async with Client(play.fake, options=options, elicitation_handler=must_not_ask) as client:
        handle = await client.call_tool_as_task("greet", {})
        status = await handle.status()
        assert status.input_requests == {"name": ASK_NAME}
        await handle.respond({"name": {"action": "accept", "content": {"name": "Bo"}}})
        result = await handle.result()
    assert not result.is_error
    assert [u.params["inputResponses"] for u in play.sent("tasks/update")] == [
        {"name": {"action": "accept", "content": {"name": "Bo"}}}
    ]


async def test_two_waits_on_one_handle_ask_each_question_once() -> None:
    asked = snap("input_required", at=0.1, inputRequests={"name": ASK_NAME})
    play = TaskPlay(polls=[asked, asked, asked, snap("completed", at=0.2, result=DONE)])
    calls: list[str] = []

    async def slow_answer(params: Any) -> ElicitResult:
        calls.append(params.message)
        await asyncio.sleep(0.05)
        return ElicitResult(action="accept", content={"name": "Ada"})

    options = ClientOptions(protocol="modern", tasks=FAST)
    async with Client(play.fake, options=options, elicitation_handler=slow_answer) as client:
        handle = await client.call_tool_as_task("greet", {})
        first, second = await asyncio.gather(handle.result(), handle.result())
    assert first is second
    assert calls == ["Your name?"]


async def test_respond_on_a_call_answered_at_once_is_refused() -> None:
    fake = FakeServer(then={"content": []})
    async with Client(fake, options=ClientOptions(protocol="modern")) as client:
        handle = await client.call_tool_as_task("quick", {})
        with pytest.raises(ValueError, match="no task to answer"):
            await handle.respond({"k": {}})


async def test_a_call_cancelled_just_as_a_notification_arrives_stops() -> None:
    play = TaskPlay(stream=True, polls=[snap("working")])
    slow = TaskOptions(min_poll_interval=0.01, default_poll_interval=5.0, backstop_interval=5.0)
    async with client_for(play, tasks=slow) as client:
        call = asyncio.create_task(client.call_tool("forever", {}))
        await play.until_sent("tasks/get")
        for _ in range(5):  # let the call reach its wait for the next notification
            await asyncio.sleep(0)
        # In the same turn of the loop: the waiter is woken with an item, and cancelled.
        await play.push("notifications/tasks", snap("working", at=1, statusMessage="still"))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 2)
    assert [c.params["taskId"] for c in play.sent("tasks/cancel")] == [TASK_ID]
