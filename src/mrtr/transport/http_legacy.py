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
   id unique among those running), its era decided once here (`protocol/era.classify`: one
   whose `_meta` names a served version is served statelessly, beside the session). It is
   answered with JSON, unless a notification or a server request (`elicitation/create`...)
   goes out first: then with an SSE stream whose events all carry ids, opened by a priming
   event with `retry`. Every JSON-RPC answer goes
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
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.era import classify
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, McpError
from ..server.session import LegacySession, SessionRecords, session_digest
from ..stepping import start_task
from .http_legacy_channel import (
    TAKEN_ELSEWHERE,
    ChannelStore,
    SessionChannel,
    cancel_request,
    close_sse_stream,
    current_stream,
    forget_request,
)
from .http_legacy_shared import (
    ANSWER_LOOK_FIRST,
    ANSWER_LOOK_MOST,
    KEPT_ANSWER_TTL,
    KEPT_STREAM_TTL,
    MAX_KEPT_RESPONSE,
    SharedSessions,
)
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
from .sse import KEEPALIVE
from .sse_events import STANDALONE, EventStream, ReplayGap, parse_event_id

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")

Receive = Callable[[], Awaitable[Message]]

#: Requests of one session running at once; past it a POST is 429 (a client that drops its
#: connections cannot pile up handlers, which outlive them here).
MAX_SESSION_REQUESTS = 64
#: The largest session record kept in a shared store (what `initialize` brought, mostly).
MAX_RECORD_BYTES = 64 * 1024
#: Requests that change what the session set up (on several instances, its shared record).
SESSION_CHANGES = frozenset(("logging/setLevel", "resources/subscribe", "resources/unsubscribe"))
_SESSION_HEADER = b"mcp-session-id"
_MAX_ID_LENGTH = 256
_SETTLE_POLL = 0.05  # seconds between looks at the requests a drain waits for


