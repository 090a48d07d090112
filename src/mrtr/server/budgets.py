"""Budgets: the bounds on everything a peer can make the server hold, in one place.

Each held thing (a legacy session, what its `initialize` brought, its subscriptions, a live
task, a listen stream's queue) has a bound per principal and a bound over all callers (see
`docs/reference/budgets.md` for the whole table). Past a bound the caller that asks for more
is refused with a JSON-RPC error naming the bound (`refusal`); nothing anyone else holds is
ever given up to make room. Idle things still end by their own expiry.

The principal a bound counts against (`holder`) is the authenticated caller
(`ServerOptions.principal`) when there is one; otherwise the remote address of the
connection (behind a balancer, the client's as its `X-Forwarded-For` says, from a trusted
balancer: `docs/reference/budgets.md`); otherwise (stdio, in-process) the one local peer.

A `Tally` counts held things by holder and in all, each with an expiry: `MemoryTally` in one
process, `RedisTally` across every instance sharing a Redis store (one atomic script per
claim, so two instances never both take the last place).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from ..protocol.errors import INVALID_PARAMS, McpError

if TYPE_CHECKING:
    from .store import Store

#: `data.reason` of every refusal past a budget.
BUDGET_EXCEEDED: Final = "budget_exceeded"
#: The holder of things a caller without principal or address holds (stdio, in-process).
LOCAL_HOLDER: Final = "local"
#: The largest `session_bytes`: what a shared store keeps of one session at most.
MAX_SESSION_BYTES: Final = 64 * 1024

#: Which bound refused a claim: the holder's own, or the one over all callers.
Bound = Literal["principal", "total"]


@dataclass(frozen=True, slots=True)
class Budgets:
    """The bounds on what callers can make the server hold (`ServerOptions.budgets`).

    `sessions_per_principal`: legacy sessions one principal may have open at once (the bound
    over all callers is the transport's `max_sessions`). `session_bytes`: the most bytes of
    JSON a session's `initialize` may leave behind (capabilities and clientInfo), in memory
    and in a shared store alike (at most 64 KiB). `subscriptions`: resources one legacy
    session may follow; `subscription_uri_bytes`: the longest URI it may follow;
    `subscription_bytes`: the URIs' bytes together. `tasks_per_principal` / `tasks`: live
    (not finished) tasks one principal, and all callers, may have. `streams_per_principal` /
    `streams`: `subscriptions/listen` streams one principal, and all callers, may have open
    on one instance. `stream_messages` /
    `stream_bytes`: task log and progress notifications one `subscriptions/listen` stream
    queues for a reader that fell behind; past either the oldest are dropped, and the stream
    says how many. `connection_requests`: requests one stdio connection may have in flight,
    each counted until its answer is written; at the bound the server stops reading that
    connection's input until one ends (so a client writing faster than it reads, or reading
    nothing, holds the server to this many), except while a request in flight waits for the
    client's own answer: then input is read on, and a request past the bound is refused.
    """

    sessions_per_principal: int = 100
    session_bytes: int = MAX_SESSION_BYTES
    subscriptions: int = 1024
    subscription_uri_bytes: int = 4096
    subscription_bytes: int = 64 * 1024
    tasks_per_principal: int = 100
    tasks: int = 1000
    streams_per_principal: int = 32
    streams: int = 1000
    stream_messages: int = 1000
    stream_bytes: int = 1024 * 1024
    connection_requests: int = 256

    def __post_init__(self) -> None:
        for name in (f.name for f in fields(self)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Budgets.{name} must be a positive integer, not {value!r}")
        if self.session_bytes > MAX_SESSION_BYTES:
            raise ValueError(
                f"Budgets.session_bytes must be at most {MAX_SESSION_BYTES} (what a shared "
                f"store keeps of one session), not {self.session_bytes}"
            )


def holder(principal: str | None, transport_info: Any) -> str:
    """Who a held thing counts against (see the module docstring)."""
    if principal is not None:
        return "principal:" + principal
    if isinstance(transport_info, dict):
        client = transport_info.get("client")
        if isinstance(client, list | tuple) and client and isinstance(client[0], str):
            return "address:" + client[0]
    return LOCAL_HOLDER


def refusal(what: str, limit: int, bound: Bound, advice: str) -> McpError:
    """The error for a caller past a budget: -32602 saying which bound, with `data.reason`
    `budget_exceeded`, `data.budget` and `data.limit` for programs."""
    whose = "this caller already holds" if bound == "principal" else "the server already holds"
    return McpError(
        INVALID_PARAMS,
        f"Too many {what}: {whose} {limit}, the most allowed; {advice}",
        {"reason": BUDGET_EXCEEDED, "budget": what, "limit": limit, "bound": bound},
    )


class Tally(Protocol):
    """Held things counted by holder and in all; each entry lives until its expiry."""

    async def claim(
        self, kind: str, who: str, member: str, ttl: float, per_holder: int, total: int
    ) -> Bound | None:
        """Count `member` for `who` for `ttl` seconds, unless that passes `per_holder` (then
        "principal") or `total` (then "total"), counting nothing. A member already counted
        has its expiry pushed back."""
        ...

    async def renew(self, kind: str, who: str, member: str, ttl: float) -> None:
        """Push a counted member's expiry `ttl` seconds from now (nothing if not counted)."""
        ...

    async def release(self, kind: str, who: str, member: str) -> None:
        """Stop counting `member` (nothing if not counted)."""
        ...


