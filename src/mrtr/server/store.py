"""Where a server keeps what must outlive one request: the `Store` interface and `MemoryStore`.

A store maps string keys to byte values, each with an expiry. It is deliberately small, so
that a shared one (Redis, a database) is a drop-in: every operation is a single atomic
command there (`SET NX PX`, `GET`, `SET PX`, `DEL`), and values are plain bytes, never Python
objects, so they can cross processes.

Two kinds of record share a store, told apart by their key:

* **Guarantees** (every key not under `CACHE_PREFIX`): what a promise rests on, such as the
  exactly-once record of each redeemed request state (`redemption.py`), DPoP proof ids,
  task records, legacy session records and budget counts. A guarantee is never dropped before
  its expiry: a store with no room for a new one refuses the write with `StoreFull` (-32603,
  `data.reason` "store_full"), so the request that needed it fails and nothing already
  promised is broken.
* **Caches** (keys under `CACHE_PREFIX`, "cache/"): what can be computed again. A store may
  drop one at any time to make room, and a cache write that does not fit is dropped silently.

A store that cannot be reached raises `StoreUnavailable` (-32603, `data.reason`
"store_unavailable"): retryable, answered over HTTP with 503 and `Retry-After`.

`MemoryStore` serves one process. Its rules:

1. Expired entries are freed as the store is written, unread: each write also looks at the
   few (`EXPIRE_PER_WRITE`) entries whose expiry has come first in an expiry-ordered heap, so
   memory follows the live set and no write does work in proportion to the store's size.
2. Past `max_entries` entries or `max_bytes` bytes, expired entries go first (a bounded
   number per write), then the least recently used caches; when that is not enough a new
   guarantee is refused (counted in `refusals`, logged). A guarantee is never dropped before
   its expiry, whatever its ttl.
3. New keys may fill only `max_bytes - reserve_bytes`: the rest is kept for records that grow
   in place (a round's outcome replacing its small "running" claim), so work already admitted
   can finish.
4. The heap holds an item no later than each live entry's expiry: a rewrite that keeps or
   extends the expiry (a claim becoming its outcome) adds none, and an item found early is
   pushed again at its entry's expiry. Items of deleted keys are skipped when they come up;
   should they outnumber the entries, the heap is rebuilt from the entries.

A `Broker` carries change notifications between instances (publish/subscribe on a named
channel, bytes messages). `MemoryBroker` connects the servers of one process; the Redis
implementations of both live in `redis_store.py`, imported only when a Redis URL is given.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final, Protocol, runtime_checkable

from ..protocol.errors import INTERNAL_ERROR, McpError

__all__ = [
    "CACHE_PREFIX",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "ENTRY_OVERHEAD",
    "EXPIRE_PER_WRITE",
    "STORE_FULL",
    "STORE_UNAVAILABLE",
    "Broker",
    "Deliver",
    "Gap",
    "MemoryBroker",
    "MemoryStore",
    "Store",
    "StoreFull",
    "StoreUnavailable",
    "Unsubscribe",
    "is_cache",
    "is_store_refusal",
]

logger = logging.getLogger("mrtr.server")

#: Called on the subscriber's event loop with each message of its channel.
Deliver = Callable[[bytes], None]
#: Called on the subscriber's event loop when messages may have been lost (see `Broker`).
Gap = Callable[[], None]
#: Ends a subscription.
Unsubscribe = Callable[[], Awaitable[None]]

#: Keys under this prefix are caches, which a store may drop early; every other key is a
#: guarantee, never dropped before its expiry (see the module docstring).
CACHE_PREFIX: Final = "cache/"
#: `data.reason` of `StoreFull`.
STORE_FULL: Final = "store_full"
#: `data.reason` of `StoreUnavailable`.
STORE_UNAVAILABLE: Final = "store_unavailable"


def is_cache(key: str) -> bool:
    """Whether `key` names a cache (droppable) rather than a guarantee."""
    return key.startswith(CACHE_PREFIX)


class StoreFull(McpError):
    """The store has no room for a new guarantee: the request that needed one is refused
    (-32603, `data.reason` "store_full"); retrying later may pass once records expire."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            INTERNAL_ERROR,
            message
            or "the server's store is full of records it has promised to keep, so it cannot "
            "take on this request now; retry later",
            {"reason": STORE_FULL},
        )


