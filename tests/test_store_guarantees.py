"""Guarantee records are never evicted: a full store refuses new work with a clear, retryable
error (-32603, `data.reason` "store_full", HTTP 503) instead of dropping the redemption record
of a round that already ran (or a DPoP proof's, or a task's); in memory and in a real Redis
at `maxmemory` with `noeviction`; an evicting Redis policy is warned about at start-up."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import orjson
import pytest

from helpers.mrtr_flows import accept, error_of, request_meta, result_of, rpc
from helpers.redis_instance import running_redis
from helpers.shop import Shop
from helpers.transport_flow import serve
from mrtr import Client, ElicitResult, McpError
from mrtr.protocol.errors import INTERNAL_ERROR
from mrtr.protocol.tasks import EXTENSION_ID
from mrtr.server.auth.dpop import DPoPChecker, Proof
from mrtr.server.auth.settings import DPoPSettings
from mrtr.server.redis_store import RedisStore, check_reachable
from mrtr.server.store import MemoryStore, StoreFull

# A large tool result, as in a report: about 16 of them fill the 4 MiB store below.
SIZE = 250_000
STORE_BYTES = 4 * 1024 * 1024
MOST_FLOWS = 40  # far past what fits: only reached when nothing is ever refused
STORE_FULL = {"reason": "store_full"}
GUARD = 10.0  # seconds: only ever reached when something is broken


def confirm(params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


async def post(http: aiohttp.ClientSession, url: str, params: dict[str, Any]) -> Any:
    """POST one raw `tools/call` of `report`: (status, headers, JSON body)."""
    message = {
        "jsonrpc": "2.0",
        "id": "raw",
        "method": "tools/call",
        "params": {**params, "_meta": request_meta()},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "report",
        "MCP-Protocol-Version": "2026-07-28",
    }
    async with http.post(url, data=orjson.dumps(message), headers=headers) as response:
        return response.status, response.headers, orjson.loads(await response.read())


async def test_a_full_memory_store_refuses_new_flows_and_a_replay_never_runs_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(max_bytes=STORE_BYTES)
    shop = Shop(store=store)
    async with (
        serve(shop.server.asgi_app()) as url,
        Client.http(f"{url}/mcp", elicitation_handler=confirm) as client,
        aiohttp.ClientSession() as http,
    ):
        params = {"name": "report", "arguments": {"size": SIZE}}
        first = await client.request("tools/call", params)
        final = {
            **params,
            "inputResponses": {"confirm": accept(ok=True)},
            "requestState": first["requestState"],
        }
        early = await client.request("tools/call", final)
        assert shop.charges == [SIZE]
        refused: McpError | None = None
        for _ in range(MOST_FLOWS):
            try:
                await client.call_tool("report", {"size": SIZE})
            except McpError as exc:
                refused = exc
                break
        assert refused is not None, "the store never filled: records were dropped instead"
        assert refused.code == INTERNAL_ERROR and refused.data == STORE_FULL
        assert "full" in refused.message and "retry later" in refused.message
        ran = len(shop.charges)
        assert 2 < ran < MOST_FLOWS
        assert store.refusals >= 1 and store.bytes <= store.max_bytes
        # The refused flow stopped before its side effect: the claim came first.
        # Over HTTP the refusal is a retryable 503 with Retry-After.
        another = await client.request("tools/call", params)
        status, headers, body = await post(
            http,
            f"{url}/mcp",
            {
                **params,
                "inputResponses": {"confirm": accept(ok=True)},
                "requestState": another["requestState"],
            },
        )
        assert status == 503 and headers.get("Retry-After") == "1"
        assert error_of(body)["data"] == STORE_FULL
        assert len(shop.charges) == ran
        # The earliest redeemed round is still remembered: its replay gets the same result.
        for _ in range(3):
            assert await client.request("tools/call", final) == early
        assert len(shop.charges) == ran
    logged = [record.getMessage() for record in caplog.records]
    assert any("store is full" in line for line in logged)
    # Refused at the claim, before running: every round that ran kept its outcome.
    assert not any("is not kept" in line for line in logged)


async def test_redis_at_maxmemory_with_noeviction_refuses_clearly_and_keeps_its_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with running_redis("--maxmemory", "4mb", "--maxmemory-policy", "noeviction") as redis:
        store = RedisStore(redis.url)
        shop = Shop(store=store)
        try:
            first = await shop.first_state(name="report", size=SIZE)
            early = result_of(await shop.final(first, name="report", size=SIZE))
            error: dict[str, Any] | None = None
            for _ in range(MOST_FLOWS):
                state = await shop.first_state(name="report", size=SIZE)
                response = await shop.final(state, name="report", size=SIZE)
                if "error" in response:
                    error = error_of(response)
                    break
            assert error is not None, "Redis never filled"
            assert error["code"] == INTERNAL_ERROR and error["data"] == STORE_FULL
            assert "full" in error["message"]
            ran = len(shop.charges)
            for _ in range(3):
                assert result_of(await shop.final(first, name="report", size=SIZE)) == early
            assert len(shop.charges) == ran
            assert store.refusals >= 1
            await store.ping()  # Redis is fine, and so is the store: only new writes wait
        finally:
            await store.aclose()
    assert not any("is not kept" in record.getMessage() for record in caplog.records)


def test_an_evicting_redis_policy_is_warned_about_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        running_redis("--maxmemory-policy", "allkeys-lru") as redis,
        caplog.at_level(logging.WARNING, "mrtr.server"),
    ):
        check_reachable(redis.url)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("allkeys-lru" in m and "noeviction" in m for m in warned), warned
    caplog.clear()
    with running_redis() as redis, caplog.at_level(logging.WARNING, "mrtr.server"):
        check_reachable(redis.url)  # noeviction: the default
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_dpop_proof_records_are_never_evicted_a_full_store_refuses_new_proofs() -> None:
    store = MemoryStore(max_entries=50)
    checker = DPoPChecker(DPoPSettings(), "http://127.0.0.1:1/mcp", store)
    proofs = [Proof("key", f"jti-{i}", None) for i in range(60)]
    refused: StoreFull | None = None
    for proof in proofs:
        try:
            assert await checker.first_use(proof) is True
        except StoreFull as exc:
            refused = exc
            break
    assert refused is not None and refused.data == STORE_FULL
    assert len(store) == 50
    # The first proof is still remembered: replaying it is refused, not let through.
    assert await checker.first_use(proofs[0]) is False


async def test_task_records_are_never_evicted_a_full_store_refuses_new_tasks() -> None:
    store = MemoryStore(max_entries=40)
    shop = Shop(store=store)
    gate = asyncio.Event()

    @shop.server.tool(task="required")
    async def pack(item: str) -> str:
        """Packs `item`, as a task."""
        await gate.wait()
        return f"packed {item}"

    caps = {"elicitation": {"form": {}}, "extensions": {EXTENSION_ID: {}}}
    call = {"name": "pack", "arguments": {"item": "a"}, "task": {"ttl": 60_000}}
    created = result_of(await rpc(shop.server, "tools/call", call, caps=caps))
    assert created["resultType"] == "task"
    for i in range(store.max_entries):
        try:
            await store.add(f"filler/{i}", b"x", 600)
        except StoreFull:
            break
    refused = error_of(await rpc(shop.server, "tools/call", call, caps=caps))
    assert refused["code"] == INTERNAL_ERROR and refused["data"] == STORE_FULL
    assert "could not create a task" not in refused["message"]
    # The first task's record is still there: it is found and finishes.
    task = {"taskId": created["taskId"]}
    assert result_of(await rpc(shop.server, "tasks/get", task, caps=caps))["status"] == "working"
    gate.set()
    async with asyncio.timeout(GUARD):
        while True:
            state = result_of(await rpc(shop.server, "tasks/get", task, caps=caps))
            if state["status"] != "working":
                break
            await asyncio.sleep(0.01)
    assert state["status"] == "completed"
