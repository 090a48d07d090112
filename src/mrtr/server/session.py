"""Legacy sessions: what an `initialize`-based client (MCP 2025-11-25 and earlier) set up.

A 2026-07-28 request carries everything the server needs in its `_meta`; a legacy client says
it once, in `initialize`, for the whole session (a stdio process, or an HTTP `Mcp-Session-Id`).
A `LegacySession` keeps that (the negotiated version, the client's capabilities and identity,
the level `logging/setLevel` chose, the resources it subscribed to) and carries the requests
the server sends the client on a legacy session (`elicitation/create`, `sampling/createMessage`,
`roots/list`, `ping`): each gets a server-side id, goes out on a stream the transport names,
and is answered when the client's response comes back through `deliver`.

Transports make sessions (one per stdio connection that sends `initialize`, one per HTTP
`initialize` POST) and keep them in a `SessionStore`; the server fills them in when it answers
`initialize`. The session does no I/O of its own: `send` functions are the transport's.

Several instances serving one HTTP endpoint share sessions through `SessionRecords`: what a
session set up (everything above but its pending requests and its streams) is a record in the
server's `Store`, which any instance reads to serve the session's requests (see
`http_legacy.py` for what crosses instances through the broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, Protocol

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import CONNECTION_CLOSED, REQUEST_TIMEOUT, McpError
from ..protocol.versions import LEGACY_PROTOCOL_VERSIONS
from .budgets import refusal, tally_for
from .store import Store

logger = logging.getLogger("mrtr.server")

#: Sends one JSON-RPC message (request, notification) to the client.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class LegacySession:
    """One legacy session (see the module docstring).

    `send` is the session-wide channel to the client (stdout on stdio; the `GET` stream on
    Streamable HTTP, or its buffer while none is open), used for what belongs to no request:
    list changes, resource updates, and server requests made outside any request.
    """

    def __init__(
        self,
        send: Send | None = None,
        session_id: str | None = None,
        *,
        request_prefix: str = "s-",
    ) -> None:
        """`request_prefix` starts the id of every request the server sends the client: each
        instance sharing a session gives its own, so their ids never collide."""
        #: The id a transport names the session by (`Mcp-Session-Id` on HTTP): 128 random bits.
        self.id = session_id or secrets.token_urlsafe(16)
        #: Sends one JSON-RPC message to the session's client.
        self.send = send
        #: Who opened the session (`ServerOptions.principal`), when known: only they may use it.
        self.principal: str | None = None
        #: Whom the session counts against (`budgets.holder`), once `initialize` admitted it.
        self.holder: str | None = None
        #: Where `initialize` asks for a place for the session (the transport's store, or the
        #: shared records); None: the transport bounds sessions itself (one per connection).
        self.admission: SessionAdmission | None = None
        #: Set by the server when it answers `initialize`.
        self.protocol_version: str | None = None
        #: What the client declared it can do, in `initialize`.
        self.client_capabilities: dict[str, Any] = {}
        #: The client's name and version from `initialize`, when it said.
        self.client_info: dict[str, Any] | None = None
        #: True once `notifications/initialized` arrived.
        self.initialized = False
        #: The minimum level `logging/setLevel` asked for; None: the client never asked.
        self.log_level: str | None = None
        #: Resource URIs the client subscribed to with `resources/subscribe`.
        self.subscriptions: set[str] = set()
        #: `time.monotonic()` of the session's last use, for idle expiry.
        self.last_used = time.monotonic()
        #: Starts the id of every request the server sends the client (see `__init__`).
        self.request_prefix = request_prefix
        self._ids: Iterator[int] = itertools.count(1)
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._closed = False

    @property
    def negotiated(self) -> bool:
        """Whether `initialize` was answered (the session has a protocol version)."""
        return self.protocol_version is not None

    @property
    def awaiting_client(self) -> bool:
        """Whether a request the server sent the client still waits for its answer."""
        return bool(self._pending)

    def touch(self) -> None:
        """Note a use of the session (for idle expiry)."""
        self.last_used = time.monotonic()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        send: Send | None = None,
        timeout: float = 0,  # noqa: ASYNC109 - bounds the wait for the client's answer
    ) -> dict[str, Any]:
        """Send a request to the client and return its result.

        `send` is the stream it goes out on (the response stream of the client request being
        handled, so the client sees which request asks); the session's own channel when None.
        `timeout` seconds bound the wait (0 = none). Raises `McpError`: the client's error, or
        `REQUEST_TIMEOUT` / `CONNECTION_CLOSED` (after telling the client the request is
        cancelled, when it timed out).
        """
        channel = send if send is not None else self.send
        if self._closed or channel is None:
            raise McpError(CONNECTION_CLOSED, f"{method}: the session has no way to the client")
        request_id: jsonrpc.RequestId = f"{self.request_prefix}{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await channel(jsonrpc.request(request_id, method, params or {}))
            try:
                if timeout > 0:
                    async with asyncio.timeout(timeout):
                        response = await future
                else:
                    response = await future
            except TimeoutError:
                await self._cancel(channel, request_id, f"no answer within {timeout:g} s")
                raise McpError(
                    REQUEST_TIMEOUT, f"{method}: the client did not answer within {timeout:g} s"
                ) from None
            except asyncio.CancelledError:
                await asyncio.shield(self._cancel(channel, request_id, "request cancelled"))
                raise
        finally:
            self._pending.pop(request_id, None)
        if "error" in response:
            raise McpError.from_error(response["error"])
        result = response.get("result")
        return result if isinstance(result, dict) else {}

    async def _cancel(self, channel: Send, request_id: jsonrpc.RequestId, reason: str) -> None:
        # The way to the client may be gone: then there is nothing more to tell it.
        with contextlib.suppress(Exception):
            await channel(
                jsonrpc.notification(
                    "notifications/cancelled", {"requestId": request_id, "reason": reason}
                )
            )

    def awaits(self, request_id: jsonrpc.RequestId) -> bool:
        """Whether the request sent to the client with `request_id` still waits for its
        answer."""
        future = self._pending.get(request_id)
        return future is not None and not future.done()

    def deliver(self, response: dict[str, Any]) -> bool:
        """Hand a client's response to the request awaiting it; False if none is (unknown or
        late id), so the transport can ignore it."""
        request_id = response.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return False
        future = self._pending.get(request_id)
        if future is None or future.done():
            return False
        future.set_result(response)
        return True

    def close(self) -> None:
        """End the session: requests still waiting for the client fail with CONNECTION_CLOSED."""
        self._closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    McpError(CONNECTION_CLOSED, "the session ended before the client answered")
                )
        self._pending.clear()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    # --- the shared record ---------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """What the session set up, as JSON (see `SessionRecords`)."""
        return {
            "v": self.protocol_version,
            "c": self.client_capabilities,
            "i": self.client_info,
            "n": self.initialized,
            "l": self.log_level,
            "s": sorted(self.subscriptions),
            "p": self.principal,
            "h": self.holder,
            "t": time.time(),
        }

    def apply_record(self, record: dict[str, Any]) -> None:
        """Take over what another instance recorded (a record `SessionRecords.load` checked)."""
        self.protocol_version = record["v"]
        self.client_capabilities = record["c"]
        self.client_info = record["i"]
        self.initialized = record["n"]
        self.log_level = record["l"]
        self.subscriptions = set(record["s"])
        self.principal = record["p"]
        holder = record.get("h")
        self.holder = holder if isinstance(holder, str) else None


class SessionAdmission(Protocol):
    """Decides whether a new session may be kept (budgets: per principal, and in all)."""

    async def admit(self, session: LegacySession, per_holder: int) -> None:
        """Hold a place for `session` (its `holder` set), or raise `McpError` naming the bound
        it would pass; nobody else's session is ever ended to make room."""
        ...


