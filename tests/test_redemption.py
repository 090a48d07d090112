"""Exactly-once redemption of sealed request states: a replayed or re-sent round runs its
handler's code once and every repeat gets the first outcome (in process and over real HTTP);
concurrent duplicates run once; too-large outcomes and refusals; `MemoryStore`'s bounds."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers.mrtr_flows import accept, call_tool, error_of, result_of, rpc
from helpers.shop import KEY, SCHEMA, Shop
from helpers.transport_flow import serve
from mrtr import Client, ElicitResult, RequestContext, Server, ServerOptions
from mrtr.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS
from mrtr.server import redemption
from mrtr.server.store import ENTRY_OVERHEAD, MemoryStore, Store, StoreFull

INVALID_STATE = {"reason": "invalid_request_state"}


async def test_a_final_round_replayed_11_times_charges_once() -> None:
    shop = Shop()
    state = await shop.first_state(amount=5)
    responses = [await shop.final(state, amount=5) for _ in range(12)]
    assert shop.charges == [5]
    results = [result_of(response) for response in responses]
    assert results[0]["content"][0]["text"] == "charge #1 of 5: accept"
    assert all(result == results[0] for result in results)
    assert len({response["id"] for response in responses}) == 12  # each under its own id


async def test_without_a_store_a_replay_charges_again() -> None:
    # What the store prevents: the same 12 requests with nothing recorded charge 12 times.
    shop = Shop(store=None)
    state = await shop.first_state(amount=5)
    for _ in range(12):
        result_of(await shop.final(state, amount=5))
    assert shop.charges == [5] * 12


async def test_a_replay_over_http_with_raw_requests_charges_once() -> None:
    shop = Shop()

    def confirm(params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"ok": True})

    async with (
        serve(shop.server.asgi_app()) as url,
        Client.http(f"{url}/mcp", elicitation_handler=confirm) as client,
    ):
        params = {"name": "charge", "arguments": {"amount": 7}}
        first = await client.request("tools/call", params)
        assert first["resultType"] == "input_required"
        final = {
            **params,
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
            "requestState": first["requestState"],
        }
        results = [await client.request("tools/call", final) for _ in range(12)]
    assert shop.charges == [7]
    assert results[0]["content"][0]["text"] == "charge #1 of 7: accept"
    assert all(result == results[0] for result in results)


async def test_concurrent_duplicates_run_once_and_all_get_the_outcome() -> None:
    shop = Shop()
    state = await shop.first_state(amount=3)
    shop.gate = asyncio.Event()
    tasks = [asyncio.create_task(shop.final(state, amount=3)) for _ in range(8)]
    await asyncio.sleep(0.02)  # all eight are in: one runs (held at the gate), seven wait
    assert shop.charges == []
    shop.gate.set()
    results = [result_of(response) for response in await asyncio.gather(*tasks)]
    assert shop.charges == [3]
    assert all(result == results[0] for result in results)


async def test_a_tool_error_is_an_outcome_returned_alike() -> None:
    shop = Shop()
    state = await shop.first_state(amount=-2)
    results = [result_of(await shop.final(state, amount=-2)) for _ in range(3)]
    assert shop.charges == [-2]
    assert results[0]["isError"] is True
    assert "refund of 2 failed" in results[0]["content"][0]["text"]
    assert all(result == results[0] for result in results)


async def test_an_error_response_is_an_outcome_returned_alike() -> None:
    shop = Shop()
    state = await shop.first_state(amount=0)
    errors = [error_of(await shop.final(state, amount=0)) for _ in range(3)]
    assert shop.charges == [0]
    assert errors[0] == {"code": -32000, "message": "nothing to charge", "data": {"charged": 1}}
    assert all(error == errors[0] for error in errors)


async def test_an_outcome_too_large_to_keep_answers_a_replay_with_the_uniform_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shop = Shop(max_outcome_bytes=1024)
    state = await shop.first_state("report", size=4000)
    first = result_of(await shop.final(state, "report", size=4000))
    assert first["content"][0]["text"] == "x" * 4000  # the first request still gets it
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        error = error_of(await shop.final(state, "report", size=4000))
    assert error["code"] == INVALID_PARAMS and error["data"] == INVALID_STATE
    assert "x" * 10 not in error["message"]
    assert shop.charges == [4000]
    assert any("max_outcome_bytes (1024)" in r.getMessage() for r in caplog.records)
    # A small outcome under the same limit is kept as usual.
    state = await shop.first_state("report", size=10)
    for _ in range(2):
        assert result_of(await shop.final(state, "report", size=10))["content"][0]["text"]
    assert shop.charges == [4000, 10]


async def test_other_answers_under_the_same_state_get_the_first_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shop = Shop()
    state = await shop.first_state(amount=4)
    first = result_of(await shop.final(state, amount=4))
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        declined = await call_tool(
            shop.server,
            "charge",
            {"amount": 4},
            responses={"confirm": {"action": "decline"}},
            state=state,
        )
    assert result_of(declined) == first
    assert shop.charges == [4]
    assert any("other inputResponses" in r.getMessage() for r in caplog.records)


async def test_a_refused_answer_leaves_the_state_redeemable() -> None:
    # -32602 for an answer that does not fit: the round did not go through, so the client's
    # corrected re-send with the same state runs it.
    shop = Shop()
    state = await shop.first_state(amount=6)
    bad = await call_tool(
        shop.server, "charge", {"amount": 6}, responses={"confirm": "yes"}, state=state
    )
    assert error_of(bad)["code"] == INVALID_PARAMS
    assert result_of(await shop.final(state, amount=6))["content"][0]["text"].startswith(
        "charge #1"
    )
    assert shop.charges == [6]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_cancelled_round_is_released_and_a_retry_runs_it_at_once() -> None:
    store = MemoryStore()
    shop = Shop(store=store, input_required=ServerOptions.InputRequiredConfig(round_timeout=600))
    state = await shop.first_state(amount=9)
    shop.gate = asyncio.Event()
    first = asyncio.create_task(shop.final(state, amount=9))
    await asyncio.sleep(0.01)
    first.cancel()  # the client went away with the handler held at the gate
    with pytest.raises(asyncio.CancelledError):
        await first
    assert shop.charges == []
    shop.gate.set()
    # Released: the retry runs the round now, not after round_timeout + 5 s.
    retried = await asyncio.wait_for(shop.final(state, amount=9), 5)
    assert result_of(retried)["content"][0]["text"] == "charge #1 of 9: accept"
    assert shop.charges == [9]
    assert result_of(await shop.final(state, amount=9)) == result_of(retried)


async def test_memory_store_operations_and_expiry() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    assert isinstance(store, Store)
    assert await store.add("a", b"1", 10) is True
    assert await store.add("a", b"2", 10) is False
    assert await store.get("a") == b"1"
    await store.set("a", b"3", 10)
    assert await store.get("a") == b"3"
    clock.now += 10
    assert await store.get("a") is None  # expired at exactly its ttl
    assert await store.add("a", b"4", 5) is True  # an expired key is absent
    await store.delete("a")
    await store.delete("a")
    assert await store.get("a") is None
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            await store.set("b", b"x", bad)
    with pytest.raises(ValueError, match="max_entries"):
        MemoryStore(0)


async def test_memory_store_evicts_caches_but_refuses_new_guarantees_when_full() -> None:
    clock = Clock()
    store = MemoryStore(max_entries=3, clock=clock)
    for key in "abc":
        await store.set(f"cache/{key}", key.encode(), 100)
    assert await store.get("cache/a") == b"a"  # "a" is now the most recently used
    await store.set("cache/d", b"d", 100)
    assert len(store) == 3 and store.evictions == 1
    assert await store.get("cache/b") is None  # the least recently used cache went first
    # Guarantees push caches out, never each other.
    await store.set("g1", b"1", 100)
    await store.set("g2", b"2", 100)
    assert await store.add("g3", b"3", 100) is True
    assert len(store) == 3 and store.evictions == 4
    with pytest.raises(StoreFull) as refused:
        await store.add("g4", b"4", 100)
    assert refused.value.code == INTERNAL_ERROR
    assert refused.value.data == {"reason": "store_full"}
    assert "retry later" in refused.value.message
    assert store.refusals == 1
    assert [await store.get(key) for key in ("g1", "g2", "g3")] == [b"1", b"2", b"3"]
    assert await store.get("g4") is None
    # A cache that does not fit is dropped, not refused; a guarantee rewritten no larger fits.
    assert await store.add("cache/x", b"x", 100) is True
    assert await store.get("cache/x") is None
    await store.set("g1", b"", 100)
    for i in range(1000):
        with pytest.raises(StoreFull):
            await store.add(f"flood-{i}", b"x" * 10, 100)
    assert len(store) == 3
    # Expired guarantees make room by themselves.
    clock.now += 200
    assert await store.add("g4", b"4", 100) is True
    assert len(store) == 1 and store.purge_expired() == 0
    clock.now += 200
    assert store.purge_expired() == 1 and len(store) == 0


def test_a_store_must_implement_the_interface() -> None:
    with pytest.raises(ValueError, match="Store"):
        ServerOptions(store={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_outcome_bytes"):
        ServerOptions(max_outcome_bytes=0)
    a, b = ServerOptions(), ServerOptions()
    assert isinstance(a.store, MemoryStore) and a.store is not b.store


# --- waiting, failing and dead owners (tests of internals: `Redemptions`) -------------------


def redemptions_of(shop: Shop) -> redemption.Redemptions:
    found = shop.server._rounds.redemptions
    assert found is not None
    return found


async def test_a_duplicate_that_waits_too_long_gets_a_clear_error() -> None:
    shop = Shop(input_required=ServerOptions.InputRequiredConfig(round_timeout=30))
    clock = Clock()
    redemptions_of(shop).clock = clock
    state = await shop.first_state(amount=5)
    shop.gate = asyncio.Event()
    first = asyncio.create_task(shop.final(state, amount=5))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(shop.final(state, amount=5))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.now += 36  # past round_timeout + 5 s, and the first is still running
    error = error_of(await asyncio.wait_for(waiting, 5))
    assert error["code"] == INTERNAL_ERROR
    assert "still being handled after 35 s; retry later" in error["message"]
    assert "charge" in error["message"]
    shop.gate.set()
    assert result_of(await first)["content"][0]["text"] == "charge #1 of 5: accept"
    assert shop.charges == [5]


async def test_a_round_whose_handler_fails_gives_a_duplicate_the_same_error() -> None:
    server = Server("fails", options=ServerOptions(request_state_key=KEY))
    runs: list[str] = []

    @server.prompt()
    async def brittle(ctx: RequestContext) -> str:
        await ctx.elicit("Go?", SCHEMA, key="confirm")
        runs.append("ran")
        raise RuntimeError("disk full at /var/secret")  # after the last question

    first = result_of(await rpc(server, "prompts/get", {"name": "brittle"}))
    final = {
        "name": "brittle",
        "inputResponses": {"confirm": accept(ok=True)},
        "requestState": first["requestState"],
    }
    errors = [error_of(await rpc(server, "prompts/get", final)) for _ in range(3)]
    assert runs == ["ran"]  # recorded as failed: never run again
    assert errors[0]["code"] == INTERNAL_ERROR
    assert "secret" not in str(errors[0])
    assert all(error == errors[0] for error in errors)


async def test_a_round_whose_process_died_is_taken_over_quickly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    shop = Shop(store=store, input_required=ServerOptions.InputRequiredConfig(round_timeout=600))
    state = await shop.first_state(amount=8)
    shop.gate = asyncio.Event()
    # The first redemption runs as another process would, held before its side effect.
    monkeypatch.setattr(redemption, "PROCESS_ID", "elsewhere")
    first = asyncio.create_task(shop.final(state, amount=8))
    await asyncio.sleep(0.02)
    monkeypatch.undo()
    beat = redemptions_of(shop)._beat
    alive = redemption.Redemptions.liveness_key("elsewhere")
    assert beat is not None and (await store.get(alive) or b"").startswith(b"1,")  # + tokens
    # While that process is alive, a duplicate waits for it.
    waiting = asyncio.create_task(shop.final(state, amount=8))
    await asyncio.sleep(1.5)
    assert not waiting.done()
    # It dies: no more beats, and its liveness key expires.
    first.cancel()
    beat.cancel()
    await store.delete(alive)
    shop.gate.set()
    started = asyncio.get_running_loop().time()
    response = await asyncio.wait_for(waiting, 5)
    assert asyncio.get_running_loop().time() - started < 3  # not round_timeout + 5 s
    assert result_of(response)["content"][0]["text"] == "charge #1 of 8: accept"
    assert shop.charges == [8]
    # Later repeats get that outcome.
    assert result_of(await shop.final(state, amount=8)) == result_of(response)


async def test_memory_store_is_bounded_by_bytes() -> None:
    store = MemoryStore(max_bytes=10 * (ENTRY_OVERHEAD + 7 + 100), reserve_bytes=0)
    for i in range(10):
        await store.set(f"cache/{i}", b"x" * 100, 60)
    assert len(store) == 10 and store.evictions == 0
    assert store.bytes == 10 * (ENTRY_OVERHEAD + 7 + 100)
    await store.set("big", b"y" * 500, 60)  # a guarantee: pushes out the three oldest caches
    assert await store.get("big") == b"y" * 500
    assert [await store.get(f"cache/{i}") is None for i in range(4)] == [True, True, True, False]
    assert store.evictions == 3 and store.bytes <= store.max_bytes
    await store.set("big", b"z", 60)  # a rewrite counts its new size only
    await store.delete("cache/9")
    assert store.bytes == 6 * (ENTRY_OVERHEAD + 7 + 100) + ENTRY_OVERHEAD + 3 + 1
    with pytest.raises(StoreFull):
        await store.set("big", b"h" * store.max_bytes, 60)  # a guarantee may not grow either
    assert await store.get("big") == b"z"
    with pytest.raises(StoreFull):
        await store.set("huge", b"h" * store.max_bytes, 60)
    assert await store.get("cache/8") is None  # caches went first, to no avail
    with pytest.raises(ValueError, match="max_bytes"):
        MemoryStore(max_bytes=0)


async def test_memory_store_keeps_a_reserve_for_records_that_grow_in_place() -> None:
    # New keys stop short of max_bytes: a round admitted can still record its outcome.
    store = MemoryStore(max_bytes=8 * 1000, reserve_bytes=2000)
    for i in range(20):
        try:
            await store.add(f"claim-{i}", b"r" * 260, 60)
        except StoreFull:
            break
    assert i == 11 and 6000 - 500 < store.bytes <= 6000
    await store.set("claim-0", b"o" * 2200, 60)  # the outcome replaces its claim
    assert await store.get("claim-0") == b"o" * 2200
    with pytest.raises(ValueError, match="reserve_bytes"):
        MemoryStore(max_bytes=10, reserve_bytes=10)
