"""What the client's lean paths rely on: one deadline per HTTP request (`request_within`)
that times out exactly as the two nested bounds did, and answers serialized as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult
from mrtr.client import InputRequiredConfig
from mrtr.client.input_handlers import InputHandlers
from mrtr.inputs import ELICITATION_CREATE
from mrtr.protocol.errors import REQUEST_TIMEOUT, McpError
from mrtr.transport.http_client import HTTPTransport

pytestmark = pytest.mark.asyncio


class SilentServer:
    """Accepts connections on loopback, reads what comes, never answers."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while await reader.read(65536):
            pass
        self.closed.set()  # the client hung up: how HTTP cancels a request
        writer.close()


@pytest_asyncio.fixture
async def silent() -> AsyncIterator[tuple[SilentServer, str]]:
    server = SilentServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}/mcp"
    finally:
        listener.close()
        await listener.wait_closed()


def modern(round_timeout: float) -> ClientOptions:
    return ClientOptions(
        protocol="modern", input_required=InputRequiredConfig(round_timeout=round_timeout)
    )


async def test_the_round_bound_alone_times_out_an_http_call_and_hangs_up(
    silent: tuple[SilentServer, str],
) -> None:
    server, url = silent
    # The transport's own bound is longer: the round's is the one deadline, and it fires.
    async with Client.http(url, timeout=30.0, options=modern(0.3)) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
        assert raised.value.code == REQUEST_TIMEOUT
        assert "got no response within 0.3 s" in raised.value.message
        await asyncio.wait_for(server.closed.wait(), 5)


async def test_a_shorter_transport_timeout_still_bounds_each_exchange(
    silent: tuple[SilentServer, str],
) -> None:
    _, url = silent
    async with Client.http(url, timeout=0.3, options=modern(30.0)) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
        assert raised.value.code == REQUEST_TIMEOUT
        assert "no complete HTTP response within 0.3 s" in raised.value.message


async def test_request_within_bounds_a_transport_that_has_no_timeout(
    silent: tuple[SilentServer, str],
) -> None:
    _, url = silent
    transport = HTTPTransport(url, timeout=0)

    async def ignore(_: dict[str, Any]) -> None:
        return None

    await transport.connect(ignore)
    try:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
        with pytest.raises(TimeoutError):
            await transport.request_within(message, 0.2)
    finally:
        await transport.close()


class Bounded:
    """A transport with `request_within`: the client hands it every bound."""

    def __init__(self) -> None:
        self.limits: list[float] = []

    async def connect(self, on_notification: Any, on_request: Any = None) -> None:
        return None

    async def close(self) -> None:
        return None

    async def notify(self, message: dict[str, Any]) -> None:
        return None

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("the client should use request_within")

    async def request_within(self, message: dict[str, Any], limit: float) -> dict[str, Any]:
        self.limits.append(limit)
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}


async def test_the_client_bounds_through_request_within_of_its_transport() -> None:
    first, second = Bounded(), Bounded()
    async with Client(first, options=modern(7.0)) as client:
        await client.call_tool("t")
        await client.request("tools/list", timeout=3.0)
        client.transport = second
        await client.call_tool("t")
    assert first.limits == [7.0, 3.0]
    assert second.limits == [7.0]


class Answer(ElicitResult):
    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return {**super().model_dump(**kwargs), "from": "subclass"}


async def test_answers_serialize_as_model_dump_did() -> None:
    handlers = InputHandlers()
    given: list[ElicitResult] = []
    handlers.set(ELICITATION_CREATE, lambda params: given[-1])
    request = {"method": ELICITATION_CREATE, "params": {"message": "Proceed?"}}

    given.append(ElicitResult(action="accept", content={"ok": True}, note="kept"))  # type: ignore[call-arg]
    bare = await handlers.answer("k", request)
    assert bare == {"action": "accept", "content": {"ok": True}, "note": "kept"}
    assert bare == given[-1].model_dump(mode="json", by_alias=True, exclude_none=True)

    given.append(Answer(action="decline"))
    assert await handlers.answer("k", request) == {"action": "decline", "from": "subclass"}


async def test_an_elicitation_handler_gets_validated_params() -> None:
    handlers = InputHandlers()
    seen: list[ElicitRequestParams] = []

    def handler(params: ElicitRequestParams) -> dict[str, Any]:
        seen.append(params)
        return {"action": "cancel"}

    handlers.set(ELICITATION_CREATE, handler)
    params = {"message": "Proceed?", "requestedSchema": {"type": "object"}}
    bare = await handlers.answer("k", {"method": ELICITATION_CREATE, "params": params})
    assert bare == {"action": "cancel"}
    assert isinstance(seen[0], ElicitRequestParams)
    assert seen[0].requested_schema == {"type": "object"}
