"""The tasks extension on the server, driven by hand (raw JSON-RPC) in memory.

The flow over stdio and HTTP is in `test_tasks_server_transports.py`; several instances and a
killed worker in `test_tasks_server_scale.py`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.tasks_server_app import (
    ACCEPT_NAME,
    ACCEPT_OK,
    EVENTS,
    GUARD,
    WITHOUT_TASKS,
    MemoryPeer,
    build_server,
    request,
    ship_flow,
)
from mrtr import McpError, RequestContext, Server, ServerOptions, TaskSettings
from mrtr.inputs import InputRequiredResult, elicit_request
from mrtr.protocol.tasks import EXTENSION_ID, RELATED_TASK_META
from mrtr.server.store import MemoryStore


async def test_a_tool_asks_by_mrtr_before_its_task_and_through_it_during() -> None:
    server = build_server()
    async with server.running():
        await ship_flow(MemoryPeer(server))


async def test_without_the_extension_optional_runs_in_line_and_required_is_refused() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        plain = await peer.call(
            "tools/call", {"name": "sleep", "arguments": {"seconds": 0.01}}, WITHOUT_TASKS
        )
        assert plain["result"]["content"][0]["text"] == "slept 0.01 s"
        assert "taskId" not in plain["result"]
        refused = await peer.call(
            "tools/call", {"name": "short_lived", "arguments": {"seconds": 0}}, WITHOUT_TASKS
        )
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"] == {
            "requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}
        }
        assert "short_lived" in refused["error"]["message"]
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            response = await peer.call(method, {"taskId": "x", "inputResponses": {}}, WITHOUT_TASKS)
            assert response["error"]["code"] == -32021, method


async def test_a_tool_without_task_support_is_never_a_task_and_removed_methods_are_unknown() -> (
    None
):
    server = build_server()
    peer = MemoryPeer(server)
    result = await peer.result(
        "tools/call", {"name": "plain", "arguments": {"x": 1}, "task": {"ttl": 5}}
    )
    assert result["structuredContent"] == {"result": 2} and result["resultType"] == "complete"
    for method in ("tasks/list", "tasks/result"):
        assert (await peer.call(method, {"taskId": "x"}))["error"]["code"] == -32601


async def test_unknown_and_malformed_task_ids_get_clear_errors() -> None:
    peer = MemoryPeer(build_server())
    unknown = await peer.call("tasks/get", {"taskId": "no-such-task"})
    assert unknown["error"]["code"] == -32602
    assert "no-such-task" in unknown["error"]["message"]
    missing = await peer.call("tasks/get", {})
    assert missing["error"]["code"] == -32602 and "taskId" in missing["error"]["message"]
    huge = await peer.call("tasks/cancel", {"taskId": "x" * 10_000})
    assert huge["error"]["code"] == -32602 and len(huge["error"]["message"]) < 300


async def test_cancel_stops_the_handler_and_settles_cancelled_and_is_idempotent() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    EVENTS.clear()
    async with server.running():
        created = await peer.result("tools/call", {"name": "sleep", "arguments": {"seconds": 30}})
        task_id = created["taskId"]
        assert (await peer.result("tasks/get", {"taskId": task_id}))["status"] == "working"
        ack = await peer.result("tasks/cancel", {"taskId": task_id})
        assert set(ack) == {"resultType", "_meta"}
        task = await peer.until(task_id, "cancelled", "completed", "failed")
        assert task["status"] == "cancelled"
        assert EVENTS == ["sleep cancelled"]  # the handler's asyncio task was cancelled
        again = await peer.result("tasks/cancel", {"taskId": task_id})
        assert again["resultType"] == "complete"
        assert (await peer.result("tasks/get", {"taskId": task_id}))["status"] == "cancelled"


async def test_a_task_is_kept_for_its_ttl_then_expires() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        created = await peer.result(
            "tools/call", {"name": "short_lived", "arguments": {"seconds": 0.05}}
        )
        assert created["ttlMs"] == 600
        task_id = created["taskId"]
        done = await peer.until(task_id, "completed")
        assert done["result"]["content"][0]["text"] == "done"
        running = await peer.result(
            "tools/call", {"name": "short_lived", "arguments": {"seconds": 30}}
        )
        await asyncio.sleep(0.75)
        for gone in (task_id, running["taskId"]):
            expired = await peer.call("tasks/get", {"taskId": gone})
            assert expired["error"]["code"] == -32602
            assert "expired" in expired["error"]["message"]


async def test_a_task_of_another_caller_does_not_exist_for_this_one() -> None:
    server = build_server()
    alice, mallory = MemoryPeer(server, "alice"), MemoryPeer(server, "mallory")
    async with server.running():
        created = await alice.result("tools/call", {"name": "pair", "arguments": {}})
        task_id = created["taskId"]
        await alice.until(task_id, "input_required")
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            response = await mallory.call(
                method, {"taskId": task_id, "inputResponses": {"a": ACCEPT_NAME}}
            )
            assert response["error"]["code"] == -32602, method
        anonymous = await MemoryPeer(server).call("tasks/get", {"taskId": task_id})
        assert anonymous["error"]["code"] == -32602
        task = await alice.result("tasks/get", {"taskId": task_id})
        assert task["status"] == "input_required" and set(task["inputRequests"]) == {"a", "b"}
        await alice.result("tasks/cancel", {"taskId": task_id})


async def test_answers_may_come_one_at_a_time_and_bad_ones_are_refused() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        task_id = (await peer.result("tools/call", {"name": "pair", "arguments": {}}))["taskId"]
        await peer.until(task_id, "input_required")
        bad = await peer.call(
            "tasks/update", {"taskId": task_id, "inputResponses": {"a": {"action": "maybe"}}}
        )
        assert bad["error"]["code"] == -32602 and "'a'" in bad["error"]["message"]
        ignored = await peer.result(
            "tasks/update", {"taskId": task_id, "inputResponses": {"zzz": {"whatever": 1}}}
        )
        assert ignored["resultType"] == "complete"
        await peer.result("tasks/update", {"taskId": task_id, "inputResponses": {"a": ACCEPT_NAME}})
        partial = await peer.result("tasks/get", {"taskId": task_id})
        assert partial["status"] == "input_required" and list(partial["inputRequests"]) == ["b"]
        second = {"action": "accept", "content": {"name": "Bo"}}
        both = {"a": {"action": "accept", "content": {"name": "Eve"}}, "b": second}
        await peer.result("tasks/update", {"taskId": task_id, "inputResponses": both})
        done = await peer.until(task_id, "completed")
        assert done["result"]["content"][0]["text"] == "Ada and Bo"  # the first answer to a wins


@pytest.mark.parametrize(("kind", "status"), [("protocol", "failed"), ("other", "completed")])
async def test_protocol_errors_fail_a_task_and_tool_errors_complete_it(
    kind: str, status: str
) -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        created = await peer.result("tools/call", {"name": "broken", "arguments": {"kind": kind}})
        task = await peer.until(created["taskId"], "completed", "failed")
        assert task["status"] == status
        if kind == "protocol":
            assert task["error"] == {"code": -32603, "message": "the backend is gone"}
            assert "result" not in task
        else:
            assert task["result"]["isError"] is True
            # masked, as for any tool call (mask_errors): the detail is in the server's log
            assert "internal error" in task["result"]["content"][0]["text"]


async def test_a_task_handler_that_returns_input_required_by_hand_fails_clearly() -> None:
    server = Server("manual")

    @server.tool(task="optional")
    async def manual(ctx: RequestContext) -> Any:
        await ctx.run_as_task()
        return InputRequiredResult(input_requests={"k": elicit_request("Hi?", {})})

    peer = MemoryPeer(server)
    async with server.running():
        created = await peer.result("tools/call", {"name": "manual", "arguments": {}})
        task = await peer.until(created["taskId"], "failed", "completed")
        assert task["status"] == "failed" and "ctx.elicit" in task["error"]["message"]


async def test_run_as_task_is_false_where_a_call_cannot_be_a_task() -> None:
    server = Server("plain-calls")
    seen: list[Any] = []

    @server.tool()
    async def never(ctx: RequestContext) -> str:
        seen.append((await ctx.run_as_task(), ctx.task_id))
        return "ok"

    @server.tool(task=TaskSettings(start_after=None))
    async def maybe(ctx: RequestContext) -> str:
        seen.append((await ctx.run_as_task(), ctx.task_id is not None))
        return "ok"

    peer = MemoryPeer(server)
    async with server.running():
        await peer.result("tools/call", {"name": "never", "arguments": {}})
        assert (await peer.call("tools/call", {"name": "maybe", "arguments": {}}, WITHOUT_TASKS))[
            "result"
        ]["content"][0]["text"] == "ok"
        created = await peer.result("tools/call", {"name": "maybe", "arguments": {}})
        await peer.until(created["taskId"], "completed")
    assert seen == [(False, None), (False, False), (True, True)]


async def test_listeners_get_the_task_states_and_its_progress() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    received: list[dict[str, Any]] = []
    got_question, got_terminal = asyncio.Event(), asyncio.Event()

    async def sink(message: dict[str, Any]) -> None:
        received.append(message)
        params = message.get("params") or {}
        if message["method"] == "notifications/tasks":
            if params.get("status") == "input_required":
                got_question.set()
            if params.get("status") == "completed":
                got_terminal.set()

    async with server.running():
        first = await peer.result("tools/call", {"name": "ship", "arguments": {"item": "pen"}})
        created = await peer.result(
            "tools/call",
            {
                "name": "ship",
                "arguments": {"item": "pen"},
                "requestState": first["requestState"],
                "inputResponses": {"where": ACCEPT_NAME},
            },
        )
        task_id = created["taskId"]
        listen = request(
            99, "subscriptions/listen", {"notifications": {"taskIds": [task_id, "other"]}}
        )
        listener = asyncio.ensure_future(server.handle_message(listen, sink, None))
        await peer.until(task_id, "input_required")
        async with asyncio.timeout(GUARD):
            # the state at subscription (or the change to it) reaches the new listener
            await got_question.wait()
        await peer.result(
            "tasks/update", {"taskId": task_id, "inputResponses": {"sure": ACCEPT_OK}}
        )
        async with asyncio.timeout(GUARD):
            await got_terminal.wait()
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    ack = received[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}  # "other" is not the caller's
    statuses = [m["params"]["status"] for m in received if m["method"] == "notifications/tasks"]
    assert statuses[-1] == "completed" and "input_required" in statuses
    final = next(
        m
        for m in received
        if m["method"] == "notifications/tasks" and m["params"]["status"] == "completed"
    )
    assert final["params"]["result"]["content"][0]["text"].startswith("pen shipped to Ada")
    assert final["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 99


async def test_listening_for_tasks_needs_the_extension() -> None:
    server = build_server()
    listen = request(
        7, "subscriptions/listen", {"notifications": {"taskIds": ["x"]}}, WITHOUT_TASKS
    )

    async def sink(message: dict[str, Any]) -> None:
        raise AssertionError(f"nothing may be sent: {message}")

    response = await server.handle_message(listen, sink, None)
    assert response is not None and response["error"]["code"] == -32021


async def test_a_task_log_reaches_its_listeners_with_the_related_task() -> None:
    server = Server("logs")
    release = asyncio.Event()

    @server.tool(task="optional")
    async def chatty(ctx: RequestContext) -> str:
        await ctx.run_as_task()
        await release.wait()
        await ctx.report_progress(1, 4)
        return "ok"

    peer = MemoryPeer(server)
    received: list[dict[str, Any]] = []
    progress_seen = asyncio.Event()

    async def sink(message: dict[str, Any]) -> None:
        received.append(message)
        if message["method"] == "notifications/progress":
            progress_seen.set()

    async with server.running():
        body = request(1, "tools/call", {"name": "chatty", "arguments": {}})
        body["params"]["_meta"]["progressToken"] = "tok"
        created = (await server.handle_message(body, None, None))["result"]  # type: ignore[index]
        task_id = created["taskId"]
        listen = request(2, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
        listener = asyncio.ensure_future(server.handle_message(listen, sink, None))
        await asyncio.sleep(0.05)
        release.set()
        async with asyncio.timeout(GUARD):
            await progress_seen.wait()
        task = await peer.until(task_id, "completed")
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    progress = next(m for m in received if m["method"] == "notifications/progress")
    assert progress["params"]["progressToken"] == "tok"
    assert progress["params"]["_meta"][RELATED_TASK_META] == {"taskId": task_id}
    states = [m["params"] for m in received if m["method"] == "notifications/tasks"]
    assert any(state.get("statusMessage") == "1/4" for state in states)  # progress, as status
    assert "statusMessage" not in task  # stale once the task completed


@pytest.mark.parametrize(
    ("method", "params", "words"),
    [
        ("tasks/get", {"taskId": 42}, "taskId"),
        ("tasks/get", {"taskId": ""}, "taskId"),
        ("tasks/cancel", {"taskId": ["a"]}, "taskId"),
        ("tasks/update", {"taskId": "TASK", "inputResponses": ["no"]}, "inputResponses"),
        ("tasks/update", {"taskId": "TASK"}, "inputResponses"),
        ("tasks/update", {"taskId": "TASK", "inputResponses": {"a": "x" * 2_000_000}}, "bytes"),
    ],
)
async def test_malformed_task_requests_get_invalid_params_and_the_task_goes_on(
    method: str, params: dict[str, Any], words: str
) -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        task_id = (await peer.result("tools/call", {"name": "pair", "arguments": {}}))["taskId"]
        await peer.until(task_id, "input_required")
        body = {k: (task_id if v == "TASK" else v) for k, v in params.items()}
        response = await peer.call(method, body)
        assert response["error"]["code"] == -32602 and words in response["error"]["message"]
        task = await peer.result("tasks/get", {"taskId": task_id})
        assert task["status"] == "input_required" and set(task["inputRequests"]) == {"a", "b"}
        await peer.result("tasks/cancel", {"taskId": task_id})


async def test_a_replayed_update_changes_nothing_and_a_late_one_is_acknowledged() -> None:
    server = build_server()
    peer = MemoryPeer(server)
    async with server.running():
        task_id = (await peer.result("tools/call", {"name": "pair", "arguments": {}}))["taskId"]
        await peer.until(task_id, "input_required")
        update = {"taskId": task_id, "inputResponses": {"a": ACCEPT_NAME, "b": ACCEPT_NAME}}
        first, again = await asyncio.gather(
            peer.result("tasks/update", update), peer.result("tasks/update", update)
        )
        assert first["resultType"] == again["resultType"] == "complete"
        done = await peer.until(task_id, "completed")
        assert done["result"]["content"][0]["text"] == "Ada and Ada"
        late = await peer.result("tasks/update", update)  # the task is over: nothing to answer
        assert late["resultType"] == "complete"
        assert (await peer.result("tasks/get", {"taskId": task_id})) == done


class RefusingStore(MemoryStore):
    """A store that takes no task (a full or failing shared store)."""

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        if key.startswith("mrtr/task/"):
            raise ConnectionError("store unreachable")
        return await super().add(key, value, ttl)


async def test_a_task_that_cannot_be_stored_fails_the_call_and_the_server_goes_on() -> None:
    server = Server("no-store", options=ServerOptions(store=RefusingStore()))
    EVENTS.clear()

    @server.tool(task="optional")
    async def work(ctx: RequestContext) -> str:
        try:
            await ctx.run_as_task()
        except McpError as exc:
            EVENTS.append(f"work told: {exc.code}")  # run_as_task raises: no task exists
            raise
        return "never"

    @server.tool(task="optional")
    async def waits() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            EVENTS.append("waits cancelled")
            raise
        return "never"

    peer = MemoryPeer(server)
    async with server.running():
        for name in ("work", "waits"):
            response = await peer.call("tools/call", {"name": name, "arguments": {}})
            assert response["error"]["code"] == -32603
            assert "could not create a task" in response["error"]["message"]
        await asyncio.sleep(0.05)
        assert sorted(EVENTS) == ["waits cancelled", "work told: -32603"]  # no orphan handler
        still = await peer.call("tools/call", {"name": "plain", "arguments": {}}, WITHOUT_TASKS)
        assert still["error"]["code"] == -32602  # unknown tool: the server answers as ever


async def test_a_call_asks_by_mrtr_then_becomes_a_task_when_it_first_waits() -> None:
    server = Server("automatic")

    @server.tool(task="optional")  # start_after=0: a task as soon as the handler waits
    async def greet_slowly(ctx: RequestContext) -> str:
        answer = await ctx.elicit("Your name?", {"type": "object", "properties": {}}, key="n")
        await asyncio.sleep(0.05)
        return f"Hello, {(answer.content or {}).get('name')} (task {ctx.task_id is not None})"

    peer = MemoryPeer(server)
    async with server.running():
        first = await peer.result("tools/call", {"name": "greet_slowly", "arguments": {}})
        assert first["resultType"] == "input_required"  # asking never waits: answered in line
        created = await peer.result(
            "tools/call",
            {
                "name": "greet_slowly",
                "arguments": {},
                "requestState": first["requestState"],
                "inputResponses": {"n": ACCEPT_NAME},
            },
        )
        assert created["resultType"] == "task"
        done = await peer.until(created["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "Hello, Ada (task True)"
