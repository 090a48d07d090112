"""`mrtr.Client` over the HTTP+SSE transport of MCP 2024-11-05, on real loopback HTTP: against
the official SDK's server (`mcp==2.3.0`, `MCPServer.sse_app()`, served by uvicorn on this
loop) and against an `mrtr` server's own `/sse`. Given a URL ending in `/sse` the client goes
there at once; given another, it follows the spec's backwards-compatibility procedure (the
`initialize` POST is refused with a 4xx, a GET of the URL brings the `endpoint` event).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from helpers.sse_server import build_server
from helpers.transport_flow import GUARD, serve
from mrtr import Client, ElicitRequestParams, ElicitResult, McpError
from mrtr.transport.http_app import StreamableHTTPApp


class Name(BaseModel):
    name: str


def official_server() -> MCPServer:
    server = MCPServer("official-sse")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    async def greet(ctx: Context) -> str:
        """Ask the user's name."""
        answer = await ctx.elicit("Your name?", Name)
        name = answer.data.name if answer.action == "accept" else "?"
        return f"hello {name} ({answer.action})"

    return server


async def on_elicit(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada"})


@pytest_asyncio.fixture
async def official() -> AsyncIterator[str]:
    server = official_server()
    app = server.sse_app()
    async with serve(app) as base:
        yield base


def text(result: Any) -> str:
    return str(result.content[0].text)


async def exercise(client: Client) -> None:
    """List, call, answer a question, and go on after an error."""
    tools = await client.list_tools()
    assert {"add", "greet"} <= {tool.name for tool in tools.tools}
    assert client.era == "legacy"
    assert text(await client.call_tool("add", {"a": 2, "b": 40})) == "42"
    assert text(await client.call_tool("greet", {})) == "hello Ada (accept)"
    try:
        failed = await client.call_tool("nope", {})
    except McpError as error:  # an mrtr server: a JSON-RPC error
        assert "nope" in error.message
    else:  # the official server: a result flagged isError
        assert failed.is_error
        assert "nope" in text(failed)
    assert text(await client.call_tool("add", {"a": 1, "b": 1})) == "2"


async def test_the_client_speaks_http_sse_to_the_official_server_given_its_sse_url(
    official: str,
) -> None:
    async with Client.http(official + "/sse", elicitation_handler=on_elicit) as client:
        await asyncio.wait_for(exercise(client), GUARD)


async def test_the_client_finds_the_official_servers_http_sse_transport_by_the_4xx() -> None:
    # The stream is not at a path ending in /sse: only the procedure can find it.
    app = official_server().sse_app(sse_path="/events", message_path="/messages/")
    async with (
        serve(app) as base,
        Client.http(base + "/events", elicitation_handler=on_elicit) as client,
    ):
        await asyncio.wait_for(exercise(client), GUARD)


@pytest_asyncio.fixture
async def ours() -> AsyncIterator[tuple[str, StreamableHTTPApp]]:
    app = StreamableHTTPApp(build_server(), sse_path="/old")
    async with serve(app) as base:
        yield base, app
        app.close()


@pytest.mark.parametrize("path", ["/old", "/old?via=link"])
async def test_the_client_speaks_http_sse_to_an_mrtr_server(
    ours: tuple[str, StreamableHTTPApp], path: str
) -> None:
    base, app = ours
    assert app.sse is not None
    async with Client.http(base + path, elicitation_handler=on_elicit) as client:
        await asyncio.wait_for(exercise(client), GUARD)
        assert len(app.sse) == 1
    # Closing the client closes the stream, which ends the session on the server.
    await asyncio.wait_for(app.sse.wait_empty(), GUARD)


async def test_a_url_ending_in_sse_that_serves_no_stream_says_what_to_give_instead() -> None:
    app = StreamableHTTPApp(build_server(), sse_path=None)
    async with serve(app) as base, Client.http(base + "/sse") as client:
        with pytest.raises(McpError) as failed:
            await asyncio.wait_for(client.list_tools(), GUARD)
        assert "serves no HTTP+SSE event stream" in failed.value.message


async def test_a_session_whose_stream_the_server_ended_is_opened_again(
    ours: tuple[str, StreamableHTTPApp],
) -> None:
    base, app = ours
    assert app.sse is not None
    async with Client.http(base + "/old", elicitation_handler=on_elicit) as client:
        assert text(await asyncio.wait_for(client.call_tool("add", {"a": 1, "b": 2}), GUARD)) == "3"
        app.sse.close()  # the server ends the stream, and the session with it
        await asyncio.wait_for(app.sse.wait_empty(), GUARD)
        # The next call finds the session gone (404, or the stream seen closed): nothing
        # was run, so the client opens a new session and sends it there.
        result = await asyncio.wait_for(client.call_tool("greet", {}), GUARD)
        assert text(result) == "hello Ada (accept)"
        assert len(app.sse) == 1


async def stream_without_endpoint(scope: Any, receive: Any, send: Any) -> None:
    """A server that refuses every POST (400) and whose GET opens an event stream that is not
    an HTTP+SSE one: its first event is a message, not `endpoint`."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request"}}'
        await send(
            {"type": "http.response.start", "status": 400,
             "headers": [(b"content-type", b"application/json")]}
        )  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        return
    await send(
        {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"text/event-stream")]}
    )  # fmt: skip
    note = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n'
    await send({"type": "http.response.body", "body": note, "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


async def test_an_event_stream_without_an_endpoint_event_is_no_http_sse_server() -> None:
    async with serve(stream_without_endpoint) as base, Client.http(base + "/mcp") as client:
        with pytest.raises(McpError) as failed:
            await asyncio.wait_for(client.list_tools(), GUARD)
        assert "Bad Request" in failed.value.message
