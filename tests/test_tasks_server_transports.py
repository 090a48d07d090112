"""The tasks flow over real transports: the app as a child process on stdio, and served on
Streamable HTTP on a loopback port (raw JSON-RPC, with the routing headers the spec asks for);
and the official SDK's legacy client, which cannot take tasks."""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import mcp
import mcp_types
from mcp.client.stdio import StdioServerParameters

from helpers.tasks_server_app import APP, HttpPeer, build_server, request, ship_flow, stdio_peer
from helpers.transport_flow import serve


async def test_a_task_asks_before_and_during_over_stdio() -> None:
    async with stdio_peer() as peer:
        await ship_flow(peer)


async def test_a_task_asks_before_and_during_over_http() -> None:
    async with (
        serve(build_server().asgi_app()) as base,
        aiohttp.ClientSession() as session,
    ):
        await ship_flow(HttpPeer(session, base + "/mcp"))


async def test_http_refuses_a_task_request_whose_mcp_name_is_not_its_task_id() -> None:
    async with (
        serve(build_server().asgi_app()) as base,
        aiohttp.ClientSession() as session,
    ):
        peer = HttpPeer(session, base + "/mcp")
        created = await peer.result("tools/call", {"name": "sleep", "arguments": {"seconds": 5}})
        task_id = created["taskId"]
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "params": request(1, "tasks/get", {"taskId": task_id})["params"],
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tasks/get",
            "Mcp-Name": "some-other-task",
        }
        async with session.post(base + "/mcp", json=body, headers=headers) as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert error["code"] == -32020 and "taskId" in error["message"]
        await peer.result("tasks/cancel", {"taskId": task_id})


async def test_http_serves_task_requests_that_leave_out_mcp_name() -> None:
    """Lenient on a missing `Mcp-Name` for `tasks/*` (clients exist that omit it; it is only
    a routing hint there), strict on a mismatched one (the test above)."""
    async with (
        serve(build_server().asgi_app()) as base,
        aiohttp.ClientSession() as session,
    ):
        peer = HttpPeer(session, base + "/mcp")
        created = await peer.result("tools/call", {"name": "sleep", "arguments": {"seconds": 5}})
        task_id = created["taskId"]
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
        }
        answers = {}
        for i, method in enumerate(("tasks/get", "tasks/cancel"), start=1):
            body = {
                "jsonrpc": "2.0",
                "id": i,
                "method": method,
                "params": request(i, method, {"taskId": task_id})["params"],
            }
            async with session.post(
                base + "/mcp", json=body, headers={**headers, "Mcp-Method": method}
            ) as response:
                assert response.status == 200
                answers[method] = (await response.json())["result"]
        assert answers["tasks/get"]["taskId"] == task_id
        assert answers["tasks/get"]["status"] == "working"
        assert answers["tasks/cancel"]["resultType"] == "complete"
        # tools/call still requires it: the core spec's table does.
        body = request(9, "tools/call", {"name": "sleep", "arguments": {"seconds": 0}})
        async with session.post(
            base + "/mcp", json=body, headers={**headers, "Mcp-Method": "tools/call"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == -32020


async def test_a_legacy_client_runs_task_tools_in_line_and_is_asked_live() -> None:
    """The official SDK's client in legacy mode (`initialize`, no per-request capabilities)
    calls a tool registered with `task=`: it runs in line, both its questions asked live."""
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        content = {"name": "Lin"} if "where" in params.message else {"ok": True}
        return mcp_types.ElicitResult(action="accept", content=content)

    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=[APP, "stdio"]),
        mode="legacy",
        elicitation_callback=elicit,
    ) as client:
        result = await client.call_tool("ship", {"item": "lamp"})
        assert result.content[0].text == "lamp shipped to Lin (task False)"  # type: ignore[union-attr]
        slept = await client.call_tool("short_lived", {"seconds": 0})  # "required": in line too
        assert slept.content[0].text == "done"  # type: ignore[union-attr]
    assert asked == ["Ship lamp where?", "Ship lamp to Lin?"]
