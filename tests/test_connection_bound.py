"""The bound on requests in flight on a `ServerConnection` (`max_in_flight`, stdio's
`Budgets.connection_requests`): a request counts until its answer is written, not only while
its handler runs, so `room()` waits while answers wait for the stream; its id is free as soon
as the handler ends; a request cancelled, or whose answer cannot be written, frees its place.

`send` here is the stream: it waits on `Stream.full` as a write to a full pipe does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from helpers.eventually import eventually
from mrtr import Server
from mrtr.protocol import jsonrpc
from mrtr.server.connection import ServerConnection

MakeRequest = Callable[..., dict[str, Any]]

GUARD = 5.0  # seconds; only a failure guard, never an expectation
STILL = 0.2  # seconds `room()` is given to return when it must not


class Stream:
    """A stream that takes each message at once, or waits while `full` is clear; when
    `closed`, a waiting write fails as one to a pipe whose reader has gone."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []
        self.full = asyncio.Event()
        self.full.set()  # set: room in the stream
        self.closed = False
        self.waiting = 0

    async def send(self, message: dict[str, Any]) -> None:
        self.waiting += 1
        try:
            await self.full.wait()
        finally:
            self.waiting -= 1
        if self.closed:
            raise BrokenPipeError("the reader has gone")
        self.written.append(message)


def bound_server() -> tuple[Server, asyncio.Event]:
    server = Server("bound")
    opened = asyncio.Event()

    @server.tool()
    def echo(text: str) -> str:  # a sync tool: its request always waits a step (a thread)
        return text

    @server.tool()
    async def echo_now(text: str) -> str:  # ends in its first step, where its answer waits
        return text

    @server.tool()
    async def hold() -> str:
        await opened.wait()
        return "held"

    return server, opened


def call(make_request: MakeRequest, request_id: int, name: str, **arguments: Any) -> Any:
    return make_request("tools/call", {"name": name, "arguments": arguments}, id=request_id)


async def has_room(connection: ServerConnection) -> bool:
    """Whether `room()` returns within `STILL` seconds."""
    try:
        async with asyncio.timeout(STILL):
            await connection.room()
    except TimeoutError:
        return False
    return True


async def test_a_request_counts_until_its_answer_is_written(make_request: MakeRequest) -> None:
    server, _ = bound_server()
    stream = Stream()
    stream.full.clear()
    connection = ServerConnection(server, stream.send, "test", max_in_flight=1)
    await connection.feed(call(make_request, 1, "echo", text="one"))
    await eventually(
        lambda: stream.waiting == 1, "the answer waiting for the stream", timeout=GUARD
    )
    # The handler has ended; its answer is not written, so input waits.
    assert connection.in_flight == 1
    assert not await has_room(connection)
    stream.full.set()
    assert await has_room(connection)
    assert connection.in_flight == 0
    assert [m["id"] for m in stream.written] == [1]


@pytest.mark.parametrize("tool", ["echo", "echo_now"])
async def test_the_id_is_free_while_its_answer_waits(make_request: MakeRequest, tool: str) -> None:
    server, _ = bound_server()
    stream = Stream()
    stream.full.clear()
    connection = ServerConnection(server, stream.send, "test", max_in_flight=2)
    await connection.feed(call(make_request, 7, tool, text="first"))
    await eventually(
        lambda: stream.waiting == 1, "the first answer waiting for the stream", timeout=GUARD
    )
    # The same id again is a new request, not "in use" (whose refusal would wait for the
    # stream too); both now count.
    async with asyncio.timeout(GUARD):
        await connection.feed(call(make_request, 7, tool, text="second"))
    await eventually(
        lambda: stream.waiting == 2, "the second answer waiting for the stream", timeout=GUARD
    )
    assert connection.in_flight == 2
    assert not await has_room(connection)
    stream.full.set()
    assert await has_room(connection)
    texts = [m["result"]["content"][0]["text"] for m in stream.written]
    assert sorted(texts) == ["first", "second"]


async def test_a_cancelled_request_frees_its_place(make_request: MakeRequest) -> None:
    server, _ = bound_server()
    stream = Stream()
    connection = ServerConnection(server, stream.send, "test", max_in_flight=1)
    await connection.feed(call(make_request, 1, "hold"))
    assert connection.in_flight == 1
    assert not await has_room(connection)
    await connection.feed(jsonrpc.notification("notifications/cancelled", {"requestId": 1}))
    assert await has_room(connection)
    assert connection.in_flight == 0
    assert stream.written == []  # a cancelled request gets no answer


async def test_an_answer_that_cannot_be_written_frees_its_place(
    make_request: MakeRequest,
) -> None:
    server, opened = bound_server()
    stream = Stream()
    stream.full.clear()
    connection = ServerConnection(server, stream.send, "test", max_in_flight=1)
    await connection.feed(call(make_request, 1, "hold"))
    opened.set()
    await eventually(
        lambda: stream.waiting == 1, "the answer waiting for the stream", timeout=GUARD
    )
    assert not await has_room(connection)
    stream.closed = True  # the reader goes away: the waiting write fails
    stream.full.set()
    assert await has_room(connection)
    assert connection.in_flight == 0
    assert stream.written == []
