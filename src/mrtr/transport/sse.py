"""Server-Sent Events framing, both directions, with no I/O.

`encode_event` frames one JSON-RPC message as an SSE event; `SSEDecoder` turns a byte stream
into events following the WHATWG event-stream rules: lines end in CRLF, LF or a lone CR; a blank
line dispatches the event; `data:` lines are joined with `\\n`; lines starting with `:` are
comments (keep-alives); `id:` and `retry:` are ignored, because MCP streams are not resumable.
An event cut off by the end of the stream is dropped, as the SSE rules say.
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


class SSEEvent(NamedTuple):
    """One dispatched event: its type (`message` unless the stream named one) and data."""

    event: str
    data: bytes


class SSEError(ValueError):
    """The stream is not one the decoder can read."""


class SSEEventTooLarge(SSEError):
    """An event is larger than the decoder's `max_event_size`."""


class SSEDecoder:
    """Incremental event-stream decoder: `feed(chunk)` returns the events completed so far."""

    __slots__ = ("_buffer", "_data", "_event", "_max_event_size", "_size", "_started")

    def __init__(self, max_event_size: int = 64 * 1024 * 1024) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = ""
        self._size = 0
        self._started = False
        self._max_event_size = max_event_size

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream; return every event they complete."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started and buffer:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer
                return []
            self._started = True
            if buffer.startswith(_BOM):
                buffer = buffer[len(_BOM) :]
        events: list[SSEEvent] = []
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
        events: list[SSEEvent] = []
        rest, self._buffer = self._buffer, b""
        # Only a trailing CR can be left unconsumed as a line end; without one, `rest` is an
        # unterminated line, which is not a line at all.
        if rest.endswith(b"\r"):
            self._line(rest[:-1], events)
        self._data = []
        self._event = ""
        self._size = 0
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event or "message", b"\n".join(self._data)))
            self._data = []
            self._event = ""
            self._size = 0
            return
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self._max_event_size:
                raise SSEEventTooLarge(f"an SSE event is larger than {self._max_event_size} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # "id", "retry" and unknown fields are ignored: MCP streams cannot be resumed.
