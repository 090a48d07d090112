"""The server the tasks tests drive, raw JSON-RPC peers for memory, stdio and HTTP, and the
flow the transports share.

Run as a script it serves the app: `python tests/helpers/tasks_server_app.py stdio`, or
`... http PORT` (the `MRTR_*` variables configure it: `MRTR_STORE_URL` shares its tasks).
`MRTR_TEST_TASK_LEASE` sets the lease of its tasks (seconds), `MRTR_TEST_ANSWER_POLL` how
often a task waiting for answers looks at the store (seconds). Callers are told apart by the
`x-test-user` HTTP header, or by the transport info a memory test passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

# Run as a script, only this file's own directory is on sys.path; the package lives one level up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import wire
from helpers.caller_header import caller
from mrtr import RequestContext, Server, TaskSettings
from mrtr.protocol.tasks import EXTENSION_ID
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.tasks import run as task_run
from mrtr.settings import server_options

APP = str(Path(__file__).resolve())


GUARD = 10.0  # seconds: only ever reached when something is broken


WITH_TASKS: dict[str, Any] = {"elicitation": {}, "extensions": {EXTENSION_ID: {}}}


WITHOUT_TASKS: dict[str, Any] = {"elicitation": {}}


CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


#: What handlers of this process saw happen, for the memory tests.
EVENTS: list[str] = []


def build_server() -> Server:
    """The tasks test server."""
    lease = float(os.environ.get("MRTR_TEST_TASK_LEASE", "10"))
    poll = os.environ.get("MRTR_TEST_ANSWER_POLL")
    if poll is not None:
        task_run.ANSWER_POLL = task_run.ANSWER_FALLBACK_POLL = float(poll)
    server = Server("tasks-test", options=server_options(principal=caller))

    @server.tool(task=TaskSettings("optional", start_after=None, lease=lease))
    async def ship(ctx: RequestContext, item: str) -> str:
        """Asks where to ship by MRTR, becomes a task, then asks for a confirmation."""
        where = await ctx.elicit(f"Ship {item} where?", NAME, key="where")
        address = (where.content or {}).get("name", "?")
        await ctx.run_as_task()
        await ctx.report_progress(1, 2, "packing")
        sure = await ctx.elicit(f"Ship {item} to {address}?", CONFIRM, key="sure")
        if sure.action != "accept":
            return f"{item} stays home"
        return f"{item} shipped to {address} (task {ctx.task_id is not None})"

    @server.tool(task=TaskSettings("optional", lease=lease))
    async def sleep(seconds: float) -> str:
        """Sleeps, noting in EVENTS whether it was cancelled."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            EVENTS.append("sleep cancelled")
            raise
        return f"slept {seconds:g} s"

    @server.tool(task=TaskSettings("required", ttl=0.6))
    async def short_lived(seconds: float) -> str:
        """A task with a TTL of 0.6 s."""
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(task="optional")
    async def pair(ctx: RequestContext) -> str:
        """Becomes a task, then asks two questions at once."""
        await ctx.run_as_task()
        a, b = await asyncio.gather(
            ctx.elicit("First?", NAME, key="a"), ctx.elicit("Second?", NAME, key="b")
        )
        return f"{(a.content or {}).get('name')} and {(b.content or {}).get('name')}"

    @server.tool(task="optional")
    async def broken(kind: str) -> str:
        """Fails as asked: with a protocol error or with an ordinary exception."""
        await asyncio.sleep(0.01)
        if kind == "protocol":
            from mrtr import McpError

            raise McpError(-32603, "the backend is gone")
        raise RuntimeError("the handler tripped")

    @server.tool()
    def plain(x: int) -> int:
        """Never a task."""
        return x + 1

    return server


