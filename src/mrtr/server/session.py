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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from ..protocol import jsonrpc
from ..protocol.errors import CONNECTION_CLOSED, REQUEST_TIMEOUT, McpError
from ..protocol.versions import LEGACY_PROTOCOL_VERSIONS

#: Sends one JSON-RPC message (request, notification) to the client.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class LegacySession:
    """One legacy session (see the module docstring).

    `send` is the session-wide channel to the client (stdout on stdio; the `GET` stream on
    Streamable HTTP, or its buffer while none is open), used for what belongs to no request:
    list changes, resource updates, and server requests made outside any request.
    """

    def __init__(self, send: Send | None = None, session_id: str | None = None) -> None:
        #: The id a transport names the session by (`Mcp-Session-Id` on HTTP): 128 random bits.
        self.id = session_id or secrets.token_urlsafe(16)
        self.send = send
        #: Set by the server when it answers `initialize`.
        self.protocol_version: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.client_info: dict[str, Any] | None = None
        #: True once `notifications/initialized` arrived.
        self.initialized = False
        #: The minimum level `logging/setLevel` asked for; None: the client never asked.
        self.log_level: str | None = None
        #: Resource URIs the client subscribed to with `resources/subscribe`.
        self.subscriptions: set[str] = set()
        #: `time.monotonic()` of the session's last use, for idle expiry.
        self.last_used = time.monotonic()
        self._ids: Iterator[int] = itertools.count(1)
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._closed = False

    @property
    def negotiated(self) -> bool:
        """Whether `initialize` was answered (the session has a protocol version)."""
        return self.protocol_version is not None

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
        request_id: jsonrpc.RequestId = f"s-{next(self._ids)}"
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


class SessionStore(Protocol):
    """Where a transport keeps its legacy sessions (in memory here; shared stores later)."""

    def get(self, session_id: str) -> LegacySession | None:
        """The live session named `session_id`, or None (unknown, ended or expired)."""

    def add(self, session: LegacySession) -> None:
        """Keep a new session (may end the least recently used one past the bound)."""

    def remove(self, session_id: str) -> LegacySession | None:
        """Forget a session (and close it); the session, if there was one."""

    def sessions(self) -> list[LegacySession]:
        """Every live session (for fan-out of list changes and resource updates)."""


class MemorySessionStore:
    """Sessions of one process, with idle expiry and a bound on their number.

    `idle_timeout` seconds without use end a session (0 = never); past `max_sessions` the least
    recently used one ends when a new one is added. An ended session is closed, so what waits
    on its client fails instead of hanging.
    """

    def __init__(self, idle_timeout: float = 3600.0, max_sessions: int = 10_000) -> None:
        if idle_timeout < 0 or max_sessions < 1:
            raise ValueError("idle_timeout must be >= 0 and max_sessions >= 1")
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, LegacySession] = {}

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
        while len(self._sessions) >= self.max_sessions:
            oldest = min(self._sessions.values(), key=lambda s: s.last_used)
            self.remove(oldest.id)
        self._sessions[session.id] = session

    def remove(self, session_id: str) -> LegacySession | None:
        """See `SessionStore.remove`."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
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


__all__ = [
    "LEGACY_PROTOCOL_VERSIONS",
    "LegacySession",
    "MemorySessionStore",
    "SessionStore",
]
