"""A Redis stall or restart never strands a round: a claim whose write timed out (and was
applied when Redis went on, or persisted before a restart) is taken over by the client's
retry within seconds, and the side effect runs once; while Redis is away, a round and a task
call get a retryable answer (HTTP 503, `Retry-After`, `data.reason` "store_unavailable").
Against a real redis-server, paused with SIGSTOP and restarted with AOF."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from redis import Redis as SyncRedis

from helpers.mrtr_flows import accept, error_of, request_meta, result_of
from helpers.redis_instance import RedisInstance, redis_instance, running_redis
from helpers.shop import Shop
from helpers.transport_flow import serve
from mrtr.protocol.tasks import EXTENSION_ID
from mrtr.server import redemption
from mrtr.server.redis_store import RedisStore

__all__ = ["redis_instance"]  # the fixture, used by name

GUARD = 10.0  # seconds: only ever reached when something is broken
UNAVAILABLE = {"reason": "store_unavailable"}
CAPS: dict[str, Any] = {"elicitation": {"form": {}}, "extensions": {EXTENSION_ID: {}}}


async def connected(*stores: RedisStore) -> None:
    """Open a few connections of each store first: a claim sent during a stall then goes out
    on one (as under load), rather than waiting on a new connection's handshake."""
    for store in stores:
        await asyncio.gather(*(store.ping() for _ in range(3)))


@contextmanager
def paused(redis: RedisInstance) -> Iterator[None]:
    """Redis stopped (SIGSTOP) inside the block, as a stall would; going on after it."""
    assert redis.process is not None
    redis.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        redis.process.send_signal(signal.SIGCONT)


def claims(redis: RedisInstance) -> list[bytes]:
    """The "running" records of redeemed rounds in Redis now."""
    client = SyncRedis.from_url(redis.url, socket_timeout=GUARD)
    try:
        values = [client.get(key) for key in client.keys("mrtr/round/*")]
    finally:
        client.close()
    return [value for value in values if isinstance(value, bytes) and value.startswith(b"R")]


def until_claimed(redis: RedisInstance) -> None:
    """Wait until the claim whose write timed out has been applied by Redis."""
    deadline = time.monotonic() + GUARD
    while not claims(redis):
        assert time.monotonic() < deadline, "the timed-out claim was never applied"
        time.sleep(0.02)


async def test_a_claim_applied_after_its_timeout_is_taken_over_by_the_retry(
    redis_instance: RedisInstance,
) -> None:
    store = RedisStore(redis_instance.url)
    shop = Shop(store=store)
    try:
        state = await shop.first_state(amount=4)
        await connected(store)
        with paused(redis_instance):
            error = error_of(await asyncio.wait_for(shop.final(state, amount=4), GUARD))
        assert error["data"] == UNAVAILABLE and "retry later" in error["message"]
        assert shop.charges == []
        # Redis went on and applied the claim: it names this live process, which never ran it.
        until_claimed(redis_instance)
        started = time.monotonic()
        response = await asyncio.wait_for(shop.final(state, amount=4), GUARD)
        assert time.monotonic() - started < 3  # not round_timeout + 5 s
        assert result_of(response)["content"][0]["text"] == "charge #1 of 4: accept"
        assert result_of(await shop.final(state, amount=4)) == result_of(response)
        assert shop.charges == [4]
    finally:
        await store.aclose()


