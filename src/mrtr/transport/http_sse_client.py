"""The HTTP+SSE transport of MCP 2024-11-05, client side: `SSEClientSession`.

`HTTPTransport` opens one when a server turns out to speak only that transport (the spec's
backwards-compatibility procedure: a 400, 404 or 405 in answer to the `initialize` POST, then a
`GET` of the same URL answered with an event stream whose first event is `endpoint`), and at
once for a URL whose path ends in `/sse`. Rules:

1. `open` GETs the URL (`Accept: text/event-stream`) and waits, within the transport's timeout,
   for its first event, which must be `endpoint`. Its data, resolved against the URL, is where
   every message is POSTed; it must be on the URL's origin (scheme, host and port), or the
   session is refused. A response that is not an event stream, or whose first event is not
   `endpoint` (within `_ENDPOINT_WAIT` seconds), means no HTTP+SSE server there: `open`
   returns None.
2. Requests and notifications are POSTed (a 2xx says they were taken); responses arrive on the
   stream, matched by id. A POST refused with a JSON-RPC error in its body is that answer.
3. The server's requests on the stream go to the client's request handler, each in a task of
   its own (at most `_MAX_SERVER_REQUESTS` at once), and the answer is POSTed back;
   notifications go to the notification handler.
4. The stream is the session: when it ends, every request awaiting a response fails with
   CONNECTION_CLOSED. A POST answered 404 means the server forgot the session: the request
   fails with SESSION_EXPIRED, and the client opens a new session.
5. A request its caller cancels, or that times out, is cancelled on the server with
   `notifications/cancelled` (a closed stream is no cancellation on this transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from ..protocol import jsonrpc
from ..protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    SESSION_EXPIRED,
    McpError,
)
from .base import NotificationHandler, RequestHandler
from .sse import SSEDecoder, SSEError, SSEEvent

logger = logging.getLogger("mrtr.http")

_SSE = "text/event-stream"
_MAX_SERVER_REQUESTS = 64  # server requests answered at once; more are answered -32603
#: Seconds the first event of the stream may take (an HTTP+SSE server sends it at once).
_ENDPOINT_WAIT = 10.0
#: The statuses of an `initialize` POST that send the client looking for an HTTP+SSE server.
OLD_TRANSPORT_STATUSES = frozenset({400, 404, 405})


class SSEClientSession:
    """One HTTP+SSE session: its stream and the POST URL it announced (see the module rules)."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        url: URL,
        headers: CIMultiDict[str],
        timeout: float,
        on_notification: NotificationHandler | None,
        on_request: RequestHandler | None,
    ) -> None:
        self.url = url
        self._http = http
        self._headers = headers
        self._timeout = timeout
        self._on_notification = on_notification
        self._on_request = on_request
        #: Where messages are POSTed, once the `endpoint` event named it.
        self.endpoint: URL | None = None
        self._response: aiohttp.ClientResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended: str | None = None  # why the session ended; None while it lasts

    @property
    def closed(self) -> bool:
        """Whether the session ended (its stream closed, or the server forgot it)."""
        return self._ended is not None

    @classmethod
    async def open(
        cls,
        http: aiohttp.ClientSession,
        url: URL,
        headers: CIMultiDict[str],
        timeout: float,  # noqa: ASYNC109 - the session's own bound on each exchange
        max_message_size: int,
        on_notification: NotificationHandler | None,
        on_request: RequestHandler | None,
    ) -> SSEClientSession | None:
        """Open the stream and wait for its `endpoint` event (rule 1); None when `url` is no
        HTTP+SSE endpoint. Raises `McpError` when it names an endpoint on another origin."""
        self = cls(http, url, headers, timeout, on_notification, on_request)
        get_headers = CIMultiDict(headers)
        get_headers.pop("Content-Type", None)
        get_headers["Accept"] = _SSE
        try:
            response = await http.get(url, headers=get_headers)
        except aiohttp.ClientError as exc:
            raise McpError(
                CONNECTION_CLOSED, f"cannot open an SSE stream at {url}: {exc}"
            ) from None
        if response.status != 200 or response.content_type != _SSE:
            response.release()
            logger.debug("GET %s: HTTP %d %s, no HTTP+SSE server", url, response.status,
                         response.content_type)  # fmt: skip
            return None
        self._response = response
        decoder = SSEDecoder(max_message_size)
        leftover: list[SSEEvent] = []
        # The first event says it all: an HTTP+SSE server sends `endpoint` at once, while a
        # Streamable HTTP server's GET stream (which a stateless one may open) sends no such
        # event, perhaps nothing for a long time: it is not waited on past `_ENDPOINT_WAIT`.
        wait = min(timeout, _ENDPOINT_WAIT) if timeout > 0 else _ENDPOINT_WAIT
        first: SSEEvent | None = None
        try:
            async with asyncio.timeout(wait):
                while first is None:
                    chunk = await response.content.readany()
                    if not chunk:
                        break
                    events = decoder.feed(chunk)
                    if events:
                        first, leftover = events[0], events[1:]
        except TimeoutError:
            pass
        except (aiohttp.ClientError, SSEError) as exc:
            response.close()
            raise McpError(CONNECTION_CLOSED, f"the SSE stream at {url} broke: {exc}") from None
        if first is None or first.event != "endpoint":
            response.close()
            logger.info("GET %s: an event stream, but no endpoint event first: no HTTP+SSE "
                        "server", url)  # fmt: skip
            return None
        try:
            self.endpoint = self._endpoint(first.data)
        except McpError:
            response.close()
            raise
        logger.info("HTTP+SSE session at %s: messages go to %s", url, self.endpoint.path)
        self._reader = asyncio.create_task(self._read(response, decoder, leftover))
        return self

    def _endpoint(self, data: bytes) -> URL:
        try:
            endpoint = self.url.join(URL(data.decode("utf-8").strip()))
        except (UnicodeDecodeError, ValueError):
            endpoint = None
        if endpoint is None or endpoint.origin() != self.url.origin():
            raise McpError(
                HTTP_ERROR,
                f"the SSE stream at {self.url} named an endpoint on another origin or no valid "
                f"URL ({data[:100]!r}); messages are only POSTed to the stream's own origin",
            )
        return endpoint

    # --- the stream (rules 3, 4) ----------------------------------------------------------

    async def _read(
        self, response: aiohttp.ClientResponse, decoder: SSEDecoder, leftover: list[SSEEvent]
    ) -> None:
        reason = "the server closed the SSE stream"
        try:
            for event in leftover:
                await self._take(event)
            async for chunk in response.content.iter_any():
                for event in decoder.feed(chunk):
                    await self._take(event)
        except (aiohttp.ClientError, OSError, SSEError) as exc:
            reason = f"the SSE stream broke ({exc})"
        finally:
            response.close()
            self._end(reason)

    async def _take(self, event: SSEEvent) -> None:
        if event.event != "message" or not event.data.strip():
            return
        try:
            message = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            logger.warning("ignoring an SSE event that is not JSON: %.80r", event.data)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            if "id" in message:
                self._answer_later(message)
                return
            handler = self._on_notification
            if handler is not None:
                outcome = handler(message)
                if inspect.isawaitable(outcome):
                    await outcome
            return
        request_id = message.get("id")
        future = self._pending.get(request_id) if jsonrpc.is_valid_id(request_id) else None
        if future is None or future.done():
            logger.debug("ignoring a response to %r, which nothing awaits", request_id)
            return
        future.set_result(message)

    def _end(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(McpError(CONNECTION_CLOSED, f"{reason} before the response"))

    def _answer_later(self, message: dict[str, Any]) -> None:
        if not jsonrpc.is_valid_id(message.get("id")):
            logger.warning("ignoring a server request with an invalid id")
            return
        if len(self._tasks) >= _MAX_SERVER_REQUESTS:
            busy = McpError(INTERNAL_ERROR, "the client is answering too many requests")
            self._send_later(jsonrpc.error_response(message["id"], busy), "a refusal")
            return
        task = asyncio.create_task(self._answer(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        handler = self._on_request
        if handler is None:
            unknown = McpError(METHOD_NOT_FOUND, f"this client does not handle {method}")
            response = jsonrpc.error_response(message["id"], unknown)
        else:
            response = await handler(message)  # never raises (the transport contract)
        await self._post_quietly(response, f"the answer to {method}")

    def _send_later(self, message: dict[str, Any], what: str) -> None:
        task = asyncio.create_task(self._post_quietly(message, what))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post_quietly(self, message: dict[str, Any], what: str) -> None:
        # No caller waits for these: a failure is logged.
        try:
            async with asyncio.timeout(self._timeout if self._timeout > 0 else None):
                await self._post(message, what)
        except (McpError, TimeoutError) as exc:
            logger.warning("could not send %s: %s", what, exc)

    # --- messages (rules 2, 4, 5) ---------------------------------------------------------

    async def _post(self, message: dict[str, Any], what: str) -> dict[str, Any] | None:
        """POST one message; the JSON-RPC error a refusal carries, if any."""
        if self._ended is not None or self.endpoint is None:
            raise McpError(CONNECTION_CLOSED, f"{what}: {self._ended or 'not connected'}")
        try:
            async with self._http.post(
                self.endpoint, data=orjson.dumps(message), headers=self._headers
            ) as response:
                if 200 <= response.status < 300:
                    return None
                body = await response.read()
        except aiohttp.ClientError as exc:
            raise McpError(CONNECTION_CLOSED, f"{what}: could not POST it: {exc}") from None
        if response.status == 404:
            self._end("the server no longer knows this HTTP+SSE session")
            raise McpError(
                SESSION_EXPIRED,
                f"{what}: the server no longer knows this session (HTTP 404 from "
                f"{self.endpoint}); a new session must be opened",
                {"status": 404},
            )
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            answer = None
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            return answer
        text = body[:200].decode("utf-8", "replace")
        raise McpError(
            HTTP_ERROR,
            f"{what}: HTTP {response.status} from {self.endpoint}: {text}",
            {"status": response.status, "body": text},
        )

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """POST a request and return its response from the stream (bounded by `timeout`)."""
        request_id = message["id"]
        method = str(message.get("method"))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            async with asyncio.timeout(self._timeout if self._timeout > 0 else None):
                refused = await self._post(message, method)
                if refused is not None:
                    refused["id"] = request_id
                    return refused
                return await future
        except TimeoutError:
            self._cancel_on_server(request_id, "timed out")
            raise McpError(
                REQUEST_TIMEOUT, f"{method}: no answer within {self._timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            if not future.done():
                self._cancel_on_server(request_id, "cancelled")
            raise
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, message: dict[str, Any]) -> None:
        """POST a notification."""
        refused = await self._post(message, str(message.get("method")))
        if refused is not None:
            raise McpError.from_error(refused["error"])

    def _cancel_on_server(self, request_id: Any, reason: str) -> None:
        if self._ended is None and len(self._tasks) < _MAX_SERVER_REQUESTS:
            cancelled = jsonrpc.notification(
                "notifications/cancelled", {"requestId": request_id, "reason": reason}
            )
            self._send_later(cancelled, "a cancellation")

    async def close(self) -> None:
        """End the session: close the stream (the server ends the session with it)."""
        self._end("the HTTP+SSE session was closed")
        reader, self._reader = self._reader, None
        tasks = [*self._tasks, *([reader] if reader is not None else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        response, self._response = self._response, None
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


__all__ = ["OLD_TRANSPORT_STATUSES", "SSEClientSession"]
