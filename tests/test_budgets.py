"""Budgets: every thing a caller can make the server hold is bounded per principal and in all,
and past a bound the caller asking for more is refused, never someone else's state ended
(`docs/reference/budgets.md`, one test per row). Real HTTP on loopback; a real redis-server
for the bounds that hold across instances. Limits are set small through options.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio

from helpers.caller_header import caller
from helpers.redis_instance import RedisInstance, redis_instance
from helpers.tasks_server_app import GUARD, NAME, HttpPeer, request
from helpers.transport_flow import serve
from mrtr import RequestContext, Server, ServerOptions
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import INVALID_PARAMS
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.budgets import BUDGET_EXCEEDED, Budgets
from mrtr.server.redis_store import RedisBroker, RedisStore
from mrtr.server.store import Broker, MemoryStore, Store
from mrtr.server.tasks import TaskSettings
from mrtr.server.tasks import run as task_run
from mrtr.transport.http_app import StreamableHTTPApp

LEGACY = "2025-11-25"
__all__ = ["redis_instance"]  # the fixture, used by name


def legacy_server(**budgets: Any) -> Server:
    server = Server("budgets", options=ServerOptions(principal=caller, budgets=Budgets(**budgets)))

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @server.resource_template("file:///{name}")
    def file(name: str) -> str:
        return name

    return server


class Peer:
    """A raw legacy HTTP client, as `user` (or anonymous)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, user: str | None) -> None:
        self.http = http
        self.url = url
        self.user = user
        self.session_id: str | None = None
        self.ids = iter(range(1, 1_000_000))

    async def post(self, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LEGACY,
        }
        if self.user is not None:
            headers["x-test-user"] = self.user
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        async with self.http.post(self.url, data=orjson.dumps(message), headers=headers) as r:
            if method == "initialize":
                self.session_id = r.headers.get("Mcp-Session-Id")
            return r.status, orjson.loads(await r.read())

    async def initialize(self, client_info: dict[str, Any] | None = None) -> tuple[bool, Any]:
        """Whether a session opened, and the answer. A refusal is a JSON-RPC error sent with
        HTTP 200, as every JSON-RPC answer of the legacy era."""
        self.session_id = None
        params = {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": client_info or {"name": "peer", "version": "1"},
        }
        status, body = await self.post("initialize", params)
        assert status == 200, body
        assert (self.session_id is not None) == ("result" in body), body
        return self.session_id is not None, body

    async def alive(self, session_id: str) -> bool:
        self.session_id = session_id
        status, body = await self.post("tools/list", {})
        return status == 200 and "result" in body


def refused(body: Any, budget: str, limit: int) -> None:
    """`body` is the budget refusal for `budget` at `limit`."""
    error = body["error"]
    assert error["code"] == INVALID_PARAMS, body
    assert error["data"]["reason"] == BUDGET_EXCEEDED
    assert error["data"]["budget"] == budget and error["data"]["limit"] == limit
    assert str(limit) in error["message"]


@contextlib.asynccontextmanager
async def endpoint(
    server: Server, **app_options: Any
) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """`server` on loopback: its URL, and an HTTP client for the peers."""
    app = StreamableHTTPApp(server, **app_options)
    async with serve(app) as base, aiohttp.ClientSession() as http:
        yield base + "/mcp", http
        app.close()


async def subscribe(peer: Peer, uri: str) -> Any:
    status, body = await peer.post("resources/subscribe", {"uri": uri})
    assert status == 200  # a refusal too: a JSON-RPC error of a legacy session
    return body


# --- legacy sessions ----------------------------------------------------------------------------


async def test_sessions_per_principal_are_refused_past_the_bound_and_others_keep_theirs() -> None:
    async with endpoint(legacy_server(sessions_per_principal=3), max_sessions=10) as (url, http):
        alice, mallory = Peer(http, url, "alice"), Peer(http, url, "mallory")
        assert (await alice.initialize())[0]
        kept = alice.session_id
        assert kept is not None
        for _ in range(3):
            assert (await mallory.initialize())[0]
        opened, body = await mallory.initialize()
        assert not opened
        refused(body, "legacy sessions", 3)
        assert body["error"]["data"]["bound"] == "principal"
        assert "DELETE" in body["error"]["message"]
        # Alice's session was never given up, and she may still open more.
        assert await alice.alive(kept)
        assert (await alice.initialize())[0]


