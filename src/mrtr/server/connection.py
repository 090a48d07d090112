"""`ServerConnection`: serves one message stream (stdio, in-memory) with concurrent requests.

Each request runs in its own task so a slow handler never blocks a fast one; the connection
keeps those tasks by request id so that `notifications/cancelled` can cancel the right one.

A connection serves both protocol eras, the era of each request decided once as it is read
(`protocol/era.classify`) and handed on with it. Requests carrying modern `_meta` are served
statelessly. The first legacy `initialize` (whose `_meta` names no protocol version) makes the
connection's `LegacySession` (its channel to the client is the connection's own writer):
every later message goes with it, the client's responses to the server's requests reach
`session.deliver`, and once `initialize` succeeded the session is attached to the server
(list changes, resource updates) until the connection closes. Until then no session exists,
so a modern client sees only modern errors.

With `max_in_flight`, the reader of the stream (stdio) awaits `room()` before reading each
message: it waits while that many requests are in flight, so a client that writes without
reading is held to that many (its input waits in the pipe, not in the server). A request
counts until its answer is written (until `send` returns, which waits while the stream is
full), not only while its handler runs: a client that writes without reading its answers
blocks on the pipe instead of the server holding every answer. Its id is freed earlier, as
soon as the handler ends (see `_run`). A request in flight waiting for the client's answer (a
legacy live question) needs input read to end, so while one does, `room()` does not wait, and
a request past the bound is refused instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from ..protocol import jsonrpc
from ..protocol.era import Era, classify
from ..protocol.errors import McpError
from ..stepping import STARTS_EAGERLY, start_task
from .budgets import refusal
from .cancellation import cancel_by_client
from .session import LegacySession

if TYPE_CHECKING:
    from .endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.server")

#: Writes one outgoing message (a response or a notification) to the stream.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ServerConnection:
    """Feeds incoming messages to a `Server` and writes what it answers."""

    def __init__(
        self,
        server: ServerEndpoint,
        send: Send,
        transport_info: Any = None,
        session: LegacySession | None = None,
        *,
        max_in_flight: int | None = None,
    ) -> None:
        """`session`: the legacy session of a transport that opens one up front (HTTP+SSE,
        whose stream is the session, named and bound to its caller before `initialize`);
        otherwise the first `initialize` opens one. `max_in_flight`: see the module docstring."""
        self.server = server
        self._writer = send
        self._transport_info = transport_info
        self._tasks: dict[jsonrpc.RequestId, asyncio.Task[None]] = {}
        #: Requests started whose task has not ended: running, or writing their answer.
        self._unwritten = 0
        #: The bound on requests in flight (None: none; see the module docstring).
        self.max_in_flight = max_in_flight
        self._roomy = asyncio.Event()
        self._roomy.set()
        #: The legacy session, from the first `initialize` on (None: no client asked for one).
        self.session: LegacySession | None = session
        self._attached = False

    @property
    def in_flight(self) -> int:
        """Requests started whose answer is not yet written (running, or being written)."""
        return self._unwritten

    async def room(self) -> None:
        """Wait until another message may be read (see the module docstring)."""
        limit = self.max_in_flight
        while limit is not None and self._unwritten >= limit and not self._owed():
            self._roomy.clear()
            await self._roomy.wait()

    def _owed(self) -> bool:
        """Whether a request in flight waits for an answer only the client's input brings."""
        return self.session is not None and self.session.awaiting_client

    def _wake(self) -> None:
        self._roomy.set()

    async def _send(self, message: dict[str, Any]) -> None:
        await self._writer(message)
        if "method" in message and "id" in message:
            self._wake()  # a request to the client: its answer is in the input, read on

    async def feed_bytes(self, data: bytes | str) -> None:
        """Handle one raw JSON-RPC message (a line of stdio, say)."""
        try:
            message = jsonrpc.loads(data)
        except McpError as exc:
            await self._send(jsonrpc.error_response(None, exc))
            return
        await self.feed(message)

    async def feed(self, message: Any) -> None:
        """Handle one decoded message: requests are started, notifications acted on."""
        try:
            kind = jsonrpc.classify(message)
        except McpError as exc:
            await self._send(jsonrpc.error_response(jsonrpc.readable_id(message), exc))
            return
        if kind == "request":
            request_id = message["id"]
            if request_id in self._tasks:
                await self._send(
                    jsonrpc.error_response(
                        request_id,
                        McpError(-32600, f"Invalid Request: id {request_id!r} is already in use"),
                    )
                )
                return
            limit = self.max_in_flight
            if limit is not None and self._unwritten >= limit:
                # Read past the bound only because the client is owed an answer (`room`).
                error = refusal(
                    "requests in flight on this connection",
                    limit,
                    "principal",
                    "answer the server's pending requests and wait for responses before "
                    "sending more",
                )
                await self._send(jsonrpc.error_response(request_id, error))
                return
            session = self.session
            era = classify(message, session is not None)  # once, here (`protocol/era.py`)
            if era == "opens-session" and self.server.serves_legacy:
                # A legacy client's handshake opens the session (a modern `initialize` is
                # refused without one: there is no handshake to open it for).
                session = self.session = LegacySession(self._send)
            task = start_task(self._run(message, session, era))
            if not task.done():  # done already: answered in its first step
                if not STARTS_EAGERLY:
                    # Held from now, not from its first step a loop turn later (a started
                    # task holds its id itself, only while its handler runs: see `_run`).
                    self._tasks[request_id] = task
                self._unwritten += 1
                task.add_done_callback(functools.partial(self._forget, request_id))
        elif kind == "notification":
            if message["method"] == "notifications/cancelled":
                self._cancel(message.get("params") or {})
            elif self.session is not None:
                await self.server.handle_message(message, session=self.session)
        elif self.session is None or not self.session.deliver(message):
            # A response to nothing this server asked (or asked and stopped waiting for).
            logger.debug("ignored a response to no pending request (id %r)", message.get("id"))

    def _forget(self, request_id: jsonrpc.RequestId, task: asyncio.Task[None]) -> None:
        # The task has ended however it ended (answered, cancelled, its write failed): its
        # answer is written or never will be, so it no longer holds input back.
        self._unwritten -= 1
        self._wake()
        # `_run` frees the id itself, and by now a new request may hold it: only a task
        # cancelled before its first step (whose `_run` never ran) is still here.
        if self._tasks.get(request_id) is task:
            del self._tasks[request_id]

    def _cancel(self, params: dict[str, Any]) -> None:
        request_id = params.get("requestId")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return  # malformed cancellations are ignored (an unhashable id must not raise)
        task = self._tasks.get(request_id)
        if task is not None:
            logger.debug("cancelling request %r: %s", params.get("requestId"), params.get("reason"))
            cancel_by_client(task)

    async def _run(self, message: dict[str, Any], session: LegacySession | None, era: Era) -> None:
        if STARTS_EAGERLY:
            # Stepped inside `start_task`: the request holds its id from here to the `finally`
            # below, also when its handler ends and its answer waits for the stream.
            self._tasks[message["id"]] = cast("asyncio.Task[None]", asyncio.current_task())
        try:
            response = await self.server.handle_request(
                message, self._send, self._transport_info, session, era
            )
        except asyncio.CancelledError:
            return  # a cancelled request gets no response
        finally:
            # The id is free as soon as the request ends, before its answer goes out (not a
            # loop turn later, when `_forget` runs): a client that reuses the id of an
            # answered request is not told it is in use. The request still counts against
            # `max_in_flight` until its answer is written (`_forget`).
            self._tasks.pop(message["id"], None)
        if session is not None and not self._attached and session.negotiated:
            self._attached = True
            self.server.attach_session(session)
        await self._send(response)

    async def finish(self, grace: float) -> None:
        """End the connection at end of input: requests in flight get up to `grace` seconds to
        end and be answered; then those still running are cancelled (see `aclose`).

        A request waiting for the client's answer fails at once: no answer can come now."""
        if self.session is not None:
            self.session.close()
        try:
            if grace > 0 and self._tasks:
                logger.debug("end of input: %d requests in flight", len(self._tasks))
                async with asyncio.timeout(grace):
                    while self._tasks:
                        await asyncio.wait(list(self._tasks.values()))
        except TimeoutError:
            logger.warning(
                "end of input: %d requests still running after %g s are cancelled",
                len(self._tasks),
                grace,
            )
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Cancel every request still running and wait for them to end; end the session."""
        session = self.session
        if session is not None:
            # First: a request waiting for the client's answer fails now instead of hanging.
            session.close()
            if self._attached:
                self._attached = False
                self.server.detach_session(session)
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._wake()
