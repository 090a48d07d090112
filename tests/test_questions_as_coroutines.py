"""Every asking method gives something usable wherever a coroutine is: `asyncio.create_task`,
`TaskGroup.create_task`, `ensure_future`, `wait_for`, `gather`, in both eras (2026-07-28 rounds
answered by replay, and a legacy session answered live), over a real HTTP server on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from helpers.transport_flow import GUARD, serve
from mrtr import (
    Client,
    ClientOptions,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    RequestContext,
    Root,
    Server,
    TextContent,
)
from mrtr.inputs import InputRequest
from mrtr.transport.http_app import StreamableHTTPApp

NAME = {"type": "object", "properties": {"name": {"type": "string"}}}


def build_server(effects: list[str]) -> Server:
    server = Server("coroutines")

    @server.tool()
    async def task_group(ctx: RequestContext) -> str:
        async with asyncio.TaskGroup() as tg:
            first = tg.create_task(ctx.elicit("First name?", NAME))
            last = tg.create_task(ctx.elicit("Last name?", NAME))
        effects.append("task_group")
        return f"{first.result().content['name']} {last.result().content['name']}"  # type: ignore[index]

    @server.tool()
    async def create_task(ctx: RequestContext) -> str:
        sampled = asyncio.create_task(ctx.sample("Say hi"))
        roots = asyncio.create_task(ctx.list_roots())
        reply, listed = await sampled, await roots
        effects.append("create_task")
        assert isinstance(reply.content, TextContent)
        return f"{reply.content.text} {len(listed.roots)} roots"

    @server.tool()
    async def ensure_future(ctx: RequestContext) -> str:
        answer = await asyncio.ensure_future(ctx.elicit("First name?", NAME))
        effects.append("ensure_future")
        return str(answer.content["name"])  # type: ignore[index]

    @server.tool()
    async def wait_for(ctx: RequestContext) -> str:
        listed = await asyncio.wait_for(ctx.list_roots(), GUARD)
        effects.append("wait_for")
        return ",".join(str(root.uri) for root in listed.roots)

    @server.tool()
    async def gather(ctx: RequestContext) -> str:
        first, last = await asyncio.gather(
            ctx.elicit("First name?", NAME), ctx.elicit("Last name?", NAME)
        )
        effects.append("gather")
        return f"{first.content['name']} {last.content['name']}"  # type: ignore[index]

    @server.tool()
    async def batch_task(ctx: RequestContext) -> str:
        questions = {
            "who": InputRequest(
                method="elicitation/create",
                params={"mode": "form", "message": "First name?", "requestedSchema": NAME},
            ),
            "where": InputRequest(method="roots/list", params={}),
        }
        answers = await asyncio.create_task(ctx.ask(questions))
        effects.append("batch_task")
        return f"{answers['who'].content['name']} in {len(answers['where'].roots)} roots"

    return server


class Asked:
    """The client's answers, and every question it was asked."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def elicit(self, params: ElicitRequestParams) -> ElicitResult:
        self.seen.append(params.message)
        name = "Ada" if params.message.startswith("First") else "Lovelace"
        return ElicitResult(action="accept", content={"name": name})

    def sample(self, params: Any) -> CreateMessageResult:
        self.seen.append("sample")
        return CreateMessageResult(role="assistant", content=TextContent(text="hi"), model="m")

    def roots(self, params: Any) -> ListRootsResult:
        self.seen.append("roots")
        return ListRootsResult(roots=[Root(uri="file:///a"), Root(uri="file:///b")])


@asynccontextmanager
async def connected(protocol: str, asked: Asked, effects: list[str]) -> AsyncIterator[Client]:
    app = StreamableHTTPApp(build_server(effects))
    async with serve(app) as base:
        options = ClientOptions(protocol=protocol)  # type: ignore[arg-type]
        async with Client.http(
            base + "/mcp",
            options=options,
            elicitation_handler=asked.elicit,
            sampling_handler=asked.sample,
            roots_handler=asked.roots,
        ) as client:
            yield client
            assert client.era == ("legacy" if protocol == "legacy" else "modern")
        app.close()


EXPECTED = {
    "task_group": ("Ada Lovelace", ["First name?", "Last name?"]),
    "create_task": ("hi 2 roots", ["sample", "roots"]),
    "ensure_future": ("Ada", ["First name?"]),
    "wait_for": ("file:///a,file:///b", ["roots"]),
    "gather": ("Ada Lovelace", ["First name?", "Last name?"]),
    "batch_task": ("Ada in 2 roots", ["First name?", "roots"]),
}


@pytest.mark.parametrize("protocol", ["modern", "legacy"])
@pytest.mark.parametrize("tool", list(EXPECTED))
async def test_an_asking_method_runs_as_a_task_in_either_era(protocol: str, tool: str) -> None:
    asked, effects = Asked(), []  # type: ignore[var-annotated]
    async with connected(protocol, asked, effects) as client:
        result = await asyncio.wait_for(client.call_tool(tool, {}), GUARD)
    text, questions = EXPECTED[tool]
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, TextContent) and block.text == text
    # Each question asked once (replay never asks an answered one again), in either order
    # where two branches ask concurrently, and the handler finished exactly once.
    assert sorted(asked.seen) == sorted(questions)
    assert effects == [tool]
