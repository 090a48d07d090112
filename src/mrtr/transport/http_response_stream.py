"""Reading a response's SSE stream: each event delivered, until the awaited response.

Notifications go to the notification handler as they come; a legacy server's requests go to
be answered in tasks of their own (a 2026-07-28 server may send none on a response stream);
a legacy stream's replayed events (an id already seen) are delivered once. The stream ends
with the response it was read for: any response (a 2026-07-28 POST stream), none (the
standalone GET stream), or the one with the request's id.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from yarl import URL

from ..protocol.errors import HTTP_ERROR, McpError
from .base import NotificationHandler
from .http_answers import is_response, same_id, too_large
from .http_session import HTTPSession, StreamCursor
from .sse import SSEDecoder, SSEError, SSEEventTooLarge, SSEFrame

logger = logging.getLogger("mrtr.http")

# What a stream read accepts as its response: any (a 2026-07-28 POST stream, as before), none
# (the standalone GET stream, which carries no responses), or else the request's own id.
ANY_RESPONSE: Any = object()
NO_RESPONSE: Any = object()
#: Where a legacy server's request found on a stream goes to be answered.
ServerRequestSink = Callable[[HTTPSession, dict[str, Any]], None]


async def drain(
    response: aiohttp.ClientResponse,
    method: str,
    cursor: StreamCursor,
    legacy: HTTPSession | None,
    expect: Any,
    *,
    url: URL,
    max_size: int,
    on_notification: NotificationHandler | None,
    on_request: ServerRequestSink,
) -> dict[str, Any] | None:
    """Deliver what one SSE connection carries until the awaited response, which is
    returned, or the connection's end (None). A break is raised, unless the stream can be
    resumed (a legacy stream with an event id), when it counts as an end."""
    decoder = SSEDecoder(max_size)
    try:
        try:
            async for chunk in response.content.iter_any():
                for frame in decoder.feed_frames(chunk):
                    answer = await take_frame(
                        frame, cursor, legacy, expect, on_notification, on_request
                    )
                    if answer is not None:
                        return answer
                if decoder.retry is not None:
                    cursor.retry = decoder.retry
            for frame in decoder.close_frames():
                answer = await take_frame(
                    frame, cursor, legacy, expect, on_notification, on_request
                )
                if answer is not None:
                    return answer
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientOSError,
        ):
            if legacy is None or not cursor.last_event_id:
                raise
    except SSEEventTooLarge:
        raise too_large(method, url, max_size) from None
    except SSEError as exc:
        raise McpError(HTTP_ERROR, f"unreadable response stream from {url}: {exc}") from None
    if decoder.retry is not None:
        cursor.retry = decoder.retry
    return None


async def take_frame(
    frame: SSEFrame,
    cursor: StreamCursor,
    legacy: HTTPSession | None,
    expect: Any,
    on_notification: NotificationHandler | None,
    on_request: ServerRequestSink,
) -> dict[str, Any] | None:
    """Deliver one event; return it when it is the awaited response."""
    if legacy is not None and not cursor.take(frame.id):
        return None  # replayed: delivered already
    data = frame.data
    if data is None or frame.event != "message" or not data.strip():
        return None  # an id-only or priming event
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        logger.warning("ignoring an SSE event that is not JSON: %.80r", data)
        return None
    if not isinstance(message, dict):
        return None
    if "method" in message:
        if "id" in message:
            if legacy is None:
                # Servers may not send requests on a 2026-07-28 stream (MRTR replaced them).
                logger.warning("ignoring request %r sent on a response stream", message["method"])
            else:
                on_request(legacy, message)
            return None
        handler = on_notification
        if handler is not None:
            outcome = handler(message)
            if inspect.isawaitable(outcome):
                await outcome
        return None
    if not is_response(message):
        logger.warning("ignoring an SSE event that is not a JSON-RPC message: %.80r", data)
        return None
    if expect is ANY_RESPONSE or same_id(message.get("id"), expect):
        return message
    if message.get("id") is None and expect is not NO_RESPONSE:
        return message  # an error about a request the server could not read: ours
    logger.warning("ignoring a response to %r, which this stream does not await", message["id"])
    return None
