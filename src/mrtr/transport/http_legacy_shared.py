"""Legacy sessions shared by several instances (`http_legacy.py` rules 8 and 9): a session
is a record in the store, so any instance serves its requests, and what one instance must
tell the others (a client's response to a server request, a cancellation, a change of the
record, the session's end, a `GET` stream taken over) goes on the broker channel
`mrtr/sessions/<server name>`, with what a lost broker message would cost kept in the store
too (relayed responses, request streams, the standalone stream's newest events).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from ..server.session import LegacySession, SessionRecords, session_digest, valid_record
from .http_legacy_channel import TAKEN_ELSEWHERE, ChannelStore, SessionChannel, cancel_request
from .http_responses import SSE_HEADERS, Send
from .sse import encode_event_with_id
from .sse_events import decode_snapshot

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint
    from ..server.store import Broker, Unsubscribe

logger = logging.getLogger("mrtr.http")

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
#: Places one session has for relayed answers in a shared store (rule 8): an answer is kept in
#: the place its request's count names (offset per instance), so that a client posting answers
#: to requests never sent makes the store hold at most this many per session, each at most
#: `MAX_KEPT_RESPONSE`, for `KEPT_ANSWER_TTL`. Two answers awaited at once in one place: the
#: later overwrites the earlier, which then depends on the broker alone.
ANSWER_SLOTS = 64
#: The id of a request an instance of a shared session sent the client (its prefix and a count).
_SERVER_REQUEST_ID = re.compile(r"s-[0-9a-f]{12}-[0-9]{1,18}")


class SharedSessions:
    """This instance's part in the legacy sessions it shares with other instances.

    `store` and `channels` are the `LegacySessions`' own (this process's sessions and their
    channels), `principal` says who makes a request (its ASGI scope given), `instance` names
    this instance, `prefix` starts the ids of the requests it sends a client, and
    `first_stream` is the first of its request stream numbers.
    """

    def __init__(
        self,
        server: ServerEndpoint,
        records: SessionRecords,
        broker: Broker,
        *,
        store: ChannelStore,
        channels: dict[str, SessionChannel],
        principal: Callable[[Any], str | None],
        buffer_bytes: int,
        instance: str,
        prefix: str,
        first_stream: int,
    ) -> None:
        self.server = server
        #: The shared records.
        self.records = records
        self.broker = broker
        self.store = store
        self.channels = channels
        self.principal = principal
        self.buffer_bytes = buffer_bytes
        self.instance = instance
        self.prefix = prefix
        self.first_stream = first_stream
        self.broker_channel = f"mrtr/sessions/{server.name}"
        #: The channels of the sessions served here, by their name in the store.
        self.by_digest: dict[str, SessionChannel] = {}
        self._unsubscribe: Unsubscribe | None = None
        self._subscribing: asyncio.Lock | None = None
        self._background: set[asyncio.Future[None]] = set()
        #: Tasks looking in the store for answers the broker may have lost (rule 8).
        self._looking: set[asyncio.Future[None]] = set()

    def track(self, channel: SessionChannel) -> None:
        """Serve `channel` (whose `digest` is set) as a shared session's."""
        channel.asked = functools.partial(self.asked, channel)
        self.by_digest[channel.digest] = channel

    def forget(self, channel: SessionChannel) -> None:
        """`channel`'s session ended here."""
        if self.by_digest.get(channel.digest) is channel:
            del self.by_digest[channel.digest]

    def close(self) -> None:
        """Stop looking for answers and listening to the broker (at shutdown)."""
        for task in list(self._looking):
            task.cancel()
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(RuntimeError):  # no loop running: nothing to stop
                task = asyncio.ensure_future(unsubscribe(), loop=asyncio.get_running_loop())
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def channel(self, session_id: str, scope: Any) -> SessionChannel | None:
        """This instance's side of a shared session, made from its record if need be; None
        when the store has no record of it (or it belongs to another caller)."""
        records = self.records
        record = await records.load(session_id)
        if record is None or record["p"] != self.principal(scope):
            if record is None and session_id in self.channels:
                self.store.remove(session_id)  # ended or expired elsewhere
            return None
        await self.listen()
        # No await from here to the end of the lookup: two requests of one session never
        # make two sides of it.
        session = self.store.get(session_id)
        channel = None if session is None else self.channels.get(session_id)
        if channel is None:
            session = LegacySession(session_id=session_id, request_prefix=self.prefix)
            channel = SessionChannel(
                session, self.buffer_bytes, session_digest(session_id), self.first_stream
            )
            channel.asked = functools.partial(self.asked, channel)
            self.channels[session_id] = channel
            self.by_digest[channel.digest] = channel
            self.store.add(session)
        channel.session.apply_record(record)
        if records.stale(record):
            await self.refresh(channel)
        return channel

    async def refresh(self, channel: SessionChannel) -> None:
        """Push the record's expiry back (the session is in use); end the session here when
        its record is gone. Skipped while another instance writes it (which does the same)."""
        records = self.records
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

    async def change(
        self, channel: SessionChannel, handle: Callable[[], Awaitable[dict[str, Any] | None]]
    ) -> dict[str, Any] | None:
        """Run `handle` (a request or notification that changes what the session set up)
        with the session's record locked and fresh, then write it and tell the other
        instances. Store failures are raised (`McpError`)."""
        records = self.records
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
                self.publish("u", channel.digest, r=written)
        return response

    async def listen(self) -> None:
        """Subscribe to the sessions' broker channel (once, at first use)."""
        broker = self.broker
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
        for channel in list(self.by_digest.values()):
            task = asyncio.ensure_future(self._reload(channel, records))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _reload(self, channel: SessionChannel, records: SessionRecords) -> None:
        try:
            record = await records.load(channel.session.id)
        except McpError:
            return  # the store too: the next request of the session reads it again
        if record is None:
            self.store.remove(channel.session.id)
        elif not channel.ended:
            channel.session.apply_record(record)

    def publish(self, kind: str, digest: str, **fields: Any) -> None:
        broker = self.broker
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
        channel = self.by_digest.get(digest)
        if channel is None or channel.ended:
            return
        if kind == "r":
            response = message.get("m")
            if isinstance(response, dict):
                channel.session.deliver(response)
        elif kind == "c":
            cancel_request(channel, message.get("m"))
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
                stream.owner = TAKEN_ELSEWHERE
                stream.changed.set()

    def elsewhere(self, request_id: Any) -> bool:
        """Whether a response's id names a server request another instance sent."""
        return (
            self.broker is not None
            and isinstance(request_id, str)
            and _SERVER_REQUEST_ID.fullmatch(request_id) is not None
            and not request_id.startswith(self.prefix)
        )

    def _answer_key(self, channel: SessionChannel, request_id: jsonrpc.RequestId) -> str:
        # Ids are `s-<instance prefix>-<count>` (`elsewhere`): consecutive requests of one
        # instance take consecutive places, each instance from its own offset.
        prefix, _, count = str(request_id).rpartition("-")
        slot = (zlib.crc32(prefix.encode()) + int(count or 0)) % ANSWER_SLOTS
        return f"mrtr/answer/{self.server.name}/{channel.digest}/{slot}"

    async def relay(self, channel: SessionChannel, response: dict[str, Any]) -> None:
        """Pass a client's response to the instance awaiting it: kept in the store first (a
        store failure is raised, `McpError`), then published (rule 8)."""
        records = self.records
        data = orjson.dumps(response)
        if len(data) <= MAX_KEPT_RESPONSE:
            key = self._answer_key(channel, response["id"])
            await records.store.set(key, data, KEPT_ANSWER_TTL)
        self.publish("r", channel.digest, m=response)

    def asked(self, channel: SessionChannel, message: dict[str, Any]) -> None:
        """A message goes to the client of a shared session: for a request, look for its
        answer in the store while it is awaited (rule 8)."""
        request_id = message.get("id")
        if "method" not in message or not isinstance(request_id, str | int):
            return  # a notification (the server's own ids are strings)
        task = asyncio.ensure_future(self._look_for_answer(channel, request_id))
        self._looking.add(task)
        task.add_done_callback(self._looking.discard)

    async def _look_for_answer(
        self, channel: SessionChannel, request_id: jsonrpc.RequestId
    ) -> None:
        records = self.records
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
            if not isinstance(response, dict):
                return
            if session.deliver(response):
                logger.info(
                    "an answer the broker lost was found in the store (%r)", response.get("id")
                )
            if response.get("id") == request_id:
                return
            # Another answer in this request's place: this one may still come by the broker.

    def standalone_key(self, channel: SessionChannel) -> str:
        return f"mrtr/sse/{self.server.name}/{channel.digest}"

    async def keep_standalone(self, channel: SessionChannel) -> None:
        """Keep the standalone stream's newest events in the store (rule 8); a store that
        fails costs only a resumption elsewhere."""
        records = self.records
        snapshot = channel.log.standalone.snapshot(self.instance)
        try:
            await records.store.set(self.standalone_key(channel), snapshot, records.ttl)
        except Exception:
            logger.warning("could not keep a session's stream in the store", exc_info=True)

    def _stream_key(self, channel: SessionChannel, stream_id: int) -> str:
        return f"mrtr/sse/{self.server.name}/{channel.digest}/{stream_id}"

    async def keep_stream(
        self, channel: SessionChannel, stream_id: int, kept: dict[str, Any]
    ) -> None:
        """Keep what another instance needs to answer a resumption of a request stream (rule
        9); a store that fails costs only that answer (the client gets a 400 there)."""
        records = self.records
        key = self._stream_key(channel, stream_id)
        try:
            await records.store.set(key, orjson.dumps(kept), min(KEPT_STREAM_TTL, records.ttl))
        except Exception:
            logger.warning("could not keep a request stream in the store", exc_info=True)

    async def answer_from_store(
        self, send: Send, channel: SessionChannel, stream_id: int, cursor: int
    ) -> bool:
        """Answer the resumption of another instance's request stream from what it kept (rule
        9): its response, or an error saying the request's outcome is unknown. False when
        nothing was kept (the caller answers 400)."""
        records = self.records
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
            self.publish("c", channel.digest, m={"requestId": request_id, "reason": "resumed"})
            response = jsonrpc.error_response(
                request_id,
                McpError(
                    INTERNAL_ERROR,
                    "Request interrupted: the server instance that was answering it stopped "
                    "or cannot be reached from this one, so its stream cannot be resumed and "
                    "whether it ran to completion is unknown; send it again if it is safe to "
                    "repeat",
                    {"mayHaveRun": True},
                ),
            )
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        event = encode_event_with_id(orjson.dumps(response), f"{stream_id}-{cursor + 1}")
        await send({"type": "http.response.body", "body": event, "more_body": False})
        return True

    async def adopt_standalone(self, channel: SessionChannel, cursor: int) -> str | None:
        """Take over the standalone stream another instance kept in the store, the client
        having its events up to `cursor`: "" when adopted, why not when it cannot be
        resumed, None when the stream is this instance's own (or nobody kept it)."""
        records = self.records
        raw = await records.store.get(self.standalone_key(channel))
        snapshot = None if raw is None else decode_snapshot(raw)
        if snapshot is None or snapshot.origin == self.instance:
            return None
        problem = snapshot.problem(cursor)
        if problem is not None:
            return problem
        channel.log.standalone.adopt(snapshot, cursor)
        return ""


__all__ = [
    "ANSWER_LOOK_FIRST",
    "ANSWER_LOOK_MOST",
    "KEPT_ANSWER_TTL",
    "KEPT_STREAM_TTL",
    "MAX_KEPT_RESPONSE",
    "SharedSessions",
]
