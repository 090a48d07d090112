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
`McpError(CONNECTION_CLOSED)` saying that it may have run. Cancelling the task awaiting
`request` closes the connection, which is how a request is cancelled on HTTP.

An HTTP error whose body is a JSON-RPC error response is returned as that error; any other
HTTP error raises `McpError(HTTP_ERROR)` naming the status and, for a 401 or 403, the
server's `WWW-Authenticate` challenge. A successful status whose body is not a JSON-RPC
response raises `McpError(PROTOCOL_VIOLATION)`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict
from yarl import URL

from ..deadline import Deadline
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    HTTP_ERROR,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    RESPONSE_TOO_LARGE,
    McpError,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION
from . import headers as mcp_headers
from .base import MAX_MESSAGE_SIZE, NotificationHandler
from .sse import SSEDecoder, SSEError, SSEEventTooLarge

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


_HEADER_CACHE_SIZE = 1024  # distinct (method, name, version) header blocks kept


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
    ) -> None:
        if connect_attempts < 1:
            raise ValueError(f"connect_attempts must be at least 1, not {connect_attempts}")
        self.url = URL(url)
        self.max_reissues = max_reissues
        self.connect_attempts = connect_attempts
        self.connect_backoff = connect_backoff
        self.max_message_size = max_message_size
        self._timeout = timeout
        # Case-insensitive, so a user header can never duplicate one the protocol sets.
        self._base_headers: CIMultiDict[str] = CIMultiDict(headers or {})
        self._base_headers["Content-Type"] = "application/json"
        self._base_headers["Accept"] = _ACCEPT
        self._session: aiohttp.ClientSession | None = None
        self._on_notification: NotificationHandler | None = None
        # The exchange's total time is bounded by a `Deadline` (a watchdog entry) rather than
        # by aiohttp's `total`, which arms a loop timer per request; aiohttp keeps the connect
        # bound. Listen streams get only the connect bound.
        self._connect_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout if timeout > 0 else None
        )
        #: `x-mcp-header` annotations of the tools seen in `tools/list` results, by tool name.
        self._tool_headers: dict[str, tuple[mcp_headers.HeaderParam, ...]] = {}
        self._own_ids = itertools.count(1)
        self._header_cache: dict[tuple[Any, Any, Any], CIMultiDict[str]] = {}

    # --- ClientTransport ---------------------------------------------------------------------

    async def connect(self, on_notification: NotificationHandler) -> None:
        """Open the connection pool; notifications from response streams go to the handler."""
        self._on_notification = on_notification
        if self._session is None:
            # Idle connections are let go before common servers' own 5 s idle timeout (uvicorn,
            # Node): a request sent as the server closes its end could not be safely re-sent.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=4.0),
                timeout=self._connect_timeout,
            )

    async def close(self) -> None:
        """Close the pool (and with it any response still streaming)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """POST one request and return its response (after the notifications streamed first)."""
        response = await self._request(message)
        method = message.get("method")
        if method == "tools/list":
            self._screen_tools(response)
        elif method == "tools/call" and _error_code(response) == HEADER_MISMATCH:
            response = await self._retry_with_fresh_headers(message, response)
        return response

    async def notify(self, message: dict[str, Any]) -> None:
        """POST one notification (the server answers 202 Accepted)."""
        session = self._require_session()
        try:
            async with session.post(
                self.url, data=orjson.dumps(message), headers=self._headers_for(message)
            ) as response:
                if response.status >= 400:
                    body = await response.read()
                    raise _http_error(response, body, str(message.get("method")))
        except aiohttp.ClientError as exc:
            raise McpError(CONNECTION_CLOSED, f"could not send to {self.url}: {exc}") from None
        except TimeoutError:
            raise McpError(
                REQUEST_TIMEOUT, f"{message.get('method')}: no answer within {self._timeout:g} s"
            ) from None

    # --- one request -------------------------------------------------------------------------

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise McpError(CONNECTION_CLOSED, "transport is not connected")
        return self._session

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        session = self._require_session()
        method = str(message.get("method"))
        headers = self._headers_for(message)
        limit = None if method == "subscriptions/listen" or self._timeout <= 0 else self._timeout
        sent = message
        refused = reissued = 0
        while True:
            try:
                answer = await self._exchange(session, sent, headers, limit)
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
                # A read: no resumption in this protocol, so send it again as a new request.
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
        headers: CIMultiDict[str],
        limit: float | None,
    ) -> dict[str, Any]:
        method = str(message.get("method"))
        try:
            if limit is None:
                return await self._post(session, message, headers)
            with Deadline(limit):
                return await self._post(session, message, headers)
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

    async def _post(
        self, session: aiohttp.ClientSession, message: dict[str, Any], headers: CIMultiDict[str]
    ) -> dict[str, Any]:
        method = str(message.get("method"))
        async with session.post(self.url, data=orjson.dumps(message), headers=headers) as response:
            content_type = response.content_type
            status = response.status
            if content_type == "text/event-stream" and status == 200:
                return await self._read_stream(response, method)
            body = await self._read_body(response, method)
            answer = _json_response(body) if content_type == "application/json" else None
            if 200 <= status < 300 and status != 202:
                if answer is None:
                    raise _not_jsonrpc(response, body, method)
                return answer
            # An error status counts as the server's answer only with a JSON-RPC error in it
            # (a 401's {"error": "invalid_token"}, say, is an HTTP error, not a JSON-RPC one).
            if answer is None or "error" not in answer:
                raise _http_error(response, body, method)
            return answer

    async def _read_body(self, response: aiohttp.ClientResponse, method: str) -> bytes:
        """The whole body, refused unread past `max_message_size` (a hostile server's endless
        body must not exhaust the client's memory)."""
        limit = self.max_message_size
        declared = response.content_length
        if declared is not None and declared <= limit:
            return await response.read()
        if declared is None:  # chunked: read up to the limit
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > limit:
                    break
                chunks.append(chunk)
            else:
                return b"".join(chunks)
        raise self._too_large(method)

    def _too_large(self, method: str) -> McpError:
        return McpError(
            RESPONSE_TOO_LARGE,
            f"{method}: a response from {self.url} is larger than max_message_size "
            f"({self.max_message_size} bytes); not read",
        )

    async def _read_stream(self, response: aiohttp.ClientResponse, method: str) -> dict[str, Any]:
        decoder = SSEDecoder(self.max_message_size)
        try:
            async for chunk in response.content.iter_any():
                for event in decoder.feed(chunk):
                    answer = await self._take_event(event.event, event.data)
                    if answer is not None:
                        return answer
            for event in decoder.close():
                answer = await self._take_event(event.event, event.data)
                if answer is not None:
                    return answer
        except SSEEventTooLarge:
            raise self._too_large(method) from None
        except SSEError as exc:
            raise McpError(
                HTTP_ERROR, f"unreadable response stream from {self.url}: {exc}"
            ) from None
        raise _StreamBroken("the response stream ended before the response")

    async def _take_event(self, kind: str, data: bytes) -> dict[str, Any] | None:
        """Deliver a notification; return the event when it is the response."""
        if kind != "message":
            return None
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            logger.warning("ignoring an SSE event that is not JSON: %.80r", data)
            return None
        if not isinstance(message, dict):
            return None
        if "method" in message:
            if "id" in message:
                # Servers may not send requests on a response stream (MRTR replaced them).
                logger.warning("ignoring request %r sent on a response stream", message["method"])
                return None
            handler = self._on_notification
            if handler is not None:
                outcome = handler(message)
                if inspect.isawaitable(outcome):
                    await outcome
            return None
        if _is_response(message):
            return message
        logger.warning("ignoring an SSE event that is not a JSON-RPC message: %.80r", data)
        return None

    # --- headers -----------------------------------------------------------------------------

    def _headers_for(self, message: dict[str, Any]) -> CIMultiDict[str]:
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        method = message.get("method")
        field = mcp_headers.NAME_FIELDS.get(method) if isinstance(method, str) else None
        name = params.get(field) if field is not None else None
        meta = params.get("_meta")
        version = meta.get(meta_keys.PROTOCOL_VERSION) if isinstance(meta, dict) else None
        # A request's headers depend on its method, name and version alone unless the tool
        # mirrors arguments into Mcp-Param-* headers; those blocks are built once and reused
        # (aiohttp copies what it is given).
        key = (method, name, version)
        cacheable = (
            isinstance(method, str)
            and isinstance(name, str | None)
            and isinstance(version, str | None)
            and not (method == "tools/call" and self._tool_headers.get(name))  # type: ignore[arg-type]
        )
        if cacheable:
            cached = self._header_cache.get(key)
            if cached is not None:
                return cached
        headers = self._build_headers(message)
        if cacheable:
            if len(self._header_cache) >= _HEADER_CACHE_SIZE:
                self._header_cache.clear()
            self._header_cache[key] = headers
        return headers

    def _build_headers(self, message: dict[str, Any]) -> CIMultiDict[str]:
        headers = self._base_headers.copy()
        method = message.get("method")
        if isinstance(method, str):
            headers[mcp_headers.METHOD] = method
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        meta = params.get("_meta")
        version = meta.get(meta_keys.PROTOCOL_VERSION) if isinstance(meta, dict) else None
        headers[mcp_headers.PROTOCOL_VERSION] = (
            version if isinstance(version, str) else LATEST_PROTOCOL_VERSION
        )
        field = mcp_headers.NAME_FIELDS.get(method) if isinstance(method, str) else None
        if field is not None:
            name = params.get(field)
            if isinstance(name, str):
                headers[mcp_headers.NAME] = mcp_headers.encode_value(name)
                if method == "tools/call":
                    headers.update(self._param_headers(name, params.get("arguments")))
        return headers

    def _param_headers(self, tool: str, arguments: Any) -> dict[str, str]:
        found = {}
        for param in self._tool_headers.get(tool, ()):
            text = mcp_headers.format_argument(mcp_headers.argument_at(arguments, param.path))
            if text is not None:
                found[param.header] = mcp_headers.encode_value(text)
        return found

    def _screen_tools(self, response: dict[str, Any]) -> None:
        """Remember the tools' header annotations; drop tools whose annotations are invalid."""
        result = response.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        kept = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                kept.append(tool)
                continue
            name = tool["name"]
            try:
                self._tool_headers[name] = mcp_headers.header_params(tool.get("inputSchema"))
            except mcp_headers.InvalidHeaderAnnotation as exc:
                self._tool_headers.pop(name, None)
                logger.warning("leaving out tool %r from tools/list: %s", name, exc)
                continue
            kept.append(tool)
        if len(kept) != len(tools):
            result["tools"] = kept  # type: ignore[index]

    async def _retry_with_fresh_headers(
        self, message: dict[str, Any], response: dict[str, Any]
    ) -> dict[str, Any]:
        """After a HeaderMismatch: list the tools again and retry once if our headers change."""
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return response
        tool, arguments = params["name"], params.get("arguments")
        before = self._param_headers(tool, arguments)
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
        if self._param_headers(tool, arguments) == before:
            return response
        logger.info("tools/call %r: retrying with the headers of the updated tool list", tool)
        return await self._request(message)


def _error_code(response: dict[str, Any]) -> Any:
    error = response.get("error")
    return error.get("code") if isinstance(error, dict) else None


def _is_response(message: Any) -> bool:
    """True for a JSON-RPC 2.0 response: an id, and a result or an error object."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and "id" in message
        and ("result" in message or isinstance(message.get("error"), dict))
    )


def _json_response(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response in `body`, or None when it holds none."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return message if _is_response(message) else None


def _snippet(body: bytes) -> str:
    """The start of a body, fit to show a person (control characters replaced)."""
    text = body[:200].decode("utf-8", "replace").strip()
    return "".join(c if c.isprintable() else "?" for c in text)


def _http_error(response: aiohttp.ClientResponse, body: bytes, method: str) -> McpError:
    if response.status == 202:
        return McpError(HTTP_ERROR, f"{method}: the server answered 202 Accepted, with no response")
    snippet = _snippet(body)
    message = (
        f"{method}: HTTP {response.status} {response.reason or ''}".rstrip()
        + f" from {response.url}"
        + (f": {snippet}" if snippet else "")
    )
    data: dict[str, Any] = {"status": response.status}
    challenge = response.headers.get("WWW-Authenticate")
    if challenge is not None:
        # What an authorization flow needs to go on (the scheme, realm, resource metadata).
        message += f" (WWW-Authenticate: {_snippet(challenge.encode())})"
        data["wwwAuthenticate"] = challenge
    return McpError(HTTP_ERROR, message, data)


def _not_jsonrpc(response: aiohttp.ClientResponse, body: bytes, method: str) -> McpError:
    snippet = _snippet(body)
    return McpError(
        PROTOCOL_VIOLATION,
        f"{method}: HTTP {response.status} from {response.url} is not a JSON-RPC response "
        f"({response.content_type or 'no content type'})" + (f": {snippet}" if snippet else ""),
        {"status": response.status},
    )


__all__ = ["HTTPTransport"]
