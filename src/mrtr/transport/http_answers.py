"""What an HTTP answer to a client's POST means: its JSON-RPC response, or the error it is.

An HTTP error whose body is a JSON-RPC error response is that error; any other is
`McpError(HTTP_ERROR)` naming the status (and, for a 401 or 403, the server's
`WWW-Authenticate` challenge). A redirect elsewhere is refused, naming where it points; a
successful status without a JSON-RPC response is `McpError(PROTOCOL_VIOLATION)`. Bodies are
read up to a limit, and shown to a person only as a short, printable snippet.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from yarl import URL

import mrtr.transport.http_refusal as refusal

from ..protocol.errors import HTTP_ERROR, PROTOCOL_VIOLATION, RESPONSE_TOO_LARGE, McpError
from .http_session import SESSION_ID, visible_ascii


def session_id_of(response: aiohttp.ClientResponse) -> str | None:
    """The session id an `initialize` response assigns, if any; one the spec does not allow
    (not visible ASCII, or huge) is a protocol violation rather than a header to send back."""
    value = response.headers.get(SESSION_ID)
    if value is None:
        return None
    if not visible_ascii(value):
        raise McpError(
            PROTOCOL_VIOLATION,
            f"initialize: the session id from {response.url} is not 1 to 1024 visible ASCII "
            f"characters: {snippet_of(value.encode())[:40]!r}",
        )
    return value


def same_id(received: Any, expected: Any) -> bool:
    """JSON-RPC ids compare by type and value (1, 1.0, "1" and True are all different)."""
    return type(received) is type(expected) and received == expected


def error_code(response: dict[str, Any]) -> Any:
    """The `code` of a JSON-RPC error response (None for a result)."""
    error = response.get("error")
    return error.get("code") if isinstance(error, dict) else None


def is_response(message: Any) -> bool:
    """True for a JSON-RPC 2.0 response: an id, and a result or an error object."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and "id" in message
        and ("result" in message or isinstance(message.get("error"), dict))
    )


def json_response(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response in `body`, or None when it holds none."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return message if is_response(message) else None


def snippet_of(body: bytes) -> str:
    """The start of a body, fit to show a person (control characters replaced)."""
    text = body[:200].decode("utf-8", "replace").strip()
    return "".join(c if c.isprintable() else "?" for c in text)


def body_text(body: bytes) -> str:
    """The first 200 characters of a body, as sent (what era detection inspects)."""
    return body[:800].decode("utf-8", "replace")[:200]


def http_error(response: aiohttp.ClientResponse, body: bytes, method: str) -> McpError:
    """The `McpError(HTTP_ERROR)` an error status (or a 202 without a response) amounts to."""
    if response.status == 202:
        return McpError(HTTP_ERROR, f"{method}: the server answered 202 Accepted, with no response")
    if 300 <= response.status < 400:
        return redirected(response, method)
    snippet = snippet_of(body)
    message = (
        f"{method}: HTTP {response.status} {response.reason or ''}".rstrip()
        + f" from {response.url}"
        + (f": {snippet}" if snippet else "")
    )
    data: dict[str, Any] = {"status": response.status, "body": body_text(body)}
    if response.status in (429, 503):
        # Retryable by the caller; not re-sent here, as nothing says it did not run.
        wait = refusal.retry_after(response.headers.get("Retry-After"))
        message += f" (retryable: the server asks to wait {wait:g} s)"
        data["retryAfter"] = wait
    challenge = response.headers.get("WWW-Authenticate")
    if challenge is not None:
        # What an authorization flow needs to go on (the scheme, realm, resource metadata).
        message += f" (WWW-Authenticate: {snippet_of(challenge.encode())})"
        data["wwwAuthenticate"] = challenge
    return McpError(HTTP_ERROR, message, data)


def same_origin_location(response: aiohttp.ClientResponse) -> URL | None:
    """Where a 307/308 points, when that is the same origin (scheme, host and port) as the
    request: such a redirect keeps the request and its headers with the server that already
    had them, so it is followed. Any other is refused (`_redirected`)."""
    location = response.headers.get("Location")
    if not location:
        return None
    try:
        target = response.url.join(URL(location))
    except ValueError:
        return None
    here = response.url
    if (target.scheme, target.host, target.port) != (here.scheme, here.host, here.port):
        return None
    return target


def redirected(response: aiohttp.ClientResponse, method: str) -> McpError:
    """A redirect to another origin, or of another kind, never followed: it would carry the
    request and the caller's headers (an API key, say) to wherever the server points."""
    location = response.headers.get("Location")
    where = snippet_of(location.encode()) if location else "no Location"
    return McpError(
        HTTP_ERROR,
        f"{method}: HTTP {response.status} from {response.url} redirects to {where}; MCP "
        "requests do not follow redirects (the request and its headers would go there too): "
        "if that address is the server's, connect to it directly",
        {"status": response.status, "location": location[:2000] if location else None},
    )


def not_jsonrpc(response: aiohttp.ClientResponse, body: bytes, method: str) -> McpError:
    """The error of a successful status whose body is not a JSON-RPC response."""
    snippet = snippet_of(body)
    return McpError(
        PROTOCOL_VIOLATION,
        f"{method}: HTTP {response.status} from {response.url} is not a JSON-RPC response "
        f"({response.content_type or 'no content type'})" + (f": {snippet}" if snippet else ""),
        {"status": response.status},
    )


async def read_body(response: aiohttp.ClientResponse, method: str, limit: int) -> bytes:
    """The whole body, refused unread past `limit` bytes (a hostile server's endless body
    must not exhaust the client's memory)."""
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
    raise too_large(method, response.url, limit)


def too_large(method: str, url: URL, limit: int) -> McpError:
    """The error of a response (or stream event) from `url` larger than `limit` bytes."""
    return McpError(
        RESPONSE_TOO_LARGE,
        f"{method}: a response from {url} is larger than max_message_size "
        f"({limit} bytes); not read",
    )
