"""Resumable SSE streams of a legacy Streamable HTTP session: event ids, logs, replay. No I/O.

A legacy (2025-11-25 and earlier) session has several SSE streams at once: one per POSTed
request whose answer is streamed, and the standalone stream a `GET` opens. A connection may
drop, or the server may end it early (SEP-1699 polling), and the client then asks for the rest
of that stream with `GET` + `Last-Event-ID`. Rules:

1. A session numbers its events with one counter; an event id is `"<stream>-<number>"`, unique
   within the session, and it names the stream it was sent on, so that `Last-Event-ID` finds
   the stream to resume and nothing of another stream is replayed. Instances sharing a
   session number their request streams in ranges of their own (`first_stream`).
2. A stream keeps its events (JSON-RPC messages) in order; `after(number)` gives those after
   a cursor, and `frame` writes one as an SSE event with its id. The priming event that opens
   a connection names the cursor it starts from (`"<stream>-0"` on a new stream, the
   `Last-Event-ID` on a resumed one): resuming from it replays what followed.
3. A session keeps at most `max_bytes` of events across its streams. Past it the oldest events
   go, those of finished streams first (a running stream keeps at least its newest event). A
   cursor older than what a stream still holds is a `ReplayGap`: the client is told, never
   handed a stream with a hole in it.
4. At most `max_streams` streams are kept per session; past it the oldest finished one goes
   (an unfinished stream is never dropped: its request is still running).
5. A stream is finished once its last event (a POST stream's response) is in. Readers wait on
   `changed`, set on every new event, on the end, and when the stream is asked to let its
   connection go (`release`).
6. A session shared by several instances keeps its standalone stream in the store too, so
   that any instance can resume it: `snapshot` encodes the newest events (at most
   `SHARED_EVENTS` and `SHARED_BYTES` of them, so the older ones count as dropped) with the
   instance that wrote them, `decode_snapshot` reads one back (None for anything malformed),
   and `adopt` makes a stream of another instance's snapshot. Numbers go on after the
   adopted ones (`EventLog.advance`), so an id never names two events of the stream.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from .sse import encode_event_with_id, encode_priming_event

#: The standalone (`GET`) stream's number in every session.
STANDALONE = 0
#: The most events of a standalone stream a shared store keeps (rule 6).
SHARED_EVENTS: Final = 256
#: The most bytes of events of a standalone stream a shared store keeps (rule 6).
SHARED_BYTES: Final = 256 * 1024


class ReplayGap(LookupError):
    """The events after a `Last-Event-ID` are no longer kept (or never were)."""


def parse_event_id(value: str) -> tuple[int, int] | None:
    """`(stream, number)` of an event id this module made, or None for anything else."""
    stream, sep, number = value.partition("-")
    if not sep or not (stream.isdigit() and number.isdigit()) or len(value) > 40:
        return None
    return int(stream), int(number)


class EventStream:
    """One SSE stream of a session (see the module rules)."""

    __slots__ = (
        "_events",
        "_log",
        "changed",
        "delivered",
        "dropped",
        "final",
        "finished",
        "id",
        "keeper",
        "last",
        "owner",
        "release_requested",
    )

    def __init__(self, log: EventLog, stream_id: int) -> None:
        self._log = log
        self.id = stream_id
        self._events: deque[tuple[int, bytes]] = deque()
        #: The number of the newest event (0: none yet).
        self.last = 0
        #: The highest number dropped for room (rule 3); a cursor below it cannot be served.
        self.dropped = 0
        #: The number of the last event written to a connection (a fresh `GET` starts there).
        self.delivered = 0
        self.finished = False
        #: The number of the stream's response (0: none, yet or ever).
        self.final = 0
        #: Set when the handler asks to end the connection early (SEP-1699).
        self.release_requested = False
        #: The connection serving the stream now (any object; None: none is).
        self.owner: object | None = None
        self.changed = asyncio.Event()
        #: Awaited before events are written to a connection: keeps them where another
        #: instance can resume the stream (rule 6). None: the stream is this instance's only.
        self.keeper: Callable[[], Awaitable[None]] | None = None

    def add(self, data: bytes, *, final: bool = False) -> None:
        """Append one message (JSON bytes); `final` ends the stream (its response)."""
        if self.finished:
            return
        log = self._log
        number = log.next_number()
        self.last = number
        self._events.append((number, data))
        log.grew(len(data))
        if final:
            self.final = number
            self.finish()
        self.changed.set()

    def finish(self) -> None:
        """End the stream (after its response, or without one: the request was cancelled)."""
        if not self.finished:
            self.finished = True
            self._log.finished(self)
        self.changed.set()

    def after(self, number: int) -> list[tuple[int, bytes]]:
        """The events after `number` (raises `ReplayGap` if some of them were dropped)."""
        if number < self.dropped:
            raise ReplayGap(f"events of stream {self.id} after {number} are no longer kept")
        return [(n, data) for n, data in self._events if n > number]

    def frame(self, number: int, data: bytes) -> bytes:
        """Event `number` (with its `data`) as SSE bytes, with its id."""
        return encode_event_with_id(data, f"{self.id}-{number}")

    def priming(self, cursor: int, retry_ms: int) -> bytes:
        """The priming event of a connection that starts after event `cursor` (rule 2)."""
        return encode_priming_event(f"{self.id}-{cursor}", retry_ms)

    def release(self) -> None:
        """Ask the connection serving the stream to end (the stream itself goes on)."""
        self.release_requested = True
        self.changed.set()

    def snapshot(self, origin: str) -> bytes:
        """The newest events within the shared bounds, written by instance `origin` (rule 6)."""
        kept: list[tuple[int, str]] = []
        size = 0
        dropped = self.dropped
        for number, data in reversed(self._events):
            if len(kept) == SHARED_EVENTS or size + len(data) > SHARED_BYTES:
                dropped = number
                break
            kept.append((number, data.decode()))
            size += len(data)
        kept.reverse()
        return orjson.dumps({"o": origin, "l": self.last, "d": dropped, "e": kept})

    def adopt(self, snapshot: Snapshot, cursor: int) -> None:
        """Take the events of another instance's `snapshot` as this stream's; the client has
        those up to `cursor`. Events of this instance not yet delivered follow, renumbered."""
        pending = [data for number, data in self._events if number > self.delivered]
        self._log.size -= self.kept_bytes()
        self._events = deque(snapshot.events)
        self.last = snapshot.last
        self.dropped = snapshot.dropped
        self.delivered = cursor
        self._log.advance(snapshot.last)
        self._log.grew(self.kept_bytes())
        for data in pending:
            self.add(data)
        self.changed.set()

    @property
    def kept_events(self) -> int:
        """How many events the stream keeps now."""
        return len(self._events)

    def kept_bytes(self) -> int:
        """The size of the events the stream keeps now."""
        return sum(len(data) for _, data in self._events)

    def drop_oldest(self) -> int:
        """Drop the oldest event kept (for room, rule 3); its size."""
        number, data = self._events.popleft()
        self.dropped = number
        return len(data)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A standalone stream as an instance kept it in the store (rule 6)."""

    origin: str
    last: int
    dropped: int
    events: list[tuple[int, bytes]]

    def problem(self, cursor: int) -> str | None:
        """Why the events after `cursor` cannot be replayed from here, or None."""
        if cursor > self.last:
            return "names no event of a stream this session still keeps"
        if cursor < self.dropped:
            return "is older than the events this session still keeps of that stream"
        return None