class MemoryTally:
    """A `Tally` of one process."""

    __slots__ = ("_all", "_by_holder")

    def __init__(self) -> None:
        # kind -> member -> (holder, monotonic expiry); kind -> holder -> members.
        self._all: dict[str, dict[str, tuple[str, float]]] = {}
        self._by_holder: dict[str, dict[str, set[str]]] = {}

    def count(self, kind: str, who: str | None = None) -> int:
        """Live members of `kind` (of `who`, when given)."""
        self._sweep(kind, time.monotonic())
        if who is None:
            return len(self._all.get(kind, {}))
        return len(self._by_holder.get(kind, {}).get(who, ()))

    def _sweep(self, kind: str, now: float) -> None:
        members = self._all.get(kind)
        if not members:
            return
        for member in [m for m, (_, expiry) in members.items() if expiry <= now]:
            self._forget(kind, member)

    def _forget(self, kind: str, member: str) -> None:
        entry = self._all.get(kind, {}).pop(member, None)
        if entry is None:
            return
        held = self._by_holder[kind].get(entry[0])
        if held is not None:
            held.discard(member)
            if not held:
                del self._by_holder[kind][entry[0]]

    async def claim(
        self, kind: str, who: str, member: str, ttl: float, per_holder: int, total: int
    ) -> Bound | None:
        """See `Tally.claim`."""
        now = time.monotonic()
        members = self._all.setdefault(kind, {})
        holders = self._by_holder.setdefault(kind, {})
        if member in members:
            members[member] = (members[member][0], now + ttl)
            return None
        held = holders.get(who, set())
        if len(held) >= per_holder or len(members) >= total:
            # Only at a bound is it worth looking for expired entries.
            self._sweep(kind, now)
            held = holders.get(who, set())
            if len(held) >= per_holder:
                return "principal"
            if len(members) >= total:
                return "total"
        members[member] = (who, now + ttl)
        holders.setdefault(who, set()).add(member)
        return None

    async def renew(self, kind: str, who: str, member: str, ttl: float) -> None:
        """See `Tally.renew`."""
        members = self._all.get(kind, {})
        if member in members:
            members[member] = (members[member][0], time.monotonic() + ttl)

    async def release(self, kind: str, who: str, member: str) -> None:
        """See `Tally.release`."""
        self._forget(kind, member)


# KEYS: the holder's sorted set, the sorted set of all. ARGV: member, ttl ms, per holder,
# total. Scores are expiries in Redis's own milliseconds, so instances' clocks never matter.
_CLAIM: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 1 end
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 2 end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 0
"""
_RENEW: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + ttl, ARGV[1])
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 0
"""
_RELEASE: Final = """
for _, key in ipairs(KEYS) do redis.call('ZREM', key, ARGV[1]) end
return 0
"""


class ScriptStore(Protocol):
    """A store that runs atomic scripts (`RedisStore`)."""

    async def script(self, source: str, keys: list[str], args: list[str | int]) -> Any:
        """Run `source` atomically on `keys` with `args`."""
        ...


class RedisTally:
    """A `Tally` in Redis, shared by every instance given the same store: per kind, a sorted
    set per holder and one of all, scored by expiry."""

    __slots__ = ("_store",)

    def __init__(self, store: ScriptStore) -> None:
        self._store = store

    @staticmethod
    def _keys(kind: str, who: str) -> list[str]:
        digest = hashlib.blake2b(who.encode("utf-8", "surrogatepass"), digest_size=16)
        return [f"mrtr/budget/{kind}/h/{digest.hexdigest()}", f"mrtr/budget/{kind}/all"]

    async def claim(
        self, kind: str, who: str, member: str, ttl: float, per_holder: int, total: int
    ) -> Bound | None:
        """See `Tally.claim`."""
        keys = self._keys(kind, who)
        found = await self._store.script(_CLAIM, keys, [member, _ms(ttl), per_holder, total])
        return "principal" if found == 1 else "total" if found == 2 else None

    async def renew(self, kind: str, who: str, member: str, ttl: float) -> None:
        """See `Tally.renew`."""
        await self._store.script(_RENEW, self._keys(kind, who), [member, _ms(ttl)])

    async def release(self, kind: str, who: str, member: str) -> None:
        """See `Tally.release`."""
        await self._store.script(_RELEASE, self._keys(kind, who), [member])


def _ms(ttl: float) -> int:
    return max(1, round(ttl * 1000)) if math.isfinite(ttl) else 2**62


def tally_for(store: Store | None) -> Tally:
    """The tally that counts across every instance sharing `store`: in Redis for a Redis
    store, in this process otherwise (a store of another kind gets per-instance bounds)."""
    if store is not None and callable(getattr(store, "script", None)):
        return RedisTally(store)  # type: ignore[arg-type]
    return MemoryTally()


__all__ = [
    "BUDGET_EXCEEDED",
    "LOCAL_HOLDER",
    "MAX_SESSION_BYTES",
    "Bound",
    "Budgets",
    "MemoryTally",
    "RedisTally",
    "Tally",
    "holder",
    "refusal",
    "tally_for",
]