async def test_sessions_in_all_are_refused_past_max_sessions_none_evicted() -> None:
    async with endpoint(legacy_server(), max_sessions=4) as (url, http):
        alice = Peer(http, url, "alice")
        assert (await alice.initialize())[0]
        kept = alice.session_id
        assert kept is not None
        # Anonymous callers (one address here) fill the rest of the server.
        anonymous = Peer(http, url, None)
        for _ in range(3):
            assert (await anonymous.initialize())[0]
        body = (await anonymous.initialize())[1]
        refused(body, "legacy sessions", 4)
        assert body["error"]["data"]["bound"] == "total"
        assert await alice.alive(kept)


async def test_an_ended_session_gives_its_place_back() -> None:
    async with endpoint(legacy_server(sessions_per_principal=1)) as (url, http):
        alice = Peer(http, url, "alice")
        assert (await alice.initialize())[0]
        first = alice.session_id
        assert not (await alice.initialize())[0]
        headers = {"Mcp-Session-Id": first or "", "x-test-user": "alice"}
        async with http.delete(url, headers=headers) as r:
            assert r.status == 204
        assert (await alice.initialize())[0]


async def test_idle_sessions_still_expire_and_free_their_place() -> None:
    server = legacy_server(sessions_per_principal=1)
    async with endpoint(server, session_idle_timeout=0.05) as (url, http):
        alice = Peer(http, url, "alice")
        assert (await alice.initialize())[0]
        first = alice.session_id
        assert first is not None
        assert not (await alice.initialize())[0]
        # Past the idle timeout the session is gone, and its place with it.
        await asyncio.sleep(0.1)
        assert (await alice.initialize())[0]
        assert not await alice.alive(first)


async def test_initialize_data_is_bounded_without_a_shared_store() -> None:
    server = legacy_server(session_bytes=4096)
    async with endpoint(server) as (url, http):
        alice = Peer(http, url, "alice")
        opened, body = await alice.initialize({"name": "x" * 5000, "version": "1"})
        assert not opened
        refused(body, "session bytes", 4096)
        assert "clientInfo" in body["error"]["message"]
        # Nothing was kept: the caller's place is still free.
        assert (await alice.initialize({"name": "x" * 3000, "version": "1"}))[0]


# --- legacy subscriptions -----------------------------------------------------------------------


async def test_subscription_uris_are_bounded_in_length_and_in_bytes_per_session() -> None:
    server = legacy_server(subscription_uri_bytes=100, subscription_bytes=250, subscriptions=5)
    async with endpoint(server) as (url, http):
        alice = Peer(http, url, "alice")
        assert (await alice.initialize())[0]
        refused(await subscribe(alice, "file:///" + "a" * 93), "subscription URI bytes", 100)
        for letter in "bc":
            assert "result" in await subscribe(alice, "file:///" + letter * 90)
        refused(await subscribe(alice, "file:///" + "d" * 90), "subscription bytes", 250)
        # A repeat of one already followed costs nothing, and short ones fit.
        assert "result" in await subscribe(alice, "file:///" + "b" * 90)
        for name in "efg":
            assert "result" in await subscribe(alice, "file:///" + name)
        refused(await subscribe(alice, "file:///h"), "subscriptions", 5)


# --- legacy sessions across instances (Redis) -------------------------------------------------