async def test_a_claim_stranded_by_another_live_instance_is_taken_over_within_seconds(
    redis_instance: RedisInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = [RedisStore(redis_instance.url) for _ in range(2)]
    a, b = Shop(store=stores[0]), Shop(store=stores[1])
    try:
        state = await a.first_state(amount=6)
        await connected(*stores)
        # Instance "a" (another process id) claims the round during a stall and gives it up.
        monkeypatch.setattr(redemption, "PROCESS_ID", "instance-a")
        with paused(redis_instance):
            error = error_of(await asyncio.wait_for(a.final(state, amount=6), GUARD))
        monkeypatch.undo()
        assert error["data"] == UNAVAILABLE
        until_claimed(redis_instance)
        assert b"instance-a:" in claims(redis_instance)[0]
        # "a" lives on (its liveness key is rewritten) but holds no claim.
        alive = redemption.Redemptions.liveness_key("instance-a")

        async def beat() -> None:
            while True:
                await asyncio.sleep(redemption.BEAT_EVERY)
                await stores[0].set(alive, b"1", redemption.LIVENESS_TTL)

        await stores[0].set(alive, b"1", redemption.LIVENESS_TTL)
        beating = asyncio.create_task(beat())
        try:
            started = time.monotonic()
            response = await asyncio.wait_for(
                b.final(state, amount=6), redemption.LIVENESS_TTL + GUARD
            )
            waited = time.monotonic() - started
        finally:
            beating.cancel()
        # Not round_timeout + 5 s: one liveness lifetime, to be sure "a" does not hold it.
        assert redemption.LIVENESS_TTL <= waited < redemption.LIVENESS_TTL + 4
        assert result_of(response)["content"][0]["text"] == "charge #1 of 6: accept"
        assert a.charges == [] and b.charges == [6]
    finally:
        for store in stores:
            await store.aclose()


async def post(
    http: aiohttp.ClientSession, url: str, name: str, params: dict[str, Any]
) -> tuple[int, Any, dict[str, Any]]:
    """POST one raw `tools/call` of `name`: (status, headers, JSON body)."""
    message = {
        "jsonrpc": "2.0",
        "id": "raw",
        "method": "tools/call",
        "params": {"name": name, **params, "_meta": request_meta(CAPS)},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        "MCP-Protocol-Version": "2026-07-28",
    }
    async with http.post(url, data=orjson.dumps(message), headers=headers) as response:
        return response.status, response.headers, orjson.loads(await response.read())


async def test_redis_restarted_with_aof_mid_flow_gives_503_then_the_retry_completes_once() -> None:
    with running_redis("--appendonly", "yes", "--appendfsync", "always") as redis:
        store = RedisStore(redis.url)
        shop = Shop(store=store)

        @shop.server.tool(task="required")
        async def pack(item: str) -> str:
            """Packs `item`, as a task."""
            await asyncio.sleep(0.5)
            return f"packed {item}"

        try:
            async with serve(shop.server.asgi_app()) as base, aiohttp.ClientSession() as http:
                url = f"{base}/mcp"
                _, _, first = await post(http, url, "charge", {"arguments": {"amount": 3}})
                final = {
                    "arguments": {"amount": 3},
                    "inputResponses": {"confirm": accept(ok=True)},
                    "requestState": result_of(first)["requestState"],
                }
                task_call = {"arguments": {"item": "a"}, "task": {"ttl": 60_000}}
                await connected(store)
                # A stall: the claim times out, then Redis applies it and persists it.
                with paused(redis):
                    status, headers, body = await post(http, url, "charge", final)
                assert status == 503 and headers.get("Retry-After") == "1"
                assert error_of(body)["data"] == UNAVAILABLE
                until_claimed(redis)
                # A restart: while Redis is down both a round and a task call are retryable.
                redis.stop()
                for name, params in (("charge", final), ("pack", task_call)):
                    status, headers, body = await post(http, url, name, params)
                    assert status == 503 and headers.get("Retry-After") == "1", body
                    assert error_of(body)["data"] == UNAVAILABLE
                redis.start()  # the same port and directory: the AOF brings the claim back
                assert claims(redis)
                started = time.monotonic()
                while True:
                    status, _, body = await post(http, url, "charge", final)
                    if status != 503:
                        break
                    assert time.monotonic() - started < GUARD
                    await asyncio.sleep(0.05)
                assert time.monotonic() - started < 5
                assert status == 200
                assert result_of(body)["content"][0]["text"] == "charge #1 of 3: accept"
                assert shop.charges == [3]
                _, _, again = await post(http, url, "charge", final)
                assert result_of(again) == result_of(body) and shop.charges == [3]
                status, _, body = await post(http, url, "pack", task_call)
                assert status == 200 and result_of(body)["resultType"] == "task"
        finally:
            await store.aclose()
