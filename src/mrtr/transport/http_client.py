"""Streamable HTTP (MCP 2026-07-28), client side: `HTTPTransport`, on aiohttp.

One `ClientSession` with a keep-alive connection pool carries every POST. Each request sends
the metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and `Mcp-Param-*` for
tools whose input schema annotates arguments with `x-mcp-header`) and reads back either one
JSON object or an SSE stream whose notifications go to the notification handler before the
response is returned.

The transport reads `tools/list` results on their way through: it remembers each tool's
`x-mcp-header` annotations, and drops tools whose annotations break the rules (with a
warning), as the spec requires of HTTP clients. A `HeaderMismatch` on `tools/call` makes it
list the tools again and, if the headers it would send changed, retry once.

Failure handling follows one rule: never send twice what the server may have acted on. A
connection that cannot be opened means nothing was sent, so any request is tried again, up to
`connect_attempts` times with a short backoff. A connection or response stream that breaks
after the request went out is ambiguous (the server may have run it), so only a method that
just reads (`_REISSUABLE`) is re-issued, as a new request with a new id (streams cannot be
resumed), at most `max_reissues` times; anything else, a `tools/call` above all, fails with
`McpError(CONNECTION_CLOSED)` saying that it may have run. A 503 (`Retry-After`) is waited
out where that is safe (`http_refusal.py`): a response or notification is sent again; a legacy
request only when the server's error says it did not run; and an answer of the client's that
cannot be delivered ends, at once, the call whose stream asked for it. Cancelling the task
awaiting `request` closes the connection, which is how a request is cancelled on HTTP.

An HTTP error whose body is a JSON-RPC error response is returned as that error; any other
HTTP error raises `McpError(HTTP_ERROR)` naming the status and, for a 401 or 403, the
server's `WWW-Authenticate` challenge. Redirects are never followed (a 307 would re-send the
body and the caller's headers to another origin): a 3xx raises `McpError(HTTP_ERROR)` naming
its `Location`. A successful status whose body is not a JSON-RPC
response raises `McpError(PROTOCOL_VIOLATION)`.

Legacy servers (2025-03-26 to 2025-11-25) are spoken to the way their revision asks, from the
`initialize` response on: the session id it returned (`Mcp-Session-Id`) and the negotiated
`MCP-Protocol-Version` go on every message and none of the 2026-07-28 headers do; the server's
requests, on any stream, go to the client's request handler and the answers are POSTed back;
`start_legacy_session` opens the standalone GET stream and `end_legacy_session` sends DELETE.
A stream that ends or breaks before its response is resumed, not re-sent: after the `retry`
time the server named, a GET with `Last-Event-ID` takes the rest of it (a bounded number of
times in a row without progress), and events it replays are delivered once. A 404 on a request
carrying the session id raises `McpError(SESSION_EXPIRED)`, and the session is forgotten so
the next `initialize` opens a new one.

Servers that speak only the HTTP+SSE transport of 2024-11-05 are found as the spec's backwards
compatibility asks: an `initialize` POST answered 400, 404 or 405 is followed by a `GET` of the
same URL, and an event stream whose first event is `endpoint` makes the rest of the exchange go
over that transport (`http_sse_client.py`); a URL whose path ends in `/sse` goes there at once.

The parts: `http_request_headers.py` (the headers of each request), `http_answers.py` (what an
HTTP answer means), `http_response_stream.py` (reading an SSE response stream) and
`http_session_traffic.py` (a legacy session's GET stream, resumption and server requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

import mrtr.transport.http_refusal as refusal

from ..deadline import Deadline
from ..protocol.errors import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    HTTP_ERROR,
    REQUEST_TIMEOUT,
    SESSION_EXPIRED,
    McpError,
)
from .base import MAX_MESSAGE_SIZE, NotificationHandler, RequestHandler
from .http_answers import (
    error_code,
    http_error,
    json_response,
    not_jsonrpc,
    read_body,
    same_origin_location,
    session_id_of,
)
from .http_request_headers import RequestHeaders
from .http_response_stream import ANY_RESPONSE, drain
from .http_session import HTTPSession, StreamCursor, visible_ascii
from .http_session_traffic import SessionTraffic
from .http_sse_client import OLD_TRANSPORT_STATUSES, SSEClientSession

if TYPE_CHECKING:
    from ..client.auth.oauth import OAuth

logger = logging.getLogger("mrtr.http")

_ACCEPT = "application/json, text/event-stream"
_MAX_TOOL_PAGES = 50  # bound on the tools/list pages a header refresh walks through


#: Methods that only read, so sending one again after its connection broke mid-exchange
#: cannot repeat an effect. `resources/read` and `prompts/get` are retrievals by the spec's
#: definition (a resource is context data, a prompt a template), in every MRTR round too: a
#: round re-sent with the same answers and `requestState` replays to the same result, and a
#: server that accepts a state only once refuses the copy (invalid_request_state) rather than
#: acting twice. Never re-sent: `tools/call` (a tool is an action, and its `idempotentHint`
#: comes from the server being distrusted here) and `subscriptions/listen` (its id names the
#: stream, so the caller must see it end and listen again).
_REISSUABLE = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
        "resources/read",
        "prompts/get",
    }
)


class _StreamBroken(Exception):
    """The exchange broke after the request went out, before the response arrived: the server
    may have received it and acted on it."""


class _NotConnected(Exception):
    """The connection could not be opened: nothing was sent."""


class _Moved(Exception):
    """A 307 or 308 to another path of the same origin (a framework's `/mcp` -> `/mcp/`, say):
    the endpoint is `url` from now on, and the request is sent there unchanged."""

    def __init__(self, url: URL) -> None:
        super().__init__(str(url))
        self.url = url


#: HTTP statuses with which a server refuses a request it never took up, whatever the era.
_NOT_TAKEN_UP = frozenset({408, 413, 429})


class _TurnedAway(Exception):
    """A legacy server answered 503 and said the request did not run: it may be sent again
    after `wait` seconds; `answer` is the server's error, returned if it keeps refusing."""

    def __init__(self, wait: float, answer: dict[str, Any]) -> None:
        super().__init__()
        self.wait = wait
        self.answer = answer


_MAX_MOVES = 3  # same-origin redirects followed for one request
_SSE = "text/event-stream"
_LISTEN_OPEN_WAIT = 5.0  # seconds start_legacy_session waits for the GET stream to open
_CLOSE_WAIT = 5.0  # seconds the closing DELETE (and the session's tasks) may take
_DELIVERY_WAIT = 30.0  # seconds a response or notification may take with `timeout=0`
#: What bounds an exchange that has no time limit (a listen stream, or `timeout=0`).
_UNBOUNDED = contextlib.nullcontext()


class HTTPTransport:
    """A `ClientTransport` for a Streamable HTTP endpoint such as `http://127.0.0.1:8000/mcp`.

    `headers` are added to every POST (e.g. `Authorization`). `timeout` bounds one HTTP
    exchange in seconds (0 = no limit); `subscriptions/listen` streams are exempt, as they are
    meant to stay open. `connect_attempts`: how many times a request is tried while the
    connection is refused (nothing sent), waiting `connect_backoff` seconds after the first
    refusal and twice as long after each next one (3 and 0.2: within about a second).
    `max_reissues`: how many times a read-only request whose connection broke mid-exchange is
    sent again. `max_message_size`: the most bytes one response body or stream event may have
    (a larger one fails the request with `RESPONSE_TOO_LARGE`, unread).

    Legacy sessions only: `max_resumptions` is how many reconnections in a row that bring
    nothing new a stream gets before it is given up; `reconnect_delay` is the wait, in seconds,
    before reconnecting to a stream whose server named no `retry` time.

    `auth` (an `mrtr.client.auth.OAuth`) authorizes every request of both eras and answers the
    server's 401 and 403 challenges; without it the transport takes no detour at all.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        max_reissues: int = 2,
        connect_attempts: int = 3,
        connect_backoff: float = 0.2,
        max_message_size: int = MAX_MESSAGE_SIZE,
        max_resumptions: int = 5,
        reconnect_delay: float = 1.0,
        auth: OAuth | None = None,
    ) -> None:
        if connect_attempts < 1:
            raise ValueError(f"connect_attempts must be at least 1, not {connect_attempts}")
        if max_resumptions < 1:
            raise ValueError(f"max_resumptions must be at least 1, not {max_resumptions}")
        self.url = URL(url)
        self.max_reissues = max_reissues
        self.connect_attempts = connect_attempts
        self.connect_backoff = connect_backoff
        self.max_message_size = max_message_size
        self.max_resumptions = max_resumptions
        self.reconnect_delay = reconnect_delay
        self._timeout = timeout
        self.auth = auth
        # Case-insensitive, so a user header can never duplicate one the protocol sets.
        self._base_headers: CIMultiDict[str] = CIMultiDict(headers or {})
        self._base_headers["Content-Type"] = "application/json"
        self._base_headers["Accept"] = _ACCEPT
        self._session: aiohttp.ClientSession | None = None
        self._on_notification: NotificationHandler | None = None
        self._on_request: RequestHandler | None = None
        #: The legacy session, from a successful `initialize` until it ends or expires.
        self._legacy: HTTPSession | None = None
        # The exchange's total time is bounded by a `Deadline` (a watchdog entry) rather than
        # by aiohttp's `total`, which arms a loop timer per request; aiohttp keeps the connect
        # bound. Listen streams get only the connect bound.
        self._connect_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout if timeout > 0 else None
        )
        self._headers = RequestHeaders(self._base_headers)
        self._own_ids = itertools.count(1)
        #: The server speaks the HTTP+SSE transport (2024-11-05): a URL ending in `/sse`,
        #: or found by the backwards-compatibility procedure.
        self.old_transport = self.url.path.rstrip("/").endswith("/sse")
        #: The HTTP+SSE session, while one is open.
        self._sse: SSEClientSession | None = None
        self._initialize_status: int | None = None  # of the last initialize POST
        self._traffic = SessionTraffic(
            self,
            session=lambda: self._session,
            require_session=self._require_session,
            current=lambda: self._legacy,
            session_expired=self._session_expired,
            deliver=self._deliver,
            on_notification=lambda: self._on_notification,
            on_request=lambda: self._on_request,
        )

    @property
    def era_probe(self) -> str:
        """`"legacy"` for an HTTP+SSE server (it speaks 2024-11-05 only), else `"inline"`."""
        return "legacy" if self.old_transport else "inline"

    # --- ClientTransport ---------------------------------------------------------------------

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        """Open the connection pool; notifications from response streams go to
        `on_notification`, and a legacy server's requests to `on_request`."""
        self._on_notification = on_notification
        self._on_request = on_request
        if self._session is None:
            # Idle connections are let go before common servers' own 5 s idle timeout (uvicorn,
            # Node): a request sent as the server closes its end could not be safely re-sent.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=4.0),
                timeout=self._connect_timeout,
                middlewares=(self.auth.middleware,) if self.auth is not None else (),
            )

    async def close(self) -> None:
        """End a legacy session still open, then close the pool (and with it any response
        still streaming)."""
        if self._legacy is not None:
            await self.end_legacy_session()
        sse, self._sse = self._sse, None
        if sse is not None:
            await sse.close()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """POST one request and return its response (after the notifications streamed first)."""
        return await self._handle(message, False)

    async def request_within(self, message: dict[str, Any], limit: float) -> dict[str, Any]:
        """`request`, bounded as a whole by `limit` seconds (0: no bound): past it the request
        is cancelled and `TimeoutError` raised. The client sends every request this way.

        When `limit` is no longer than the transport's own `timeout`, the bound of each
        exchange is left out: it could never fire first, since the whole request's bound
        started earlier and ends no later (retries start later still). One deadline per
        request instead of two, and the same timeout as the two would give.
        """
        if limit <= 0:
            return await self._handle(message, False)
        with Deadline(limit):
            return await self._handle(message, limit <= self._timeout)

    async def _handle(self, message: dict[str, Any], bounded: bool) -> dict[str, Any]:
        """`request`; `bounded`: the caller bounds it within `timeout` (`request_within`)."""
        method = message.get("method")
        if method == "initialize" or self._sse is not None:
            return await self._old_transport_aware(message, bounded)
        legacy = self._legacy
        if legacy is not None and method != "initialize":
            # No tool-header bookkeeping: those headers are 2026-07-28 only.
            task = asyncio.current_task()
            call = refusal.PendingCall(task)
            token = refusal.current_call.set(call)
            try:
                return await self._request(message, bounded)
            except asyncio.CancelledError:
                # A legacy server does not take a closed stream for a cancellation (a network
                # drop looks the same), so it is told.
                self._traffic.cancel_on_server(legacy, message)
                if call.error is not None and task is not None and task.uncancel() == 0:
                    raise call.error from None  # an answer of ours was lost: ended early
                raise
            finally:
                call.finish()
                refusal.current_call.reset(token)
        response = await self._request(message, bounded)
        if method == "tools/list":
            self._headers.screen_tools(response)
        elif (
            method == "tools/call"
            and "error" in response
            and error_code(response) == HEADER_MISMATCH
        ):
            response = await self._retry_with_fresh_headers(message, response)
        return response

    async def _old_transport_aware(self, message: dict[str, Any], bounded: bool) -> dict[str, Any]:
        """`initialize`, and any request of an HTTP+SSE session: the backwards-compatibility
        procedure (a 400, 404 or 405 on the `initialize` POST, then a GET) decides whether
        the server speaks the HTTP+SSE transport of 2024-11-05."""
        if message.get("method") != "initialize":
            sse = self._sse
            if sse is None or sse.closed:
                raise McpError(
                    SESSION_EXPIRED,
                    f"{message.get('method')}: the HTTP+SSE session at {self.url} ended; a new "
                    "session must be initialized",
                )
            return await sse.request(message)
        if self.old_transport:
            sse = await self._open_sse(required=True)
            assert sse is not None  # required: raised otherwise
            return await sse.request(message)
        self._initialize_status = None
        try:
            response = await self._request(message, bounded)
        except McpError:
            if self._initialize_status not in OLD_TRANSPORT_STATUSES:
                raise
            sse = await self._open_sse(required=False)
            if sse is None:
                raise
            return await sse.request(message)
        if "error" in response and self._initialize_status in OLD_TRANSPORT_STATUSES:
            sse = await self._open_sse(required=False)
            if sse is not None:
                return await sse.request(message)
        return response

    async def _open_sse(self, *, required: bool) -> SSEClientSession | None:
        """A new HTTP+SSE session at the URL (ending the one before); None, unless
        `required`, when the URL serves no event stream."""
        old, self._sse = self._sse, None
        if old is not None:
            await old.close()
        sse = await SSEClientSession.open(
            self._require_session(),
            self.url,
            self._base_headers,
            self._timeout,
            self.max_message_size,
            self._on_notification,
            self._on_request,
        )
        if sse is None:
            if required:
                raise McpError(
                    HTTP_ERROR,
                    f"initialize: {self.url} ends in /sse but serves no HTTP+SSE event stream "
                    "(GET brought no endpoint event); give the server's Streamable HTTP URL "
                    "(often /mcp) instead",
                )
            return None
        if not self.old_transport:
            logger.info("%s speaks the HTTP+SSE transport (2024-11-05); using it", self.url)
        self.old_transport = True
        self._sse = sse
        return sse

    async def notify(self, message: dict[str, Any]) -> None:
        """POST one notification (the server answers 202 Accepted)."""
        if self._sse is not None:
            await self._sse.notify(message)
            return
        self._require_session()
        legacy = self._legacy
        headers = legacy.headers if legacy is not None else self._headers.for_message(message)
        error = await self._deliver(message, headers, str(message.get("method")), legacy)
        if error is not None:
            raise error

    async def _deliver(
        self,
        message: dict[str, Any],
        headers: CIMultiDict[str],
        what: str,
        legacy: HTTPSession | None,
    ) -> McpError | None:
        """POST a response or a notification, which expects no answer but 202; None once the
        server took it, else why it could not be delivered. A 503 (the server refused it
        unread) and a failed connection are tried again after the server's `Retry-After` (or
        a short backoff), `refusal.ATTEMPTS` times at most, all within the transport's
        `timeout`: a copy the server did get is harmless (see `http_refusal`)."""
        session = self._session
        if session is None:
            return McpError(CONNECTION_CLOSED, f"{what}: the transport is not connected")
        loop = asyncio.get_running_loop()
        budget = self._timeout if self._timeout > 0 else _DELIVERY_WAIT
        deadline = loop.time() + budget
        data = orjson.dumps(message)
        attempt = 0
        while True:
            attempt += 1
            try:
                with Deadline(max(deadline - loop.time(), 0.0)):
                    async with session.post(
                        self.url, data=data, headers=headers, allow_redirects=False
                    ) as response:
                        status = response.status
                        if status == 404 and legacy is not None and legacy.session_id is not None:
                            return self._session_expired(legacy, what)
                        if status < 300:
                            return None
                        body = await read_body(response, what, self.max_message_size)
                        error = http_error(response, body, what)
                        if status != 503:
                            return error
                        wait = refusal.retry_after(response.headers.get("Retry-After"))
            except TimeoutError:  # the deadline (before OSError, which it is a kind of)
                return McpError(
                    REQUEST_TIMEOUT,
                    f"{what}: not delivered to {self.url} within {budget:g} s "
                    f"({attempt} attempt{'s' if attempt > 1 else ''})",
                )
            except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
                # A TLS failure will not go away by trying again.
                return McpError(CONNECTION_CLOSED, f"{what}: cannot connect to {self.url}: {exc}")
            except (aiohttp.ClientConnectionError, OSError) as exc:
                error = McpError(
                    CONNECTION_CLOSED, f"{what}: could not send it to {self.url}: {exc}"
                )
                wait = max(self.connect_backoff * 2 ** (attempt - 1), refusal.MIN_WAIT)
            except aiohttp.ClientError as exc:
                return McpError(HTTP_ERROR, f"{what}: HTTP request to {self.url} failed: {exc}")
            except McpError as exc:  # a refusal's body too large to read
                return exc
            if attempt >= refusal.ATTEMPTS or loop.time() + wait >= deadline:
                return McpError(
                    error.code,
                    f"{error.message}; sent {attempt} time{'s' if attempt > 1 else ''}, giving up",
                    error.data,
                )
            logger.info("%s; sending it again in %g s", error.message, wait)
            await asyncio.sleep(wait)

    # --- one request -------------------------------------------------------------------------

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise McpError(CONNECTION_CLOSED, "transport is not connected")
        return self._session

    async def _request(self, message: dict[str, Any], bounded: bool = False) -> dict[str, Any]:
        session = self._session
        if session is None:
            raise McpError(CONNECTION_CLOSED, "transport is not connected")
        method = str(message.get("method"))
        legacy = self._legacy
        if method == "initialize":
            # A new session starts bare: no session id, no version yet, no 2026-07-28 headers.
            legacy = None
            headers = self._base_headers
        elif legacy is not None:
            headers = legacy.headers
        else:
            headers = self._headers.for_message(message)
        exempt = bounded or method == "subscriptions/listen" or self._timeout <= 0
        limit = None if exempt else self._timeout
        sent = message
        refused = reissued = turned_away = moved = 0
        while True:
            try:
                answer = await self._exchange(session, sent, method, headers, limit, legacy)
            except _Moved as exc:
                moved += 1
                if moved > _MAX_MOVES:
                    raise McpError(
                        HTTP_ERROR,
                        f"{method}: {self.url} redirected more than {_MAX_MOVES} times",
                        {"location": str(exc.url)[:2000]},
                    ) from None
                logger.info("%s: %s moved to %s (same origin); using it", method, self.url, exc.url)
                self.url = exc.url
                continue  # answered by a redirect: nothing ran, the same request goes there
            except _TurnedAway as exc:
                turned_away += 1
                if turned_away >= refusal.ATTEMPTS:
                    return exc.answer  # the server's own error: retryable, by the caller
                logger.info("%s: refused before it ran (503); sending it again", method)
                await asyncio.sleep(exc.wait)
                continue  # it did not run: the same request, under the same id
            except _NotConnected as exc:
                refused += 1
                if refused >= self.connect_attempts:
                    raise McpError(
                        CONNECTION_CLOSED,
                        f"{method}: cannot connect to {self.url} ({exc}) after {refused} "
                        f"attempt{'s' if refused > 1 else ''}; the request was not sent",
                        {"mayHaveRun": False},
                    ) from None
                delay = self.connect_backoff * 2 ** (refused - 1)
                logger.info("%s: cannot connect (%s); trying again in %g s", method, exc, delay)
                await asyncio.sleep(delay)
                continue  # nothing was sent: the same request, under the same id
            except _StreamBroken as exc:
                if method not in _REISSUABLE:
                    raise McpError(
                        CONNECTION_CLOSED,
                        f"{method}: {exc}; the server may have run it, so it was not sent again",
                        {"mayHaveRun": True},
                    ) from None
                if reissued == self.max_reissues:
                    raise McpError(
                        CONNECTION_CLOSED,
                        f"{method}: {exc}, on every one of {reissued + 1} attempts; giving up",
                        {"mayHaveRun": True},
                    ) from None
                # A read whose stream cannot be resumed: send it again as a new request.
                reissued += 1
                sent = {**message, "id": f"{message['id']}~{reissued}"}
                logger.info("%s: %s; re-issuing it as request %r", method, exc, sent["id"])
                continue
            if sent is not message and answer.get("id") == sent["id"]:
                answer["id"] = message["id"]  # the caller knows the request by its first id
            return answer

    async def _exchange(
        self,
        session: aiohttp.ClientSession,
        message: dict[str, Any],
        method: str,
        headers: CIMultiDict[str],
        limit: float | None,
        legacy: HTTPSession | None,
    ) -> dict[str, Any]:
        """One POST and the JSON-RPC response it brings, its failures sorted into what
        `_request` does with them."""
        # A legacy stream may carry other responses (replays, a confused server): only ours ends
        # it. A 2026-07-28 stream keeps its rule: the response on it is the answer.
        expect = message.get("id") if legacy is not None else ANY_RESPONSE
        try:
            with Deadline(limit) if limit is not None else _UNBOUNDED:
                async with session.post(
                    self.url, data=orjson.dumps(message), headers=headers, allow_redirects=False
                ) as response:
                    status = response.status
                    if status == 404 and legacy is not None and legacy.session_id is not None:
                        raise self._session_expired(legacy, method)
                    if status in (307, 308):
                        target = same_origin_location(response)
                        if target is not None:
                            raise _Moved(target)
                    if method == "initialize":
                        self._initialize_status = status
                        session_id = session_id_of(response) if 200 <= status < 300 else None
                        answer = await self._answer_in(response, method, expect, legacy)
                        self._open_session(answer, session_id)
                        return answer
                    answer = await self._answer_in(response, method, expect, legacy)
                    if status == 503 and legacy is not None and refusal.not_run(answer):
                        wait = refusal.retry_after(response.headers.get("Retry-After"))
                        raise _TurnedAway(wait, answer)
                    return answer
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as exc:
            # A TLS failure will not go away by trying again.
            raise McpError(
                CONNECTION_CLOSED, f"{method}: cannot connect to {self.url}: {exc}"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            raise _NotConnected(str(exc)) from None
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientOSError,
        ) as exc:
            raise _StreamBroken(f"the connection broke before the response ({exc})") from None
        except TimeoutError:
            raise McpError(
                REQUEST_TIMEOUT,
                f"{method}: no complete HTTP response within {self._timeout:g} s; "
                "request cancelled",
            ) from None
        except aiohttp.ClientError as exc:
            raise McpError(
                HTTP_ERROR, f"{method}: HTTP request to {self.url} failed: {exc}"
            ) from None

    async def _answer_in(
        self,
        response: aiohttp.ClientResponse,
        method: str,
        expect: Any,
        legacy: HTTPSession | None,
    ) -> dict[str, Any]:
        """The JSON-RPC response a POST's HTTP response carries (read from its SSE stream, which
        a legacy session resumes if it breaks), or the McpError it amounts to."""
        content_type = response.content_type
        status = response.status
        if 300 <= status < 400:
            raise http_error(response, b"", method)
        if content_type == _SSE and status == 200:
            return await self._read_stream(response, method, expect, legacy)
        declared = response.content_length
        if declared is not None and declared <= self.max_message_size:
            body = await response.read()  # `read_body`'s common case, one frame less
        else:
            body = await read_body(response, method, self.max_message_size)
        answer = json_response(body) if content_type == "application/json" else None
        if 200 <= status < 300 and status != 202:
            if answer is None:
                raise not_jsonrpc(response, body, method)
            return answer
        # An error status counts as the server's answer only with a JSON-RPC error in it
        # (a 401's {"error": "invalid_token"}, say, is an HTTP error, not a JSON-RPC one), and
        # not when that error answers no request and the status says the request was never
        # taken up (an overload, a timeout, a size limit): that is an HTTP error, so the status
        # is what the caller (and the client's era detection) reads.
        if answer is None or "error" not in answer:
            raise http_error(response, body, method)
        if answer.get("id") is None and (status >= 500 or status in _NOT_TAKEN_UP):
            raise http_error(response, body, method)
        return answer

    # --- SSE streams -------------------------------------------------------------------------

    async def _read_stream(
        self,
        response: aiohttp.ClientResponse,
        method: str,
        expect: Any,
        legacy: HTTPSession | None,
    ) -> dict[str, Any]:
        cursor = StreamCursor()
        answer = await drain(
            response,
            method,
            cursor,
            legacy,
            expect,
            url=self.url,
            max_size=self.max_message_size,
            on_notification=self._on_notification,
            on_request=self._traffic.answer_later,
        )
        if answer is not None:
            return answer
        if legacy is None or not cursor.last_event_id:
            raise _StreamBroken("the response stream ended before the response")
        logger.info("%s: the response stream ended early; resuming it", method)
        return await self._traffic.resume(method, cursor, legacy, expect)

    # --- legacy sessions ---------------------------------------------------------------------

    def _open_session(self, answer: dict[str, Any], session_id: str | None) -> None:
        """A successful `initialize` answer starts a legacy session (replacing any other)."""
        result = answer.get("result")
        if not isinstance(result, dict):
            return
        version = result.get("protocolVersion")
        version = version if isinstance(version, str) and visible_ascii(version) else None
        old, self._legacy = self._legacy, HTTPSession(self._base_headers, session_id, version)
        if old is not None:
            old.stop()

    async def start_legacy_session(self, protocol_version: str) -> None:
        """After a successful `initialize`: send the negotiated version and the session id on
        every later message, and open the standalone GET stream (a 405 means the server offers
        none, which is fine). An HTTP+SSE session needs none of it: its stream is open."""
        if self._sse is not None:
            return
        legacy = self._legacy
        if legacy is None:  # the initialize answer was not seen here: a session without an id
            legacy = self._legacy = HTTPSession(self._base_headers, None, protocol_version)
        legacy.set_version(protocol_version)
        if legacy.listener is not None or self._session is None:
            return
        opened = asyncio.Event()
        legacy.listener = asyncio.create_task(self._traffic.listen(legacy, opened))
        # Wait until the server has the stream (or refused it), so that what it sends from
        # now on has a stream to go to rather than racing the GET.
        try:
            async with asyncio.timeout(_LISTEN_OPEN_WAIT):
                await opened.wait()
        except TimeoutError:
            logger.info("the GET stream did not open within %g s; going on", _LISTEN_OPEN_WAIT)

    async def end_legacy_session(self) -> None:
        """End the legacy session: stop its streams and send DELETE with its id (a 405 means
        the server does not let clients end sessions, which is fine); then forget it. An
        HTTP+SSE session ends by closing its stream."""
        sse, self._sse = self._sse, None
        if sse is not None:
            await sse.close()
        legacy, self._legacy = self._legacy, None
        if legacy is None:
            return
        await _settle(legacy.stop())
        session = self._session
        if legacy.session_id is None or session is None:
            return
        try:
            async with asyncio.timeout(_CLOSE_WAIT):
                async with session.delete(
                    self.url, headers=legacy.headers, allow_redirects=False
                ) as response:
                    if response.status == 405:
                        logger.debug("the server does not let clients end sessions (405)")
                    elif response.status >= 300 and response.status != 404:
                        logger.info("ending the session: HTTP %d", response.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            logger.info("could not end the session at %s: %s", self.url, exc)

    def _session_expired(self, legacy: HTTPSession, method: str) -> McpError:
        """Forget a session the server answered 404 for, and say so."""
        if self._legacy is legacy:
            self._legacy = None
        legacy.stop()
        return McpError(
            SESSION_EXPIRED,
            f"{method}: the server no longer knows this session (HTTP 404 from {self.url}); "
            "a new session must be initialized",
            {"status": 404},
        )

    async def _retry_with_fresh_headers(
        self, message: dict[str, Any], response: dict[str, Any]
    ) -> dict[str, Any]:
        """After a HeaderMismatch: list the tools again and retry once if our headers change."""
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return response
        tool, arguments = params["name"], params.get("arguments")
        before = self._headers.param_headers(tool, arguments)
        meta = params.get("_meta")
        cursor: Any = None
        for _ in range(_MAX_TOOL_PAGES):
            list_params: dict[str, Any] = {"_meta": meta}
            if cursor is not None:
                list_params["cursor"] = cursor
            listing = await self.request(
                {
                    "jsonrpc": "2.0",
                    "id": f"tools-refresh-{next(self._own_ids)}",
                    "method": "tools/list",
                    "params": list_params,
                }
            )
            result = listing.get("result")
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if not isinstance(cursor, str):
                break
        if self._headers.param_headers(tool, arguments) == before:
            return response
        logger.info("tools/call %r: retrying with the headers of the updated tool list", tool)
        return await self._request(message)


async def _settle(tasks: list[asyncio.Task[None]]) -> None:
    """Wait (bounded) for cancelled tasks to finish, leaving out the one that is waiting."""
    current = asyncio.current_task()
    others = [task for task in tasks if task is not current]
    if others:
        await asyncio.wait(others, timeout=_CLOSE_WAIT)


__all__ = ["HTTPTransport"]