class StoreUnavailable(McpError):
    """The store could not be reached (or did not answer in time): -32603 with `data.reason`
    "store_unavailable", retryable."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            INTERNAL_ERROR,
            message
            or "the shared store is unavailable, so this request cannot be handled now; "
            "retry later",
            {"reason": STORE_UNAVAILABLE},
        )


def is_store_refusal(error: McpError | dict[str, object]) -> bool:
    """Whether `error` (an `McpError` or a JSON-RPC error member) is a store's retryable
    refusal (`StoreFull`, `StoreUnavailable`)."""
    code: object
    data: object
    if isinstance(error, McpError):
        code, data = error.code, error.data
    else:
        code, data = error.get("code"), error.get("data")
    return (
        code == INTERNAL_ERROR
        and isinstance(data, dict)
        and data.get("reason") in (STORE_FULL, STORE_UNAVAILABLE)
    )


@runtime_checkable
class Store(Protocol):
    """Keyed bytes with an expiry, shared by every instance that should see the same records.

    Guarantees an implementation must give:

    * `add` is atomic: of any number of concurrent `add`s of one absent key (from any process
      sharing the store), exactly one returns True.
    * An entry is never returned after its expiry (`ttl` seconds after it was written).
    * A guarantee (a key not under `CACHE_PREFIX`) is never dropped before its expiry: when
      there is no room for one, `add` and `set` raise `StoreFull` and change nothing. A cache
      (a key under `CACHE_PREFIX`) may be dropped at any time, and a write of one may be
      dropped instead of raising.
    * A store that cannot be reached raises `StoreUnavailable`, never a client library's own
      exception.
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
#: (value, expiry) tuple, the float, the dict's slot and its expiry-heap entry: about 240.
ENTRY_OVERHEAD: Final = 240
#: The default bound on a `MemoryStore`'s memory. A redemption record of a typical tool
#: result (a short text) costs about 0.4 KiB all told, so 64 MiB (less its reserve of an
#: eighth) keeps about 140,000 of them: at two rounds a flow kept for the default
#: `request_state_ttl` (600 s), some 115 flows a second per process before new work is refused
#: (`refusals`). Past that a deployment wants a shared store anyway. Large outcomes (up to
#: `max_outcome_bytes`, 256 KiB) count by their size, so a few of them cannot take the
#: process's memory.
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
#: The default bound on entries: 64 MiB of the smallest records (key and tag only, about
#: 0.3 KiB each), so that this bound and `max_bytes` meet.
DEFAULT_MAX_ENTRIES: Final = 200_000
#: Heap items each write looks at for expired entries (rule 1): above the one item a write
#: adds, so a backlog (after a burst, or an idle spell) drains while the store is in use.
EXPIRE_PER_WRITE: Final = 4
# Heap items a write that needs room looks at before caches are evicted (rule 2).
_EXPIRE_FOR_ROOM: Final = 64
# Seconds between two log lines about refused guarantees.
_LOG_EVERY: Final = 10.0


def _check_ttl(ttl: float) -> float:
    # Chained, so NaN (every comparison false) and infinity fail it as well.
    if not 0 < ttl < math.inf:
        raise ValueError(f"a store entry's ttl must be a finite number of seconds > 0, not {ttl}")
    return ttl


