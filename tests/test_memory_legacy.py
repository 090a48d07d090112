"""`Client.in_memory` speaks the legacy era too: `ClientOptions(protocol="legacy")` opens an
`initialize` session in memory, where a tool's question is a live server-to-client request
answered by the client's own handlers, as on stdio."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.eventually import eventually
from mrtr import (
    Client,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    McpError,
    RequestContext,
    Root,
    Server,
    ServerOptions,
    TextContent,
)
from mrtr.client.options import ClientOptions
from mrtr.server.options import InputRequiredConfig

server = Server("legacy-in-memory")


@server.tool()
async def greet(ctx: RequestContext) -> str:
    """Ask for a name, then greet."""
    answer = await ctx.elicit(
        "Whom to greet?", {"type": "object", "properties": {"name": {"type": "string"}}}
    )
    era = "legacy session" if ctx.session is not None else "rounds"
    assert answer.content is not None
    return f"Hello, {answer.content['name']} ({era}, round {ctx.round})"


@server.tool()
async def summarise_roots(ctx: RequestContext) -> str:
    """Ask the client for its roots and its model for a summary of them."""
    roots = await ctx.list_roots()
    summary = await ctx.sample(" ".join(str(root.uri) for root in roots.roots))
    assert isinstance(summary.content, TextContent)
    return summary.content.text


STARTED: list[Any] = []
CANCELLED: list[str] = []


@server.tool()
async def slow(ctx: RequestContext) -> str:
    STARTED.append(ctx.request_id)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        CANCELLED.append("legacy session" if ctx.session is not None else "rounds")
        raise
    return "late"


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def test_a_legacy_in_memory_call_is_answered_live_by_the_elicitation_handler() -> None:
    asked: list[str] = []

    async def elicit(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "Ada"})

    options = ClientOptions(protocol="legacy")
    async with Client.in_memory(server, options=options, elicitation_handler=elicit) as client:
        result = await client.call_tool("greet", {})
        # Live: the handler ran once, on the session, without a second round.
        assert text(result) == "Hello, Ada (legacy session, round 0)"
        assert asked == ["Whom to greet?"]
        # The same client goes on using its session.
        assert text(await client.call_tool("greet", {})) == text(result)


async def test_roots_and_sampling_are_answered_live_too() -> None:
    def roots(params: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri="file:///a"), Root(uri="file:///b")])

    def sample(params: CreateMessageRequestParams) -> CreateMessageResult:
        content = params.messages[0].content
        assert isinstance(content, TextContent)
        reply = TextContent(text=f"summary of {content.text}")
        return CreateMessageResult(role="assistant", content=reply, model="m")

    async with Client.in_memory(
        server,
        options=ClientOptions(protocol="legacy"),
        roots_handler=roots,
        sampling_handler=sample,
    ) as client:
        result = await client.call_tool("summarise_roots", {})
    assert text(result) == "summary of file:///a file:///b"


async def test_a_legacy_in_memory_call_can_be_cancelled() -> None:
    async with Client.in_memory(server, options=ClientOptions(protocol="legacy")) as client:
        call = asyncio.ensure_future(client.call_tool("slow", {}))
        await eventually(lambda: bool(STARTED), "the handler to start", timeout=10.0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # `notifications/cancelled` reached the handler while the session stays open.
        await eventually(lambda: bool(CANCELLED), "the handler to be cancelled", timeout=10.0)
        assert CANCELLED == ["legacy session"]
        assert "slow" in [t.name for t in (await client.list_tools()).tools]


async def test_the_modern_era_in_memory_is_unchanged() -> None:
    def elicit(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Bob"})

    async with Client.in_memory(server, elicitation_handler=elicit) as client:
        result = await client.call_tool("greet", {})
        assert text(result) == "Hello, Bob (rounds, round 1)"


async def test_a_server_that_serves_no_legacy_clients_says_so_in_memory() -> None:
    modern_only = Server(
        "modern-only", options=ServerOptions(input_required=InputRequiredConfig(legacy_shim=False))
    )
    options = ClientOptions(protocol="legacy")
    with pytest.raises(McpError, match="2026-07-28"):
        async with Client.in_memory(modern_only, options=options) as client:
            await client.list_tools()
