"""`Client` against this SDK's own server with task support, over memory, stdio and HTTP.

The app (`helpers/tasks_client_app.py`) has a tool that asks by MRTR before its task exists and
through the task while it runs, a sleeping tool, and one whose task outlives its TTL. Each
test drives it the way an application would: `call_tool` (transparent), the `TaskHandle`,
cancellation, expiry, resuming by id from a new client, and another caller's task id.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.tasks_client_app import answer, build_server, connect, http_app
from mrtr import ClientOptions, ElicitResult, McpError, Server
from mrtr.protocol import errors
from mrtr.protocol.types import ElicitRequestParams

GUARD = 10.0  # seconds: reached only when something is broken
TRANSPORTS = ["memory", "stdio", "http"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One HTTP app for the module (each test's tasks are its own)."""
    with http_app() as endpoint:
        yield endpoint


@pytest.fixture
def server() -> Server:
    return build_server()


def client_over(transport: str, server: Server, url: str, **kwargs: Any) -> Any:
    if transport == "memory":
        return connect("memory", server=server, **kwargs)
    return connect(transport, url, **kwargs)


class Questions:
    """An elicitation handler that records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        return answer(params)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_call_tool_answers_before_and_during_the_task_and_returns_its_result(
    transport: str, server: Server, url: str
) -> None:
    questions = Questions()
    statuses: list[str] = []
    async with client_over(transport, server, url, elicitation_handler=questions) as client:
        result = await asyncio.wait_for(
            client.call_tool(
                "ship", {"item": "book"}, on_task_status=lambda t: statuses.append(t.status)
            ),
            GUARD,
        )
    assert result.content[0].text == "book shipped to Ada (task True)"
    assert questions.asked == ["Ship book where?", "Ship book to Ada?"]
    assert "input_required" in statuses and statuses[-1] == "completed"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_handle_drives_the_same_task_step_by_step(
    transport: str, server: Server, url: str
) -> None:
    questions = Questions()
    async with client_over(transport, server, url, elicitation_handler=questions) as client:
        handle = await asyncio.wait_for(client.call_tool_as_task("ship", {"item": "pen"}), GUARD)
        assert handle.task_id is not None and len(handle.task_id) >= 20
        assert questions.asked == ["Ship pen where?"]  # the MRTR round before the task
        status = await handle.status()
        assert status.task_id == handle.task_id
        assert status.status in ("working", "input_required")
        result = await handle.result(timeout=GUARD)
        assert result.content[0].text == "pen shipped to Ada (task True)"
        assert (await handle.status()).status == "completed"
    assert questions.asked == ["Ship pen where?", "Ship pen to Ada?"]


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_cancelling_call_tool_cancels_the_task(
    transport: str, server: Server, url: str
) -> None:
    started = asyncio.Event()
    ids: list[str] = []

    def note(task: Any) -> None:
        ids.append(task.task_id)
        started.set()

    async with client_over(transport, server, url) as client:
        call = asyncio.create_task(client.call_tool("sleep", {"seconds": 30}, on_task_status=note))
        await asyncio.wait_for(started.wait(), GUARD)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The task was cancelled on the server, not merely abandoned.
        with pytest.raises(McpError) as caught:
            await client.task(ids[0]).result(timeout=GUARD)
        assert caught.value.code == errors.TASK_CANCELLED


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_handle_cancels_a_running_task(transport: str, server: Server, url: str) -> None:
    async with client_over(transport, server, url) as client:
        handle = await client.call_tool_as_task("sleep", {"seconds": 30})
        assert handle.task_id is not None
        await handle.cancel()
        with pytest.raises(McpError) as caught:
            await handle.result(timeout=GUARD)
        assert caught.value.code == errors.TASK_CANCELLED
        assert "tasks/cancel" in caught.value.message  # the server's reason, passed on


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_task_that_outlives_its_ttl_ends_the_call_with_a_clear_error(
    transport: str, server: Server, url: str
) -> None:
    async with client_over(transport, server, url) as client:
        started = time.monotonic()
        with pytest.raises(McpError) as caught:
            await asyncio.wait_for(client.call_tool("short_lived", {"seconds": 30}), GUARD)
        assert time.monotonic() - started < 3  # the TTL is 0.5 s; the backstop poll 5 s
    # The server forgets the task once its TTL is over; the client, woken at that moment
    # rather than at its next backstop poll, says so at once.
    assert caught.value.code == errors.INVALID_PARAMS
    assert "no longer knows task" in caught.value.message
    assert "expired" in caught.value.message


async def test_a_task_is_resumed_by_id_from_a_new_http_client(url: str) -> None:
    first = Questions()
    async with connect("http", url, user="ada", elicitation_handler=first) as client:
        handle = await client.call_tool_as_task("ship", {"item": "lamp"})
        task_id = handle.task_id
    assert task_id is not None and first.asked == ["Ship lamp where?"]
    # Another process would do the same: a new client, only the persisted id.
    second = Questions()
    async with connect("http", url, user="ada", elicitation_handler=second) as client:
        result = await client.task(task_id, tool="ship").result(timeout=GUARD)
    assert result.content[0].text == "lamp shipped to Ada (task True)"
    assert second.asked == ["Ship lamp to Ada?"]


async def test_a_task_is_resumed_by_id_in_memory(server: Server) -> None:
    async with connect("memory", server=server) as client:
        task_id = (await client.call_tool_as_task("sleep", {"seconds": 0.2})).task_id
    assert task_id is not None
    async with connect("memory", server=server) as client:
        result = await client.task(task_id).result(timeout=GUARD)
    assert result.content[0].text == "slept 0.2 s"


async def test_another_callers_task_id_is_refused(url: str) -> None:
    async with connect("http", url, user="ada") as ada:
        handle = await ada.call_tool_as_task("sleep", {"seconds": 30})
        task_id = handle.task_id
        assert task_id is not None
        async with connect("http", url, user="eve") as eve:
            stolen = eve.task(task_id)
            for attempt in (stolen.status(), stolen.result(timeout=GUARD), stolen.cancel()):
                with pytest.raises(McpError) as caught:
                    await attempt
                assert caught.value.code == errors.INVALID_PARAMS
                assert "no longer knows task" in caught.value.message
        assert (await handle.status()).status == "working"  # eve's cancel did nothing
        await handle.cancel()


async def test_a_server_that_answers_at_once_gives_a_finished_handle(server: Server) -> None:
    async with connect("memory", server=server) as client:
        handle = await client.call_tool_as_task("sleep", {"seconds": 0})
    # The sleep of 0 s never waited, so the server answered in line.
    assert handle.task_id is None
    assert (await handle.result()).content[0].text == "slept 0 s"


def test_mrtr_call_shows_the_task_status_while_it_waits(url: str) -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "mrtr", "call", url, "ship", "item=kite"],
        input="a\nAda\na\ny\n",
        capture_output=True,
        text=True,
        timeout=30,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kite shipped to Ada (task True)"
    statuses = [line for line in done.stderr.splitlines() if line.startswith("mrtr call: task ")]
    assert statuses, done.stderr
    assert statuses[-1].endswith(": completed")
    assert any(line.endswith(": input_required") for line in statuses)


async def test_on_a_legacy_session_the_same_calls_run_in_line() -> None:
    # An initialize-based session has no tasks: the server asks live and answers in line,
    # and the handle of such a call is simply finished.
    questions = Questions()
    options = ClientOptions(protocol="legacy")
    async with connect("stdio", elicitation_handler=questions, options=options) as client:
        result = await asyncio.wait_for(client.call_tool("ship", {"item": "cup"}), GUARD)
        handle = await asyncio.wait_for(client.call_tool_as_task("sleep", {"seconds": 0.05}), GUARD)
        assert client.era == "legacy"
    assert result.content[0].text == "cup shipped to Ada (task False)"
    assert questions.asked == ["Ship cup where?", "Ship cup to Ada?"]
    assert handle.task_id is None
    assert (await handle.result()).content[0].text == "slept 0.05 s"