class MemoryStore:
    """A `Store` for one process, bounded by `max_entries` and `max_bytes` (see
    `DEFAULT_MAX_BYTES` for the sizing); new keys stop at `max_bytes - reserve_bytes`
    (`reserve_bytes`: an eighth of `max_bytes` unless given), leaving room for records that
    grow in place.

    Expired entries are freed a few per write, without being read (counted in `expirations`).
    Past a bound, expired entries go first, then the least recently used caches (counted in
    `evictions`); a guarantee is never dropped early: when nothing else can go, the write of a
    new or larger guarantee raises `StoreFull` (counted in `refusals` and logged). Records kept
    here are not seen by other processes: several instances behind a load balancer need a
    shared store.
    """

    __slots__ = (
        "_caches",
        "_clock",
        "_entries",
        "_expiries",
        "_logged",
        "bytes",
        "evictions",
        "expirations",
        "max_bytes",
        "max_entries",
        "refusals",
        "reserve_bytes",
    )

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        reserve_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` gives seconds: monotonic by default, so that a change of the wall clock
        neither expires nor revives entries."""
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"MemoryStore.{name} must be a positive integer, not {bound!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        reserve = max_bytes // 8 if reserve_bytes is None else reserve_bytes
        if (
            isinstance(reserve, bool)
            or not isinstance(reserve, int)
            or not 0 <= reserve < max_bytes
        ):
            raise ValueError(
                f"MemoryStore.reserve_bytes must be an integer from 0 to below max_bytes, "
                f"not {reserve_bytes!r}"
            )
        self.reserve_bytes = reserve
        #: What the entries cost, as `ENTRY_OVERHEAD` plus their keys' and values' lengths.
        self.bytes = 0
        #: Caches dropped before their expiry to make room.
        self.evictions = 0
        #: Expired entries freed without being read (by writes or `purge_expired`).
        self.expirations = 0
        #: Writes of guarantees refused with `StoreFull`.
        self.refusals = 0
        self._clock = clock
        self._logged = -_LOG_EVERY
        self._entries: dict[str, tuple[bytes, float]] = {}
        # The caches, least recently used first: the only entries dropped early.
        self._caches: OrderedDict[str, None] = OrderedDict()
        # (expiry, key), a heap with an item no later than each live entry's expiry (rule 4),
        # so expired entries are found without a scan.
        self._expiries: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _size(key: str, value: bytes) -> int:
        return ENTRY_OVERHEAD + len(key) + len(value)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= self._size(key, entry[0])
            self._caches.pop(key, None)

    def _live(self, key: str, now: float) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            self._drop(key)
            return None
        if key in self._caches:
            self._caches.move_to_end(key)
        return entry[0]

    def _fits(self, entries: int, size: int) -> bool:
        # A new key may not take the reserve; a record growing in place may.
        limit = self.max_bytes - self.reserve_bytes if entries else self.max_bytes
        return len(self._entries) + entries <= self.max_entries and self.bytes + size <= limit

    def _make_room(self, key: str, entries: int, size: int, now: float) -> bool:
        """Whether `entries` more entries and `size` more bytes fit once expired entries (a
        bounded number) and then caches other than `key` are dropped."""
        heap = self._expiries
        work = _EXPIRE_FOR_ROOM
        while not self._fits(entries, size):
            if not (work and heap and heap[0][0] <= now):
                break
            work -= self._expire(now, 1)
        caches = self._caches
        while not self._fits(entries, size):
            victim = next((k for k in caches if k != key), None)
            if victim is None:
                return False
            self._drop(victim)
            self.evictions += 1
        return True

    def _expire(self, now: float, work: float) -> int:
        """Look at up to `work` heap items due by `now` (rule 4): free the expired entries,
        skip the items of deleted keys, push early ones again; how many were looked at."""
        heap, entries = self._expiries, self._entries
        done = 0
        while done < work and heap and heap[0][0] <= now:
            done += 1
            key = heap[0][1]
            entry = entries.get(key)
            if entry is None:
                heapq.heappop(heap)
            elif entry[1] <= now:
                heapq.heappop(heap)
                self._drop(key)
                self.expirations += 1
            else:
                heapq.heapreplace(heap, (entry[1], key))
        return done

    def _refuse(self) -> None:
        self.refusals += 1
        now = time.monotonic()
        if now - self._logged >= _LOG_EVERY:
            self._logged = now
            logger.error(
                "the in-process store is full (%d entries, %d bytes; bounds %d and %d): new "
                "work is refused until records expire (%d refused so far); raise "
                "MemoryStore's max_entries/max_bytes or use a shared store",
                len(self._entries),
                self.bytes,
                self.max_entries,
                self.max_bytes,
                self.refusals,
            )
        raise StoreFull()

    def _write(self, key: str, value: bytes, expires_at: float, now: float) -> bool:
        """Write the entry (any old one under `key` is live or absent); False when a cache
        did not fit and was not kept; `StoreFull` when a guarantee does not fit."""
        if type(value) is not bytes and not isinstance(value, bytes):
            raise TypeError("store values are bytes")
        entries = self._entries
        old = entries.get(key)
        cache = key.startswith(CACHE_PREFIX)
        if old is None:
            grows, size = 1, ENTRY_OVERHEAD + len(key) + len(value)
        else:
            grows, size = 0, len(value) - len(old[0])
        # A write that takes no more room fits as it is.
        if (
            (size > 0 or grows)
            and not self._fits(grows, size)
            and not self._make_room(key, grows, size, now)
        ):
            if not cache:
                self._refuse()
            self._drop(key)  # a cache that does not fit is simply not kept
            return False
        entries[key] = (value, expires_at)
        self.bytes += size
        if cache:
            self._caches[key] = None
            self._caches.move_to_end(key)
        heap = self._expiries
        if old is None or expires_at < old[1]:
            # An entry kept as long or longer keeps its item (rule 4): nothing to add.
            heapq.heappush(heap, (expires_at, key))
            if len(heap) > 2 * len(entries) + 1024:
                # Deleted keys' items outnumber the entries: rebuilt, one item per entry.
                self._expiries = heap = [(e[1], k) for k, e in entries.items()]
                heapq.heapify(heap)
        if heap and heap[0][0] <= now:
            self._expire(now, EXPIRE_PER_WRITE)  # rule 1
        return True

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """See `Store.add`."""
        now = self._clock()
        expires_at = now + _check_ttl(ttl)
        entry = self._entries.get(key)
        if entry is not None:
            if entry[1] > now:
                if key in self._caches:
                    self._caches.move_to_end(key)
                return False
            self._drop(key)
        # A cache that does not fit counts as written and dropped at once.
        self._write(key, value, expires_at, now)
        return True

    async def get(self, key: str) -> bytes | None:
        """See `Store.get`."""
        return self._live(key, self._clock())

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """See `Store.set`."""
        now = self._clock()
        expires_at = now + _check_ttl(ttl)
        entry = self._entries.get(key)
        if entry is not None and entry[1] <= now:
            self._drop(key)
        self._write(key, value, expires_at, now)

    async def delete(self, key: str) -> None:
        """See `Store.delete`."""
        self._drop(key)

    def purge_expired(self) -> int:
        """Drop every expired entry now, in one pass (writes free them a few at a time
        anyway); how many."""
        before = len(self._entries)
        self._expire(self._clock(), math.inf)
        return before - len(self._entries)


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
