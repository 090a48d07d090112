"""`Client.listen`: a `subscriptions/listen` stream from the client's side, in memory and over
Streamable HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from helpers.transport_flow import serve
from mrtr import Client, Server
from mrtr.client import Change, Subscription

GUARD = 10.0  # seconds: only ever reached when something is broken


def build_server() -> Server:
    server = Server("listening")

    @server.tool()
    def ping() -> str:
        """Answers pong."""
        return "pong"

    @server.prompt()
    def hello() -> str:
        """Says hello."""
        return "hello"

    @server.resource("file:///config.json")
    def config() -> str:
        """The configuration."""
        return "{}"

    return server


@asynccontextmanager
async def connect(server: Server, transport: str) -> AsyncIterator[Client]:
    if transport == "memory":
        async with Client.in_memory(server) as client:
            yield client
        return
    async with serve(server.asgi_app()) as base, Client.http(base + "/mcp") as client:
        yield client


async def take(changes: Subscription, count: int) -> list[Change]:
    got: list[Change] = []
    async with asyncio.timeout(GUARD):
        async for change in changes:
            got.append(change)
            if len(got) == count:
                break
    return got


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_listen_delivers_the_changes_asked_for_and_only_those(transport: str) -> None:
    server = build_server()
    async with connect(server, transport) as client:
        async with client.listen(tools=True, resource_uris=["file:///config.json"]) as changes:
            assert changes.honoured == {
                "toolsListChanged": True,
                "resourceSubscriptions": ["file:///config.json"],
            }
            server.notify_prompts_changed()  # not asked for
            server.notify_resource_updated("file:///other.json")  # not subscribed
            server.notify_tools_changed()
            server.notify_resource_updated("file:///config.json")
            got = await take(changes, 2)
        assert sorted(got, key=lambda c: c.kind) == [
            Change("resource", "file:///config.json"),
            Change("tools"),
        ]
        # The stream ended with the block; the client goes on serving calls.
        result = await client.call_tool("ping")
        assert result.content[0].text == "pong"  # type: ignore[union-attr]
        for _ in range(int(GUARD / 0.01)):  # bounded: the server side lets go of the stream
            if not len(server._subscriptions):
                break
            await asyncio.sleep(0.01)
        assert not len(server._subscriptions)


async def test_the_server_honours_only_what_it_can_announce() -> None:
    server = Server("no-prompts")

    @server.tool()
    def ping() -> str:
        """Answers pong."""
        return "pong"

    async with Client.in_memory(server) as client, client.listen(tools=True, prompts=True) as ch:
        assert ch.honoured == {"toolsListChanged": True}


async def test_iteration_ends_when_the_server_closes_the_stream() -> None:
    server = build_server()
    async with Client.in_memory(server) as client, client.listen(tools=True) as changes:
        server.notify_tools_changed()
        await asyncio.sleep(0)
        server.close_subscriptions()
        async with asyncio.timeout(GUARD):
            got = [change async for change in changes]
    assert got == [Change("tools")]


async def test_two_streams_each_get_their_own_changes() -> None:
    server = build_server()
    async with (
        Client.in_memory(server) as client,
        client.listen(tools=True) as tool_changes,
        client.listen(prompts=True) as prompt_changes,
    ):
        server.notify_tools_changed()
        server.notify_prompts_changed()
        assert await take(tool_changes, 1) == [Change("tools")]
        assert await take(prompt_changes, 1) == [Change("prompts")]
