"""A hostile legacy server against the client: what it can make the host's handlers do.

On an `initialize` session a server asks with requests of its own (`sampling/createMessage`,
...), each of which runs a handler that may call a model the host pays for. The client holds
them to the bounds MRTR rounds have (`mrtr.client.server_asks`): so many answered at once, so
many per client request; past them the server gets -32600 naming the bound, and no handler
runs. These tests play the server in process (`Client.in_memory`, `protocol="legacy"`), whose
tools send the requests with the real server machinery.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mrtr import (
    Client,
    CreateMessageRequestParams,
    CreateMessageResult,
    McpError,
    RequestContext,
    Server,
    TextContent,
)
from mrtr.client.options import ClientOptions, InputRequiredConfig
from mrtr.client.probe import await_probe
from mrtr.client.server_asks import TOO_MANY_SERVER_REQUESTS, ServerAsks
from mrtr.protocol.errors import INVALID_REQUEST

server = Server("hostile-legacy")

FLOOD = 500


async def _sample(ctx: RequestContext) -> str:
    answer = await ctx.sample("hi", max_tokens=10**9)
    assert isinstance(answer.content, TextContent)
    return answer.content.text


def _tally(outcomes: list[Any]) -> dict[str, Any]:
    refused = [str(o) for o in outcomes if isinstance(o, BaseException)]
    return {"answered": len(outcomes) - len(refused), "refused": refused}


@server.tool()
async def flood(ctx: RequestContext) -> dict[str, Any]:
    """Ask for FLOOD samplings at once."""
    outcomes = await asyncio.gather(*(_sample(ctx) for _ in range(FLOOD)), return_exceptions=True)
    return _tally(list(outcomes))


@server.tool()
async def trickle(ctx: RequestContext) -> dict[str, Any]:
    """Ask for FLOOD samplings one after another, going on past every refusal."""
    outcomes: list[Any] = []
    for _ in range(FLOOD):
        try:
            outcomes.append(await _sample(ctx))
        except McpError as error:
            outcomes.append(error)
    return _tally(outcomes)


@server.tool()
async def once(ctx: RequestContext) -> str:
    """Ask for one sampling."""
    return await _sample(ctx)


class Model:
    """A sampling handler that counts how many of its calls run at once, and in all."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.running = 0
        self.most = 0
        self.calls = 0

    async def __call__(self, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.calls += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.pause)  # a model takes a while: the requests overlap
        finally:
            self.running -= 1
        return CreateMessageResult(role="assistant", content=TextContent(text="ok"), model="m")


def legacy_client(model: Model, **options: Any) -> Client:
    return Client.in_memory(
        server, options=ClientOptions(protocol="legacy", **options), sampling_handler=model
    )


def data(result: Any) -> dict[str, Any]:
    assert result.structured_content is not None, result
    content: dict[str, Any] = result.structured_content
    return content


async def test_500_samplings_at_once_run_the_handler_at_most_the_bound_the_rest_refused() -> None:
    model = Model(pause=0.02)
    async with legacy_client(model) as client:
        async with asyncio.timeout(30):
            tally = data(await client.call_tool("flood", {}))
        # The MRTR bound of a round (max_input_requests, 16) at once; and in all no more
        # than a call's (16 x 10 rounds): here all came at once, so only the first 16 ran.
        assert model.most <= 16
        assert model.calls <= 160
        assert tally["answered"] == model.calls
        assert tally["answered"] + len(tally["refused"]) == FLOOD
        assert len(tally["refused"]) >= FLOOD - 160
        assert all(
            "-32600" in why and "ClientOptions.max_server_requests_in_flight" in why
            for why in tally["refused"]
        ), tally["refused"][:1]
        # The session goes on: a later call asks once and is answered.
        assert (await client.call_tool("once", {})).content[0].text == "ok"  # type: ignore[union-attr]
        assert model.calls == tally["answered"] + 1


async def test_samplings_one_after_another_stop_at_the_total_bound_per_client_request() -> None:
    model = Model()
    async with legacy_client(model) as client:
        async with asyncio.timeout(60):
            tally = data(await client.call_tool("trickle", {}))
        assert model.most == 1
        assert tally["answered"] == model.calls == 16 * 10  # max_input_requests x max_rounds
        assert len(tally["refused"]) == FLOOD - 160
        assert all(
            "at most 160 server requests per client request" in why
            and "ClientOptions.max_server_requests" in why
            for why in tally["refused"]
        ), tally["refused"][:1]
        # The next client request has a bound of its own.
        assert (await client.call_tool("once", {})).content[0].text == "ok"  # type: ignore[union-attr]
        assert model.calls == 161


async def test_the_bounds_follow_the_options_and_the_mrtr_bounds_they_default_to() -> None:
    model = Model(pause=0.02)
    config = InputRequiredConfig(max_input_requests=3, max_rounds=2)
    async with legacy_client(model, input_required=config) as client:
        tally = data(await client.call_tool("flood", {}))
        assert model.most == 3
        trickled = data(await client.call_tool("trickle", {}))
        assert trickled["answered"] == 6
    model = Model(pause=0.02)
    async with legacy_client(
        model, max_server_requests_in_flight=2, max_server_requests=5
    ) as client:
        tally = data(await client.call_tool("flood", {}))
        assert model.most == 2 and tally["answered"] <= 5
        trickled = data(await client.call_tool("trickle", {}))
        assert trickled["answered"] == 5 and len(trickled["refused"]) == FLOOD - 5


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_bound_that_is_not_a_positive_integer_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_server_requests must be None or an integer"):
        ClientOptions(max_server_requests=bad)
    with pytest.raises(ValueError, match="max_server_requests_in_flight must be None"):
        ClientOptions(max_server_requests_in_flight=bad)


def test_questions_while_no_client_request_is_in_flight_count_against_the_session() -> None:
    options = ClientOptions(max_server_requests=2)
    asks = ServerAsks(lambda: options)
    for _ in range(2):
        with asks.admit("roots/list"):
            pass
    with pytest.raises(McpError) as caught:
        asks.admit("roots/list")
    assert caught.value.code == INVALID_REQUEST
    assert caught.value.data == {
        "reason": TOO_MANY_SERVER_REQUESTS,
        "bound": "per session",
        "limit": 2,
        "option": "ClientOptions.max_server_requests",
    }
    # A client request opens a count of its own, started again by the next one...
    for _ in range(2):
        with asks.client_request():
            for _ in range(2):
                with asks.admit("sampling/createMessage"):
                    pass
            with pytest.raises(McpError):
                asks.admit("sampling/createMessage")
    # ... the session's count is not reset by them, and ping is never counted.
    with pytest.raises(McpError):
        asks.admit("elicitation/create")
    with asks.admit("ping"):
        pass


class SilentServer:
    """A transport whose server never answers, telling when a request is given up."""

    def __init__(self) -> None:
        self.given_up = asyncio.Event()

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.given_up.set()
            raise
        raise AssertionError("unreachable")


async def test_a_probe_whose_caller_stops_waiting_is_given_up_with_it() -> None:
    # A caller's own deadline (mrtr call --timeout) may pass during the era probe: the probe
    # must end with it, not linger to fail unread when the transport closes.
    silent = SilentServer()
    message = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await await_probe(silent, message, 5.0)  # type: ignore[arg-type]
    async with asyncio.timeout(2):
        await silent.given_up.wait()
