"""The official SDK's client (`mcp==2.3.0`, its Streamable HTTP transport) against an `mrtr`
server on real loopback HTTP, in `mode="legacy"` (an `initialize` session: questions go to it
as live requests) and in its default `auto` mode, with its callbacks answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import mcp
import mcp_types
import pytest
import pytest_asyncio

from helpers.transport_flow import GUARD, serve
from mrtr import InputRequiredResult, RequestContext, Server, elicit_request, roots_request
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.http_legacy import close_sse_stream

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def build_server() -> Server:
    server = Server("interop", version="2.0.0")

    @server.tool()
    async def greet(ctx: RequestContext) -> str:
        """Ask the user's name."""
        answer = await ctx.elicit("Your name?", NAME)
        return f"hello {(answer.content or {}).get('name')} ({answer.action})"

    @server.tool()
    async def summarize(ctx: RequestContext, text: str) -> str:
        """Ask the client's model."""
        reply = await ctx.sample(f"Summarize: {text}", max_tokens=20)
        return f"{getattr(reply.content, 'text', '?')} by {reply.model}"

    @server.tool()
    async def roots(ctx: RequestContext) -> str:
        """Ask for the client's roots."""
        listed = await ctx.list_roots()
        return ",".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def both(ctx: RequestContext) -> str:
        """Ask two things at once."""
        answers = await ctx.ask({"who": elicit_request("Who?", NAME), "where": roots_request()})
        return f"{(answers['who'].content or {}).get('name')} in {len(answers['where'].roots)}"

    @server.tool()
    async def rename(ctx: RequestContext, path: str) -> str | InputRequiredResult:
        """The manual style."""
        answer = ctx.input_responses.get("new_name")
        if answer is None or ctx.request_state != "asked":
            return InputRequiredResult(
                input_requests={"new_name": elicit_request(f"Rename {path}?", NAME)},
                request_state="asked",
            )
        return f"{path} -> {answer['content']['name']}"

    @server.tool()
    async def polled(ctx: RequestContext) -> str:
        """End the connection early, ask, then answer (the client resumes the stream)."""
        close_sse_stream()
        await asyncio.sleep(0.05)
        answer = await ctx.elicit("After the cut?", NAME)
        return f"resumed: {(answer.content or {}).get('name')}"

    @server.tool()
    async def touch(ctx: RequestContext) -> str:
        """Announce a tool list change."""
        ctx.server.notify_tools_changed()
        return "touched"

    return server


async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})


async def sample(context: Any, params: Any) -> mcp_types.CreateMessageResult:
    return mcp_types.CreateMessageResult(
        role="assistant", content=mcp_types.TextContent(type="text", text="short"), model="m1"
    )


async def list_roots(context: Any) -> mcp_types.ListRootsResult:
    return mcp_types.ListRootsResult(
        roots=[mcp_types.Root(uri="file:///a"), mcp_types.Root(uri="file:///b")]
    )


@pytest_asyncio.fixture
async def endpoint() -> AsyncIterator[tuple[str, StreamableHTTPApp]]:
    app = StreamableHTTPApp(build_server(), sse_retry=0.05)
    async with serve(app) as base:
        yield base + "/mcp", app
        app.close()


def text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_every_way_of_asking_works_in_both_modes(
    endpoint: tuple[str, StreamableHTTPApp], mode: str, version: str
) -> None:
    url, app = endpoint
    async with mcp.Client(
        url,
        mode=mode,  # type: ignore[arg-type]
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=list_roots,
    ) as client:
        assert client.session.protocol_version == version
        # Only the legacy handshake opens a session on the server.
        assert len(app.sessions.store) == (1 if mode == "legacy" else 0)
        assert text(await client.call_tool("greet", {})) == "hello Ada (accept)"
        assert text(await client.call_tool("summarize", {"text": "t"})) == "short by m1"
        assert text(await client.call_tool("roots", {})) == "file:///a,file:///b"
        assert text(await client.call_tool("both", {})) == "Ada in 2"
        assert text(await client.call_tool("rename", {"path": "x"})) == "x -> Ada"
        # Several at once on one session: each answer on its own request's stream.
        results = await asyncio.gather(*(client.call_tool("greet", {}) for _ in range(4)))
        assert [text(r) for r in results] == ["hello Ada (accept)"] * 4
    # The client ends its session on the way out (DELETE).
    assert len(app.sessions.store) == 0


async def test_the_legacy_client_resumes_a_stream_the_server_cut(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    url, _ = endpoint
    async with mcp.Client(url, mode="legacy", elicitation_callback=elicit) as client:
        result = await asyncio.wait_for(client.call_tool("polled", {}), GUARD)
        assert text(result) == "resumed: Ada"


async def test_the_legacy_client_hears_list_changes_on_its_get_stream(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    url, _ = endpoint
    heard = asyncio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            heard.set()

    async with mcp.Client(url, mode="legacy", message_handler=on_message) as client:
        assert text(await client.call_tool("touch", {})) == "touched"
        await asyncio.wait_for(heard.wait(), GUARD)


async def test_a_legacy_client_without_the_capability_gets_a_clear_error(
    endpoint: tuple[str, StreamableHTTPApp],
) -> None:
    url, _ = endpoint
    async with mcp.Client(url, mode="legacy") as client:  # declares no elicitation
        with pytest.raises(mcp.MCPError) as caught:
            await client.call_tool("greet", {})
        assert caught.value.error.code == -32021
        assert "elicitation" in caught.value.error.message
        assert text(await client.call_tool("touch", {})) == "touched"  # the session goes on
