"""A re-sent round that made a task: the same task again, never a second run of the handler.

The round that becomes a task is redeemed like any sealed round (exactly once, `redemption.py`),
but its request answers with the `CreateTaskResult` while the handler runs on for as long as the
task lives, far past the `round_timeout` that bounds an ordinary round's "running" record. A
client that lost that answer re-sends the round: it must get the same task back, whenever it
asks, and the handler must not start again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from helpers.tasks_server_app import NAME, MemoryPeer
from mrtr import RequestContext, Server, ServerOptions, TaskSettings
from mrtr.server.options import InputRequiredConfig
from mrtr.server.store import MemoryStore

WHERE = {"action": "accept", "content": {"name": "Ada"}}


class Clock:
    """Monotonic time that a test can move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def shipping_server(store: MemoryStore, started: list[str], release: asyncio.Event) -> Server:
    server = Server(
        "resend",
        options=ServerOptions(store=store, input_required=InputRequiredConfig(round_timeout=1)),
    )

    @server.tool(task=TaskSettings("optional", start_after=None))
    async def ship(ctx: RequestContext, item: str) -> str:
        """Asks where by MRTR, becomes a task, then works until released."""
        where = await ctx.elicit(f"Ship {item} where?", NAME, key="where")
        await ctx.run_as_task()
        started.append(item)  # the side effect: once per call, whatever is re-sent
        await release.wait()
        return f"{item} shipped to {(where.content or {}).get('name')}"

    return server


async def test_a_resent_task_round_gets_the_same_task_long_after_round_timeout() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    started: list[str] = []
    release = asyncio.Event()
    server = shipping_server(store, started, release)
    peer = MemoryPeer(server)
    async with server.running():
        first = await peer.result("tools/call", {"name": "ship", "arguments": {"item": "book"}})
        retry: dict[str, Any] = {
            "name": "ship",
            "arguments": {"item": "book"},
            "requestState": first["requestState"],
            "inputResponses": {"where": WHERE},
        }
        created = await peer.result("tools/call", retry)
        assert created["resultType"] == "task"
        # The answer was lost; the client re-sends long after round_timeout + its margin.
        clock.offset += 60
        again = await peer.result("tools/call", retry)
        assert again["resultType"] == "task"
        assert again["taskId"] == created["taskId"]
        assert started == ["book"]
        release.set()
        done = await peer.until(created["taskId"], "completed")
        assert done["result"]["content"][0]["text"] == "book shipped to Ada"
        # Once the task has finished, a re-send still names the task, not a new run.
        final = await peer.result("tools/call", retry)
        assert final["taskId"] == created["taskId"]
        assert started == ["book"]
