"""Legacy (initialize-based) Streamable HTTP sessions spoken by hand, and one scenario each for
our client and the official one, for the scale-out tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import mcp
import mcp_types

from helpers.transport_flow import GUARD
from mrtr import (
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
)
from mrtr.client import Change
from servers.legacy_cluster_server import WATCHED

VERSION = "2025-11-25"


HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def accept(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


async def ours_scenario(url: str) -> list[str]:
    """Our client in the legacy era: every kind of request; the servers that asked."""
    logs: list[dict[str, Any]] = []
    client = Client.http(
        url,
        elicitation_handler=accept,
        log_handler=logs.append,
        log_level="warning",
        options=ClientOptions(protocol="legacy"),
    )
    async with client:
        tools = await client.all_tools()
        assert client.era == "legacy" and client.protocol_version == VERSION
        assert {t.name for t in tools} >= {"confirm", "levels", "touch"}
        asked = []
        for item in ("a", "b", "c"):
            result = await asyncio.wait_for(client.call_tool("confirm", {"item": item}), GUARD)
            data = result.structured_content or {}
            assert (data["action"], data["ok"]) == ("accept", True)
            asked.append(str(data["asked_by"]))
        for _ in range(2):  # the level set on one server holds on the other
            await client.call_tool("levels", {})
        assert sorted({entry["level"] for entry in logs}) == ["error", "warning"]
        assert len(logs) == 4
        async with client.listen(resource_uris=[WATCHED]) as changes:
            await asyncio.sleep(0.1)  # the GET stream is open on one of them
            for _ in range(2):  # raised once on each server
                await client.call_tool("touch", {})
                async with asyncio.timeout(GUARD):
                    change = await anext(aiter(changes))
                assert change == Change("resource", WATCHED)
        await client.ping()
    return asked


async def official_scenario(url: str) -> list[str]:
    """The official SDK's client, `mode="legacy"`; the servers that asked."""
    logs: list[str] = []
    updated = asyncio.Event()

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"ok": True})

    async def on_log(params: Any) -> None:
        logs.append(params.level)

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ResourceUpdatedNotification):
            updated.set()

    asked = []
    async with mcp.Client(
        url,
        mode="legacy",
        elicitation_callback=elicit,
        logging_callback=on_log,
        message_handler=on_message,
    ) as client:
        assert client.session.protocol_version == VERSION
        for item in ("a", "b", "c"):
            result = await asyncio.wait_for(client.call_tool("confirm", {"item": item}), GUARD)
            assert result.structured_content is not None
            assert result.structured_content["action"] == "accept"
            asked.append(str(result.structured_content["asked_by"]))
        await client.set_logging_level("warning")
        for _ in range(2):
            await client.call_tool("levels", {})
        assert sorted(logs) == ["error", "error", "warning", "warning"]
        await client.subscribe_resource(WATCHED)
        await asyncio.sleep(0.1)
        await client.call_tool("touch", {})
        await asyncio.wait_for(updated.wait(), GUARD)
        await client.unsubscribe_resource(WATCHED)
        await client.send_ping()
    return asked


def message(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        body["id"] = id
    return body


INIT = message(
    "initialize",
    {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
)


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    session_id: str | None = None,
    **headers: str,
) -> tuple[int, Any, str | None]:
    """POST one message; (status, JSON body or None, Mcp-Session-Id of the answer)."""
    sent = dict(HEADERS, **headers)
    if session_id is not None:
        sent["Mcp-Session-Id"] = session_id
    async with http.post(url, json=body, headers=sent) as response:
        text = await response.text()
        data = json.loads(text) if response.content_type == "application/json" and text else None
        return response.status, data, response.headers.get("mcp-session-id")


async def open_session(http: aiohttp.ClientSession, url: str, **headers: str) -> str:
    status, data, session_id = await post(http, url, INIT, **headers)
    assert status == 200 and data["result"]["protocolVersion"] == VERSION and session_id
    notified = message("notifications/initialized", id=None)
    assert (await post(http, url, notified, session_id, **headers))[0] == 202
    return session_id
