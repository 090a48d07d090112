"""Where a server keeps what must outlive one request: the `Store` interface and `MemoryStore`.

A store maps string keys to byte values, each with an expiry. It is deliberately small, so
that a shared one (Redis, a database) is a drop-in: every operation is a single atomic
command there (`SET NX PX`, `GET`, `SET PX`, `DEL`), and values are plain bytes, never Python
objects, so they can cross processes. What the server keeps in it today is the exactly-once
record of each redeemed request state (`redemption.py`).

`MemoryStore` serves one process: entries expire, and past `max_entries` entries or
`max_bytes` bytes the least recently used entry goes first, so its memory stays bounded
whatever clients send.

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
from typing import Final, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "ENTRY_OVERHEAD",
    "Broker",
    "Deliver",
    "Gap",
    "MemoryBroker",
    "MemoryStore",
    "Store",
    "Unsubscribe",
]

#: Called on the subscriber's event loop with each message of its channel.
Deliver = Callable[[bytes], None]
#: Called on the subscriber's event loop when messages may have been lost (see `Broker`).
Gap = Callable[[], None]
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


#: Bytes one entry costs besides its key's and value's characters, measured with tracemalloc on
#: CPython 3.11 (20,000 redemption records): the key and value objects' headers, the
#: (value, expiry) tuple, the float and the ordered dict's slot: about 240.
ENTRY_OVERHEAD: Final = 240
#: The default bound on a `MemoryStore`'s memory. A redemption record of a typical tool
#: result (a short text) costs about 0.4 KiB all told, so 64 MiB keeps about 160,000 of them:
#: at two rounds a flow kept for the default `request_state_ttl` (600 s), some 130 flows a
#: second per process before the oldest live records go early (`evictions`). Past that a
#: deployment wants a shared store anyway. Large outcomes (up to `max_outcome_bytes`, 256
#: KiB) count by their size, so a few of them cannot take the process's memory.
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
#: The default bound on entries: 64 MiB of the smallest records (key and tag only, about
#: 0.3 KiB each), so that this bound and `max_bytes` meet.
DEFAULT_MAX_ENTRIES: Final = 200_000


def _check_ttl(ttl: float) -> float:
    # Chained, so NaN (every comparison false) and infinity fail it as well.
    if not 0 < ttl < math.inf:
        raise ValueError(f"a store entry's ttl must be a finite number of seconds > 0, not {ttl}")
    return ttl


class MemoryStore:
    """A `Store` for one process: bounded by expiry, by `max_entries` and by `max_bytes`
    (least recently used first; see `DEFAULT_MAX_BYTES` for the sizing).

    Records kept here are not seen by other processes: several instances behind a load
    balancer need a shared store. An entry evicted early (the store full of live entries) is
    counted in `evictions`; size the bounds so that it stays at 0.
    """

    __slots__ = ("_clock", "_entries", "bytes", "evictions", "max_bytes", "max_entries")

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` gives seconds: monotonic by default, so that a change of the wall clock
        neither expires nor revives entries."""
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"MemoryStore.{name} must be a positive integer, not {bound!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        #: What the entries cost, as `ENTRY_OVERHEAD` plus their keys' and values' lengths.
        self.bytes = 0
        self.evictions = 0
        self._clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _size(key: str, value: bytes) -> int:
        return ENTRY_OVERHEAD + len(key) + len(value)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= self._size(key, entry[0])

    def _live(self, key: str, now: float) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def _write(self, key: str, value: bytes, expires_at: float, now: float) -> None:
        if type(value) is not bytes and not isinstance(value, bytes):
            raise TypeError("store values are bytes")
        entries = self._entries
        old = entries.get(key)
        if old is None:
            self._insert(key, value, expires_at, now)
            return
        # Replaced in place and moved to the newest end: as dropping and re-inserting it would,
        # without taking the key out of the table and putting it back.
        entries[key] = (value, expires_at)
        entries.move_to_end(key)
        self.bytes += len(value) - len(old[0])
        if self.bytes > self.max_bytes:
            self._evict(now)

    def _insert(self, key: str, value: bytes, expires_at: float, now: float) -> None:
        # `key` is absent here. The size is `_size`, written out: this runs on every write.
        entries = self._entries
        entries[key] = (value, expires_at)
        self.bytes += ENTRY_OVERHEAD + len(key) + len(value)
        if len(entries) > self.max_entries or self.bytes > self.max_bytes:
            self._evict(now)

    def _evict(self, now: float) -> None:
        entries = self._entries
        while len(entries) > 1 and (len(entries) > self.max_entries or self.bytes > self.max_bytes):
            oldest, (oldest_value, oldest_expiry) = entries.popitem(last=False)
            self.bytes -= self._size(oldest, oldest_value)
            if oldest_expiry > now:
                self.evictions += 1

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """See `Store.add`."""
        now = self._clock()
        expires_at = now + _check_ttl(ttl)
        # `_live` written out: the first redemption of every round comes here.
        entries = self._entries
        entry = entries.get(key)
        if entry is not None:
            if entry[1] > now:
                entries.move_to_end(key)
                return False
            self._drop(key)
        if type(value) is not bytes and not isinstance(value, bytes):
            raise TypeError("store values are bytes")
        self._insert(key, value, expires_at, now)
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
        self._drop(key)

    def purge_expired(self) -> int:
        """Drop every expired entry now (they also go when touched or evicted); how many."""
        now = self._clock()
        dead = [key for key, (_, expires_at) in self._entries.items() if expires_at <= now]
        for key in dead:
            self._drop(key)
        return len(dead)


@runtime_checkable
class Broker(Protocol):
    """Publish/subscribe of bytes messages on named channels, across the instances sharing it.

    Guarantees an implementation must give: `publish` never waits (it is called from sync
    code on the event loop); the messages one publisher sends on a channel reach each
    subscriber in the order sent; delivery is at most once per subscription (a message sent
    while a subscriber is disconnected may be lost: what is carried are "look again" signals),
    and a subscription that lost its connection and got it back calls its `on_gap`, so the
    subscriber can act as if it had missed anything.
    """

    def publish(self, channel: str, message: bytes) -> None:
        """Send `message` to every subscriber of `channel`, this process's included."""
        ...

    async def subscribe(
        self, channel: str, deliver: Deliver, on_gap: Gap | None = None
    ) -> Unsubscribe:
        """Call `deliver` with every message published on `channel` from now on, until the
        returned function is awaited; `on_gap` after messages may have been lost."""
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

    async def subscribe(
        self, channel: str, deliver: Deliver, on_gap: Gap | None = None
    ) -> Unsubscribe:
        """See `Broker.subscribe` (in one process nothing is lost: `on_gap` is never called)."""
        entry = (deliver, asyncio.get_running_loop())
        self._subscribers.setdefault(channel, []).append(entry)

        async def unsubscribe() -> None:
            subscribers = self._subscribers.get(channel, [])
            if entry in subscribers:
                subscribers.remove(entry)
            if not subscribers:
                self._subscribers.pop(channel, None)

        return unsubscribe