def decode_snapshot(data: bytes) -> Snapshot | None:
    """A snapshot `EventStream.snapshot` wrote, or None for anything else."""
    try:
        raw: Any = orjson.loads(data)
        origin, last, dropped, events = raw["o"], raw["l"], raw["d"], raw["e"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not (
        isinstance(origin, str)
        and type(last) is int
        and type(dropped) is int
        and 0 <= dropped <= last
        and isinstance(events, list)
    ):
        return None
    kept: list[tuple[int, bytes]] = []
    previous = dropped
    for event in events:
        if not (
            isinstance(event, list)
            and len(event) == 2
            and type(event[0]) is int
            and previous < event[0] <= last
            and isinstance(event[1], str)
        ):
            return None
        previous = event[0]
        kept.append((event[0], event[1].encode()))
    return Snapshot(origin, last, dropped, kept)


class EventLog:
    """The streams of one session, with the bounds of rules 3 and 4."""

    def __init__(
        self, max_bytes: int, max_streams: int = 64, first_stream: int = STANDALONE + 1
    ) -> None:
        """`first_stream`: the number of the first request stream (rule 1: instances sharing
        a session give theirs apart, so that an id names the stream of one instance only)."""
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self.size = 0
        self._next = 1
        self._stream_ids = itertools.count(first_stream)
        self._streams: OrderedDict[int, EventStream] = OrderedDict()
        self.standalone = EventStream(self, STANDALONE)
        self._streams[STANDALONE] = self.standalone

    def next_number(self) -> int:
        """The next event number of the session (rule 1)."""
        number = self._next
        self._next = number + 1
        return number

    def advance(self, number: int) -> None:
        """Number the next events after `number` (an adopted stream's last event, rule 6)."""
        self._next = max(self._next, number + 1)

    def open(self) -> EventStream:
        """A new stream (for one POSTed request)."""
        stream = EventStream(self, next(self._stream_ids))
        self._streams[stream.id] = stream
        self._trim_streams()
        return stream

    def get(self, stream_id: int) -> EventStream | None:
        """The stream numbered `stream_id`, if it is still kept."""
        return self._streams.get(stream_id)

    def discard(self, stream: EventStream) -> None:
        """Forget `stream` now (its events can never be asked for again)."""
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]
            self.size -= stream.kept_bytes()

    def streams(self) -> list[EventStream]:
        """Every stream kept."""
        return list(self._streams.values())

    def finished(self, stream: EventStream) -> None:
        """A stream ended: it may be dropped for room from now on (rule 4)."""
        self._trim_streams()

    def grew(self, size: int) -> None:
        """`size` more bytes are kept: drop the oldest events past the bound (rule 3)."""
        self.size += size
        if self.size <= self.max_bytes:
            return
        # Finished streams first, down to nothing; then running ones, whose newest event
        # stays (a reader may be about to send it).
        for keep, candidates in (
            (0, [s for s in self._streams.values() if s.finished]),
            (1, [s for s in self._streams.values() if not s.finished]),
        ):
            for victim in candidates:
                while self.size > self.max_bytes and victim.kept_events > keep:
                    self.size -= victim.drop_oldest()
                if self.size <= self.max_bytes:
                    return

    def _trim_streams(self) -> None:
        while len(self._streams) > self.max_streams:
            victim = next(
                (s for s in self._streams.values() if s.finished and s.owner is None), None
            )
            if victim is None:
                return
            del self._streams[victim.id]
            self.size -= victim.kept_bytes()


__all__ = [
    "SHARED_BYTES",
    "SHARED_EVENTS",
    "STANDALONE",
    "EventLog",
    "EventStream",
    "ReplayGap",
    "Snapshot",
    "decode_snapshot",
    "parse_event_id",
]
