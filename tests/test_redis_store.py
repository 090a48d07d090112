"""Redis as the shared store and change broker, against a real redis-server on loopback:
`RedisStore` semantics; exactly-once redemption across two servers; change notifications
across servers (listen streams and a legacy session), once each and in order; Redis lost and
back; `MRTR_STORE_URL`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from helpers.loopback_process import free_port
from helpers.mrtr_flows import call_tool, error_of, result_of, rpc
from helpers.redis_instance import RedisInstance, redis_instance
from helpers.shop import KEY, Shop
from mrtr import Client, Server, ServerOptions
from mrtr.client import Change, Subscription
from mrtr.protocol import jsonrpc
from mrtr.protocol.errors import INTERNAL_ERROR
from mrtr.server.redis_store import RedisBroker, RedisStore
from mrtr.server.session import LegacySession
from mrtr.server.store import Broker, MemoryBroker, Store
from mrtr.settings import SettingsError, server_options

__all__ = ["redis_instance"]  # the fixture, used by name

GUARD = 10.0  # seconds: only ever reached when something is broken


async def test_redis_store_keeps_the_store_contract(redis_instance: RedisInstance) -> None:
    store = RedisStore(redis_instance.url)
    try:
        assert isinstance(store, Store)
        assert await store.add("a", b"1\x00\xff", 10) is True
        assert await store.add("a", b"2", 10) is False  # one add of an absent key wins
        assert await store.get("a") == b"1\x00\xff"  # byte for byte
        await store.set("a", b"3", 10)
        assert await store.get("a") == b"3"
        await store.delete("a")
        await store.delete("a")  # absent: nothing happens
        assert await store.get("a") is None
        assert await store.add("short", b"x", 0.05) is True
        await asyncio.sleep(0.2)
        assert await store.get("short") is None  # expired
        assert await store.add("short", b"y", 10) is True
        results = await asyncio.gather(*(store.add("race", b"%d" % i, 10) for i in range(20)))
        assert sorted(results) == [False] * 19 + [True]
    finally:
        await store.aclose()


async def test_a_round_redeemed_on_one_server_and_replayed_on_another_runs_once(
    redis_instance: RedisInstance,
) -> None:
    a, b = Shop(store=RedisStore(redis_instance.url)), Shop(store=RedisStore(redis_instance.url))
    state = await a.first_state(amount=7)
    first = result_of(await a.final(state, amount=7))
    again = result_of(await b.final(state, amount=7))
    assert a.charges == [7] and b.charges == []
    assert again == first
    assert first["content"][0]["text"] == "charge #1 of 7: accept"
    # Concurrent repeats on both servers of a fresh state: still one charge.
    state = await b.first_state(amount=3)
    results = await asyncio.gather(
        *(shop.final(state, amount=3) for shop in (a, b, a, b)),
    )
    assert len(a.charges) + len(b.charges) == 2
    assert len({str(result_of(r)) for r in results}) == 1


def listening_server(name: str, broker: Broker) -> Server:
    server = Server(name, options=ServerOptions(request_state_key=KEY, broker=broker))

    @server.tool()
    def ping() -> str:
        """Answers pong."""
        return "pong"

    @server.resource("file:///config.json")
    def config() -> str:
        """The configuration."""
        return "{}"

    return server


async def take(changes: Subscription, count: int) -> list[Change]:
    got: list[Change] = []
    async with asyncio.timeout(GUARD):
        async for change in changes:
            got.append(change)
            if len(got) == count:
                break
    return got


async def legacy_session(server: Server) -> list[dict[str, Any]]:
    """A legacy (initialize) session attached to `server`; what it is sent."""
    sent: list[dict[str, Any]] = []

    async def on_session(message: dict[str, Any]) -> None:
        sent.append(message)

    async def on_request(message: dict[str, Any]) -> None:
        pass

    session = LegacySession(on_session)
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "0"},
    }
    response = await server.handle_message(
        jsonrpc.request(1, "initialize", init), on_request, "test", session
    )
    assert response is not None and "result" in response
    await server.handle_message(
        jsonrpc.notification("notifications/initialized"), on_request, "test", session
    )
    server.attach_session(session)
    return sent


async def check_changes_cross_servers(a: Server, b: Server) -> None:
    async with a.running(), b.running(), Client.in_memory(a) as client:
        legacy = await legacy_session(a)
        async with client.listen(tools=True, resource_uris=["file:///config.json"]) as changes:
            b.notify_tools_changed()
            b.notify_resource_updated("file:///other.json")  # not subscribed to on a
            b.notify_resource_updated("file:///config.json")
            a.notify_prompts_changed()  # not asked for by the stream
            # In the order b raised them.
            assert await take(changes, 2) == [
                Change("tools"),
                Change("resource", "file:///config.json"),
            ]
            # A's own change: delivered once, its echo through the broker dropped.
            a.notify_tools_changed()
            assert await take(changes, 1) == [Change("tools")]
            b.notify_resource_updated("file:///config.json")  # a marker: all before it is in
            assert await take(changes, 1) == [Change("resource", "file:///config.json")]
        # The legacy session (not subscribed to any resource): b's and a's list changes once.
        for _ in range(int(GUARD / 0.01)):  # bounded
            if len(legacy) >= 3:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # nothing more arrives (no duplicates)
        assert sorted(m["method"] for m in legacy) == [
            "notifications/prompts/list_changed",
            "notifications/tools/list_changed",
            "notifications/tools/list_changed",
        ]


async def test_changes_raised_on_one_server_reach_another_through_redis(
    redis_instance: RedisInstance,
) -> None:
    a = listening_server("fleet", RedisBroker(redis_instance.url))
    b = listening_server("fleet", RedisBroker(redis_instance.url))
    await check_changes_cross_servers(a, b)


async def test_changes_cross_servers_through_an_in_memory_broker() -> None:
    broker = MemoryBroker()
    assert isinstance(broker, Broker)
    await check_changes_cross_servers(
        listening_server("fleet", broker), listening_server("fleet", broker)
    )


async def test_a_server_of_another_name_hears_nothing(redis_instance: RedisInstance) -> None:
    a = listening_server("one", RedisBroker(redis_instance.url))
    b = listening_server("two", RedisBroker(redis_instance.url))
    c = listening_server("one", RedisBroker(redis_instance.url))
    async with (
        a.running(),
        b.running(),
        c.running(),
        Client.in_memory(a) as client,
        client.listen(tools=True, resource_uris=["file:///config.json"]) as changes,
    ):
        b.notify_tools_changed()  # another channel
        c.notify_resource_updated("file:///config.json")
        assert await take(changes, 1) == [Change("resource", "file:///config.json")]


async def test_malformed_and_stale_broker_messages_are_dropped() -> None:
    broker = MemoryBroker()
    a = listening_server("fleet", broker)
    async with a.running(), Client.in_memory(a) as client:
        async with client.listen(tools=True, resource_uris=["file:///config.json"]) as changes:
            channel = "mrtr/changes/fleet"
            for junk in (b"not json", b"[]", b'{"o": 1, "n": 1, "k": "toolsListChanged"}',
                         b'{"o": "x", "n": "1", "k": "toolsListChanged"}',
                         b'{"o": "x", "n": 1, "k": "nope"}', b'{"o": "x", "n": 1}'):  # fmt: skip
                broker.publish(channel, junk)
            broker.publish(channel, b'{"o": "x", "n": 5, "k": "toolsListChanged"}')
            assert await take(changes, 1) == [Change("tools")]
            broker.publish(channel, b'{"o": "x", "n": 5, "k": "toolsListChanged"}')  # duplicate
            broker.publish(channel, b'{"o": "x", "n": 4, "k": "toolsListChanged"}')  # older
            broker.publish(channel, b'{"o": "x", "n": 6, "u": "file:///config.json"}')
            assert await take(changes, 1) == [Change("resource", "file:///config.json")]
        result = result_of(await call_tool(a, "ping"))
        assert result["content"][0]["text"] == "pong"


async def test_redis_lost_fails_store_requests_fast_and_recovers(
    redis_instance: RedisInstance,
) -> None:
    a = Shop(store=RedisStore(redis_instance.url), broker=RedisBroker(redis_instance.url))

    @a.server.tool()
    def ping() -> str:
        """Answers pong."""
        return "pong"

    async with a.server.running():
        state = await a.first_state(amount=2)
        redis_instance.stop()
        started = time.monotonic()
        error = error_of(await a.final(state, amount=2))
        assert time.monotonic() - started < 3.0  # fails fast, never hangs
        assert error["code"] == INTERNAL_ERROR
        assert "shared store is unavailable" in error["message"]
        assert "127.0.0.1" not in error["message"]  # where Redis runs is not told
        assert a.charges == []
        # What does not need the store goes on: lists, first rounds, plain calls, changes.
        assert result_of(await call_tool(a.server, "ping"))["content"][0]["text"] == "pong"
        tools = result_of(await rpc(a.server, "tools/list", {}))["tools"]
        assert {tool["name"] for tool in tools} >= {"charge", "ping"}
        await a.first_state(amount=9)
        a.server.notify_tools_changed()
        redis_instance.start()  # the same port
        async with asyncio.timeout(GUARD):
            while True:
                response = await a.final(state, amount=2)
                if "result" in response:
                    break
                await asyncio.sleep(0.05)
        assert result_of(response)["content"][0]["text"] == "charge #1 of 2: accept"
        assert a.charges == [2]


async def test_changes_flow_again_after_redis_returns(redis_instance: RedisInstance) -> None:
    a = listening_server("fleet", RedisBroker(redis_instance.url))
    b = listening_server("fleet", RedisBroker(redis_instance.url))
    async with (
        a.running(),
        b.running(),
        Client.in_memory(a) as client,
        client.listen(resource_uris=["file:///config.json"]) as changes,
    ):
        redis_instance.stop()
        b.notify_resource_updated("file:///config.json")  # lost: Redis is away
        redis_instance.start()
        got: list[Change] = []
        for _ in range(int(GUARD / 0.5)):  # the subscriber reconnects with backoff
            b.notify_resource_updated("file:///config.json")
            try:
                async with asyncio.timeout(0.5):
                    got = await take(changes, 1)
                break
            except TimeoutError:
                pass
        assert got == [Change("resource", "file:///config.json")]


def test_store_url_selects_redis_and_checks_it(redis_instance: RedisInstance) -> None:
    options = server_options({"MRTR_STORE_URL": redis_instance.url})
    assert isinstance(options.store, RedisStore) and options.store.url == redis_instance.url
    assert isinstance(options.broker, RedisBroker)
    assert server_options({}).broker is None  # unset: in memory, no broker


def test_store_url_unreachable_or_malformed_is_a_clear_error() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(SettingsError, match=r"MRTR_STORE_URL: Redis at 127\.0\.0\.1:\d+/0 is "):
        server_options({"MRTR_STORE_URL": url})
    assert time.monotonic() - started < 5.0
    with pytest.raises(SettingsError, match="give a Redis URL"):
        server_options({"MRTR_STORE_URL": "http://localhost:6379"})


def test_options_refuse_a_broker_that_is_not_one() -> None:
    with pytest.raises(ValueError, match=r"ServerOptions\.broker must implement"):
        ServerOptions(broker="redis://localhost")  # type: ignore[arg-type]


def test_the_core_never_imports_redis() -> None:
    import subprocess
    import sys

    code = "import sys, mrtr, mrtr.server, mrtr.settings, mrtr.cli; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


async def test_a_burst_waits_for_a_free_connection_instead_of_failing(
    redis_instance: RedisInstance,
) -> None:
    store = RedisStore(redis_instance.url, max_connections=2)
    try:
        results = await asyncio.gather(*(store.add(f"burst/{i}", b"1", 10) for i in range(300)))
        assert results == [True] * 300  # 300 at once over 2 connections: none refused
        assert await store.get("burst/299") == b"1"
    finally:
        await store.aclose()
    with pytest.raises(ValueError, match="max_connections"):
        RedisStore(redis_instance.url, max_connections=0)


async def test_after_the_broker_comes_back_every_list_is_announced_once(
    redis_instance: RedisInstance,
) -> None:
    # Changes published while Redis was away are lost: once the subscription is back, the
    # hub says each list may have changed, to its listen streams and legacy sessions.
    a = listening_server("fleet", RedisBroker(redis_instance.url))

    @a.prompt()
    def hello() -> str:
        """A prompt, so that prompt list changes are announced."""
        return "hello"

    async with (
        a.running(),
        Client.in_memory(a) as client,
        client.listen(tools=True, prompts=True) as changes,
    ):
        legacy = await legacy_session(a)
        redis_instance.stop()
        await asyncio.sleep(0.2)  # the subscription notices
        redis_instance.start()
        got = await take(changes, 2)
        assert sorted(change.kind for change in got) == ["prompts", "tools"]
        for _ in range(int(GUARD / 0.01)):  # bounded
            if len(legacy) >= 3:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert sorted(m["method"] for m in legacy) == [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/tools/list_changed",
        ]


async def test_concurrent_repeats_never_take_over_a_round_that_just_ended(
    redis_instance: RedisInstance,
) -> None:
    # A waiting repeat reads "running", and the round ends (outcome written, claim given up)
    # before it acts on what it read: taking that stale claim over would charge again. Many
    # tries, since the window is a few awaits wide (about one in six charged twice before).
    a, b = Shop(store=RedisStore(redis_instance.url)), Shop(store=RedisStore(redis_instance.url))
    for _ in range(100):
        state = await b.first_state(amount=3)
        charged = len(a.charges) + len(b.charges)
        results = await asyncio.gather(*(shop.final(state, amount=3) for shop in (a, b, a, b)))
        assert len(a.charges) + len(b.charges) == charged + 1
        assert len({str(result_of(r)) for r in results}) == 1
