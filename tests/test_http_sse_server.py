"""The HTTP+SSE transport of MCP 2024-11-05, served beside Streamable HTTP: the official SDK's
client (`mcp==2.3.0`, `mcp.client.sse.sse_client` + `ClientSession`) against an `mrtr` server
on real loopback HTTP, and the refusals a raw HTTP client meets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import mcp
import mcp_types
import pytest
import pytest_asyncio
from mcp.client.sse import sse_client

from helpers.sse_server import build_server
from helpers.transport_flow import GUARD, serve
from mrtr import AccessToken, AuthSettings
from mrtr.server.budgets import Budgets
from mrtr.transport.http_app import StreamableHTTPApp


async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})


@pytest_asyncio.fixture
async def endpoint() -> AsyncIterator[tuple[str, StreamableHTTPApp]]:
    app = StreamableHTTPApp(build_server())
    async with serve(app) as base:
        yield base, app
        app.close()


def text(result: Any) -> str:
    return str(result.content[0].text)


async def wait_for_no_stream(app: StreamableHTTPApp) -> None:
    assert app.sse is not None
    await asyncio.wait_for(app.sse.wait_empty(), GUARD)


async def test_the_official_sse_client_initializes_lists_calls_and_answers_a_question(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    base, app = endpoint
    async with (
        sse_client(base + "/sse") as (read, write),
        mcp.ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        init = await asyncio.wait_for(session.initialize(), GUARD)
        assert init.server_info.name == "sse-interop"
        assert init.protocol_version == "2025-11-25"
        tools = await asyncio.wait_for(session.list_tools(), GUARD)
        assert sorted(tool.name for tool in tools.tools) == ["add", "greet"]
        assert text(await session.call_tool("add", {"a": 2, "b": 3})) == "5"
        assert text(await session.call_tool("greet", {})) == "hello Ada (accept)"
        # An error is an answer on the stream: the session goes on.
        with pytest.raises(mcp.MCPError) as failed:
            await asyncio.wait_for(session.call_tool("nope", {}), GUARD)
        assert "nope" in str(failed.value)
        assert text(await session.call_tool("add", {"a": 1, "b": 1})) == "2"
        assert len(app.sse or ()) == 1
    # The client went away: its session ends with its stream.
    await wait_for_no_stream(app)


async def test_a_post_to_an_unknown_or_missing_session_is_refused(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    base, _ = endpoint
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx.AsyncClient(timeout=GUARD) as http:
        unknown = await http.post(base + "/sse?session_id=nobody", json=ping)
        assert unknown.status_code == 404
        assert "GET /sse" in unknown.json()["error"]["message"]
        missing = await http.post(base + "/sse", json=ping)
        assert missing.status_code == 400
        assert "session_id" in missing.json()["error"]["message"]
        other = await http.put(base + "/sse", json=ping)
        assert other.status_code == 405
        assert other.headers["allow"] == "GET, POST"


async def test_a_foreign_origin_is_refused_on_the_stream_and_on_posts(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    base, app = endpoint
    evil = {"origin": "https://evil.example"}
    async with httpx.AsyncClient(timeout=GUARD) as http:
        opened = await http.get(base + "/sse", headers=evil)
        assert opened.status_code == 403
        assert "Origin" in opened.json()["error"]["message"]
        assert len(app.sse or ()) == 0
        async with http.stream("GET", base + "/sse") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            assert endpoint_url.startswith("/sse?session_id=")
            refused = await http.post(base + endpoint_url, json=INITIALIZE, headers=evil)
            assert refused.status_code == 403
            # Before initialize a legacy session serves ping alone.
            ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
            assert (await http.post(base + endpoint_url, json=ping)).status_code == 202
            assert await anext(lines) == ""
            assert await anext(lines) == "event: message"
            assert await anext(lines) == 'data: {"jsonrpc":"2.0","id":0,"result":{}}'
            taken = await http.post(base + endpoint_url, json=INITIALIZE)
            assert taken.status_code == 202
            assert await anext(lines) == ""
            assert await anext(lines) == "event: message"
            answer = json.loads((await anext(lines)).removeprefix("data: "))
            assert answer["id"] == 1
            assert answer["result"]["protocolVersion"] == "2024-11-05"
            bad = await http.post(base + endpoint_url, content=b"{", headers=JSON)
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == -32700


JSON = {"content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t"}},
}


async def test_sessions_are_bound_to_their_principal_and_counted_per_principal() -> None:
    app = StreamableHTTPApp(
        build_server(
            principal=lambda scope: dict(scope["headers"]).get(b"x-user", b"").decode(),
            budgets=Budgets(sessions_per_principal=1),
        )
    )
    async with serve(app) as base, httpx.AsyncClient(timeout=GUARD) as http:
        ada = {"x-user": "ada"}
        async with http.stream("GET", base + "/sse", headers=ada) as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            # Another caller knowing the URL finds no session there.
            other = await http.post(base + endpoint_url, json=ping, headers={"x-user": "bob"})
            assert other.status_code == 404
            assert (await http.post(base + endpoint_url, json=ping, headers=ada)).status_code == 202
            # A second stream of the same caller is past its budget; another caller's is not.
            second = await http.get(base + "/sse", headers=ada)
            assert second.status_code == 429
            assert second.json()["error"]["data"]["reason"] == "budget_exceeded"
            async with http.stream("GET", base + "/sse", headers={"x-user": "bob"}) as bobs:
                assert bobs.status_code == 200
        await wait_for_no_stream(app)
        app.close()


async def test_the_transport_can_be_turned_off() -> None:
    app = StreamableHTTPApp(build_server(), sse_path=None)
    async with serve(app) as base, httpx.AsyncClient(timeout=GUARD) as http:
        assert (await http.get(base + "/sse")).status_code == 404


class Tokens:
    """Accepts the one token `good`, for the subject ada (a verifier of the server's own)."""

    async def verify(self, token: str) -> AccessToken | None:
        return AccessToken(subject="ada", client_id="app") if token == "good" else None


async def test_a_protected_server_asks_a_token_on_the_stream_and_on_posts() -> None:
    server = build_server(
        auth=AuthSettings(
            resource="http://127.0.0.1/mcp",
            authorization_servers=["https://as.example"],
            verifier=Tokens(),
        )
    )
    app = StreamableHTTPApp(server)
    good = {"authorization": "Bearer good"}
    async with serve(app) as base, httpx.AsyncClient(timeout=GUARD) as http:
        refused = await http.get(base + "/sse")
        assert refused.status_code == 401
        assert "resource_metadata" in refused.headers["www-authenticate"]
        assert (
            await http.get(base + "/sse", headers={"authorization": "Bearer bad"})
        ).status_code == 401
        async with http.stream("GET", base + "/sse", headers=good) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            assert (await http.post(base + endpoint_url, json=INITIALIZE)).status_code == 401
            taken = await http.post(base + endpoint_url, json=INITIALIZE, headers=good)
            assert taken.status_code == 202
        await wait_for_no_stream(app)
        app.close()


async def test_closing_the_app_ends_open_streams_and_their_sessions(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    base, app = endpoint
    async with httpx.AsyncClient(timeout=GUARD) as http:
        async with http.stream("GET", base + "/sse") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            app.close()  # what a shutdown does first
            rest = [line async for line in lines]
            assert all(not line or line.startswith(":") for line in rest)
        await wait_for_no_stream(app)
        gone = await http.post(base + endpoint_url, json=INITIALIZE)
        assert gone.status_code == 404


async def test_a_post_past_the_body_limit_or_of_another_type_is_refused() -> None:
    app = StreamableHTTPApp(build_server(), max_body_size=1024, max_inflight_body_bytes=4096)
    async with serve(app) as base, httpx.AsyncClient(timeout=GUARD) as http:
        async with http.stream("GET", base + "/sse") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            large = await http.post(base + endpoint_url, content=b" " * 2048, headers=JSON)
            assert large.status_code == 413
            plain = await http.post(
                base + endpoint_url, content=b"{}", headers={"content-type": "text/plain"}
            )
            assert plain.status_code == 415
            assert (await http.post(base + endpoint_url, json=INITIALIZE)).status_code == 202
            assert app.inflight_body_bytes == 0
        app.close()


async def test_streams_past_max_sse_streams_get_503_and_none_is_closed() -> None:
    app = StreamableHTTPApp(build_server(), max_sse_streams=1)
    async with serve(app) as base, httpx.AsyncClient(timeout=GUARD) as http:
        async with http.stream("GET", base + "/sse") as stream:
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint_url = (await anext(lines)).removeprefix("data: ")
            busy = await http.get(base + "/sse")
            assert busy.status_code == 503
            assert busy.headers["retry-after"] == "5"
            assert busy.json()["error"]["data"]["bound"] == "total"
            # The open stream's session still works.
            assert (await http.post(base + endpoint_url, json=INITIALIZE)).status_code == 202
            assert await anext(lines) == ""
            assert await anext(lines) == "event: message"
        await wait_for_no_stream(app)
        async with http.stream("GET", base + "/sse") as again:
            assert again.status_code == 200
        app.close()
