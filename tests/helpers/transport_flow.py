"""One full MRTR flow, run unchanged over every transport.

A tool, a prompt and a resource template that elicit, sample and list roots over several rounds;
the client handlers that answer them; `run_mrtr_flow`, the assertions every transport must pass;
and `serve`, which runs an ASGI app on a loopback port. Kept free of test-runner imports because
`tests/servers/flow_stdio_server.py` imports it in a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from pydantic import BaseModel

from mrtr import (
    Client,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    RequestContext,
    Root,
    Server,
    TextContent,
)

GUARD = 10.0  # seconds: only ever reached when something is broken


# --- the server side -------------------------------------------------------------------------


class Travellers(BaseModel):
    count: int
    seat: str


class Drafts(BaseModel):
    drafts: bool


def add_flow(server: Server) -> None:
    """Register the flow's tool `plan_trip`, prompt `greeting` and template `notes://{topic}`."""

    @server.tool()
    async def plan_trip(ctx: RequestContext, city: str) -> str:
        """Two rounds: ask who travels (a model), then sample a tip and list roots together."""
        who = await ctx.elicit(f"Who travels to {city}?", Travellers)
        if who.action != "accept" or who.content is None:
            return "cancelled"
        tip, roots = await asyncio.gather(ctx.sample(f"One tip for {city}"), ctx.list_roots())
        assert isinstance(tip.content, TextContent)
        return (
            f"{city} for {who.content.count} ({who.content.seat}) from {roots.roots[0].uri}: "
            f"{tip.content.text}"
        )

    @server.prompt()
    async def greeting(ctx: RequestContext, name: str) -> str:
        """Two rounds: ask the register (a raw schema), then sample the line."""
        register = await ctx.elicit(
            ElicitRequestParams(
                message="Formal?",
                requested_schema={"type": "object", "properties": {"formal": {"type": "boolean"}}},
            )
        )
        formal = bool((register.content or {}).get("formal"))
        line = await ctx.sample(f"Greet {name} {'formally' if formal else 'casually'}")
        assert isinstance(line.content, TextContent)
        return f"{'Dear' if formal else 'Hi'} {name}: {line.content.text}"

    @server.resource_template("notes://{topic}")
    async def notes(ctx: RequestContext, topic: str) -> str:
        """Three rounds: list roots, ask about drafts (a model), then sample a summary."""
        roots = await ctx.list_roots()
        drafts = await ctx.elicit(f"Include drafts for {topic}?", Drafts)
        include = drafts.content is not None and drafts.content.drafts
        summary = await ctx.sample(f"Summarise the notes on {topic}")
        assert isinstance(summary.content, TextContent)
        return (
            f"notes on {topic} under {roots.roots[0].uri} (drafts: {include}): "
            f"{summary.content.text}"
        )


def build_flow_server() -> Server:
    """A server with exactly the flow's tool, prompt and resource template."""
    server = Server("transport-flow", "1.0.0")
    add_flow(server)
    return server


# --- the client side -------------------------------------------------------------------------


class Handlers:
    """The client's answers to elicitation, sampling and roots, recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def elicitation(self, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(f"elicit:{params.message}")
        if "travels" in params.message:
            return ElicitResult(action="accept", content={"count": 2, "seat": "window"})
        if params.message == "Formal?":
            return ElicitResult(action="accept", content={"formal": True})
        return ElicitResult(action="accept", content={"drafts": True})

    async def sampling(self, params: Any) -> CreateMessageResult:
        self.asked.append("sample")
        return CreateMessageResult(
            role="assistant", content=TextContent(text="pack a coat"), model="test-model"
        )

    def roots(self, params: Any) -> ListRootsResult:
        self.asked.append("roots")
        return ListRootsResult(roots=[Root(uri="file:///home/trips")])

    def client_kwargs(self) -> dict[str, Any]:
        return {
            "elicitation_handler": self.elicitation,
            "sampling_handler": self.sampling,
            "roots_handler": self.roots,
        }


async def run_mrtr_flow(client: Client, handlers: Handlers) -> None:
    """A multi-round flow for a tool, a prompt and a resource template, on any transport.

    `client` must be connected to a server set up by `add_flow` with `handlers.client_kwargs()`.
    """
    rounds: list[tuple[str, str, int, tuple[str, ...]]] = []
    client.options.on_round = lambda info: rounds.append(
        (info.method, info.target, info.round, info.keys)
    )

    def questions_per_round(method: str) -> list[int]:
        return [len(keys) for m, _, _, keys in rounds if m == method]

    trip = await client.call_tool("plan_trip", {"city": "Oslo"})
    block = trip.content[0]
    assert isinstance(block, TextContent)
    assert block.text == "Oslo for 2 (window) from file:///home/trips: pack a coat"
    assert questions_per_round("tools/call") == [1, 2]  # one question, then two asked together

    prompt = await client.get_prompt("greeting", {"name": "Ada"})
    message = prompt.messages[0].content
    assert isinstance(message, TextContent)
    assert message.text == "Dear Ada: pack a coat"
    assert questions_per_round("prompts/get") == [1, 1]

    read = await client.read_resource("notes://mrtr")
    contents = read.contents[0]
    assert getattr(contents, "text", None) == (
        "notes on mrtr under file:///home/trips (drafts: True): pack a coat"
    )
    # Three rounds: each earlier answer is carried into the later rounds, never asked again.
    assert questions_per_round("resources/read") == [1, 1, 1]
    assert handlers.asked == [
        "elicit:Who travels to Oslo?",
        "sample",
        "roots",
        "elicit:Formal?",
        "sample",
        "roots",
        "elicit:Include drafts for mrtr?",
        "sample",
    ]


# --- serving an ASGI app on a loopback port ---------------------------------------------------


class LoopbackUvicorn(uvicorn.Server):
    """uvicorn without its signal handlers (the test runner owns the signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Run `app` on 127.0.0.1:<free port> on the running loop; yields the base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = LoopbackUvicorn(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(GUARD):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, GUARD)