class SessionStore(Protocol):
    """Where a transport keeps its legacy sessions (in memory here; shared stores later)."""

    def get(self, session_id: str) -> LegacySession | None:
        """The live session named `session_id`, or None (unknown, ended or expired)."""

    def add(self, session: LegacySession) -> None:
        """Keep a new session (one `admit` made room for: `add` never ends another)."""

    def remove(self, session_id: str) -> LegacySession | None:
        """Forget a session (and close it); the session, if there was one."""

    def sessions(self) -> list[LegacySession]:
        """Every live session (for fan-out of list changes and resource updates)."""


class MemorySessionStore:
    """Sessions of one process, with idle expiry and bounds on their number.

    `idle_timeout` seconds without use end a session (0 = never). `admit` refuses a new
    session past `max_sessions` in all, or past its holder's own bound; no live session is
    ever ended to make room. An ended session is closed, so what waits on its client fails
    instead of hanging.
    """

    def __init__(self, idle_timeout: float = 3600.0, max_sessions: int = 10_000) -> None:
        if idle_timeout < 0 or max_sessions < 1:
            raise ValueError("idle_timeout must be >= 0 and max_sessions >= 1")
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, LegacySession] = {}
        # Places `admit` gave sessions not added yet (their `initialize` is being answered):
        # id -> (holder, monotonic time). One never added is given up after `_RESERVED_FOR`.
        self._reserved: dict[str, tuple[str | None, float]] = {}
        self._held: dict[str | None, int] = {}

    async def admit(self, session: LegacySession, per_holder: int) -> None:
        """See `SessionAdmission.admit`."""
        self._sweep()
        now = time.monotonic()
        if self._reserved:
            self._reserved = {
                key: (who, at) for key, (who, at) in self._reserved.items()
                if now - at < _RESERVED_FOR
            }  # fmt: skip
        who = session.holder
        held = self._held.get(who, 0) + sum(1 for h, _ in self._reserved.values() if h == who)
        if held >= per_holder:
            raise refusal("legacy sessions", per_holder, "principal", _SESSION_ADVICE)
        if len(self._sessions) + len(self._reserved) >= self.max_sessions:
            raise refusal("legacy sessions", self.max_sessions, "total", _SESSION_RETRY)
        self._reserved[session.id] = (who, now)

    def get(self, session_id: str) -> LegacySession | None:
        """See `SessionStore.get`."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if self._expired(session, time.monotonic()):
            self.remove(session_id)
            return None
        session.touch()
        return session

    def add(self, session: LegacySession) -> None:
        """See `SessionStore.add`."""
        self._sweep()
        self._reserved.pop(session.id, None)
        if session.id not in self._sessions:
            self._held[session.holder] = self._held.get(session.holder, 0) + 1
        self._sessions[session.id] = session

    def remove(self, session_id: str) -> LegacySession | None:
        """See `SessionStore.remove`."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            left = self._held.get(session.holder, 0) - 1
            if left > 0:
                self._held[session.holder] = left
            else:
                self._held.pop(session.holder, None)
            session.close()
        return session

    def sessions(self) -> list[LegacySession]:
        """See `SessionStore.sessions`."""
        self._sweep()
        return list(self._sessions.values())

    def __len__(self) -> int:
        return len(self._sessions)

    def _expired(self, session: LegacySession, now: float) -> bool:
        return self.idle_timeout > 0 and now - session.last_used > self.idle_timeout

    def _sweep(self) -> None:
        now = time.monotonic()
        for session in [s for s in self._sessions.values() if self._expired(s, now)]:
            self.remove(session.id)