@contextlib.asynccontextmanager
async def redis_pair(
    url: str, **budgets: Any
) -> AsyncIterator[tuple[list[str], aiohttp.ClientSession, list[asyncio.Event]]]:
    """Two instances of one server sharing a real Redis, each on its own loopback port; the
    gates their `wait` tools wait on."""
    stores = [RedisStore(url) for _ in range(2)]
    brokers = [RedisBroker(url) for _ in range(2)]
    built = [task_server(stores[i], brokers[i], **budgets) for i in range(2)]
    apps = [StreamableHTTPApp(server, max_sessions=4) for server, _ in built]
    try:
        async with (
            built[0][0].running(),
            built[1][0].running(),
            serve(apps[0]) as first,
            serve(apps[1]) as second,
            aiohttp.ClientSession() as http,
        ):
            yield [first + "/mcp", second + "/mcp"], http, [gate for _, gate in built]
            for app in apps:
                app.close()
    finally:
        for store, broker in zip(stores, brokers, strict=True):
            await store.aclose()
            await broker.aclose()


async def test_session_bounds_hold_across_instances_sharing_redis(
    redis_instance: RedisInstance,
) -> None:
    async with redis_pair(redis_instance.url, sessions_per_principal=2) as (urls, http, _):
        # Per principal: mallory's third session is refused whichever instance she asks.
        mallory = [Peer(http, url, "mallory") for url in urls]
        assert (await mallory[0].initialize())[0]
        assert (await mallory[1].initialize())[0]
        for peer in mallory:
            refused((await peer.initialize())[1], "legacy sessions", 2)
        # In all: 4 sessions over both instances (each holds 2 of its own); the fifth is
        # refused on either, and nobody's session was given up.
        bob = [Peer(http, url, "bob") for url in urls]
        assert (await bob[0].initialize())[0]
        kept = bob[0].session_id
        assert kept is not None
        assert (await bob[1].initialize())[0]
        carol = [Peer(http, url, "carol") for url in urls]
        for peer in carol:
            body = (await peer.initialize())[1]
            refused(body, "legacy sessions", 4)
            assert body["error"]["data"]["bound"] == "total"
        assert await bob[1].alive(kept)  # served by the other instance, from the record
        client = redis.asyncio.Redis.from_url(redis_instance.url)
        try:
            assert len(await client.keys("mrtr/session/*")) == 4
        finally:
            await client.aclose()
        # A session deleted on one instance gives its place back on both.
        headers = {"Mcp-Session-Id": kept, "x-test-user": "bob"}
        async with http.delete(urls[1], headers=headers) as r:
            assert r.status == 204
        assert (await carol[0].initialize())[0]
        refused((await carol[1].initialize())[1], "legacy sessions", 4)


# --- live tasks ---------------------------------------------------------------------------------


