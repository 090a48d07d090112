"""One request flows down through the server's modules and back without re-entering any.

The layers import downwards only, and a request follows them: the entry decides the era, the
era's dispatcher picks the method, the invocation pipeline binds, runs and renders through the
registry's entries and the engine. Callbacks handed down (how to run the handler, how to
render its value) come from the registry's entries, below the pipeline, never from a module
the request already passed through. The check: trace every Python call made while one request
is served, and at each call look at the stack of `mrtr` modules (consecutive frames of one
module counted once); none may appear twice. The handlers and middleware here are this test
module's, not `mrtr`'s: the walk up the stack stops at them, since what a handler calls (its
context's `elicit`, say) starts a descent of its own, from the handler down. A tool that asks
is followed through both eras' way of asking: a second round that redeems the sealed state
(2026-07-28), and a question put to a legacy session's client while the call waits.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import orjson
import pytest

from helpers.http_calls import call, post
from helpers.legacy_peer import Peer, initialized, send
from helpers.mrtr_flows import accept, call_tool, result_of
from mrtr import RequestContext, Server
from mrtr.transport.http_app import StreamableHTTPApp


def _server(*, middleware: bool) -> Server:
    server = Server("flow")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    @server.tool()
    async def echo(ctx: RequestContext, text: str) -> str:
        return f"{text} (round {ctx.round})"

    @server.tool()
    def add_in_thread(a: int, b: int) -> int:
        return a + b

    @server.tool(timeout=30)
    async def bounded(a: int) -> int:
        return a

    @server.prompt()
    async def greet(name: str) -> str:
        return f"Hello {name}"

    @server.resource("memo://note")
    async def note() -> str:
        return "a note"

    @server.tool()
    async def confirm(ctx: RequestContext, amount: int) -> str:
        answer = await ctx.elicit("Go on?", {"type": "object", "properties": {}})
        return f"{answer.action} {amount}"

    if middleware:

        @server.middleware
        async def passthrough(ctx: RequestContext, call_next: Any) -> dict[str, Any]:
            return await call_next(ctx)  # type: ignore[no-any-return]

    return server


def _stack(frame: FrameType | None) -> list[str]:
    """The `mrtr` modules on the stack from `frame` up to this module's handlers (if one is
    on it), outermost first, one per run."""
    modules: list[str] = []
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == __name__:
            break
        if name.startswith("mrtr.") and (not modules or modules[-1] != name):
            modules.append(name)
        frame = frame.f_back
    modules.reverse()
    return modules


async def _reentries(serve: Callable[[], Awaitable[dict[str, Any]]]) -> set[str]:
    """The stacks seen while `serve()` ran on which some `mrtr` module appears twice."""
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            stack = _stack(frame)
            if len(set(stack)) != len(stack):
                seen.add(" -> ".join(stack))

    sys.setprofile(profile)
    try:
        response = await serve()
    finally:
        sys.setprofile(None)
    assert "result" in response, response
    return seen


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}),
    ("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
    ("tools/call", {"name": "add_in_thread", "arguments": {"a": 1, "b": 2}}),
    ("tools/call", {"name": "bounded", "arguments": {"a": 1}}),
    ("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
    ("resources/read", {"uri": "memo://note"}),
    ("tools/list", {}),
]


@pytest.mark.parametrize("middleware", [False, True])
@pytest.mark.parametrize(("method", "params"), REQUESTS)
async def test_a_modern_request_enters_each_module_once(
    method: str, params: dict[str, Any], middleware: bool
) -> None:
    server = _server(middleware=middleware)
    if method == "tools/call":
        # Once before tracing: what is made on first use (the worker pool) is not the path.
        result_of(await call_tool(server, params["name"], params["arguments"]))

        def serve() -> Awaitable[dict[str, Any]]:
            return call_tool(server, params["name"], params["arguments"])

    else:
        from helpers.mrtr_flows import rpc

        def serve() -> Awaitable[dict[str, Any]]:
            return rpc(server, method, params)

    assert await _reentries(serve) == set()


@pytest.mark.parametrize("middleware", [False, True])
@pytest.mark.parametrize(("method", "params"), REQUESTS)
async def test_a_legacy_request_enters_each_module_once(
    method: str, params: dict[str, Any], middleware: bool
) -> None:
    server = _server(middleware=middleware)
    peer = Peer()
    await initialized(server, peer)
    await send(server, peer, method, params, id=2)

    def serve() -> Awaitable[dict[str, Any]]:
        return asyncio.wait_for(send(server, peer, method, params, id=3), 10)

    assert await _reentries(serve) == set()


@pytest.mark.parametrize("middleware", [False, True])
async def test_a_modern_tool_that_asks_enters_each_module_once_in_each_round(
    middleware: bool,
) -> None:
    server = _server(middleware=middleware)
    arguments = {"amount": 3}
    result_of(await call_tool(server, "add", {"a": 1, "b": 2}))

    async def serve() -> dict[str, Any]:
        asked = result_of(await call_tool(server, "confirm", arguments))
        (key,) = asked["inputRequests"]
        return await call_tool(
            server, "confirm", arguments, responses={key: accept()}, state=asked["requestState"]
        )

    # The store is the default one: the second round is redeemed (claimed, run, kept).
    assert server.options.store is not None
    assert await _reentries(serve) == set()


@pytest.mark.parametrize("middleware", [False, True])
async def test_a_legacy_tool_that_asks_live_enters_each_module_once(middleware: bool) -> None:
    server = _server(middleware=middleware)
    peer = Peer()
    await initialized(server, peer)
    await send(server, peer, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, id=2)
    call = {"name": "confirm", "arguments": {"amount": 3}}

    def serve() -> Awaitable[dict[str, Any]]:
        return asyncio.wait_for(send(server, peer, "tools/call", call, id=3), 10)

    assert await _reentries(serve) == set()
    (asked,) = [m for m in peer.requests() if m["method"] == "elicitation/create"]
    assert asked["params"]["message"] == "Go on?"


async def test_a_request_makes_no_call_through_the_server_facade() -> None:
    server = _server(middleware=False)
    entered: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_globals.get("__name__") == "mrtr.server.server":
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        response = await call_tool(server, "add", {"a": 1, "b": 2})
    finally:
        sys.setprofile(None)
    assert result_of(response)["content"][0]["text"] == "3"
    assert entered == []


async def test_a_subclass_that_overrides_handle_request_still_sees_every_request() -> None:
    seen: list[str] = []

    class Counting(Server):
        async def handle_request(
            self, message: dict[str, Any], notify: Any = None, transport_info: Any = None,
            session: Any = None,
        ) -> dict[str, Any]:  # fmt: skip
            seen.append(message["method"])
            return await super().handle_request(message, notify, transport_info, session)

    server = Counting("counting")

    @server.tool
    async def add(a: int, b: int) -> int:
        return a + b

    # The HTTP app hands each request to `handle_request`; a legacy one too.
    status, _, body = await post(StreamableHTTPApp(server), call("add", {"a": 1, "b": 2}, id=7))
    assert status == 200
    assert orjson.loads(body)["result"]["structuredContent"] == {"result": 3}
    assert seen == ["tools/call"]
