"""On a legacy (2025-11-25 and earlier) HTTP session every JSON-RPC answer goes out with 200,
errors included, and the session goes on; 4xx is left for what the transport refuses.

Legacy clients take a 4xx for the session failing (a 404 on a request with a session id even
means "session gone, initialize again"), so an unknown tool, bad arguments or an unknown method
must not cost the session. Checked over raw HTTP (the status itself) and with the official
client (`mcp`, `mode="legacy"`), against a real uvicorn on loopback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import mcp
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from helpers.transport_flow import GUARD, serve
from mrtr import Server
from mrtr.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND
from mrtr.transport.http_app import StreamableHTTPApp

LEGACY = "2025-11-25"


def build_server() -> Server:
    server = Server("legacy-status", version="1.0.0")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return server


@contextlib.asynccontextmanager
async def endpoint() -> AsyncIterator[str]:
    app = StreamableHTTPApp(build_server())
    async with serve(app) as base:
        yield base + "/mcp"
        app.close()


class Session:
    """A legacy session over raw HTTP."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self.next_id = 0

    async def post(self, message: dict[str, Any], **extra: str) -> httpx.Response:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **extra,
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers.setdefault("MCP-Protocol-Version", LEGACY)
        return await self.http.post(self.url, json=message, headers=headers)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        return await self.post(message)

    async def open(self) -> None:
        response = await self.request(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        assert response.status_code == 200
        self.session_id = response.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.post(initialized)).status_code == 202


async def still_works(session: Session) -> None:
    response = await session.request("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert response.status_code == 200
    assert response.json()["result"]["content"][0]["text"] == "5"


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("tools/call", {"name": "no_such_tool", "arguments": {}}, INVALID_PARAMS),
        # Arguments that fail the schema are a tool error in the legacy revisions (isError).
        ("tools/call", {"name": "add", "arguments": {"a": "two"}}, "tool-error"),
        ("no/such/method", {}, METHOD_NOT_FOUND),
        ("resources/read", {"uri": "nothing://here"}, None),
        ("initialize", {"protocolVersion": LEGACY}, INVALID_REQUEST),  # a second one
    ],
    ids=["unknown-tool", "bad-arguments", "unknown-method", "unknown-resource", "re-initialize"],
)
async def test_a_json_rpc_error_is_200_and_the_session_goes_on(
    method: str, params: dict[str, Any], code: int | str | None
) -> None:
    async with endpoint() as url, httpx.AsyncClient(timeout=GUARD) as http:
        session = Session(http, url)
        await session.open()
        response = await session.request(method, params)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        if code == "tool-error":
            assert response.json()["result"]["isError"] is True
        else:
            error = response.json()["error"]
            assert error["message"]
            if code is not None:
                assert error["code"] == code
        await still_works(session)


async def test_transport_refusals_keep_their_4xx() -> None:
    async with endpoint() as url, httpx.AsyncClient(timeout=GUARD) as http:
        session = Session(http, url)
        await session.open()
        # A session id this endpoint never gave: 404, initialize again.
        known, session.session_id = session.session_id, "unknown"
        response = await session.request("tools/list")
        assert response.status_code == 404
        assert "Session not found" in response.json()["error"]["message"]
        session.session_id = known
        # A protocol version header that is not the session's.
        message = {"jsonrpc": "2.0", "id": 50, "method": "tools/list", "params": {}}
        response = await session.post(message, **{"MCP-Protocol-Version": "2025-03-26"})
        assert response.status_code == 400
        # Not JSON at all.
        response = await http.post(
            url,
            content=b"a=1",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json, text/event-stream",
                "Mcp-Session-Id": known or "",
            },
        )
        assert response.status_code == 415
        await still_works(session)


async def test_the_official_client_keeps_its_session_after_errors() -> None:
    async with endpoint() as url, mcp.Client(url, mode="legacy") as client:
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content[0].text == "3"
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert unknown.value.error.code == INVALID_PARAMS
        assert "no_such_tool" in unknown.value.error.message
        assert (await client.call_tool("add", {"a": "two"})).is_error
        with pytest.raises(MCPError) as no_method:
            await client.session.send_request(
                mcp_types.Request(method="no/such/method", params=None), mcp_types.EmptyResult
            )
        assert no_method.value.error.code == METHOD_NOT_FOUND
        with pytest.raises(MCPError) as missing:
            await client.read_resource("nothing://here")
        assert missing.value.error.message
        # Every later call is served on the same session.
        result = await client.call_tool("add", {"a": 20, "b": 22})
        assert isinstance(result.content[0], mcp_types.TextContent)
        assert result.content[0].text == "42"
        assert [tool.name for tool in (await client.list_tools()).tools] == ["add"]
