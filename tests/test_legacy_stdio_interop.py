"""Legacy sessions over real stdio: `mrtr serve` in a child process, driven by the official SDK's
client in `mode="legacy"` and by raw JSON lines (one stream serving both eras, cancellation
of a request waiting for the client, stray responses).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import orjson
import pytest
from mcp.client.stdio import StdioServerParameters

from mrtr.protocol import meta as meta_keys

SCRIPT = Path(__file__).resolve().parent / "servers" / "both_eras_server.py"
SERVE = ["-m", "mrtr", "serve", f"{SCRIPT}:server"]
GUARD = 20.0  # seconds: reached only when something is broken
FORM_CAPS: dict[str, Any] = {"elicitation": {"form": {}}}


# The official client warns that logging/setLevel and resources/subscribe are gone in
# 2026-07-28: exactly why a legacy session is the place to use them.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_the_official_legacy_client_lists_calls_and_hears_changes() -> None:
    changes: list[Any] = []
    heard = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ServerNotification):
            changes.append(message)
            if len(changes) == 2:
                heard.set()

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="decline")

    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=SERVE),
        mode="legacy",
        elicitation_callback=elicit,
        message_handler=on_message,
    ) as client:
        assert client.session.protocol_version == "2025-11-25"
        init = client.session.initialize_result
        assert init is not None and init.server_info.name == "both-eras"
        assert init.instructions == "Every tool asks something."
        tools = await client.list_tools()
        assert "confirm" in [tool.name for tool in tools.tools]
        declined = await client.call_tool("confirm", {"item": "pen"})
        assert declined.content[0].text == "pen: cancelled (decline)"  # type: ignore[union-attr]
        await client.set_logging_level("error")
        await client.subscribe_resource("file:///notes")
        await client.call_tool("touch", {"uri": "file:///notes"})
        await asyncio.wait_for(heard.wait(), GUARD)
        kinds = sorted(
            type(change.root if hasattr(change, "root") else change).__name__ for change in changes
        )
        assert kinds == ["ResourceUpdatedNotification", "ToolListChangedNotification"]
        read = await client.read_resource("file:///notes")
        assert read.contents[0].text == "notes"  # type: ignore[union-attr]


# --- raw lines ----------------------------------------------------------------------------------


class Child:
    """The server as a bare subprocess: write lines, read messages."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        await self.process.stdin.drain()

    async def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), GUARD)
        assert line, "the server closed its stdout"
        return orjson.loads(line)  # type: ignore[no-any-return]

    async def request(self, id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.write({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        return await self.read()

    async def initialize(self, caps: dict[str, Any] | None = None) -> dict[str, Any]:
        init = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": caps if caps is not None else FORM_CAPS,
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        await self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init


@pytest.fixture
async def child() -> AsyncIterator[Child]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *SERVE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield Child(process)
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), GUARD)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_one_stream_serves_a_legacy_session_and_modern_requests(child: Child) -> None:
    init = await child.initialize()
    assert init["result"]["protocolVersion"] == "2025-06-18"
    modern_meta = {meta_keys.PROTOCOL_VERSION: "2026-07-28", meta_keys.CLIENT_CAPABILITIES: {}}
    modern = await child.request(1, "tools/list", {"_meta": modern_meta})
    assert modern["result"]["resultType"] == "complete"
    legacy = await child.request(2, "tools/list", {})
    assert "resultType" not in legacy["result"] and "ttlMs" not in legacy["result"]
    again = await child.request(3, "initialize", {"protocolVersion": "2025-06-18"})
    assert again["error"]["code"] == -32600


async def test_a_modern_client_on_stdio_never_sees_a_legacy_session(child: Child) -> None:
    # No initialize: a request without _meta gets the modern error, not "initialize first".
    refused = await child.request(1, "tools/list", {})
    assert refused["error"]["code"] == -32602 and "_meta" in refused["error"]["message"]


async def test_a_question_goes_out_on_stdout_and_the_answer_comes_back_on_stdin(
    child: Child,
) -> None:
    await child.initialize()
    await child.write(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "confirm", "arguments": {"item": "cup"}},
        }
    )
    asked = await child.read()
    assert asked["method"] == "elicitation/create"
    assert "mode" not in asked["params"]  # 2025-06-18 has no elicitation modes
    # A stray response (an id nobody asked) is ignored, and the real answer still counts.
    await child.write({"jsonrpc": "2.0", "id": "s-404", "result": {}})
    await child.write(
        {
            "jsonrpc": "2.0",
            "id": asked["id"],
            "result": {"action": "accept", "content": {"ok": True}},
        }
    )
    done = await child.read()
    assert done["id"] == 5
    assert done["result"]["content"][0]["text"] == "cup: confirmed"


async def test_cancelling_a_request_that_waits_for_the_client_cancels_its_question(
    child: Child,
) -> None:
    await child.initialize()
    await child.write(
        {
            "jsonrpc": "2.0",
            "id": 6,
            "method": "tools/call",
            "params": {"name": "confirm", "arguments": {"item": "hat"}},
        }
    )
    asked = await child.read()
    await child.write(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}}
    )
    told = await child.read()
    assert told["method"] == "notifications/cancelled"
    assert told["params"]["requestId"] == asked["id"]
    pong = await child.request(7, "ping", {})
    assert pong == {"jsonrpc": "2.0", "id": 7, "result": {}}  # and no response to request 6


async def test_a_client_without_the_capability_gets_32021_and_no_question(child: Child) -> None:
    await child.initialize(caps={})
    refused = await child.request(8, "tools/call", {"name": "confirm", "arguments": {"item": "x"}})
    assert refused["id"] == 8
    assert refused["error"]["code"] == -32021