# Seconds a place `admit` gave stays held for a session whose `initialize` never completed.
_RESERVED_FOR: Final = 60.0
_SESSION_ADVICE: Final = (
    "end a session no longer used (HTTP DELETE with its Mcp-Session-Id) or wait until an idle "
    "one expires, then send initialize again"
)
_SESSION_RETRY: Final = "retry later, when sessions have ended or expired"
#: Seconds a session's record lives when sessions never idle out (`idle_timeout` 0): a
#: store entry needs a finite lifetime, and a month of silence ends any real session.
NEVER_IDLE_RECORD_TTL: Final = 30 * 86_400.0
#: Seconds between two rewrites of a record in use (each pushes its expiry back), at most: a
#: session ends between `idle_timeout - REFRESH_EVERY` and `idle_timeout` after its last use.
REFRESH_EVERY: Final = 60.0
# A lock on one record, taken with `Store.add`, lives this long: a holder that died blocks
# the session's writes no longer than that.
_LOCK_TTL: Final = 2.0
_LOCK_WAIT: Final = 2.0
_RECORD_TYPES: Final = (
    ("v", str),
    ("c", dict),
    ("i", (dict, type(None))),
    ("n", bool),
    ("l", (str, type(None))),
    ("s", list),
    ("p", (str, type(None))),
    ("t", (int, float)),
)


