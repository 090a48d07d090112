"""Legacy Streamable HTTP on the server (MCP 2025-03-26 to 2025-11-25), on the endpoint that
serves 2026-07-28 statelessly: sessions, the `GET` stream, resumable SSE.

`StreamableHTTPApp` sends here what a legacy client sends (see its routing); everything else
stays on the stateless path. Rules:

1. A POST of `initialize` (without a modern `_meta`) opens a session: the server negotiates it
   (`Server.handle_request` with a fresh `LegacySession`). A success is answered with a new
   `Mcp-Session-Id`, and the session is kept (`MemorySessionStore`: idle expiry, a bound on
   their number) and attached to the server, which then sends it list changes and resource
   updates. An error is answered with 200 (as every JSON-RPC answer here, rule 3), and nothing
   is kept; a server that serves no legacy revision refuses with -32022 and 400, naming the
   versions this endpoint speaks, as on its 2026-07-28 path.
2. A message with `Mcp-Session-Id` belongs to that session: an unknown, ended or expired id is
   404, with a JSON-RPC error saying to initialize again. `MCP-Protocol-Version`, when sent,
   must be the negotiated version (400 otherwise); a request without it is served under the
   negotiated version, the spec's "other way to identify the version" (it would otherwise
   assume 2025-03-26).
3. A POSTed request runs as a task of its session (at most `MAX_SESSION_REQUESTS` at once, each
   id unique among those running). It is answered with JSON, unless a notification or a
   server request (`elicitation/create`...) goes out first: then with an SSE stream whose
   events all carry ids, opened by a priming event with `retry`. Every JSON-RPC answer goes
   out with 200, errors included (`LEGACY_ERROR_STATUS`): legacy clients take a 4xx for the
   session failing, so 4xx is kept for what the transport refuses. A dropped connection does not
   cancel the request (the client sends `notifications/cancelled` for that): its events are
   kept (`sse_events.py`) and the client resumes with `GET` + `Last-Event-ID`.
4. POSTed notifications and responses are answered 202. A response goes to the server request
   awaiting it; one that nothing awaits (late, duplicated, never asked for) is dropped.
5. `GET` (which must accept `text/event-stream`): without `Last-Event-ID`, the session's own
   stream, for what belongs to no request (what was sent while none was open comes first).
   One at a time: a second is 409 Conflict, as no message may go out on two streams. With
   `Last-Event-ID`: the rest of the stream that id names, taken over from the connection that
   served it, if one still does; it ends after the request's response. An id this session
   never sent, or whose events are no longer kept, is 400.
6. `DELETE` ends the session (204): its requests are cancelled, what waits on the client fails,
   its streams end. Expiry and eviction do the same.
7. `close_sse_stream()` lets a handler end its request's connection early (SEP-1699 polling):
   the client reconnects after `retry` and gets the rest.
8. Several instances (the server has a `store` and a `broker`, as `MRTR_STORE_URL` gives):
   a session is a record in the store (`SessionRecords`), so any instance serves its
   requests; each instance keeps only its own side (the streams it serves, the requests it
   runs, the server requests it awaits). Across instances, on the broker channel
   `mrtr/sessions/<server name>`: a client's response to a server request, POSTed to another
   instance than the one awaiting it (the request id names its instance), goes to that one;
   so does `notifications/cancelled`; a change of the record (`logging/setLevel`,
   subscriptions) reaches the instances serving the session at once; DELETE ends the
   session's streams and requests everywhere; a `GET` stream opened on one instance ends the
   one another instance served (the newest wins: no message goes out twice). List changes
   and resource updates reach a session on the instance serving its `GET` stream (through the
   change broker); with none open they are not kept. The rest of a request's stream
   (`Last-Event-ID`) is served by the instance that served it. Any other instance answers
   from what that one kept in the store (rule 9) rather than leave a legacy client waiting:
   the stored response if the request was answered, else a JSON-RPC error for the request
   (its instance stopped or cannot be reached, the outcome is unknown, send it again), after
   asking that instance to cancel it. The standalone stream's newest events are kept in
   the store by the instance serving it, before they go out (`sse_events.py` rule 6), so
   any instance resumes it. A store that fails answers 503 with -32603, the session intact.
   A broker message can be lost (Redis stalls as it is published, or a subscriber is away),
   so a client's response relayed to another instance is also kept in the store (up to
   `MAX_KEPT_RESPONSE` bytes, for `KEPT_ANSWER_TTL` seconds) before it is answered 202 (503
   when the store fails: the client sends it again), and an instance awaiting an answer
   looks for it there now and then (`ANSWER_LOOK_FIRST`, doubling up to `ANSWER_LOOK_MOST`
   seconds): a lost message costs that wait, never the call.
9. What a request stream leaves in a shared store (rule 8): when its first event goes out,
   before any event id can reach the client, its request id; when the request is answered,
   its response too (up to `MAX_KEPT_RESPONSE` bytes), for `KEPT_STREAM_TTL` seconds. A
   client whose instance dies mid-call (the official Python client resumes with `GET` +
   `Last-Event-ID`, on whichever instance the load balancer picks) is answered there, on an
   event stream, as it expects: it gets an answer or an error, never a wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, McpError
from ..server.legacy import SESSION_CHANGES
from ..server.session import (
    LegacySession,
    MemorySessionStore,
    SessionRecords,
    session_digest,
    valid_record,
)
from ..stepping import start_task
from .http_responses import (
    NOT_RUN,
    SSE_HEADERS,
    Message,
    Send,
    accepted,
    answer,
    legacy_status_of,
    reject,
    send_json,
    status_of,
)
from .sse import KEEPALIVE, encode_event_with_id
from .sse_events import (
    STANDALONE,
    EventLog,
    EventStream,
    ReplayGap,
    decode_snapshot,
    parse_event_id,
)

if TYPE_CHECKING:
    from ..server.server import Server
    from ..server.store import Broker, Unsubscribe

logger = logging.getLogger("mrtr.http")

Receive = Callable[[], Awaitable[Message]]

#: Requests of one session running at once; past it a POST is 429 (a client that drops its
#: connections cannot pile up handlers, which outlive them here).
MAX_SESSION_REQUESTS = 64
#: The largest session record kept in a shared store (what `initialize` brought, mostly).
MAX_RECORD_BYTES = 64 * 1024
#: Seconds a request stream's id and response stay in a shared store (rule 9): a client
#: resumes within its retry time, a few seconds at most, or polls (SEP-1699) about as often.
KEPT_STREAM_TTL = 300.0
#: The largest response kept for another instance to replay (rule 9); a larger one is not
#: kept, and a resumption elsewhere gets the error instead.
MAX_KEPT_RESPONSE = 64 * 1024
#: Seconds a client's response relayed to another instance stays in a shared store (rule 8):
#: the instance awaiting it looks there within `ANSWER_LOOK_MOST` seconds.
KEPT_ANSWER_TTL = 60.0
#: Seconds after sending a request to the client before its instance first looks in the shared
#: store for an answer the broker lost; each next look waits twice as long, up to
#: `ANSWER_LOOK_MOST` (rule 8).
ANSWER_LOOK_FIRST = 0.5
ANSWER_LOOK_MOST = 5.0
#: The id of a request an instance of a shared session sent the client (`_prefix` and a count).
_SERVER_REQUEST_ID = re.compile(r"s-[0-9a-f]{12}-[0-9]{1,18}")
_SESSION_HEADER = b"mcp-session-id"
_MAX_ID_LENGTH = 256
_SETTLE_POLL = 0.05  # seconds between looks at the requests a drain waits for

_current_stream: contextvars.ContextVar[EventStream | None] = contextvars.ContextVar(
    "mrtr_legacy_stream", default=None
)


def close_sse_stream() -> bool:
    """End the connection of the legacy HTTP request being handled, keeping its stream.

    The client resumes the stream with `GET` + `Last-Event-ID` after the `retry` time and gets
    everything sent after the cut, the response included (SEP-1699 polling). Call it from a
    handler; it returns False, doing nothing, anywhere else (a 2026-07-28 request, stdio).
    """
    stream = _current_stream.get()
    if stream is None or stream.finished:
        return False
    stream.release()
    return True


class _Channel:
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
        self.ended = True
        for task in list(self.tasks.values()):
            task.cancel()
        for stream in self.log.streams():
            stream.changed.set()


class _Store(MemorySessionStore):
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


class LegacySessions:
    """The legacy sessions of one endpoint (see the module rules)."""

    def __init__(
        self,
        server: Server,
        *,
        idle_timeout: float = 3600.0,
        max_sessions: int = 1000,
        buffer_bytes: int = 1024 * 1024,
        retry: float = 1.0,
        keepalive_interval: float = 15.0,
    ) -> None:
        if buffer_bytes < 1 or retry < 0:
            raise ValueError("session_buffer_bytes must be >= 1 and sse_retry >= 0")
        self.server = server
        #: This process's sessions (shared ones: those it served lately, rule 8).
        self.store = _Store(idle_timeout, max_sessions, self._ended)
        self.buffer_bytes = buffer_bytes
        self.retry_ms = round(retry * 1000)
        self.keepalive_interval = keepalive_interval
        self._channels: dict[str, _Channel] = {}
        options = server.options
        #: The shared records (rule 8); None: sessions live in this process only, and cost
        #: nothing more than a dict lookup per request.
        self.records: SessionRecords | None = None
        self._broker: Broker | None = None
        if options.store is not None and options.broker is not None:
            self.records = SessionRecords(options.store, idle_timeout, max_sessions)
            self._broker = options.broker
        #: Names this instance in server request ids and broker messages.
        self.instance = secrets.token_hex(6)
        self._prefix = f"s-{self.instance}-" if self.records is not None else "s-"
        #: This instance's range of request stream numbers in a shared session (an event id
        #: of another instance's request stream names none of this one's).
        self._first_stream = int(self.instance, 16) * 10**9 + 1 if self.records else 1
        self.broker_channel = f"mrtr/sessions/{server.name}"
        self._by_digest: dict[str, _Channel] = {}
        self._unsubscribe: Unsubscribe | None = None
        self._subscribing: asyncio.Lock | None = None
        self._background: set[asyncio.Future[None]] = set()
        #: Tasks looking in the store for answers the broker may have lost (rule 8).
        self._looking: set[asyncio.Future[None]] = set()

    def _ended(self, session: LegacySession) -> None:
        channel = self._channels.pop(session.id, None)
        if channel is not None:
            channel.end()
            if self._by_digest.get(channel.digest) is channel:
                del self._by_digest[channel.digest]
        self.server.detach_session(session)

    async def settle(self, within: float | None) -> None:
        """Return once no request of these sessions is running, or after `within` seconds
        (None: no limit); a drain calls it before `close`, which would cancel them."""
        deadline = None if within is None else time.monotonic() + within
        while any(channel.tasks for channel in self._channels.values()):
            if deadline is not None and time.monotonic() >= deadline:
                return
            await asyncio.sleep(_SETTLE_POLL)

    def close(self) -> None:
        """End every session (at shutdown): their streams end, their requests are cancelled.

        Shared sessions end here only: their records stay, and other instances serve them.
        """
        for session in self.store.sessions():
            self.store.remove(session.id)
        for task in list(self._looking):
            task.cancel()
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(RuntimeError):  # no loop running: nothing to stop
                task = asyncio.ensure_future(unsubscribe(), loop=asyncio.get_running_loop())
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    def _principal(self, scope: Any) -> str | None:
        resolver = self.server.options.principal
        if resolver is None or scope is None:
            return None
        try:
            return resolver(scope)
        except Exception:
            # Unknown caller: it matches no session opened by a known one (fails closed).
            logger.exception("ServerOptions.principal failed on a legacy session request")
            return None

    # --- opening a session (rule 1) ---------------------------------------------------------

    async def initialize(self, scope: Any, send: Send, message: dict[str, Any]) -> None:
        """Answer a POSTed `initialize` without a session id."""
        session = LegacySession(request_prefix=self._prefix)
        session.principal = self._principal(scope)
        session.admission = self.records or self.store
        records = self.records
        channel = _Channel(session, self.buffer_bytes, first_stream=self._first_stream)
        response = await self.server.handle_request(message, None, scope, session)
        if "error" in response:
            # Without the legacy shim the refusal is the 2026-07-28 one (-32022, 400).
            serves = self.server.serves_legacy
            await answer(
                send, legacy_status_of(response) if serves else status_of(response), response
            )
            return
        if records is not None:
            if len(orjson.dumps(session.to_record())) > MAX_RECORD_BYTES:
                await reject(
                    send,
                    200,  # a JSON-RPC error of a legacy request, as any other (rule 3)
                    INVALID_PARAMS,
                    "initialize: clientInfo and capabilities are too large to keep for a "
                    f"session (at most {MAX_RECORD_BYTES // 1024} KiB together)",
                    message["id"],
                )
                return
            try:
                await self._listen()
                await records.create(session)
            except McpError as exc:
                await _unavailable(send, message["id"], exc, not_run=True)
                return
            channel.digest = session_digest(session.id)
            channel.asked = functools.partial(self._asked, channel)
            self._by_digest[channel.digest] = channel
        self._channels[session.id] = channel
        self.store.add(session)
        if records is None:
            self.server.attach_session(session)
        await send_json(
            send, 200, orjson.dumps(response), [(_SESSION_HEADER, session.id.encode("ascii"))]
        )

    # --- finding the session (rule 2) -------------------------------------------------------

    async def _find(
        self,
        send: Send,
        headers: dict[bytes, bytes],
        request_id: jsonrpc.RequestId | None,
        scope: Any = None,
    ) -> _Channel | None:
        raw = headers[_SESSION_HEADER]
        session_id = raw.decode("latin-1").strip() if len(raw) <= _MAX_ID_LENGTH else ""
        channel: _Channel | None = None
        if not session_id:
            pass
        elif self.records is None:
            session = self.store.get(session_id)
            channel = None if session is None else self._channels.get(session.id)
            if channel is not None and channel.session.principal != self._principal(scope):
                channel = None  # another caller's session: as unknown as any other id
        else:
            try:
                channel = await self._shared(session_id, self.records, scope)
            except McpError as exc:
                await _unavailable(send, request_id, exc, not_run=True)
                return None
        if channel is None:
            await reject(
                send,
                404,
                INVALID_REQUEST,
                "Session not found: this Mcp-Session-Id is unknown, ended or expired; send "
                "initialize (without Mcp-Session-Id) to start a new session",
                request_id,
            )
            return None
        session = channel.session
        version = headers.get(b"mcp-protocol-version")
        if version is not None:
            value = version.strip(b" \t").decode("latin-1")
            if value != session.protocol_version:
                await reject(
                    send,
                    400,
                    INVALID_REQUEST,
                    f"Bad Request: MCP-Protocol-Version {value[:40]!r} is not the version this "
                    f"session negotiated ({session.protocol_version}); send that one",
                    request_id,
                )
                return None
        return channel

    # --- shared sessions (rule 8) -----------------------------------------------------------

    async def _shared(
        self, session_id: str, records: SessionRecords, scope: Any
    ) -> _Channel | None:
        """This instance's side of a shared session, made from its record if need be; None
        when the store has no record of it (or it belongs to another caller)."""
        record = await records.load(session_id)
        if record is None or record["p"] != self._principal(scope):
            if record is None and session_id in self._channels:
                self.store.remove(session_id)  # ended or expired elsewhere
            return None
        await self._listen()
        # No await from here to the end of the lookup: two requests of one session never
        # make two sides of it.
        session = self.store.get(session_id)
        channel = None if session is None else self._channels.get(session_id)
        if channel is None:
            session = LegacySession(session_id=session_id, request_prefix=self._prefix)
            channel = _Channel(
                session, self.buffer_bytes, session_digest(session_id), self._first_stream
            )
            channel.asked = functools.partial(self._asked, channel)
            self._channels[session_id] = channel
            self._by_digest[channel.digest] = channel
            self.store.add(session)
        channel.session.apply_record(record)
        if records.stale(record):
            await self._refresh(channel, records)
        return channel

    async def _refresh(self, channel: _Channel, records: SessionRecords) -> None:
        """Push the record's expiry back (the session is in use); end the session here when
        its record is gone. Skipped while another instance writes it (which does the same)."""
        channel.refreshed = time.monotonic()
        session = channel.session
        async with records.locked(session.id, wait=0) as held:
            if not held:
                return
            record = await records.load(session.id)
            if record is None:
                self.store.remove(session.id)
                return
            session.apply_record(record)
            await records.save(session)

    async def _change(
        self, channel: _Channel, handle: Callable[[], Awaitable[dict[str, Any] | None]]
    ) -> dict[str, Any] | None:
        """Run `handle` (a request or notification that changes what the session set up)
        with the session's record locked and fresh, then write it and tell the other
        instances. Store failures are raised (`McpError`)."""
        records = self.records
        assert records is not None
        session = channel.session
        async with records.locked(session.id):
            record = await records.load(session.id)
            if record is None:
                raise McpError(
                    INVALID_REQUEST,
                    "Session not found: it ended or expired; send initialize (without "
                    "Mcp-Session-Id) to start a new session",
                )
            session.apply_record(record)
            before = session.to_record()
            response = await handle()
            after = session.to_record()
            if {**after, "t": 0} != {**before, "t": 0}:
                written = await records.save(session)
                channel.refreshed = time.monotonic()
                self._publish("u", channel.digest, r=written)
        return response

    async def _listen(self) -> None:
        """Subscribe to the sessions' broker channel (once, at first use)."""
        broker = self._broker
        if broker is None or self._unsubscribe is not None:
            return
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._unsubscribe is None:
                self._unsubscribe = await broker.subscribe(
                    self.broker_channel, self._received, self._missed
                )

    def _missed(self) -> None:
        """The broker lost messages for a while: read every served session's record again
        (ending those that ended elsewhere meanwhile)."""
        records = self.records
        if records is None:
            return
        for channel in list(self._by_digest.values()):
            task = asyncio.ensure_future(self._reload(channel, records))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _reload(self, channel: _Channel, records: SessionRecords) -> None:
        try:
            record = await records.load(channel.session.id)
        except McpError:
            return  # the store too: the next request of the session reads it again
        if record is None:
            self.store.remove(channel.session.id)
        elif not channel.ended:
            channel.session.apply_record(record)

    def _publish(self, kind: str, digest: str, **fields: Any) -> None:
        broker = self._broker
        if broker is None:
            return
        message = {"t": kind, "o": self.instance, "s": digest, **fields}
        try:
            broker.publish(self.broker_channel, orjson.dumps(message))
        except Exception:
            logger.exception("could not publish a legacy session message to other instances")

    def _received(self, data: bytes) -> None:
        """Act on what another instance published about a session this one serves."""
        try:
            message = orjson.loads(data)
            kind, origin, digest = message["t"], message["o"], message["s"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            logger.warning("ignored a malformed message on %s", self.broker_channel)
            return
        if origin == self.instance or not isinstance(digest, str):
            return
        channel = self._by_digest.get(digest)
        if channel is None or channel.ended:
            return
        if kind == "r":
            response = message.get("m")
            if isinstance(response, dict):
                channel.session.deliver(response)
        elif kind == "c":
            _cancel(channel, message.get("m"))
        elif kind == "u":
            record = message.get("r")
            if valid_record(record):
                channel.session.apply_record(record)
        elif kind == "e":
            self.store.remove(channel.session.id)
        elif kind == "g":
            stream = channel.log.standalone
            stream.keeper = None  # the instance now serving it keeps it
            if stream.owner is not None:
                stream.owner = _TAKEN_ELSEWHERE
                stream.changed.set()

    def _elsewhere(self, request_id: Any) -> bool:
        """Whether a response's id names a server request another instance sent."""
        return (
            self._broker is not None
            and isinstance(request_id, str)
            and _SERVER_REQUEST_ID.fullmatch(request_id) is not None
            and not request_id.startswith(self._prefix)
        )

    def _answer_key(self, channel: _Channel, request_id: jsonrpc.RequestId) -> str:
        return f"mrtr/answer/{self.server.name}/{channel.digest}/{request_id}"

    async def _relay(self, channel: _Channel, response: dict[str, Any]) -> None:
        """Pass a client's response to the instance awaiting it: kept in the store first (a
        store failure is raised, `McpError`), then published (rule 8)."""
        records = self.records
        data = orjson.dumps(response)
        if records is not None and len(data) <= MAX_KEPT_RESPONSE:
            key = self._answer_key(channel, response["id"])
            await records.store.set(key, data, KEPT_ANSWER_TTL)
        self._publish("r", channel.digest, m=response)

    def _asked(self, channel: _Channel, message: dict[str, Any]) -> None:
        """A message goes to the client of a shared session: for a request, look for its
        answer in the store while it is awaited (rule 8)."""
        request_id = message.get("id")
        if "method" not in message or not isinstance(request_id, str | int):
            return  # a notification (the server's own ids are strings)
        task = asyncio.ensure_future(self._look_for_answer(channel, request_id))
        self._looking.add(task)
        task.add_done_callback(self._looking.discard)

    async def _look_for_answer(self, channel: _Channel, request_id: jsonrpc.RequestId) -> None:
        records = self.records
        assert records is not None
        session = channel.session
        key = self._answer_key(channel, request_id)
        wait = ANSWER_LOOK_FIRST
        while True:
            await asyncio.sleep(wait)
            wait = min(wait * 2, ANSWER_LOOK_MOST)
            if channel.ended or not session.awaits(request_id):
                return  # answered (the broker's message came), or no longer awaited
            try:
                raw = await records.store.get(key)
            except McpError:
                continue  # the store fails too: look again later
            if raw is None:
                continue
            try:
                response = orjson.loads(raw)
            except orjson.JSONDecodeError:
                logger.warning("ignored an unreadable answer kept in the store for %r", request_id)
                return
            if isinstance(response, dict) and session.deliver(response):
                logger.info("an answer the broker lost was found in the store (%r)", request_id)
            return

    # --- POST (rules 3 and 4) ---------------------------------------------------------------

    async def post(
        self,
        scope: Any,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        message: dict[str, Any],
        kind: str,
        accept_sse: bool,
    ) -> None:
        """Serve one POSTed message that carries `Mcp-Session-Id`."""
        request_id = message.get("id") if kind == "request" else None
        channel = await self._find(send, headers, request_id, scope)
        if channel is None:
            return
        session = channel.session
        if kind == "response":
            if session.deliver(message):
                pass
            elif self._elsewhere(message["id"]):
                try:
                    await self._relay(channel, message)
                except McpError as exc:
                    await _unavailable(send, None, exc)
                    return
            else:
                logger.debug("ignored a response to no pending request (id %r)", message["id"])
            await accepted(send)
            return
        if kind == "notification":
            if message["method"] == "notifications/cancelled":
                params = message.get("params")
                if not _cancel(channel, params) and self._broker is not None:
                    self._publish("c", channel.digest, m=params)
            elif self.records is not None:
                try:
                    await self._change(
                        channel,
                        functools.partial(
                            self.server.handle_message, message, None, scope, session
                        ),
                    )
                except McpError as exc:
                    await _unavailable(send, None, exc)
                    return
            else:
                await self.server.handle_message(message, None, scope, session)
            await accepted(send)
            return
        await self._request(scope, receive, send, channel, message, accept_sse)

    async def _request(
        self,
        scope: Any,
        receive: Receive,
        send: Send,
        channel: _Channel,
        message: dict[str, Any],
        accept_sse: bool,
    ) -> None:
        request_id = message["id"]
        if request_id in channel.tasks:
            await reject(
                send,
                400,
                INVALID_REQUEST,
                f"Invalid Request: id {request_id!r} is already in use by a request of this "
                "session that is still running",
                request_id,
            )
            return
        if len(channel.tasks) >= MAX_SESSION_REQUESTS:
            await reject(
                send,
                429,
                INVALID_REQUEST,
                f"Too Many Requests: this session already has {MAX_SESSION_REQUESTS} requests "
                "in progress; wait for one to finish",
                request_id,
                [(b"retry-after", b"1")],
            )
            return
        stream = channel.log.open()
        task = start_task(self._run(channel, stream, message, scope, accept_sse))
        if not task.done():  # done already: answered in its first step, nothing to cancel
            channel.tasks[request_id] = task
            task.add_done_callback(functools.partial(_forget, channel, request_id, stream))
        await self._pump(send, receive, channel, stream, 0, opened=False, can_stream=accept_sse)

    async def _run(
        self,
        channel: _Channel,
        stream: EventStream,
        message: dict[str, Any],
        scope: Any,
        accept_sse: bool,
    ) -> None:
        _current_stream.set(stream)
        standalone = channel.log.standalone

        async def notify(outgoing: dict[str, Any]) -> None:
            if channel.asked is not None:
                channel.asked(outgoing)
            if accept_sse:
                if self.records is not None and stream.id not in channel.kept:
                    # Before the stream's first event id can go out (rule 9).
                    channel.kept.add(stream.id)
                    await self._keep_stream(channel, stream.id, {"i": message["id"]})
                stream.add(orjson.dumps(outgoing))
            elif "id" in outgoing:
                # A client that takes no stream here still gets the server's requests: on its
                # own stream. Notifications about this request have nowhere to go.
                standalone.add(orjson.dumps(outgoing))

        try:
            if self.records is not None and message["method"] in SESSION_CHANGES:
                handle = functools.partial(
                    self.server.handle_request, message, notify, scope, channel.session
                )
                try:
                    changed = await self._change(channel, handle)
                except McpError as exc:
                    changed = jsonrpc.error_response(message["id"], exc)
                response = changed if changed is not None else {}
            else:
                response = await self.server.handle_request(message, notify, scope, channel.session)
        except asyncio.CancelledError:
            stream.finish()  # cancelled: no response (the client said so, or the session ended)
            raise
        except Exception:
            # `handle_request` answers every failure; should that ever break, the stream still
            # ends, so the connection waiting on it is answered rather than left hanging.
            logger.exception("a legacy request failed")
            stream.finish()
            return
        finally:
            # Its id is free as soon as it ends, before its answer goes out (not a loop turn
            # later): a client that reuses the id of an answered request is not told it runs.
            channel.tasks.pop(message["id"], None)
        data = orjson.dumps(response)
        stream.add(data, final=True)
        if stream.id in channel.kept:
            channel.kept.discard(stream.id)
            kept: dict[str, Any] = {"i": message["id"]}
            if len(data) <= MAX_KEPT_RESPONSE:
                kept["r"] = response
            await self._keep_stream(channel, stream.id, kept)

    # --- GET (rule 5) -----------------------------------------------------------------------

    async def get(
        self,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        accept_sse: bool,
        scope: Any = None,
    ) -> None:
        """Serve a `GET` that carries `Mcp-Session-Id`."""
        channel = await self._find(send, headers, None, scope)
        if channel is None:
            return
        if not accept_sse:
            await reject(
                send,
                406,
                INVALID_REQUEST,
                "Not Acceptable: a GET opens a text/event-stream, which the Accept header does "
                "not allow",
            )
            return
        raw = headers.get(b"last-event-id")
        if raw is None:
            stream = channel.log.standalone
            if stream.owner is not None:
                await reject(
                    send,
                    409,
                    INVALID_REQUEST,
                    "Conflict: this session's GET stream is already open (one at a time); to "
                    "resume a stream, send Last-Event-ID",
                )
                return
            cursor = max(stream.delivered, stream.dropped)
            if self.records is not None:
                await self._standalone(receive, send, channel, cursor)
                return
        else:
            last = raw.decode("latin-1").strip()
            found = parse_event_id(last)
            problem = None
            shared_standalone = (
                found is not None and found[0] == STANDALONE and self.records is not None
            )
            if shared_standalone and found is not None:
                try:
                    problem = await self._adopt_standalone(channel, found[1])
                except McpError as exc:
                    await _unavailable(send, None, exc)
                    return
            stream_ = None if found is None else channel.log.get(found[0])
            if problem is not None:
                pass  # decided by what another instance kept ("": taken over from it)
            elif found is None or stream_ is None or found[1] > stream_.last:
                problem = "names no event of a stream this session still keeps"
            elif found[1] < stream_.dropped:
                problem = "is older than the events this session still keeps of that stream"
            if problem == "" or (problem is None and shared_standalone):
                assert found is not None
                await self._standalone(receive, send, channel, found[1])
                return
            if (
                stream_ is None
                and found is not None
                and found[0] != STANDALONE
                and self.records is not None
                and await self._answer_from_store(send, channel, found[0], found[1])
            ):
                return
            if problem is not None or stream_ is None or found is None:
                await reject(
                    send,
                    400,
                    INVALID_REQUEST,
                    f"Bad Request: Last-Event-ID {last[:40]!r} {problem}; its messages cannot "
                    "be replayed",
                )
                return
            stream, cursor = stream_, found[1]
        await self._pump(send, receive, channel, stream, cursor, opened=True, can_stream=True)

    async def _standalone(
        self, receive: Receive, send: Send, channel: _Channel, cursor: int
    ) -> None:
        """A shared session's `GET` stream: changes reach the session here while it is open,
        and the stream another instance served ends (rule 8)."""
        session = channel.session
        self._publish("g", channel.digest)
        self.server.attach_session(session)
        stream = channel.log.standalone
        stream.keeper = functools.partial(self._keep_standalone, channel)
        await stream.keeper()  # a quiet stream can be resumed elsewhere too
        try:
            await self._pump(send, receive, channel, stream, cursor, opened=True, can_stream=True)
        finally:
            if stream.owner is None or stream.owner is _TAKEN_ELSEWHERE:
                stream.owner = None
                self.server.detach_session(session)

    def _standalone_key(self, channel: _Channel) -> str:
        return f"mrtr/sse/{self.server.name}/{channel.digest}"

    async def _keep_standalone(self, channel: _Channel) -> None:
        """Keep the standalone stream's newest events in the store (rule 8); a store that
        fails costs only a resumption elsewhere."""
        records = self.records
        if records is None:
            return
        snapshot = channel.log.standalone.snapshot(self.instance)
        try:
            await records.store.set(self._standalone_key(channel), snapshot, records.ttl)
        except Exception:
            logger.warning("could not keep a session's stream in the store", exc_info=True)

    def _stream_key(self, channel: _Channel, stream_id: int) -> str:
        return f"mrtr/sse/{self.server.name}/{channel.digest}/{stream_id}"

    async def _keep_stream(self, channel: _Channel, stream_id: int, kept: dict[str, Any]) -> None:
        """Keep what another instance needs to answer a resumption of a request stream (rule
        9); a store that fails costs only that answer (the client gets a 400 there)."""
        records = self.records
        assert records is not None
        key = self._stream_key(channel, stream_id)
        try:
            await records.store.set(key, orjson.dumps(kept), min(KEPT_STREAM_TTL, records.ttl))
        except Exception:
            logger.warning("could not keep a request stream in the store", exc_info=True)

    async def _answer_from_store(
        self, send: Send, channel: _Channel, stream_id: int, cursor: int
    ) -> bool:
        """Answer the resumption of another instance's request stream from what it kept (rule
        9): its response, or an error saying the request's outcome is unknown. False when
        nothing was kept (the caller answers 400)."""
        records = self.records
        assert records is not None
        try:
            raw = await records.store.get(self._stream_key(channel, stream_id))
            kept = None if raw is None else orjson.loads(raw)
        except Exception:
            logger.warning("could not read a request stream from the store", exc_info=True)
            return False
        if not isinstance(kept, dict) or not jsonrpc.is_valid_id(request_id := kept.get("i")):
            return False
        response = kept.get("r")
        if not isinstance(response, dict):
            # Still running elsewhere, or lost with its instance: the client is told to send it
            # again, so the instance running it (if any) is asked to stop it.
            self._publish("c", channel.digest, m={"requestId": request_id, "reason": "resumed"})
            response = jsonrpc.error_response(
                request_id,
                McpError(
                    INTERNAL_ERROR,
                    "Request interrupted: the server instance that was answering it stopped "
                    "or cannot be reached from this one, so its stream cannot be resumed and "
                    "whether it ran to completion is unknown; send it again if it is safe to "
                    "repeat",
                ),
            )
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        event = encode_event_with_id(orjson.dumps(response), f"{stream_id}-{cursor + 1}")
        await send({"type": "http.response.body", "body": event, "more_body": False})
        return True

    async def _adopt_standalone(self, channel: _Channel, cursor: int) -> str | None:
        """Take over the standalone stream another instance kept in the store, the client
        having its events up to `cursor`: "" when adopted, why not when it cannot be
        resumed, None when the stream is this instance's own (or nobody kept it)."""
        records = self.records
        assert records is not None
        raw = await records.store.get(self._standalone_key(channel))
        snapshot = None if raw is None else decode_snapshot(raw)
        if snapshot is None or snapshot.origin == self.instance:
            return None
        problem = snapshot.problem(cursor)
        if problem is not None:
            return problem
        channel.log.standalone.adopt(snapshot, cursor)
        return ""

    # --- DELETE (rule 6) --------------------------------------------------------------------

    async def delete(self, send: Send, headers: dict[bytes, bytes], scope: Any = None) -> None:
        """End the session `Mcp-Session-Id` names."""
        channel = await self._find(send, headers, None, scope)
        if channel is None:
            return
        if self.records is not None:
            try:
                await self.records.delete(channel.session.id)
                await self.records.store.delete(self._standalone_key(channel))
            except McpError as exc:
                await _unavailable(send, None, exc)
                return
            self._publish("e", channel.digest)
        self.store.remove(channel.session.id)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # --- writing a stream to a connection ---------------------------------------------------

    async def _pump(
        self,
        send: Send,
        receive: Receive,
        channel: _Channel,
        stream: EventStream,
        cursor: int,
        *,
        opened: bool,
        can_stream: bool,
    ) -> None:
        """Write `stream` after event `cursor` to this connection until the stream ends, the
        handler lets the connection go, another connection takes the stream over, the session
        ends or the client goes away.

        `opened`: start the SSE stream at once (a GET); otherwise (a POST) wait for the first
        event, and answer JSON if the response comes first.
        """
        token = object()
        if stream.owner is not None:
            stream.changed.set()  # the connection serving it now sees it was taken over
        stream.owner = token
        # Armed only when there is something to wait for: most POSTed requests are answered
        # within a turn of the loop, and the watcher (with `_wait`) costs tasks per request.
        gone: asyncio.Future[None] | None = None
        streaming = False
        try:
            if opened:
                await self._open_stream(send, stream, cursor)
                streaming = True
            elif not stream.finished:
                await asyncio.sleep(0)  # the request's task takes its first step
            while True:
                stream.changed.clear()
                if stream.owner is not token:
                    break
                if channel.ended:
                    if not streaming:
                        await _session_ended(send)
                        return
                    break
                try:
                    events = stream.after(cursor)
                except ReplayGap:
                    logger.warning("a slow client lost events of stream %d", stream.id)
                    break
                if not streaming:
                    # Nothing but the response (or nothing at all: cancelled) is a JSON answer.
                    if stream.finished and (not events or events[0][0] == stream.final):
                        # No event of it ever went out with an id, so none can be asked for
                        # again: the log need not keep the stream.
                        channel.log.discard(stream)
                        await _json_answer(send, events)
                        return
                    if not can_stream:
                        stream.release_requested = False
                    elif events or stream.release_requested:
                        await self._open_stream(send, stream, cursor)
                        streaming = True
                if events and stream.keeper is not None:
                    await stream.keeper()  # kept before sent: any instance can resume it
                for number, data in events:
                    frame = stream.frame(number, data)
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    cursor = number
                if events:
                    stream.delivered = max(stream.delivered, cursor)
                if stream.finished and cursor >= stream.last:
                    break
                if stream.release_requested and streaming:
                    stream.release_requested = False
                    break
                if events:
                    continue  # more may have come while this connection was written to
                if gone is None:
                    gone = asyncio.ensure_future(_disconnect(receive))
                if await self._wait(stream, gone, send if streaming else None, channel):
                    return  # the client went away
            if streaming:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await reject(
                    send,
                    409,
                    INVALID_REQUEST,
                    "Conflict: this request's stream was resumed on another connection (GET "
                    "with Last-Event-ID), where its answer goes",
                )
        finally:
            if gone is not None:
                gone.cancel()
            if stream.owner is token:
                stream.owner = None

    async def _open_stream(self, send: Send, stream: EventStream, cursor: int) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        priming = stream.priming(cursor, self.retry_ms)
        await send({"type": "http.response.body", "body": priming, "more_body": True})

    async def _wait(
        self,
        stream: EventStream,
        gone: asyncio.Future[None],
        send: Send | None,
        channel: _Channel,
    ) -> bool:
        """Wait for news on `stream`; True if the client went away instead. A quiet stream
        gets a keep-alive comment now and then, and its session counts as in use."""
        changed = asyncio.ensure_future(stream.changed.wait())
        try:
            while True:
                timeout = self.keepalive_interval or None
                done, _ = await asyncio.wait(
                    (changed, gone), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if gone in done:
                    return True
                if changed in done:
                    return False
                channel.session.touch()
                records = self.records
                if records is not None and (
                    time.monotonic() - channel.refreshed >= records.refresh_every
                ):
                    # An open stream keeps its session in use, on every instance.
                    with contextlib.suppress(McpError):
                        await self._refresh(channel, records)
                    if channel.ended:
                        return False
                if send is not None:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
        finally:
            changed.cancel()


def _forget(
    channel: _Channel, request_id: jsonrpc.RequestId, stream: EventStream, task: asyncio.Task[None]
) -> None:
    # `_run` frees the id and ends the stream itself, unless the task was cancelled before its
    # first step (a cancellation or the session's end in the same loop turn): then its body
    # never ran, and this does both, so the id is not held and the waiting POST is answered.
    if channel.tasks.get(request_id) is task:
        del channel.tasks[request_id]
    if task.cancelled():
        stream.finish()  # idempotent: a cancelled `_run` that did run has ended it already


def _cancel(channel: _Channel, params: Any) -> bool:
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
_TAKEN_ELSEWHERE = object()


async def _unavailable(
    send: Send, request_id: jsonrpc.RequestId | None, exc: McpError, *, not_run: bool = False
) -> None:
    """The shared store failed: 503, the store's own error (its cause is logged there).
    `not_run`: the message was refused before anything ran, which its `data` says
    (`mayHaveRun: false`), so a client may send it again."""
    if not_run:
        data = exc.data if isinstance(exc.data, dict) else {}
        exc = McpError(exc.code, exc.message, {**data, **NOT_RUN})
    body = orjson.dumps(jsonrpc.error_response(request_id, exc))
    await send_json(send, 503, body, [(b"retry-after", b"1")])


async def _disconnect(receive: Receive) -> None:
    """Resolve when the client goes away (what else arrives is ignored, a bounded number of
    times: a GET's empty body, say)."""
    for _ in range(16):
        if (await receive())["type"] == "http.disconnect":
            return
    await asyncio.Event().wait()  # a client that keeps sending is not watched any further


async def _json_answer(send: Send, events: list[tuple[int, bytes]]) -> None:
    if not events:
        # Cancelled before anything went out: the client asked for it, so it expects nothing;
        # the connection still needs an answer.
        error = McpError(INTERNAL_ERROR, "Request cancelled before it was answered")
        await answer(send, 200, jsonrpc.error_response(None, error))
        return
    data = events[0][1]
    # Only an error may change the status: a response without the word is a 200 unparsed.
    status = legacy_status_of(orjson.loads(data)) if b'"error"' in data else 200
    await send_json(send, status, data)


async def _session_ended(send: Send) -> None:
    await reject(
        send,
        404,
        INVALID_REQUEST,
        "Session ended before the request was answered; send initialize (without "
        "Mcp-Session-Id) to start a new session",
    )


__all__ = [
    "ANSWER_LOOK_FIRST",
    "ANSWER_LOOK_MOST",
    "KEPT_ANSWER_TTL",
    "KEPT_STREAM_TTL",
    "MAX_KEPT_RESPONSE",
    "MAX_RECORD_BYTES",
    "MAX_SESSION_REQUESTS",
    "LegacySessions",
    "close_sse_stream",
]
