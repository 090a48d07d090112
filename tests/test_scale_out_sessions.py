"""Legacy (`initialize`) sessions shared by several servers in one process: two `Server`s
given one `MemoryStore` and one `MemoryBroker`, each behind its own `StreamableHTTPApp`, and
a round-robin ASGI front on real loopback HTTP, so each request of a session goes to the other
server than the one before. The same wiring as Redis gives separate processes
(`test_scale_out_legacy.py` runs that), fast enough to probe every path:

* our client and the official SDK's, in the legacy era: tools/list, a live elicitation whose
  answer reaches the other server than the one waiting, setLevel then a logging tool,
  subscribe, a resource update heard on the GET stream, unsubscribe, DELETE;
* the same with a store and broker per server fails (so the test can fail);
* a forged id, another caller's id, a deleted session: 404 on every server; a second
  `initialize`: -32600; a response nobody awaits and a cancellation of nothing: 202, no harm;
* a GET stream opened on one server ends the one the other served;
* a GET stream served by one server is resumed (`Last-Event-ID`) on the other, from what the
  first kept in the store: the events after the id are replayed, new ones follow; an id past
  them or older than what is kept is 400; what a server keeps of a stream is bounded; a
  request's stream is resumed by the server that streamed it, and elsewhere answered with the
  response it kept in the store (never another request's events; 400 when nothing was kept);
* a session's record expires when idle; the store failing answers 503, the session intact.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import mcp
import pytest

from helpers.legacy_sessions import (
    HEADERS,
    INIT,
    message,
    official_scenario,
    open_session,
    ours_scenario,
    post,
)
from helpers.transport_flow import GUARD, serve
from mrtr import (
    RequestContext,
    Server,
    ServerOptions,
)
from mrtr.protocol.errors import INTERNAL_ERROR, McpError
from mrtr.server.legacy import MAX_SUBSCRIPTIONS
from mrtr.server.session import LegacySession, SessionRecords
from mrtr.server.store import Broker, MemoryBroker, MemoryStore, Store
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.http_legacy import MAX_KEPT_RESPONSE
from mrtr.transport.sse_events import SHARED_BYTES, SHARED_EVENTS, EventLog, decode_snapshot
from servers.legacy_cluster_server import build

KEY = "sessions-key-" + "k" * 32


@dataclass
class Front:
    """A round-robin ASGI front: request n goes to app n mod len(apps); every POSTed JSON-RPC
    message is logged with the index of the app that received it."""

    apps: list[StreamableHTTPApp]
    turn: itertools.count[int] = field(default_factory=itertools.count)
    posted: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        index = next(self.turn) % len(self.apps)
        if scope["method"] != "POST":
            await self.apps[index](scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recording() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    with suppress(ValueError):  # a body that is not JSON: not logged
                        self.posted.append((index, json.loads(b"".join(chunks))))
            return message

        await self.apps[index](scope, recording, send)


def options(store: Store | None, broker: Broker | None) -> ServerOptions:
    return ServerOptions(request_state_key=KEY, store=store, broker=broker)


@asynccontextmanager
async def fleet(*, shared: bool = True, n: int = 3, **app: Any) -> AsyncIterator[tuple[str, Front]]:
    """`n` servers behind the round-robin front; yields its URL and the front."""
    store, broker = MemoryStore(), MemoryBroker()
    servers = [
        build("fleet", options(store, broker) if shared else options(MemoryStore(), None))
        for _ in range(n)
    ]
    front = Front([StreamableHTTPApp(s, sse_retry=0.05, **app) for s in servers])
    async with AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server.running())
        base = await stack.enter_async_context(serve(front))
        try:
            yield base + "/mcp", front
        finally:
            for each in front.apps:
                each.close()


def answered_elsewhere(front: Front) -> int:
    """How many elicitation answers were POSTed to another server than the one that asked
    (the id of a server's request names its instance)."""
    owners = {app.sessions.instance: index for index, app in enumerate(front.apps)}
    count = 0
    for index, posted in front.posted:
        if "result" in posted and "action" in posted["result"]:
            owner = owners[str(posted["id"]).split("-")[1]]
            count += owner != index
    return count


async def test_our_legacy_client_alternating_between_servers() -> None:
    async with fleet() as (url, front):
        asked = await ours_scenario(url)
        assert len(set(asked)) == 3  # asked by each server
        # Every answer was POSTed to another server than the one awaiting it.
        assert answered_elsewhere(front) == 3


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_the_official_legacy_client_alternating_between_servers() -> None:
    async with fleet() as (url, front):
        asked = await official_scenario(url)
        # Its GET stream takes turns too, so which server asks varies; some answers cross.
        assert len(set(asked)) >= 2
        assert answered_elsewhere(front) >= 1, front.posted


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_without_a_shared_store_the_same_session_fails() -> None:
    async with fleet(shared=False) as (url, _):
        # A server that does not know the session answers 404: the client gives up, or (an
        # answer POSTed to it) the server that asked waits for an answer that never comes.
        with pytest.raises((mcp.MCPError, TimeoutError, ExceptionGroup)):
            await asyncio.wait_for(official_scenario(url), 3.0)


# --- raw HTTP: what each server answers --------------------------------------------------


def user_of(scope: Any) -> str | None:
    """The caller, from an `X-User` header (a stand-in for verified credentials)."""
    for name, value in scope.get("headers", ()):
        if name == b"x-user":
            return str(value.decode())
    return None


@asynccontextmanager
async def raw_fleet(**app: Any) -> AsyncIterator[tuple[str, Front, aiohttp.ClientSession]]:
    async with fleet(**app) as (url, front), aiohttp.ClientSession() as http:
        yield url, front, http


async def test_forged_foreign_and_deleted_ids_are_404_on_every_server() -> None:
    store, broker = MemoryStore(), MemoryBroker()
    opts = ServerOptions(request_state_key=KEY, store=store, broker=broker, principal=user_of)
    front = Front([StreamableHTTPApp(build("fleet", opts)) for _ in range(3)])
    async with AsyncExitStack() as stack:
        for app in front.apps:
            await stack.enter_async_context(app.server.running())
        url = await stack.enter_async_context(serve(front)) + "/mcp"
        http = await stack.enter_async_context(aiohttp.ClientSession())
        alice = await open_session(http, url, **{"X-User": "alice"})
        listing = message("tools/list")
        for _ in range(3):  # each server in turn
            assert (await post(http, url, listing, alice, **{"X-User": "alice"}))[0] == 200
            status, data, _ = await post(http, url, listing, alice, **{"X-User": "bob"})
            assert status == 404 and "Session not found" in data["error"]["message"]
            status, data, _ = await post(http, url, listing, "forged-" + alice[7:])
            assert status == 404 and data["error"]["code"] == -32600
        # A second initialize on the session, wherever it lands: -32600.
        status, data, _ = await post(http, url, INIT, alice, **{"X-User": "alice"})
        assert data["error"]["code"] == -32600 and "already initialized" in data["error"]["message"]
        # Responses nobody awaits (this instance's id form or another's) and a cancellation
        # of nothing: accepted, ignored, the session goes on.
        for stray in (
            {"jsonrpc": "2.0", "id": "s-000000000000-1", "result": {"action": "accept"}},
            {"jsonrpc": "2.0", "id": 7, "result": {}},
            message("notifications/cancelled", {"requestId": 99}, id=None),
        ):
            assert (await post(http, url, stray, alice, **{"X-User": "alice"}))[0] == 202
        assert (await post(http, url, listing, alice, **{"X-User": "alice"}))[0] == 200
        # Bob cannot end Alice's session; Alice can, and then no server knows it.
        async with http.delete(url, headers={"Mcp-Session-Id": alice, "X-User": "bob"}) as r:
            assert r.status == 404
        async with http.delete(url, headers={"Mcp-Session-Id": alice, "X-User": "alice"}) as r:
            assert r.status == 204
        for _ in range(3):
            status, _, _ = await post(http, url, listing, alice, **{"X-User": "alice"})
            assert status == 404
        assert await store.get(SessionRecords.key(alice)) is None


async def test_a_get_stream_opened_on_another_server_ends_the_first() -> None:
    async with raw_fleet() as (url, _, http):
        session_id = await open_session(http, url)
        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        first = await http.get(url, headers=get_headers)
        assert first.status == 200
        second = await http.get(url, headers=get_headers)  # the next server
        try:
            assert second.status == 200
            async with asyncio.timeout(GUARD):
                await first.read()  # ended by the server: the body completes
            # The stream now open hears a change raised anywhere.
            await post(http, url, message("tools/call", {"name": "announce"}), session_id)
            async with asyncio.timeout(GUARD):
                while b"notifications/tools/list_changed" not in await second.content.readline():
                    pass
        finally:
            first.close()
            second.close()


async def test_an_idle_session_expires_on_every_server_and_one_in_use_does_not() -> None:
    async with raw_fleet(session_idle_timeout=0.6) as (url, _, http):
        busy = await open_session(http, url)
        idle = await open_session(http, url)
        for _ in range(8):  # 1.2 s, busy used every 0.15 s
            await asyncio.sleep(0.15)
            assert (await post(http, url, message("ping"), busy))[0] == 200
        for _ in range(3):
            assert (await post(http, url, message("ping"), busy))[0] == 200
            assert (await post(http, url, message("ping"), idle))[0] == 404


class Flaky(MemoryStore):
    """A store that fails, as a lost Redis does, while `broken`."""

    broken = False

    async def get(self, key: str) -> bytes | None:
        if self.broken:
            raise McpError(INTERNAL_ERROR, "the shared store is unavailable; retry later")
        return await super().get(key)


async def test_a_failing_store_answers_503_and_the_session_survives() -> None:
    store = Flaky()
    front = Front([StreamableHTTPApp(build("fleet", options(store, MemoryBroker())))])
    async with (
        front.apps[0].server.running(),
        serve(front) as base,
        aiohttp.ClientSession() as http,
    ):
        url = base + "/mcp"
        session_id = await open_session(http, url)
        store.broken = True
        status, data, _ = await post(http, url, message("tools/list"), session_id)
        assert status == 503 and data["error"]["code"] == INTERNAL_ERROR
        assert "unavailable" in data["error"]["message"]
        store.broken = False
        assert (await post(http, url, message("tools/list"), session_id))[0] == 200


async def test_one_process_binds_a_session_to_its_caller_too() -> None:
    opts = ServerOptions(request_state_key=KEY, principal=user_of)  # no broker: not shared
    front = Front([StreamableHTTPApp(build("alone", opts))])
    async with (
        front.apps[0].server.running(),
        serve(front) as base,
        aiohttp.ClientSession() as http,
    ):
        url = base + "/mcp"
        alice = await open_session(http, url, **{"X-User": "alice"})
        assert front.apps[0].sessions.records is None
        listing = message("tools/list")
        assert (await post(http, url, listing, alice, **{"X-User": "alice"}))[0] == 200
        status, data, _ = await post(http, url, listing, alice, **{"X-User": "bob"})
        assert status == 404 and "Session not found" in data["error"]["message"]
        status, _, _ = await post(http, url, listing, alice)  # no caller at all
        assert status == 404


async def test_what_a_session_keeps_is_bounded() -> None:
    async with raw_fleet() as (url, _, http):
        huge = {**INIT["params"], "clientInfo": {"name": "x" * 70_000, "version": "0"}}
        status, data, session_id = await post(http, url, message("initialize", huge))
        assert status == 200 and session_id is None
        assert data["error"]["code"] == -32602 and "too large" in data["error"]["message"]
    # Subscriptions: a template matches endlessly many URIs, a session follows at most 1024.
    server = Server("subs")

    @server.resource_template("db://rows/{id}")
    def row(id: int) -> str:
        return str(id)

    session = LegacySession()
    await server.handle_message(INIT, None, None, session)
    for i in range(MAX_SUBSCRIPTIONS):
        response = await server.handle_message(
            message("resources/subscribe", {"uri": f"db://rows/{i}"}), None, None, session
        )
        assert response is not None and "result" in response
    response = await server.handle_message(
        message("resources/subscribe", {"uri": "db://rows/x1"}), None, None, session
    )
    assert response is not None and response["error"]["code"] == -32602
    assert "unsubscribe from one first" in response["error"]["message"]
    assert len(session.subscriptions) == MAX_SUBSCRIPTIONS


async def next_event(response: aiohttp.ClientResponse) -> tuple[str, bytes]:
    """The next SSE event of `response` (a priming one included): (its id, its data)."""
    event_id, data = "", b""
    async with asyncio.timeout(GUARD):
        while True:
            line = (await response.content.readline()).rstrip(b"\r\n")
            if line.startswith(b"id: "):
                event_id = line[4:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
            elif not line and event_id:
                return event_id, data


async def test_a_get_stream_resumes_on_another_server_from_the_store() -> None:
    async with raw_fleet(n=2) as (url, front, http):
        session_id = await open_session(http, url)
        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        announce = message("tools/call", {"name": "announce"})
        front.turn = itertools.count(0)  # the GET goes to server 0
        first = await http.get(url, headers=get_headers)
        heard: list[tuple[str, bytes]] = []
        try:
            assert first.status == 200
            await next_event(first)  # priming
            for _ in range(2):
                await post(http, url, announce, session_id)
                heard.append(await next_event(first))
        finally:
            first.close()
        assert all(b"notifications/tools/list_changed" in data for _, data in heard)

        # Server 1 never served the stream: it resumes it from what server 0 kept.
        front.turn = itertools.count(1)
        resumed = await http.get(url, headers={**get_headers, "Last-Event-ID": heard[0][0]})
        try:
            assert resumed.status == 200
            assert (await next_event(resumed))[0] == heard[0][0]  # priming: where it resumes
            assert await next_event(resumed) == heard[1]  # replayed, byte for byte
            await post(http, url, announce, session_id)
            newer_id, newer = await next_event(resumed)  # server 1 serves the stream now
        finally:
            resumed.close()
        assert b"notifications/tools/list_changed" in newer
        assert newer_id.startswith("0-") and int(newer_id[2:]) > int(heard[1][0][2:])

        # Each server refuses ids the stream never had; both resume the newest one.
        for index in (0, 1):
            for bad in ("0-999999", "0-x", "7-1"):
                front.turn = itertools.count(index)
                async with http.get(url, headers={**get_headers, "Last-Event-ID": bad}) as r:
                    assert r.status == 400, (index, bad)
                    error = (await r.json())["error"]
                assert error["code"] == -32600 and "cannot be replayed" in error["message"]
            front.turn = itertools.count(index)
            again = await http.get(url, headers={**get_headers, "Last-Event-ID": newer_id})
            try:
                assert again.status == 200
                assert (await next_event(again))[0] == newer_id
            finally:
                again.close()


def test_what_the_store_keeps_of_a_stream_is_bounded_and_checked() -> None:
    log = EventLog(max_bytes=10 * SHARED_BYTES)
    stream = log.standalone
    for i in range(SHARED_EVENTS + 40):
        stream.add(b'{"n":%d}' % i)
    snapshot = decode_snapshot(stream.snapshot("a"))
    assert snapshot is not None and snapshot.origin == "a" and snapshot.last == stream.last
    assert len(snapshot.events) == SHARED_EVENTS
    assert snapshot.dropped == 40 and snapshot.events[0] == (41, b'{"n":40}')
    assert snapshot.problem(39) is not None and snapshot.problem(40) is None
    assert snapshot.problem(stream.last + 1) is not None
    big = EventLog(max_bytes=10 * SHARED_BYTES).standalone
    for _ in range(3):
        big.add(b'"' + b"x" * (SHARED_BYTES // 2) + b'"')
    kept = decode_snapshot(big.snapshot("a"))
    assert kept is not None and len(kept.events) == 1 and kept.dropped == 2

    # Another instance adopts it: the replay goes on from the cursor, new numbers follow, and
    # what that instance held undelivered comes after, renumbered.
    other = EventLog(max_bytes=10 * SHARED_BYTES)
    other.standalone.add(b'"undelivered"')
    other.standalone.adopt(snapshot, snapshot.last - 1)
    after = other.standalone.after(snapshot.last - 1)
    assert after == [snapshot.events[-1], (snapshot.last + 1, b'"undelivered"')]
    assert other.next_number() == snapshot.last + 2

    for malformed in (
        b"not json",
        b"[]",
        b'{"o": "a", "l": 1, "d": 2, "e": []}',
        b'{"o": "a", "l": 3, "d": 0, "e": [[2, "x"], [1, "y"]]}',
        b'{"o": "a", "l": 1, "d": 0, "e": [[5, "x"]]}',
        b'{"o": 1, "l": 1, "d": 0, "e": []}',
        b'{"o": "a", "l": 1, "d": 0, "e": [[1, 2]]}',
    ):
        assert decode_snapshot(malformed) is None, malformed


async def sse_ids(response: aiohttp.ClientResponse) -> list[str]:
    """The ids of every event of a finished SSE response (its priming one first)."""
    return [line[4:] for line in (await response.text()).splitlines() if line.startswith("id: ")]


async def test_a_request_stream_of_one_server_is_never_resumed_from_another() -> None:
    async with raw_fleet(n=2) as (url, front, http):
        session_id = await open_session(http, url)
        streamed: list[list[str]] = []
        for index in (0, 1):  # the same tool on each server: streams alike in all but origin
            front.turn = itertools.count(index)
            levels = message("tools/call", {"name": "levels"}, id=10 + index)
            headers = {**HEADERS, "Mcp-Session-Id": session_id}
            async with http.post(url, json=levels, headers=headers) as response:
                assert response.content_type == "text/event-stream"
                streamed.append(await sse_ids(response))
        front.turn = itertools.count(1)
        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        first_of_server_0 = streamed[0][1]
        async with http.get(url, headers={**get_headers, "Last-Event-ID": first_of_server_0}) as r:
            # Server 1 replays the response server 0 kept in the store (request 10's), never
            # server 1's own events.
            assert r.status == 200 and r.content_type == "text/event-stream"
            events = [
                json.loads(line[6:])
                for line in (await r.text()).splitlines()
                if line.startswith("data: ") and line[6:]
            ]
        assert [event.get("id") for event in events] == [10]
        assert "result" in events[0]
        # A stream nothing kept (an id no server made): 400, as before.
        async with http.get(url, headers={**get_headers, "Last-Event-ID": "77-1"}) as r:
            assert r.status == 400
            assert "names no event" in (await r.json())["error"]["message"]
        front.turn = itertools.count(0)  # the server that streamed it replays the rest
        async with http.get(url, headers={**get_headers, "Last-Event-ID": first_of_server_0}) as r:
            assert r.status == 200
            assert await sse_ids(r) == [first_of_server_0, *streamed[0][2:]]


async def data_events(response: aiohttp.ClientResponse) -> list[Any]:
    """The messages of a finished SSE response."""
    lines = (await response.text()).splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line[6:]]


async def test_a_response_too_large_to_keep_is_answered_elsewhere_with_an_error() -> None:
    async with raw_fleet(n=2) as (url, front, http):
        for app in front.apps:

            @app.server.tool()
            async def large(ctx: RequestContext) -> str:
                """Log, then answer more than a store keeps for another instance."""
                await ctx.log("info", "a large answer follows")
                return "x" * MAX_KEPT_RESPONSE

        session_id = await open_session(http, url)
        front.turn = itertools.count(0)
        body = message("tools/call", {"name": "large"}, id=21)
        headers = {**HEADERS, "Mcp-Session-Id": session_id}
        async with http.post(url, json=body, headers=headers) as response:
            assert response.content_type == "text/event-stream"
            ids = await sse_ids(response)
        front.turn = itertools.count(1)
        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
        async with http.get(url, headers={**get_headers, "Last-Event-ID": ids[1]}) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            events = await data_events(r)
        assert [(event["id"], event["error"]["code"]) for event in events] == [(21, -32603)]
        assert "Request interrupted" in events[0]["error"]["message"]
