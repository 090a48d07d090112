"""`MemoryStore` frees expired records as it is written, unread, a bounded number per write:
its size follows the live set, a write into a store full of expired records does a few
records' work (not a purge of them all), and no record is freed before its expiry."""

from __future__ import annotations

import random

from mrtr.server.store import ENTRY_OVERHEAD, EXPIRE_PER_WRITE, MemoryStore


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cost(key: str, value: bytes) -> int:
    return ENTRY_OVERHEAD + len(key) + len(value)


async def test_expired_records_are_freed_by_writes_of_other_keys_without_being_read() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    for i in range(2000):
        await store.add(f"mrtr/round/short-{i}/1", b"outcome", 1)
    await store.set("kept", b"long", 3600)
    assert len(store) == 2001
    clock.now += 2
    # Far fewer writes than expired records, but each looks at a few of them.
    for i in range(600):
        await store.set(f"other/{i}", b"v", 100)
    assert len(store) == 601
    assert store.expirations == 2000
    assert store.bytes == cost("kept", b"long") + sum(cost(f"other/{i}", b"v") for i in range(600))
    assert await store.get("kept") == b"long"
    assert store.purge_expired() == 0


async def test_a_write_into_a_full_store_of_expired_records_frees_only_a_few() -> None:
    clock = Clock()
    records = 20_000
    store = MemoryStore(max_entries=records, clock=clock)
    for i in range(records):
        await store.add(f"g/{i}", b"x", 1)
    clock.now += 2
    # The store is at its bound: the write needs one entry's room, which one expired record
    # gives, and frees EXPIRE_PER_WRITE more; the other 19,995 stay until later writes.
    assert await store.add("new/0", b"y", 100) is True
    freed = records + 1 - len(store)
    assert 1 <= freed <= EXPIRE_PER_WRITE + 1
    assert store.expirations == freed
    # A write with room to spare frees at most EXPIRE_PER_WRITE, and the writes go on
    # freeing until none is left.
    before = len(store)
    await store.set("new/1", b"y", 100)
    assert before + 1 - len(store) <= EXPIRE_PER_WRITE
    writes = 2
    while store.expirations < records:
        before = len(store)
        await store.set(f"new/{writes}", b"y", 100)
        assert before + 1 - len(store) <= EXPIRE_PER_WRITE
        writes += 1
    assert len(store) == writes
    assert writes <= records // EXPIRE_PER_WRITE + 2


async def test_a_steady_stream_of_flows_keeps_the_store_at_its_live_set() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    ttl, step = 30.0, 0.01  # 100 flows a second, each kept 30 s: 3,000 live
    sizes = []
    for flow in range(30_000):  # 300 s: ten lifetimes
        key = f"mrtr/round/{flow}/1"
        assert await store.add(key, b"running", ttl) is True
        clock.now += step / 2
        await store.set(key, b"outcome of the round", ttl)  # later: its expiry moves on
        clock.now += step / 2
        sizes.append(len(store))
    live = round(ttl / step)
    assert max(sizes[-10_000:]) <= live + 1
    assert min(sizes[-10_000:]) >= live - 1
    assert store.bytes <= (live + 1) * cost("mrtr/round/29999/1", b"outcome of the round")


async def test_no_record_is_freed_before_its_expiry_whatever_was_rewritten() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    await store.add("claimed", b"running", 1)
    await store.set("claimed", b"outcome", 60)  # kept longer: its first expiry passes
    await store.set("shortened", b"v", 60)
    await store.set("shortened", b"v", 1)  # kept shorter: freed at the new expiry
    await store.add("readded", b"a", 1)
    await store.delete("readded")
    await store.add("readded", b"b", 60)  # a deleted key written again lives its new ttl
    clock.now += 2
    for i in range(20):
        await store.set(f"filler/{i}", b"f", 600)
    assert await store.get("claimed") == b"outcome"
    assert await store.get("readded") == b"b"
    assert "shortened" not in store._entries  # freed unread
    clock.now += 60
    for i in range(20):
        await store.set(f"later/{i}", b"f", 600)
    assert len(store) == 40 and store.expirations == 3


async def test_random_operations_agree_with_a_model_of_expiry() -> None:
    rng = random.Random(7)
    clock = Clock()
    store = MemoryStore(max_entries=400, clock=clock)
    model: dict[str, tuple[bytes, float]] = {}  # key: (value, expiry)
    keys = [f"k{i}" for i in range(300)]
    for n in range(20_000):
        key, op = rng.choice(keys), rng.random()
        value, ttl = str(n).encode(), rng.choice((0.5, 1.0, 5.0, 20.0))
        live = key in model and model[key][1] > clock.now
        if op < 0.35:
            assert await store.add(key, value, ttl) is (not live)
            if not live:
                model[key] = (value, clock.now + ttl)
        elif op < 0.7:
            await store.set(key, value, ttl)
            model[key] = (value, clock.now + ttl)
        elif op < 0.8:
            await store.delete(key)
            model.pop(key, None)
        elif op < 0.95:
            assert await store.get(key) == (model[key][0] if live else None)
        else:
            clock.now += rng.random()
    for key in keys:
        entry = model.get(key)
        expected = entry[0] if entry is not None and entry[1] > clock.now else None
        assert await store.get(key) == expected
    assert store.refusals == 0  # 300 keys in 400 entries: nothing was ever refused