def session_digest(session_id: str) -> str:
    """What names a session in the store and on the broker: a digest, never the id itself, so
    that reading the store or the broker's channel does not give anyone a session to use."""
    return hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class SessionRecords:
    """Legacy session records in a `Store`, shared by every instance given the same store.

    One record per session, under `mrtr/session/<digest of its id>`, written when `initialize`
    is answered and rewritten (under a short lock taken with `Store.add`, so concurrent changes
    on two instances are not lost) by `logging/setLevel`, `resources/subscribe` and
    `unsubscribe`, and `notifications/initialized`. Each record expires `idle_timeout` seconds
    after it was last written; a session in use is rewritten at most every `REFRESH_EVERY`
    seconds to push that back. Store failures raise `McpError` (the store's own).
    """

    __slots__ = ("max_sessions", "refresh_every", "store", "tally", "ttl")

    def __init__(self, store: Store, idle_timeout: float, max_sessions: int = 10_000) -> None:
        """`max_sessions`: the sessions all instances sharing `store` keep at most (with a
        Redis store; with another kind, each instance counts its own)."""
        self.store = store
        self.ttl = idle_timeout if idle_timeout > 0 else NEVER_IDLE_RECORD_TTL
        self.refresh_every = min(REFRESH_EVERY, self.ttl / 4)
        self.max_sessions = max_sessions
        #: Counts the sessions of every holder across the instances, with the records' expiry.
        self.tally = tally_for(store)

    async def admit(self, session: LegacySession, per_holder: int) -> None:
        """See `SessionAdmission.admit`: the place lives as long as the record, renewed with
        it, and is given back when the session is deleted."""
        who = session.holder or ""
        bound = await self.tally.claim(
            "sessions", who, session_digest(session.id), self.ttl, per_holder, self.max_sessions
        )
        if bound == "principal":
            raise refusal("legacy sessions", per_holder, bound, _SESSION_ADVICE)
        if bound == "total":
            raise refusal("legacy sessions", self.max_sessions, bound, _SESSION_RETRY)

    @staticmethod
    def key(session_id: str) -> str:
        """The store key of a session's record."""
        return "mrtr/session/" + session_digest(session_id)

    async def create(self, session: LegacySession) -> None:
        """Record a session `initialize` just negotiated."""
        if not await self.store.add(self.key(session.id), self._encode(session), self.ttl):
            # 128 random bits: only a broken random source gets here.
            raise RuntimeError("a new legacy session id is already in use")

    async def load(self, session_id: str) -> dict[str, Any] | None:
        """The session's record, or None (unknown, ended, expired, or not a valid record)."""
        raw = await self.store.get(self.key(session_id))
        if raw is None:
            return None
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if not valid_record(record):
            logger.error("a legacy session record in the store is not valid: ignored")
            return None
        assert isinstance(record, dict)
        return record

    async def save(self, session: LegacySession) -> dict[str, Any]:
        """Write the session's record (pushing its expiry back); the record written."""
        record = session.to_record()
        await self.store.set(self.key(session.id), orjson.dumps(record), self.ttl)
        digest = session_digest(session.id)
        await self.tally.renew("sessions", session.holder or "", digest, self.ttl)
        return record

    async def delete(self, session_id: str) -> None:
        """Remove a session's record (DELETE): every instance answers 404 for it from now on,
        and its holder has its place back."""
        record = await self.load(session_id)
        await self.store.delete(self.key(session_id))
        if record is not None:
            holder = record.get("h")
            who = holder if isinstance(holder, str) else ""
            await self.tally.release("sessions", who, session_digest(session_id))

    def stale(self, record: dict[str, Any]) -> bool:
        """Whether a record in use should be rewritten to push its expiry back."""
        written: float = record["t"]
        return time.time() - written >= self.refresh_every

    @contextlib.asynccontextmanager
    async def locked(self, session_id: str, *, wait: float = _LOCK_WAIT) -> AsyncIterator[bool]:
        """Hold the lock on a session's record while changing it; yields whether it was taken
        (after `wait` seconds the change goes ahead without it: the holder died or hangs)."""
        key = self.key(session_id) + "/lock"
        token = secrets.token_bytes(8)
        deadline = time.monotonic() + wait
        delay = 0.001
        while not (held := await self.store.add(key, token, _LOCK_TTL)):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield held
        finally:
            if held:
                with contextlib.suppress(Exception):
                    if await self.store.get(key) == token:
                        await self.store.delete(key)

    @staticmethod
    def _encode(session: LegacySession) -> bytes:
        return orjson.dumps(session.to_record())


def valid_record(record: Any) -> bool:
    """Whether `record` has the shape `LegacySession.to_record` writes."""
    if not isinstance(record, dict):
        return False
    for name, kind in _RECORD_TYPES:
        if not isinstance(record.get(name), kind):
            return False
    return record["v"] in LEGACY_PROTOCOL_VERSIONS and all(
        isinstance(uri, str) for uri in record["s"]
    )


__all__ = [
    "LEGACY_PROTOCOL_VERSIONS",
    "NEVER_IDLE_RECORD_TTL",
    "REFRESH_EVERY",
    "LegacySession",
    "MemorySessionStore",
    "SessionAdmission",
    "SessionRecords",
    "SessionStore",
    "session_digest",
    "valid_record",
]