def request(
    id: int, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A 2026-07-28 request with the per-request `_meta` (tasks declared unless `caps`)."""
    return wire.request(
        method, params, id=id, client_info=None, caps=WITH_TASKS if caps is None else caps
    )


class Peer:
    """Sends raw JSON-RPC requests and returns the raw responses."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request; its response."""
        raise NotImplementedError

    async def call(
        self, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Send `method` with `params`; the response (with `result` or `error`)."""
        return await self.send(request(next(self._ids), method, params, caps))

    async def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send `method`; its result (failing on an error)."""
        response = await self.call(method, params)
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result

    async def until(self, task_id: str, *statuses: str) -> dict[str, Any]:
        """Poll `tasks/get` until the task is in one of `statuses`."""
        async with asyncio.timeout(GUARD):
            while True:
                task = await self.result("tasks/get", {"taskId": task_id})
                if task["status"] in statuses:
                    return task
                await asyncio.sleep(0.02)


class MemoryPeer(Peer):
    """Calls `Server.handle_message` directly, as caller `user`."""

    def __init__(self, server: Server, user: str | None = None) -> None:
        super().__init__()
        self.server = server
        self.user = user

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        response = await self.server.handle_message(message, None, self.user)
        assert response is not None
        return response


class StdioPeer(Peer):
    """Talks to the app run as a child process over stdio."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        super().__init__()
        self.process = process

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()
        async with asyncio.timeout(GUARD):
            while True:
                line = await self.process.stdout.readline()
                assert line, "the server closed stdout"
                decoded: dict[str, Any] = json.loads(line)
                if decoded.get("id") == message["id"]:
                    return decoded


class HttpPeer(Peer):
    """POSTs to the app's Streamable HTTP endpoint, with the headers the spec asks for."""

    def __init__(self, session: aiohttp.ClientSession, url: str, user: str | None = None):
        super().__init__()
        self.session = session
        self.url = url
        self.user = user

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        params = message["params"]
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
            "Mcp-Method": message["method"],
        }
        name = params.get("taskId", params.get("name"))
        if isinstance(name, str):
            headers["Mcp-Name"] = name
        if self.user is not None:
            headers["x-test-user"] = self.user
        async with self.session.post(self.url, json=message, headers=headers) as response:
            text = await response.text()
        if response.content_type == "text/event-stream":
            for line in text.splitlines():
                if line.startswith("data:"):
                    decoded: dict[str, Any] = json.loads(line[5:])
                    if decoded.get("id") == message["id"]:
                        return decoded
            raise AssertionError(f"no response in the event stream: {text!r}")
        result: dict[str, Any] = json.loads(text)
        return result


@contextlib.asynccontextmanager
async def stdio_peer(env: dict[str, str] | None = None) -> AsyncIterator[StdioPeer]:
    """The app in a child process over stdio."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        APP,
        "stdio",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        yield StdioPeer(process)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), GUARD)
        except TimeoutError:
            process.kill()
            await process.wait()


ACCEPT_NAME = {"action": "accept", "content": {"name": "Ada"}}


ACCEPT_OK = {"action": "accept", "content": {"ok": True}}


async def ship_flow(peer: Any) -> None:
    """A tool that asks by MRTR before its task exists and through the task while it runs;
    shared with the stdio and HTTP tests."""
    first = await peer.result("tools/call", {"name": "ship", "arguments": {"item": "book"}})
    assert first["resultType"] == "input_required"
    assert set(first["inputRequests"]) == {"where"} and "taskId" not in first
    created = await peer.result(
        "tools/call",
        {
            "name": "ship",
            "arguments": {"item": "book"},
            "requestState": first["requestState"],
            "inputResponses": {"where": ACCEPT_NAME},
        },
    )
    assert created["resultType"] == "task" and created["status"] == "working"
    assert "requestState" not in created and "inputRequests" not in created
    task_id = created["taskId"]
    waiting = await peer.until(task_id, "input_required")
    assert list(waiting["inputRequests"]) == ["sure"]
    assert waiting["inputRequests"]["sure"]["params"]["message"] == "Ship book to Ada?"
    assert "statusMessage" not in waiting  # progress is reported only when a token asked
    ack = await peer.result(
        "tasks/update", {"taskId": task_id, "inputResponses": {"sure": ACCEPT_OK}}
    )
    assert ack["resultType"] == "complete" and "status" not in ack
    done = await peer.until(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "book shipped to Ada (task True)"
    assert "inputRequests" not in done and "error" not in done


if __name__ == "__main__":
    app = build_server()
    if sys.argv[1] == "stdio":
        app.run("stdio")
    else:
        app.run("http", host="127.0.0.1", port=int(sys.argv[2]))
