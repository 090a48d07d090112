"""Where a server keeps what must outlive one request: the `Store` interface and `MemoryStore`.

A store maps string keys to byte values, each with an expiry. It is deliberately small, so
that a shared one (Redis, a database) is a drop-in: every operation is a single atomic
command there (`SET NX PX`, `GET`, `SET PX`, `DEL`), and values are plain bytes, never Python
objects, so they can cross processes. What the server keeps in it today is the exactly-once
record of each redeemed request state (`redemption.py`).

`MemoryStore` serves one process: entries expire, and past `max_entries` the least recently
used entry goes first, so its memory stays bounded whatever clients send.

A `Broker` carries change notifications between instances (publish/subscribe on a named
channel, bytes messages). `MemoryBroker` connects the servers of one process; the Redis
implementations of both live in `redis_store.py`, imported only when a Redis URL is given.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

__all__ = ["Broker", "Deliver", "MemoryBroker", "MemoryStore", "Store", "Unsubscribe"]

#: Called on the subscriber's event loop with each message of its channel.
Deliver = Callable[[bytes], None]
#: Ends a subscription.
Unsubscribe = Callable[[], Awaitable[None]]


@runtime_checkable
class Store(Protocol):
    """Keyed bytes with an expiry, shared by every instance that should see the same records.

    Guarantees an implementation must give:

    * `add` is atomic: of any number of concurrent `add`s of one absent key (from any process
      sharing the store), exactly one returns True.
    * An entry is never returned after its expiry (`ttl` seconds after it was written); it may
      disappear earlier only under memory pressure (an implementation documents when).
    * `set` and `delete` are visible to every later `get` and `add` of any process.
    * Values come back byte for byte as written.
    """

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """Write `value` under `key` for `ttl` seconds only if the key is absent (or expired).

        True when written; False, changing nothing, when the key holds a live entry.
        """
        ...

    async def get(self, key: str) -> bytes | None:
        """The live value under `key`, or None."""
        ...

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """Write `value` under `key` for `ttl` seconds, replacing any entry."""
        ...

    async def delete(self, key: str) -> None:
        """Remove `key` (nothing happens when it is absent)."""
        ...


def _check_ttl(ttl: float) -> float:
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"a store entry's ttl must be a finite number of seconds > 0, not {ttl}")
    return ttl


class MemoryStore:
    """A `Store` for one process: bounded by expiry and by `max_entries` (LRU eviction).

    Records kept here are not seen by other processes: several instances behind a load
    balancer need a shared store. An entry evicted early (the store full of live entries) is
    counted in `evictions`; size `max_entries` so that it stays at 0.
    """

    __slots__ = ("_clock", "_entries", "evictions", "max_entries")

    def __init__(
        self, max_entries: int = 100_000, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`clock` gives seconds: monotonic by default, so that a change of the wall clock
        neither expires nor revives entries."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(
                f"MemoryStore.max_entries must be a positive integer, not {max_entries!r}"
            )
        self.max_entries = max_entries
        self.evictions = 0
        self._clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _live(self, key: str, now: float) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def _write(self, key: str, value: bytes, expires_at: float, now: float) -> None:
        if not isinstance(value, bytes):
            raise TypeError("store values are bytes")
        entries = self._entries
        entries[key] = (value, expires_at)
        entries.move_to_end(key)
        while len(entries) > self.max_entries:
            _, (_, oldest_expiry) = entries.popitem(last=False)
            if oldest_expiry > now:
                self.evictions += 1

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """See `Store.add`."""
        now = self._clock()
        expires_at = now + _check_ttl(ttl)
        if self._live(key, now) is not None:
            return False
        self._write(key, value, expires_at, now)
        return True

    async def get(self, key: str) -> bytes | None:
        """See `Store.get`."""
        return self._live(key, self._clock())

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """See `Store.set`."""
        now = self._clock()
        self._write(key, value, now + _check_ttl(ttl), now)

    async def delete(self, key: str) -> None:
        """See `Store.delete`."""
        self._entries.pop(key, None)

    def purge_expired(self) -> int:
        """Drop every expired entry now (they also go when touched or evicted); how many."""
        now = self._clock()
        dead = [key for key, (_, expires_at) in self._entries.items() if expires_at <= now]
        for key in dead:
            del self._entries[key]
        return len(dead)


@runtime_checkable
class Broker(Protocol):
    """Publish/subscribe of bytes messages on named channels, across the instances sharing it.

    Guarantees an implementation must give: `publish` never waits (it is called from sync
    code on the event loop); the messages one publisher sends on a channel reach each
    subscriber in the order sent; delivery is at most once per subscription (a message sent
    while a subscriber is disconnected may be lost: what is carried are "look again" signals).
    """

    def publish(self, channel: str, message: bytes) -> None:
        """Send `message` to every subscriber of `channel`, this process's included."""
        ...

    async def subscribe(self, channel: str, deliver: Deliver) -> Unsubscribe:
        """Call `deliver` with every message published on `channel` from now on, until the
        returned function is awaited."""
        ...


class MemoryBroker:
    """A `Broker` for the servers of one process: give the same instance to each."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: dict[str, list[tuple[Deliver, asyncio.AbstractEventLoop]]] = {}

    def publish(self, channel: str, message: bytes) -> None:
        """See `Broker.publish`: each delivery is scheduled on its subscriber's loop, in
        order, never run inside the publisher's call."""
        if not isinstance(message, bytes):
            raise TypeError("broker messages are bytes")
        for deliver, loop in self._subscribers.get(channel, ()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(deliver, message)

    async def subscribe(self, channel: str, deliver: Deliver) -> Unsubscribe:
        """See `Broker.subscribe`."""
        entry = (deliver, asyncio.get_running_loop())
        self._subscribers.setdefault(channel, []).append(entry)

        async def unsubscribe() -> None:
            subscribers = self._subscribers.get(channel, [])
            if entry in subscribers:
                subscribers.remove(entry)
            if not subscribers:
                self._subscribers.pop(channel, None)

        return unsubscribe
