"""One legacy session's side on this transport: its channel (the session's streams and the
requests it runs), the session store that ends a channel with its session, and
`close_sse_stream`, with which a handler ends its request's connection (`http_legacy.py`
rule 7).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from ..protocol import jsonrpc
from ..server.session import LegacySession, MemorySessionStore
from .sse_events import EventLog, EventStream

logger = logging.getLogger("mrtr.http")

#: The request stream of the legacy request being handled (`close_sse_stream`).
current_stream: contextvars.ContextVar[EventStream | None] = contextvars.ContextVar(
    "mrtr_legacy_stream", default=None
)


def close_sse_stream() -> bool:
    """End the connection of the legacy HTTP request being handled, keeping its stream.

    The client resumes the stream with `GET` + `Last-Event-ID` after the `retry` time and gets
    everything sent after the cut, the response included (SEP-1699 polling). Call it from a
    handler; it returns False, doing nothing, anywhere else (a 2026-07-28 request, stdio).
    """
    stream = current_stream.get()
    if stream is None or stream.finished:
        return False
    stream.release()
    return True


class SessionChannel:
    """The transport side of one session: its streams and its running requests."""

    __slots__ = ("asked", "digest", "ended", "kept", "log", "refreshed", "session", "tasks")

    def __init__(
        self, session: LegacySession, buffer_bytes: int, digest: str = "", first_stream: int = 1
    ) -> None:
        self.session = session
        self.log = EventLog(buffer_bytes, first_stream=first_stream)
        self.tasks: dict[jsonrpc.RequestId, asyncio.Task[None]] = {}
        self.ended = False
        #: The session's name in the store and on the broker (shared sessions only).
        self.digest = digest
        #: `time.monotonic()` of the last rewrite of the shared record from here.
        self.refreshed = time.monotonic()
        #: Request streams whose request id is in the shared store (rule 9).
        self.kept: set[int] = set()
        #: Told of each message going to the client (shared sessions: a request's answer may
        #: have to be looked for in the store, rule 8).
        self.asked: Callable[[dict[str, Any]], None] | None = None
        session.send = self.send

    async def send(self, message: dict[str, Any]) -> None:
        """The session's own channel: the standalone (`GET`) stream."""
        if self.asked is not None:
            self.asked(message)
        self.log.standalone.add(orjson.dumps(message))

    def end(self) -> None:
        """The session ended: cancel its requests and wake whatever waits on its streams."""
        self.ended = True
        for task in list(self.tasks.values()):
            task.cancel()
        for stream in self.log.streams():
            stream.changed.set()


class ChannelStore(MemorySessionStore):
    """The session store, ending a session's transport side whenever a session goes (DELETE,
    expiry, eviction past the bound)."""

    def __init__(
        self, idle_timeout: float, max_sessions: int, on_end: Callable[[LegacySession], None]
    ) -> None:
        super().__init__(idle_timeout, max_sessions)
        self._on_end = on_end

    def remove(self, session_id: str) -> LegacySession | None:
        session = super().remove(session_id)
        if session is not None:
            self._on_end(session)
        return session


def forget_request(
    channel: SessionChannel,
    request_id: jsonrpc.RequestId,
    stream: EventStream,
    task: asyncio.Task[None],
) -> None:
    """The done callback of the task running request `request_id` on `stream`."""
    # The request's own task frees the id and ends the stream, unless it was cancelled before
    # its first step (a cancellation or the session's end in the same loop turn): then its
    # body never ran, and this does both, so the id is not held and the waiting POST is
    # answered.
    if channel.tasks.get(request_id) is task:
        del channel.tasks[request_id]
    if task.cancelled():
        stream.finish()  # idempotent: a cancelled task that did run has ended it already


def cancel_request(channel: SessionChannel, params: Any) -> bool:
    """Cancel the request `params` names if it runs here; whether it did (True also for a
    malformed cancellation, which is ignored: an unhashable id must not raise)."""
    request_id = params.get("requestId") if isinstance(params, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return True
    task = channel.tasks.get(request_id)
    if task is None:
        return False
    logger.debug("cancelling request %r: %s", request_id, params.get("reason"))
    task.cancel()
    return True


#: Marks a `GET` stream whose session opened another one on another instance (rule 8).
TAKEN_ELSEWHERE = object()


__all__ = [
    "TAKEN_ELSEWHERE",
    "ChannelStore",
    "SessionChannel",
    "cancel_request",
    "close_sse_stream",
    "current_stream",
    "forget_request",
]
