"""Legacy Streamable HTTP (2025-03-26 to 2025-11-25), client side: the state of one session.

A legacy server opens a session with its `initialize` response (`Mcp-Session-Id`), expects that
id and the negotiated `MCP-Protocol-Version` on every later request, may push requests and
notifications on any SSE stream (a POST's or the standalone GET stream), and may let a stream's
connection drop and resume it on `GET` with `Last-Event-ID`. `HTTPSession` holds what a
client keeps for that: the header blocks, the server requests already answered, and the tasks
the session runs (the GET stream, answers being sent). `StreamCursor` is where one stream
stands: its last event id, the `retry` time the server asked for, and the ids already taken,
so an event the server sends twice is delivered once. Neither does any I/O.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from typing import Any

from multidict import CIMultiDict

import mrtr.transport.headers as mcp_headers

#: The header that carries the session id, both ways.
SESSION_ID = "Mcp-Session-Id"
LAST_EVENT_ID = "Last-Event-ID"

# The spec allows visible ASCII only; the length bound keeps a hostile server from making every
# later request carry a huge header.
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,1024}")

_MAX_REMEMBERED = 4096  # event ids and server request ids remembered, to drop repeats
MIN_RECONNECT_DELAY = 0.05  # seconds: never reconnect in a tight loop, whatever `retry` says
MAX_RECONNECT_DELAY = 30.0  # seconds: the ceiling of the backoff after failed reconnections


def visible_ascii(value: str) -> bool:
    """True for 1 to 1024 visible ASCII characters: what a session id may be, and a value
    that can go back in a header as it is."""
    return _SESSION_ID.fullmatch(value) is not None


class _Recent:
    """A bounded set that forgets its oldest members first."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: OrderedDict[Any, None] = OrderedDict()

    def add(self, item: Any) -> bool:
        """Remember `item`; False when it was already there."""
        if item in self._items:
            return False
        self._items[item] = None
        if len(self._items) > _MAX_REMEMBERED:
            self._items.popitem(last=False)
        return True


class StreamCursor:
    """Where one SSE stream stands, across the connections it is read over."""

    __slots__ = ("_seen", "last_event_id", "progress", "retry")

    def __init__(self) -> None:
        self._seen = _Recent()
        #: The newest event id taken from the stream ("" before any): sent as `Last-Event-ID`.
        self.last_event_id = ""
        #: The reconnection time the server asked for, in milliseconds (None: it named none).
        self.retry: int | None = None
        #: Counts new events taken; a reconnection that moves it made progress.
        self.progress = 0

    def take(self, event_id: str | None) -> bool:
        """Note an event's id; False when the stream already delivered that event (a replay
        after a reconnection, or a server repeating itself): the event is then skipped, and the
        cursor does not move back to it."""
        if event_id is None:
            self.progress += 1
            return True
        if not self._seen.add(event_id):
            return False
        self.last_event_id = event_id
        self.progress += 1
        return True

    def delay(self, default: float, failures: int) -> float:
        """Seconds to wait before the next connection: the server's `retry` (or `default`),
        doubled after each reconnection that failed or brought nothing new."""
        base = self.retry / 1000 if self.retry is not None else default
        wait = base * 2**failures if failures else base
        # Backing off never shortens the wait the server asked for.
        return max(MIN_RECONNECT_DELAY, min(wait, max(base, MAX_RECONNECT_DELAY)))


class HTTPSession:
    """One legacy session: its id (None when the server keeps none), its negotiated version,
    the headers every message carries, and the work it has running."""

    __slots__ = ("_answered", "headers", "listener", "protocol_version", "session_id", "tasks")

    def __init__(
        self, base_headers: CIMultiDict[str], session_id: str | None, protocol_version: str | None
    ) -> None:
        self.session_id = session_id
        self.protocol_version = protocol_version
        self.headers = base_headers.copy()
        if session_id is not None:
            self.headers[SESSION_ID] = session_id
        if protocol_version is not None:
            self.headers[mcp_headers.PROTOCOL_VERSION] = protocol_version
        #: The standalone GET stream's task, once it is opened.
        self.listener: asyncio.Task[None] | None = None
        #: Answers to the server's requests being worked out or sent.
        self.tasks: set[asyncio.Task[None]] = set()
        self._answered = _Recent()

    def set_version(self, protocol_version: str) -> None:
        """Send `protocol_version` from now on (the one `initialize` negotiated)."""
        self.protocol_version = protocol_version
        self.headers[mcp_headers.PROTOCOL_VERSION] = protocol_version

    def stream_headers(self, last_event_id: str = "") -> CIMultiDict[str]:
        """Headers of a GET that opens (or, with `last_event_id`, resumes) a stream."""
        headers = self.headers.copy()
        headers["Accept"] = "text/event-stream"
        headers.popall("Content-Type", None)
        if last_event_id:
            headers[LAST_EVENT_ID] = last_event_id
        return headers

    def first_time(self, request_id: Any) -> bool:
        """True the first time the server's request `request_id` arrives: a request replayed
        on a resumed stream is answered once."""
        return self._answered.add((type(request_id), request_id))

    def stop(self) -> list[asyncio.Task[None]]:
        """Cancel everything the session runs; returns the tasks, to be awaited."""
        running = list(self.tasks)
        if self.listener is not None:
            running.append(self.listener)
            self.listener = None
        self.tasks.clear()
        for task in running:
            task.cancel()
        return running
