"""A legacy session's traffic outside the client's own POSTs.

The standalone GET stream carries the server's notifications and requests that belong to no
request of the client's; it is reconnected (resumed when it had event ids) while the session
lasts. A response stream that broke before its response is resumed with GET and
`Last-Event-ID`, never re-sent. The server's requests are answered in tasks of their own and
the answers POSTed back; an answer that cannot be delivered ends the call whose stream asked
for it. A request the caller gave up on is cancelled on the server with a notification.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
from multidict import CIMultiDict
from yarl import URL

import mrtr.transport.http_refusal as refusal

from ..protocol import jsonrpc
from ..protocol.errors import CONNECTION_CLOSED, INTERNAL_ERROR, METHOD_NOT_FOUND, McpError
from .base import NotificationHandler, RequestHandler
from .http_answers import body_text, read_body
from .http_response_stream import NO_RESPONSE, drain
from .http_session import HTTPSession, StreamCursor

logger = logging.getLogger("mrtr.http")

_SSE = "text/event-stream"
_MAX_SERVER_REQUESTS = 64  # server requests of one session answered at once; more are dropped

#: POST a response or notification; None once delivered, else why not (`HTTPTransport`).
Deliver = Callable[
    [dict[str, Any], CIMultiDict[str], str, HTTPSession | None], Awaitable[McpError | None]
]


class StreamSettings(Protocol):
    """What the session's streams read of their transport's settings."""

    @property
    def url(self) -> URL: ...
    @property
    def reconnect_delay(self) -> float: ...
    @property
    def max_resumptions(self) -> int: ...
    @property
    def max_message_size(self) -> int: ...


class SessionTraffic:
    """The GET stream, stream resumption, and the server's requests of a transport's legacy
    sessions; the transport's state is read through the callables given."""

    def __init__(
        self,
        settings: StreamSettings,
        *,
        session: Callable[[], aiohttp.ClientSession | None],
        require_session: Callable[[], aiohttp.ClientSession],
        current: Callable[[], HTTPSession | None],
        session_expired: Callable[[HTTPSession, str], McpError],
        deliver: Deliver,
        on_notification: Callable[[], NotificationHandler | None],
        on_request: Callable[[], RequestHandler | None],
    ) -> None:
        self._settings = settings
        self._session = session
        self._require_session = require_session
        self._current = current
        self._session_expired = session_expired
        self._deliver = deliver
        self._on_notification = on_notification
        self._on_request = on_request

    async def resume(
        self, method: str, cursor: StreamCursor, legacy: HTTPSession, expect: Any
    ) -> dict[str, Any]:
        """Take the rest of a broken legacy response stream with GET + `Last-Event-ID`, after
        the `retry` time the server named; never re-send the request itself."""
        session = self._require_session()
        failures = 0
        while True:
            await asyncio.sleep(cursor.delay(self._settings.reconnect_delay, failures))
            if self._current() is not legacy:
                raise McpError(
                    CONNECTION_CLOSED,
                    f"{method}: the session ended before the response arrived; the server may "
                    "have run the request",
                    {"mayHaveRun": True},
                )
            before = cursor.progress
            try:
                async with session.get(
                    self._settings.url,
                    headers=legacy.stream_headers(cursor.last_event_id),
                    allow_redirects=False,
                ) as response:
                    status = response.status
                    if status == 404 and legacy.session_id is not None:
                        raise self._session_expired(legacy, method)
                    if status == 200 and response.content_type == _SSE:
                        answer = await drain(
                            response,
                            method,
                            cursor,
                            legacy,
                            expect,
                            url=self._settings.url,
                            max_size=self._settings.max_message_size,
                            on_notification=self._on_notification(),
                            on_request=self.answer_later,
                        )
                        if answer is not None:
                            return answer
                    elif status < 500:  # a refusal; a 5xx may pass, so it counts as a failure
                        body = await read_body(response, method, self._settings.max_message_size)
                        raise McpError(
                            CONNECTION_CLOSED,
                            f"{method}: the response stream ended before the response, and the "
                            f"server refused to resume it (HTTP {status}); the server may have "
                            "run the request, so it was not sent again",
                            {"mayHaveRun": True, "status": status, "body": body_text(body)},
                        )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
                logger.info("%s: resuming the response stream failed (%s)", method, exc)
            except aiohttp.ClientOSError as exc:  # the connection was refused or broke
                logger.info("%s: resuming the response stream failed (%s)", method, exc)
            failures = 0 if cursor.progress > before else failures + 1
            if failures >= self._settings.max_resumptions:
                raise McpError(
                    CONNECTION_CLOSED,
                    f"{method}: the response stream ended before the response and "
                    f"{failures} reconnections in a row brought nothing new; giving up (the "
                    "server may have run the request, so it was not sent again)",
                    {"mayHaveRun": True},
                )

    async def listen(self, legacy: HTTPSession, opened: asyncio.Event) -> None:
        """The standalone GET stream: the server's notifications and requests that belong to
        no request of ours. Reconnected (resumed when it had event ids) while the session
        lasts, until `max_resumptions` connections in a row bring nothing new."""
        session = self._require_session()
        refusal.current_call.set(None)  # its server requests belong to no call of ours
        cursor = StreamCursor()
        failures = 0
        first = True
        try:
            while self._current() is legacy:
                if not first:
                    await asyncio.sleep(cursor.delay(self._settings.reconnect_delay, failures))
                first = False
                before = cursor.progress
                try:
                    async with session.get(
                        self._settings.url,
                        headers=legacy.stream_headers(cursor.last_event_id),
                        allow_redirects=False,
                    ) as response:
                        opened.set()
                        status = response.status
                        if status == 200 and response.content_type == _SSE:
                            await drain(
                                response,
                                "GET stream",
                                cursor,
                                legacy,
                                NO_RESPONSE,
                                url=self._settings.url,
                                max_size=self._settings.max_message_size,
                                on_notification=self._on_notification(),
                                on_request=self.answer_later,
                            )
                        elif status == 405:
                            logger.debug("the server offers no GET stream (405)")
                            return
                        elif status < 500:
                            logger.info("the server refused the GET stream (HTTP %d)", status)
                            return
                except (aiohttp.ClientError, OSError) as exc:
                    logger.info("the GET stream broke (%s)", exc)
                except McpError as exc:  # an event too large, an unreadable stream
                    logger.warning("the GET stream: %s", exc.message)
                failures = 0 if cursor.progress > before else failures + 1
                if failures >= self._settings.max_resumptions:
                    logger.warning(
                        "giving up the GET stream after %d connections in a row brought "
                        "nothing new",
                        failures,
                    )
                    return
        finally:
            opened.set()

    def answer_later(self, legacy: HTTPSession, message: dict[str, Any]) -> None:
        """Answer a server request in a task of its own, so the stream it came on goes on."""
        request_id = message.get("id")
        if not jsonrpc.is_valid_id(request_id):
            logger.warning("ignoring a server request with an invalid id: %.80r", request_id)
            return
        if not legacy.first_time(request_id):
            logger.info("ignoring the server's request %r: it came before", request_id)
            return
        if len(legacy.tasks) >= _MAX_SERVER_REQUESTS:
            logger.warning(
                "ignoring the server's request %r: %d are being answered already",
                request_id,
                len(legacy.tasks),
            )
            return
        task = asyncio.create_task(self._answer(legacy, message, refusal.current_call.get()))
        legacy.tasks.add(task)
        task.add_done_callback(legacy.tasks.discard)

    async def _answer(
        self, legacy: HTTPSession, message: dict[str, Any], call: refusal.PendingCall | None
    ) -> None:
        """Work out the answer to the server's request and POST it; one that cannot be
        delivered ends `call`, the request whose stream the question came on."""
        method = message.get("method")
        handler = self._on_request()
        response: dict[str, Any]
        if handler is None:
            response = jsonrpc.error_response(
                message["id"], McpError(METHOD_NOT_FOUND, f"this client does not handle {method}")
            )
        else:
            try:
                response = await handler(message)
            except Exception:  # the contract says it never raises; the server still gets word
                logger.exception("answering the server's %s request failed", method)
                response = jsonrpc.error_response(
                    message["id"], McpError(INTERNAL_ERROR, f"the client failed to answer {method}")
                )
        what = f"the answer to the server's {method}"
        error = await self._send_to_session(legacy, response, what)
        if error is not None and call is not None:
            # Never SESSION_EXPIRED, even when that is the cause: the client re-sends a request
            # refused with it, and this one ran (it asked the question).
            call.fail(
                McpError(
                    CONNECTION_CLOSED,
                    f"{error.message}. The server waits for that answer, so the request that "
                    "it belongs to was ended rather than left to time out; it may have run "
                    "in part",
                    {"mayHaveRun": True, "undelivered": str(method), "cause": error.to_error()},
                )
            )

    def cancel_on_server(self, legacy: HTTPSession, message: dict[str, Any]) -> None:
        """Tell a legacy server that the caller gave up on request `message`."""
        if "id" not in message or len(legacy.tasks) >= _MAX_SERVER_REQUESTS:
            return
        cancelled = jsonrpc.notification(
            "notifications/cancelled", {"requestId": message["id"], "reason": "cancelled"}
        )
        task = asyncio.create_task(self._tell(legacy, cancelled, "a cancellation"))
        legacy.tasks.add(task)
        task.add_done_callback(legacy.tasks.discard)

    async def _tell(self, legacy: HTTPSession, message: dict[str, Any], what: str) -> None:
        """`_send_to_session`, for a notification no one waits on."""
        await self._send_to_session(legacy, message, what)

    async def _send_to_session(
        self, legacy: HTTPSession, message: dict[str, Any], what: str
    ) -> McpError | None:
        """POST a response or notification on the session (`_deliver`: re-sent while the
        server refuses it unread); returns, and logs, why it could not be delivered."""
        if self._session() is None or self._current() is not legacy:
            return None
        error = await self._deliver(message, legacy.headers, what, legacy)
        if error is not None:
            logger.warning("not delivered: %s", error.message)  # it names `what` first
        return error
