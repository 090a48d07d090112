"""uvicorn's HTTP/1.1 protocols (h11 or httptools), with the connection limits of `HTTPLimits`.

uvicorn closes idle keep-alive connections but has no timeout for a request whose headers or
body never finish, no bound on the bytes of a request's headers with httptools, and no bound
on open connections but the process's file descriptors (past which `accept` fails in a loop).
`guarded_protocol` subclasses the protocol uvicorn would pick and adds them:

* A connection over `max_connections` gets a 503 before any state is built for it, and a
  lingering close: the server shuts its writing side, then reads and drops what the client
  sends until the client closes, for `_LINGER` seconds at most. Closed at once instead, unread
  request bytes make the kernel answer with a reset, which most clients report before reading
  the 503 (the whole point of sending it). At most `max_connections // 16` (32 at least)
  refused connections linger at once, past which one is closed at once, so the descriptors in
  use stay bounded whatever clients do: that is at most half the share of them
  `connection_cap` keeps free.
* Each connection has one timer, armed lazily. Its deadline follows the request: opened (or
  first byte of the next request) + `header_timeout` until the headers are complete, then
  + `body_timeout` until the body is complete. When it fires it compares the time with the
  current deadline and re-arms if that moved, so a request that arrives in one packet, the
  common case, arms and cancels nothing. Between requests uvicorn's keep-alive timer rules.
* Past a deadline: a connection that sent nothing is closed; one part-way through a request
  gets 408 (with a JSON-RPC error, while the app has not answered) and is closed. A body that
  stalls only because reading is paused on the server's side is given more time.

The phase is read from the state uvicorn keeps for the current request (`cycle`: a new one
per request once its headers are parsed, with `more_body` and `response_complete`), which
both protocols share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from .http_limits import HTTPLimits
from .http_responses import NOT_RUN

logger = logging.getLogger("mrtr.http")

# What a connection is waiting for, as far as its timer is concerned.
_IDLE = 0  # nothing the timer watches: a request being handled, or keep-alive (uvicorn's)
_HEADERS = 1  # the headers of a request (or of the first one, on a new connection)
_BODY = 2  # the rest of a request's body
_LEFTOVER = 3  # the rest of a body the app answered without reading

_REFUSAL_LOG_INTERVAL = 60.0  # seconds between warnings about refused connections
#: Seconds a refused connection is drained at most, waiting for the client to close it: a
#: client reads the 503 within a round trip; one that never closes is not waited on longer.
_LINGER = 2.0
#: The fewest refused connections allowed to drain at once (see `guarded_protocol`).
_MIN_LINGERING = 32


def _raw_response(status: bytes, message: str, extra: bytes = b"") -> bytes:
    """A whole `Connection: close` response with a JSON-RPC error body, for the protocol
    to write when no app is there to answer."""
    refused = status.startswith(b"503")  # a connection refused before any request was read
    code = INTERNAL_ERROR if refused else INVALID_REQUEST
    data = NOT_RUN if refused else None
    body = orjson.dumps(jsonrpc.error_response(None, McpError(code, message, data)))
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s" % (status, len(body), extra, body)
    )


class _Census:
    """Open connections of one server, and the warnings about those refused."""

    __slots__ = ("lingering", "next_warning", "open", "refused")

    def __init__(self) -> None:
        self.open = 0
        self.refused = 0
        self.lingering = 0
        self.next_warning = 0.0

    def refuse(self, limit: int) -> None:
        # At most one line a minute, however fast connections are refused.
        self.refused += 1
        now = time.monotonic()
        if now >= self.next_warning:
            self.next_warning = now + _REFUSAL_LOG_INTERVAL
            logger.warning(
                "max_connections (%d) reached: new connections get 503 "
                "(%d so far since the last such warning; one a minute at most)",
                limit,
                self.refused,
            )
            self.refused = 0


class _Guard(asyncio.Protocol):
    """The limits, mixed in before uvicorn's protocol class (see `guarded_protocol`)."""

    limits: HTTPLimits
    census: _Census
    max_lingering: int
    refusal: bytes
    header_timeout_response: bytes
    body_timeout_response: bytes
    header_too_large_response: bytes

    # uvicorn's own per-connection state, read here.
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any
    flow: Any

    _counted = False
    _lingering = False
    _phase = _IDLE
    _deadline = 0.0
    _timer: asyncio.TimerHandle | None = None
    _timer_at = 0.0
    _seen: Any = None
    _header_bytes = 0
    _tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limit = self.limits.max_connections
        census = self.census
        if limit and census.open >= limit:
            # A stream transport (uvloop's is not a registered `asyncio.Transport` subclass).
            stream = cast(asyncio.Transport, transport)
            stream.write(self.refusal)
            census.refuse(limit)
            if census.lingering < self.max_lingering and stream.can_write_eof():
                # Lingering close (see the module docstring): the 503 and a FIN go out, what
                # the client sends is read and dropped (`data_received`) until it closes
                # (`eof_received`) or the time is up.
                census.lingering += 1
                self._lingering = True
                stream.write_eof()
                self._timer = self.loop.call_later(_LINGER, stream.close)
            else:
                stream.close()
            return
        census.open += 1
        self._counted = True
        super().connection_made(transport)
        self._watch(_HEADERS, self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            # Refused: uvicorn never knew of it.
            if self._lingering:
                self._lingering = False
                self.census.lingering -= 1
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            return
        self._counted = False
        self.census.open -= 1
        self._phase = _IDLE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:
        if not self._counted:
            return False  # a refused client is done sending: the transport closes
        return super().eof_received()

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return  # a refused connection's request, drained and dropped
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            if cycle is not None and cycle.more_body and self._phase in (_BODY, _LEFTOVER):
                # The app answered early (413, 503...) and the client is still sending the
                # body, which uvicorn discards. The body's deadline still holds.
                self._phase = _LEFTOVER
            elif not self._head(data):
                return
        super().data_received(data)
        cycle = self.cycle
        if cycle is not self._seen:
            # A new request's headers are complete (uvicorn built its cycle).
            self._seen = cycle
            if cycle.more_body:
                self._watch(_BODY, self.limits.body_timeout)
            else:
                self._phase = _IDLE
        elif self._phase == _BODY and not cycle.more_body:
            self._phase = _IDLE

    def _head(self, data: bytes) -> bool:
        """Count `data`, bytes of a request's start line and headers; False (after a 431) when
        the head goes past `max_header_size`. Checked before the parser buffers them."""
        if self._phase != _HEADERS:  # the first bytes of the next request on this connection
            self._header_bytes = 0
            self._tail = b""
            self._watch(_HEADERS, self.limits.header_timeout)
        limit = self.limits.max_header_size
        size = self._header_bytes + len(data)
        if limit and size > limit:
            # Past the limit, unless the head ends within it (a body may follow in `data`).
            window = self._tail + data[: max(0, limit - self._header_bytes) + 3]
            if b"\n\r\n" not in window and b"\n\n" not in window:
                self._phase = _IDLE
                self.transport.write(self.header_too_large_response)
                self.transport.close()
                return False
        self._header_bytes = size
        self._tail = data[-3:]  # a head's end may straddle two reads
        return True

    def _watch(self, phase: int, timeout: float) -> None:
        """Enter `phase`, to be over within `timeout` seconds (0: no limit)."""
        self._phase = phase
        if not timeout:
            self._deadline = float("inf")
            return
        deadline = self.loop.time() + timeout
        self._deadline = deadline
        timer = self._timer
        if timer is None or deadline < self._timer_at:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(deadline, self._expire)
            self._timer_at = deadline

    def _expire(self) -> None:
        self._timer = None
        phase = self._phase
        transport = self.transport
        if phase == _IDLE or transport.is_closing():
            return
        now = self.loop.time()
        if now < self._deadline:
            if self._deadline != float("inf"):
                self._timer = self.loop.call_at(self._deadline, self._expire)
                self._timer_at = self._deadline
            return
        if phase == _BODY and self.flow.read_paused:
            # The server stopped reading (a pipelined request waits its turn): not the
            # client's fault, so the body gets its time again once reading resumes.
            self._watch(_BODY, self.limits.body_timeout)
            return
        self._phase = _IDLE
        if phase == _HEADERS:
            if self._header_bytes:
                transport.write(self.header_timeout_response)
        elif phase == _BODY:
            cycle = self.cycle
            if not cycle.response_started:
                transport.write(self.body_timeout_response)
                # The app is waiting for the body: it hears of the end at once, and anything
                # it might still send is dropped.
                cycle.disconnected = True
                cycle.message_event.set()
        transport.close()


def _uvicorn_protocol(http: Any) -> type[asyncio.Protocol]:
    """The protocol class uvicorn would use for `http` ("auto", "h11", "httptools", or a
    class), checked to be one this module knows how to guard."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import ImportFromStringError, import_from_string
    from uvicorn.protocols.http.h11_impl import H11Protocol

    try:
        base = import_from_string(HTTP_PROTOCOLS[http]) if isinstance(http, str) else http
    except (KeyError, ImportError, ImportFromStringError):
        base = None  # an unknown name, or one whose library is not installed
    known: tuple[type[asyncio.Protocol], ...] = (H11Protocol,)
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed
        pass
    else:
        known += (HttpToolsProtocol,)
    if not (isinstance(base, type) and issubclass(base, known)):
        raise ValueError(
            f"http={http!r}: serve_http enforces its limits on uvicorn's HTTP/1.1 protocols "
            "only ('auto', 'h11' or 'httptools')"
        )
    return base


def guarded_protocol(limits: HTTPLimits, http: Any = "auto") -> type[asyncio.Protocol]:
    """A protocol class for `uvicorn.Config(http=...)`: uvicorn's choice for `http`, with
    `limits` enforced on every connection. One class per server: it counts that server's
    connections."""
    base = _uvicorn_protocol(http)
    header_timeout = f"{limits.header_timeout:g} s"
    body_timeout = f"{limits.body_timeout:g} s"
    namespace = {
        "limits": limits,
        "census": _Census(),
        "max_lingering": max(_MIN_LINGERING, limits.max_connections // 16),
        "refusal": _raw_response(
            b"503 Service Unavailable",
            "Service Unavailable: the server has as many connections open as it takes "
            f"({limits.max_connections}); retry in a moment",
            b"retry-after: 1\r\n",
        ),
        "header_timeout_response": _raw_response(
            b"408 Request Timeout",
            f"Request Timeout: the request headers did not arrive within {header_timeout}",
        ),
        "body_timeout_response": _raw_response(
            b"408 Request Timeout",
            f"Request Timeout: the request body did not arrive within {body_timeout}",
        ),
        "header_too_large_response": _raw_response(
            b"431 Request Header Fields Too Large",
            "Request Header Fields Too Large: the start line and headers may be at most "
            f"{limits.max_header_size} bytes here",
        ),
    }
    guarded: type[asyncio.Protocol] = type(f"Guarded{base.__name__}", (_Guard, base), namespace)
    return guarded


__all__ = ["guarded_protocol"]
