"""Tasks across instances: two server processes sharing a real Redis store (and broker), one
of them killed while it runs a task (its task must end `failed`, never stay `working`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from helpers.loopback_process import free_port
from helpers.redis_instance import RedisInstance, redis_instance  # noqa: F401
from helpers.tasks_server_app import APP, GUARD, HttpPeer, request
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

Instance = tuple[str, asyncio.subprocess.Process]  # (url, process)
LEASE = "0.6"  # seconds: the instances renew their tasks' leases every 0.2 s
#: Seconds two fresh interpreters have to start listening: a Python start on a loaded machine
#: can take many seconds, so this only bounds a server that never comes up.
START_GUARD = 60.0


@contextlib.asynccontextmanager
async def instances(
    redis: RedisInstance, extra: dict[str, str] | None = None
) -> AsyncIterator[list[Instance]]:
    """Two processes serving the tasks app on HTTP, sharing `redis`, started together
    (`extra`: more environment)."""
    env = {**os.environ, "MRTR_STORE_URL": redis.url, "MRTR_TEST_TASK_LEASE": LEASE}
    env.update(extra or {})
    started: list[Instance] = []
    try:
        for _ in range(2):
            port = free_port()
            process = await asyncio.create_subprocess_exec(
                sys.executable, APP, "http", str(port), env=env, stderr=asyncio.subprocess.DEVNULL
            )
            started.append((f"http://127.0.0.1:{port}/mcp", process))
        async with aiohttp.ClientSession() as session, asyncio.timeout(START_GUARD):
            for url, process in started:
                while True:
                    assert process.returncode is None, "a server exited at start"
                    try:
                        async with session.get(url) as response:
                            await response.read()
                        break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)
        yield started
    finally:
        for _, process in started:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for _, process in started:
            try:
                await asyncio.wait_for(process.wait(), GUARD)
            except TimeoutError:
                process.kill()
                await process.wait()


async def listen_until_terminal(
    session: aiohttp.ClientSession, url: str, task_id: str
) -> dict[str, Any]:
    """Listen for the task on `url`; the first terminal `notifications/tasks` params."""
    body = request(500, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "subscriptions/listen",
    }
    async with session.post(url, json=body, headers=headers) as response:
        assert response.content_type == "text/event-stream"
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            params = message.get("params") or {}
            if message.get("method") == "notifications/tasks" and params["status"] in (
                "completed",
                "failed",
                "cancelled",
            ):
                return dict(params)
    raise AssertionError("the listen stream ended first")


async def test_another_instance_answers_updates_and_cancels_a_task(
    redis_instance: RedisInstance,  # noqa: F811
) -> None:
    async with (
        instances(redis_instance) as [(url_a, _), (url_b, _)],
        aiohttp.ClientSession() as session,
    ):
        a, b = HttpPeer(session, url_a), HttpPeer(session, url_b)
        task_id = (await a.result("tools/call", {"name": "pair", "arguments": {}}))["taskId"]
        waiting = await b.until(task_id, "input_required")
        assert set(waiting["inputRequests"]) == {"a", "b"}
        heard = asyncio.ensure_future(listen_until_terminal(session, url_b, task_id))
        answers = {
            "a": {"action": "accept", "content": {"name": "Ada"}},
            "b": {"action": "accept", "content": {"name": "Bo"}},
        }
        await b.result("tasks/update", {"taskId": task_id, "inputResponses": answers})
        done = await b.until(task_id, "completed")  # A ran it, with B's answers
        assert done["result"]["content"][0]["text"] == "Ada and Bo"
        async with asyncio.timeout(GUARD):
            pushed = await heard  # A's change reached B's listener through the broker
        assert pushed["status"] == "completed" and pushed["result"] == done["result"]

        sleeping = await a.result("tools/call", {"name": "sleep", "arguments": {"seconds": 30}})
        await b.result("tasks/cancel", {"taskId": sleeping["taskId"]})
        cancelled = await a.until(sleeping["taskId"], "cancelled", "completed", "failed")
        assert cancelled["status"] == "cancelled"


async def test_a_task_whose_instance_dies_ends_failed(
    redis_instance: RedisInstance,  # noqa: F811
) -> None:
    async with (
        instances(redis_instance) as [(url_a, process_a), (url_b, _)],
        aiohttp.ClientSession() as session,
    ):
        a, b = HttpPeer(session, url_a), HttpPeer(session, url_b)
        task_id = (await a.result("tools/call", {"name": "sleep", "arguments": {"seconds": 60}}))[
            "taskId"
        ]
        await asyncio.sleep(0.5)  # a lease renewal or two: a live worker is never declared dead
        assert (await b.result("tasks/get", {"taskId": task_id}))["status"] == "working"
        process_a.kill()  # SIGKILL: nothing of A's runs any more
        await process_a.wait()
        failed = await b.until(task_id, "failed", "completed", "cancelled")
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == -32603
        assert (
            "stopped" in failed["error"]["message"]
            and "call the tool again" in failed["statusMessage"]
        )
        again = await b.result("tasks/get", {"taskId": task_id})
        assert again["status"] == "failed" and again["error"] == failed["error"]


#: How often the instances look at the store for answers: far longer than any guard of this
#: file, so a task that resumes at all was resumed by the broker's wake-up, never by a poll.
SLOW_POLL = "3600"


async def test_answers_posted_to_another_instance_resume_the_task_at_once(
    redis_instance: RedisInstance,  # noqa: F811
) -> None:
    async with (
        instances(redis_instance, {"MRTR_TEST_ANSWER_POLL": SLOW_POLL}) as [(url_a, _), (url_b, _)],
        aiohttp.ClientSession() as session,
    ):
        a, b = HttpPeer(session, url_a), HttpPeer(session, url_b)
        for round_ in range(2):  # the second task proves the first wake-up left nothing stale
            task_id = (await a.result("tools/call", {"name": "pair", "arguments": {}}))["taskId"]
            await b.until(task_id, "input_required")
            answers = {
                "a": {"action": "accept", "content": {"name": f"Ada{round_}"}},
                "b": {"action": "accept", "content": {"name": "Bo"}},
            }
            await b.result("tasks/update", {"taskId": task_id, "inputResponses": answers})
            # Bounded by GUARD, far below SLOW_POLL: only the wake-up can finish it in time.
            done = await a.until(task_id, "completed", "failed")
            assert done["status"] == "completed"
            assert done["result"]["content"][0]["text"] == f"Ada{round_} and Bo"
