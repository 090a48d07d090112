"""The HTTP answers of the Streamable HTTP endpoint, shared by its modern and legacy paths.

Every refusal carries a JSON-RPC error saying why. The status of a JSON-RPC answer depends on
the era, and is decided here only: on the 2026-07-28 path, errors from the dispatcher get the
status the spec ties to their code (`ERROR_STATUS`), a store's retryable refusal
("store_unavailable", "store_full") 503 with `Retry-After`, anything else 200; on a legacy
session (2025-11-25 and earlier) every JSON-RPC answer is 200, errors included
(`LEGACY_ERROR_STATUS`), the store's refusals too (the error's `data.reason` says to retry).
There a 4xx is a transport refusal only (unknown session, bad `MCP-Protocol-Version` header,
wrong content type, body too large...), which legacy clients treat as the session failing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)
from ..server.store import is_store_refusal

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

#: The statuses the 2026-07-28 spec ties to JSON-RPC error codes; every other answer is 200.
ERROR_STATUS: Mapping[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
#: The same for a legacy session: none. A legacy client raises on a 4xx and loses its session
#: (a 404 on a request with a session id even means "session gone, initialize again"), while
#: the official legacy servers answer every JSON-RPC error with 200.
LEGACY_ERROR_STATUS: Mapping[int, int] = {}
JSON_TYPE = (b"content-type", b"application/json")
#: Sent with every 503: how many seconds to wait before retrying.
RETRY_AFTER = (b"retry-after", b"1")
#: The `data` of a refusal made before the request reached a handler: sending it again is safe
#: (a client may re-send a request only on this word; see `transport/http_refusal.py`).
NOT_RUN: Mapping[str, Any] = {"mayHaveRun": False}
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    # Reverse proxies must not buffer the stream (the spec's advice for nginx and the like).
    (b"x-accel-buffering", b"no"),
]
ACCEPTED: Message = {
    "type": "http.response.start",
    "status": 202,
    "headers": [(b"content-length", b"0")],
}
EMPTY_BODY: Message = {"type": "http.response.body", "body": b"", "more_body": False}


def status_of(response: dict[str, Any], table: Mapping[int, int] = ERROR_STATUS) -> int:
    """The HTTP status of a JSON answer carrying `response`, by the era's `table`."""
    error = response.get("error")
    if error is None:
        return 200
    if table is ERROR_STATUS and is_store_refusal(error):
        return 503  # retryable: the store is down, restarting or full
    return table.get(error.get("code"), 200)


def legacy_status_of(response: dict[str, Any]) -> int:
    """The HTTP status of a JSON answer carrying `response` on a legacy session."""
    return status_of(response, LEGACY_ERROR_STATUS)


async def send_json(send: Send, status: int, body: bytes, extra: Headers | None = None) -> None:
    """Answer `body` (JSON) with `status`, plus `extra` headers."""
    headers = [JSON_TYPE, (b"content-length", b"%d" % len(body))]
    if extra:
        headers.extend(extra)
    if status == 503 and not any(name == RETRY_AFTER[0] for name, _ in headers):
        headers.append(RETRY_AFTER)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def answer(send: Send, status: int, response: dict[str, Any]) -> None:
    """Answer a JSON-RPC message with `status`."""
    await send_json(send, status, orjson.dumps(response))


async def reject(
    send: Send,
    status: int,
    code: int,
    message: str,
    request_id: jsonrpc.RequestId | None = None,
    extra: Headers | None = None,
    data: Any = None,
) -> None:
    """Refuse a request at the HTTP level, with a JSON-RPC error saying why (and `data`)."""
    body = orjson.dumps(jsonrpc.error_response(request_id, McpError(code, message, data)))
    await send_json(send, status, body, extra)


async def accepted(send: Send, extra: Headers | None = None) -> None:
    """202 Accepted, no body (a notification or a response was taken)."""
    if extra:
        await send({**ACCEPTED, "headers": [*ACCEPTED["headers"], *extra]})
    else:
        await send(ACCEPTED)
    await send(EMPTY_BODY)


async def plain(send: Send, status: int, text: bytes) -> None:
    """A plain-text answer (for what is not the MCP endpoint at all)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(text)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": text, "more_body": False})


__all__ = [
    "ACCEPTED",
    "EMPTY_BODY",
    "ERROR_STATUS",
    "LEGACY_ERROR_STATUS",
    "RETRY_AFTER",
    "SSE_HEADERS",
    "accepted",
    "answer",
    "legacy_status_of",
    "plain",
    "reject",
    "send_json",
    "status_of",
]