class CountingStore(MemoryStore):
    """A real in-process store that counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def get(self, key: str) -> bytes | None:
        self.reads += 1
        return await super().get(key)


def task_server(
    store: Store | None = None, broker: Broker | None = None, **budgets: Any
) -> tuple[Server, asyncio.Event]:
    gate = asyncio.Event()
    options = ServerOptions(principal=caller, budgets=Budgets(**budgets), broker=broker)
    if store is not None:
        options.store = store
    server = Server("budget-tasks", options=options)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @server.tool(task=TaskSettings("optional", start_after=None))
    async def wait(ctx: RequestContext) -> str:
        """Become a task, then wait for the gate."""
        await ctx.run_as_task()
        await gate.wait()
        return "done"

    @server.tool(task=TaskSettings("optional", start_after=None))
    async def ask(ctx: RequestContext) -> str:
        """Become a task, then ask for a name."""
        await ctx.run_as_task()
        answer = await ctx.elicit("Name?", NAME, key="name")
        return f"hello {(answer.content or {}).get('name')}"

    @server.tool(task=TaskSettings("optional", start_after=None))
    async def chatty(ctx: RequestContext, lines: int) -> str:
        """Become a task, wait for the gate, then log `lines` lines at once."""
        await ctx.run_as_task()
        await gate.wait()
        for number in range(lines):
            await ctx.log("info", f"line {number} " + "x" * 100)
        return "said it all"

    return server, gate


async def test_live_tasks_are_refused_past_their_bounds_none_stopped() -> None:
    server, gate = task_server(tasks_per_principal=2, tasks=3)
    async with server.running(), endpoint(server) as (url, http):
        alice, bob, carol = (HttpPeer(http, url, user) for user in ("alice", "bob", "carol"))
        call = {"name": "wait", "arguments": {}}
        mine = [(await alice.result("tools/call", call))["taskId"] for _ in range(2)]
        refused(await alice.call("tools/call", call), "live tasks", 2)
        theirs = (await bob.result("tools/call", call))["taskId"]
        body = await carol.call("tools/call", call)
        refused(body, "live tasks", 3)
        assert body["error"]["data"]["bound"] == "total"
        for peer, task_id in ((alice, mine[0]), (alice, mine[1]), (bob, theirs)):
            assert (await peer.result("tasks/get", {"taskId": task_id}))["status"] == "working"
        # A task that ends gives its place back.
        gate.set()
        for peer, task_id in ((alice, mine[0]), (alice, mine[1]), (bob, theirs)):
            await peer.until(task_id, "completed")
        assert "taskId" in await carol.result("tools/call", call)


async def test_a_task_waiting_for_answers_does_not_poll_an_in_process_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(task_run, "ANSWER_POLL", 0.005)
    store = CountingStore()
    server, _ = task_server(store)
    async with server.running(), endpoint(server) as (url, http):
        alice = HttpPeer(http, url, "alice")
        task_id = (await alice.result("tools/call", {"name": "ask", "arguments": {}}))["taskId"]
        await alice.until(task_id, "input_required")
        reads = store.reads
        await asyncio.sleep(0.1)  # twenty polls' worth
        assert store.reads == reads
        answer = {"action": "accept", "content": {"name": "Ada"}}
        await alice.result("tasks/update", {"taskId": task_id, "inputResponses": {"name": answer}})
        done = await alice.until(task_id, "completed")
        assert done["result"]["content"][0]["text"] == "hello Ada"


# --- listen stream queues -----------------------------------------------------------------------


async def listen(http: aiohttp.ClientSession, url: str, task_id: str) -> AsyncIterator[Any]:
    """The messages of a `subscriptions/listen` stream following `task_id`."""
    body = request(500, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "subscriptions/listen",
        "x-test-user": "alice",
    }
    async with http.post(url, json=body, headers=headers) as response:
        assert response.content_type == "text/event-stream"
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data:"):
                yield orjson.loads(line[5:])


@pytest.mark.parametrize("bound", [{"stream_messages": 5}, {"stream_bytes": 1000}])
async def test_a_listen_stream_queues_task_messages_within_its_bounds(
    bound: dict[str, int],
) -> None:
    server, gate = task_server(**bound)
    async with server.running(), endpoint(server) as (url, http):
        alice = HttpPeer(http, url, "alice")
        call = request(1, "tools/call", {"name": "chatty", "arguments": {"lines": 50}})
        call["params"]["_meta"][meta_keys.LOG_LEVEL] = "info"
        task_id = (await alice.send(call))["result"]["taskId"]
        received: list[Any] = []
        async with asyncio.timeout(GUARD):
            async for message in listen(http, url, task_id):
                received.append(message)
                method = message.get("method")
                if method == "notifications/subscriptions/acknowledged":
                    gate.set()  # the 50 lines are queued at once, before the stream sends any
                elif method == "notifications/tasks" and message["params"]["status"] != "working":
                    break
        logs = [m for m in received if m.get("method") == "notifications/message"]
        note, lines = logs[0]["params"], logs[1:]
        dropped = int(note["data"].split()[0])
        assert note["level"] == "warning" and "reader fell behind" in note["data"]
        # The newest lines are kept, within the bound, and the note counts the rest.
        kept = [int(line["params"]["data"].split()[1]) for line in lines]
        assert kept == list(range(50 - len(kept), 50)) and dropped + len(kept) == 50
        if "stream_messages" in bound:
            assert len(kept) == 5
        else:
            assert 0 < sum(len(orjson.dumps(line)) for line in lines) <= 1000
        assert received[-1]["params"]["status"] == "completed"


async def test_a_listen_stream_follows_resources_within_the_subscription_budgets() -> None:
    server = legacy_server(subscriptions=3, subscription_uri_bytes=100, subscription_bytes=250)
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "subscriptions/listen",
    }
    async with endpoint(server) as (url, http):

        async def listen_to(uris: list[str]) -> Any:
            filter = {"notifications": {"resourceSubscriptions": uris}}
            body = request(7, "subscriptions/listen", filter)
            async with http.post(url, json=body, headers=headers) as response:
                return orjson.loads(await response.read())

        refused(await listen_to(["file:///" + c for c in "abcd"]), "subscriptions", 3)
        refused(await listen_to(["file:///" + "a" * 93]), "subscription URI bytes", 100)
        uris = ["file:///" + c * 90 for c in "abc"]
        refused(await listen_to(uris), "subscription bytes", 250)


async def test_live_task_bounds_hold_across_instances_sharing_redis(
    redis_instance: RedisInstance,
) -> None:
    async with redis_pair(redis_instance.url, tasks_per_principal=1, tasks=2) as (
        urls,
        http,
        gates,
    ):
        call = {"name": "wait", "arguments": {}}
        alice = [HttpPeer(http, url, "alice") for url in urls]
        mine = (await alice[0].result("tools/call", call))["taskId"]
        refused(await alice[1].call("tools/call", call), "live tasks", 1)
        bob = [HttpPeer(http, url, "bob") for url in urls]
        theirs = (await bob[1].result("tools/call", call))["taskId"]
        body = await HttpPeer(http, urls[0], "carol").call("tools/call", call)
        refused(body, "live tasks", 2)
        assert body["error"]["data"]["bound"] == "total"
        # Alice's task ends on the first instance: her place is free on the second.
        gates[0].set()
        await alice[1].until(mine, "completed")
        assert "taskId" in await alice[1].result("tools/call", call)
        assert (await bob[0].result("tasks/get", {"taskId": theirs}))["status"] == "working"
        gates[1].set()


async def test_listen_streams_are_refused_past_their_bounds_none_closed() -> None:
    server = legacy_server(streams_per_principal=2, streams=3)
    body = request(9, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})

    async def open_stream(stack: contextlib.AsyncExitStack, user: str) -> Any:
        """Open a listen stream as `user`: the open response once acknowledged, else the
        refusal."""
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
            "Mcp-Method": "subscriptions/listen",
            "x-test-user": user,
        }
        response = await stack.enter_async_context(http.post(url, json=body, headers=headers))
        if response.content_type != "text/event-stream":
            return orjson.loads(await response.read())
        async for raw in response.content:
            if raw.startswith(b"data:"):
                assert b"acknowledged" in raw
                return response
        raise AssertionError("the stream ended before its acknowledgement")

    async with (
        server.running(),
        endpoint(server) as (url, http),
        contextlib.AsyncExitStack() as stack,
    ):
        alices = [await open_stream(stack, "alice") for _ in range(2)]
        refused(await open_stream(stack, "alice"), "listen streams", 2)
        bobs = await open_stream(stack, "bob")
        body_ = await open_stream(stack, "carol")
        refused(body_, "listen streams", 3)
        assert body_["error"]["data"]["bound"] == "total"
        # Everyone's streams are still open: a change reaches each of them.
        server.notify_tools_changed()
        for response in (*alices, bobs):
            async for raw in response.content:
                if raw.startswith(b"data:"):
                    assert b"tools/list_changed" in raw
                    break
        # A stream closed gives its place back.
        alices[0].close()
        # (The server sees the close a moment later: asked again until then.)
        for _ in range(round(GUARD / 0.01)):
            reopened = await open_stream(stack, "alice")
            if not isinstance(reopened, dict):
                break
            refused(reopened, "listen streams", 2)
            await asyncio.sleep(0.01)
        assert reopened.content_type == "text/event-stream"


def test_budgets_refuse_impossible_values() -> None:
    with pytest.raises(ValueError, match="sessions_per_principal"):
        Budgets(sessions_per_principal=0)
    with pytest.raises(ValueError, match="session_bytes"):
        Budgets(session_bytes=1024 * 1024)
