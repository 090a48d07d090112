"""Server-Sent Events framing, both directions, with no I/O.

`encode_event` frames one JSON-RPC message as an SSE event; `SSEDecoder` turns a byte stream
into events following the WHATWG event-stream rules: lines end in CRLF, LF or a lone CR; a blank
line dispatches the event; `data:` lines are joined with `\\n`; lines starting with `:` are
comments (keep-alives). An event cut off by the end of the stream is dropped, as the SSE rules say.

`feed` gives the events alone, which is all a 2026-07-28 stream has (its streams cannot be
resumed). `feed_frames` also gives each event's own `id:` and the blocks that carry an id but
no data (a legacy server's priming event), and the decoder keeps the stream's `retry:` time:
what a client needs to resume a legacy (2025-xx) stream with `Last-Event-ID`.

A legacy server's streams are resumable: `encode_event_with_id` frames an event with its id, and
`encode_priming_event` the id-and-empty-data event (with `retry:`) that opens such a stream.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: An SSE comment line: sent on quiet long-lived streams so intermediaries keep them open.
KEEPALIVE = b":\n\n"

# A CR is a line end on its own only once we know no LF follows it, so a CR that is the last
# byte of a chunk waits for the next chunk.
_LINE_END = re.compile(rb"\r\n|\r(?=[^\n])|\n")
_BOM = b"\xef\xbb\xbf"


def encode_event(data: bytes) -> bytes:
    """Frame one message (JSON without newlines, as `orjson` writes it) as an SSE event."""
    return b"data: " + data + b"\n\n"


def encode_named_event(event: str, data: bytes) -> bytes:
    """Frame one message as an SSE event of type `event` (the HTTP+SSE transport of
    2024-11-05 names its events: `endpoint`, then `message`). `data` holds no newline."""
    return b"event: " + event.encode("ascii") + b"\ndata: " + data + b"\n\n"


def encode_event_with_id(data: bytes, event_id: str) -> bytes:
    """Frame one message as an SSE event with an `id:`, so the stream can be resumed from it
    (legacy Streamable HTTP). `event_id` is printable ASCII without newlines."""
    return b"id: " + event_id.encode("ascii") + b"\ndata: " + data + b"\n\n"


def encode_priming_event(event_id: str, retry_ms: int) -> bytes:
    """The event that opens a resumable stream: an id and empty data, which no client handles
    as a message but which gives it a `Last-Event-ID` to resume from, and the `retry:` time (in
    milliseconds) it waits before it reconnects after the server ends the connection early."""
    return b"id: %s\nretry: %d\ndata: \n\n" % (event_id.encode("ascii"), retry_ms)


class SSEEvent(NamedTuple):
    """One dispatched event: its type (`message` unless the stream named one) and data."""

    event: str
    data: bytes


class SSEFrame(NamedTuple):
    """One dispatched block: its event type, its data (None when it had no `data:` line) and
    its own `id:` (None when it had none, or one a client could not send back)."""

    event: str
    data: bytes | None
    id: str | None


#: The longest event id kept; a longer one is treated as absent (it would go back in a header).
MAX_EVENT_ID = 1024
# A reconnection time has at most this many digits (about 115 days); a longer one is ignored,
# which also keeps an endless digit string away from `int()`.
_MAX_RETRY_DIGITS = 10


class SSEError(ValueError):
    """The stream is not one the decoder can read."""


class SSEEventTooLarge(SSEError):
    """An event is larger than the decoder's `max_event_size`."""


class SSEDecoder:
    """Incremental event-stream decoder: `feed(chunk)` returns the events completed so far."""

    __slots__ = (
        "_buffer",
        "_data",
        "_event",
        "_has_data",
        "_id",
        "_max_event_size",
        "_size",
        "_started",
        "last_event_id",
        "retry",
    )

    def __init__(self, max_event_size: int = 64 * 1024 * 1024) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._has_data = False
        self._event = ""
        self._id: str | None = None
        self._size = 0
        self._started = False
        self._max_event_size = max_event_size
        #: The id of the last dispatched block that had one ("" before any): the stream's
        #: `Last-Event-ID`.
        self.last_event_id = ""
        #: The reconnection time the stream asked for, in milliseconds (None: it named none).
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream; return every event they complete."""
        return [SSEEvent(f.event, f.data) for f in self.feed_frames(chunk) if f.data is not None]

    def feed_frames(self, chunk: bytes) -> list[SSEFrame]:
        """Like `feed`, with each block's own id, and id-only blocks too (with `data` None)."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started and buffer:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer
                return []
            self._started = True
            if buffer.startswith(_BOM):
                buffer = buffer[len(_BOM) :]
        events: list[SSEFrame] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            self._line(buffer[start : match.start()], events)
            start = match.end()
        self._buffer = buffer[start:]
        if self._size + len(self._buffer) > self._max_event_size:
            raise SSEEventTooLarge(f"an SSE event is larger than {self._max_event_size} bytes")
        return events

    def close(self) -> list[SSEEvent]:
        """The stream ended: finish its last line. A pending event without its blank line is
        dropped, so this only returns events that a final blank line completes."""
        return [SSEEvent(f.event, f.data) for f in self.close_frames() if f.data is not None]

    def close_frames(self) -> list[SSEFrame]:
        """Like `close`, in the form of `feed_frames`."""
        events: list[SSEFrame] = []
        rest, self._buffer = self._buffer, b""
        # Only a trailing CR can be left unconsumed as a line end; without one, `rest` is an
        # unterminated line, which is not a line at all.
        if rest.endswith(b"\r"):
            self._line(rest[:-1], events)
        self._data = []
        self._has_data = False
        self._event = ""
        self._id = None
        self._size = 0
        return events

    def _line(self, line: bytes, events: list[SSEFrame]) -> None:
        if not line:
            event_id = self._id
            if event_id is not None:
                self.last_event_id = event_id
            if self._has_data:
                data = b"\n".join(self._data)
                events.append(SSEFrame(self._event or "message", data, event_id or None))
            elif event_id:
                events.append(SSEFrame(self._event or "message", None, event_id))
            self._data = []
            self._has_data = False
            self._event = ""
            self._id = None
            self._size = 0
            return
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
            self._size += len(value) + 1
            if self._size > self._max_event_size:
                raise SSEEventTooLarge(f"an SSE event is larger than {self._max_event_size} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            self._id = _event_id(value)
        elif name == b"retry" and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            self.retry = int(value)
        # Unknown fields are ignored, as the SSE rules say.


def _event_id(value: bytes) -> str | None:
    """An `id:` value as the client may send it back in `Last-Event-ID`: printable ASCII and
    not too long. The empty id resets the stream's last id; anything else is None (unusable,
    so treated as if the block had no id)."""
    if len(value) > MAX_EVENT_ID or not all(0x20 <= b < 0x7F for b in value):
        return None
    return value.decode("ascii")