class LegacySessions:
    """The legacy sessions of one endpoint (see the module rules)."""

    def __init__(
        self,
        server: ServerEndpoint,
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
        self.store = ChannelStore(idle_timeout, max_sessions, self._ended)
        self.buffer_bytes = buffer_bytes
        self.retry_ms = round(retry * 1000)
        self.keepalive_interval = keepalive_interval
        self._channels: dict[str, SessionChannel] = {}
        options = server.options
        #: The shared records (rule 8); None: sessions live in this process only, and cost
        #: nothing more than a dict lookup per request.
        self.records: SessionRecords | None = None
        #: This instance's part in shared sessions (rule 8), with the records.
        self.shared: SharedSessions | None = None
        #: Names this instance in server request ids and broker messages.
        self.instance = secrets.token_hex(6)
        self._prefix = "s-"
        #: This instance's range of request stream numbers in a shared session (an event id
        #: of another instance's request stream names none of this one's).
        self._first_stream = 1
        if options.store is not None and options.broker is not None:
            self.records = SessionRecords(options.store, idle_timeout, max_sessions)
            self._prefix = f"s-{self.instance}-"
            self._first_stream = int(self.instance, 16) * 10**9 + 1
            self.shared = SharedSessions(
                server,
                self.records,
                options.broker,
                store=self.store,
                channels=self._channels,
                principal=self._principal,
                buffer_bytes=buffer_bytes,
                instance=self.instance,
                prefix=self._prefix,
                first_stream=self._first_stream,
            )

    def _ended(self, session: LegacySession) -> None:
        channel = self._channels.pop(session.id, None)
        if channel is not None:
            channel.end()
            if self.shared is not None:
                self.shared.forget(channel)
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
        if self.shared is not None:
            self.shared.close()

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
        shared = self.shared
        channel = SessionChannel(session, self.buffer_bytes, first_stream=self._first_stream)
        # Sent here because its era opens a session (`StreamableHTTPApp` classified it).
        response = await self.server.handle_request(message, None, scope, session, "opens-session")
        if "error" in response:
            # Without the legacy shim the refusal is the 2026-07-28 one (-32022, 400).
            serves = self.server.serves_legacy
            await answer(
                send, legacy_status_of(response) if serves else status_of(response), response
            )
            return
        if shared is not None:
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
                await shared.listen()
                await shared.records.create(session)
            except McpError as exc:
                await _unavailable(send, message["id"], exc, not_run=True)
                return
            channel.digest = session_digest(session.id)
            shared.track(channel)
        self._channels[session.id] = channel
        self.store.add(session)
        if shared is None:
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
    ) -> SessionChannel | None:
        raw = headers[_SESSION_HEADER]
        session_id = raw.decode("latin-1").strip() if len(raw) <= _MAX_ID_LENGTH else ""
        channel: SessionChannel | None = None
        if not session_id:
            pass
        elif self.shared is None:
            session = self.store.get(session_id)
            channel = None if session is None else self._channels.get(session.id)
            if channel is not None and channel.session.principal != self._principal(scope):
                channel = None  # another caller's session: as unknown as any other id
        else:
            try:
                channel = await self.shared.channel(session_id, scope)
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
        shared = self.shared
        if kind == "response":
            if session.deliver(message):
                pass
            elif shared is not None and shared.elsewhere(message["id"]):
                try:
                    await shared.relay(channel, message)
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
                if not cancel_request(channel, params) and shared is not None:
                    shared.publish("c", channel.digest, m=params)
            elif shared is not None:
                try:
                    await shared.change(
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
        channel: SessionChannel,
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
            task.add_done_callback(functools.partial(forget_request, channel, request_id, stream))
        await self._pump(send, receive, channel, stream, 0, opened=False, can_stream=accept_sse)

    async def _run(
        self,
        channel: SessionChannel,
        stream: EventStream,
        message: dict[str, Any],
        scope: Any,
        accept_sse: bool,
    ) -> None:
        current_stream.set(stream)
        standalone = channel.log.standalone
        shared = self.shared

        async def notify(outgoing: dict[str, Any]) -> None:
            if channel.asked is not None:
                channel.asked(outgoing)
            if accept_sse:
                if shared is not None and stream.id not in channel.kept:
                    # Before the stream's first event id can go out (rule 9).
                    channel.kept.add(stream.id)
                    await shared.keep_stream(channel, stream.id, {"i": message["id"]})
                stream.add(orjson.dumps(outgoing))
            elif "id" in outgoing:
                # A client that takes no stream here still gets the server's requests: on its
                # own stream. Notifications about this request have nowhere to go.
                standalone.add(orjson.dumps(outgoing))

        era = classify(message, True)  # once per request of a session (`protocol/era.py`)
        try:
            if shared is not None and message["method"] in SESSION_CHANGES:
                handle = functools.partial(
                    self.server.handle_request, message, notify, scope, channel.session, era
                )
                try:
                    changed = await shared.change(channel, handle)
                except McpError as exc:
                    changed = jsonrpc.error_response(message["id"], exc)
                response = changed if changed is not None else {}
            else:
                response = await self.server.handle_request(
                    message, notify, scope, channel.session, era
                )
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
        if stream.id in channel.kept and shared is not None:  # kept: a shared session's
            channel.kept.discard(stream.id)
            kept: dict[str, Any] = {"i": message["id"]}
            if len(data) <= MAX_KEPT_RESPONSE:
                kept["r"] = response
            await shared.keep_stream(channel, stream.id, kept)

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
        shared = self.shared
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
            if shared is not None:
                await self._standalone(receive, send, channel, cursor, shared)
                return
        else:
            last = raw.decode("latin-1").strip()
            found = parse_event_id(last)
            problem = None
            shared_standalone = found is not None and found[0] == STANDALONE and shared is not None
            if shared_standalone and found is not None and shared is not None:
                try:
                    problem = await shared.adopt_standalone(channel, found[1])
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
                assert found is not None and shared is not None
                await self._standalone(receive, send, channel, found[1], shared)
                return
            if (
                stream_ is None
                and found is not None
                and found[0] != STANDALONE
                and shared is not None
                and await shared.answer_from_store(send, channel, found[0], found[1])
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
        self,
        receive: Receive,
        send: Send,
        channel: SessionChannel,
        cursor: int,
        shared: SharedSessions,
    ) -> None:
        """A shared session's `GET` stream: changes reach the session here while it is open,
        and the stream another instance served ends (rule 8)."""
        session = channel.session
        shared.publish("g", channel.digest)
        self.server.attach_session(session)
        stream = channel.log.standalone
        stream.keeper = functools.partial(shared.keep_standalone, channel)
        await stream.keeper()  # a quiet stream can be resumed elsewhere too
        try:
            await self._pump(send, receive, channel, stream, cursor, opened=True, can_stream=True)
        finally:
            if stream.owner is None or stream.owner is TAKEN_ELSEWHERE:
                stream.owner = None
                self.server.detach_session(session)

    # --- DELETE (rule 6) --------------------------------------------------------------------

    async def delete(self, send: Send, headers: dict[bytes, bytes], scope: Any = None) -> None:
        """End the session `Mcp-Session-Id` names."""
        channel = await self._find(send, headers, None, scope)
        if channel is None:
            return
        shared = self.shared
        if shared is not None:
            try:
                await shared.records.delete(channel.session.id)
                await shared.records.store.delete(shared.standalone_key(channel))
            except McpError as exc:
                await _unavailable(send, None, exc)
                return
            shared.publish("e", channel.digest)
        self.store.remove(channel.session.id)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # --- writing a stream to a connection ---------------------------------------------------

    async def _pump(
        self,
        send: Send,
        receive: Receive,
        channel: SessionChannel,
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
        channel: SessionChannel,
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
                shared = self.shared
                if shared is not None and (
                    time.monotonic() - channel.refreshed >= shared.records.refresh_every
                ):
                    # An open stream keeps its session in use, on every instance.
                    with contextlib.suppress(McpError):
                        await shared.refresh(channel)
                    if channel.ended:
                        return False
                if send is not None:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
        finally:
            changed.cancel()


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
    "SESSION_CHANGES",
    "LegacySessions",
    "close_sse_stream",
]
