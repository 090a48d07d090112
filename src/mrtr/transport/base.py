"""The contract between a `Client` and the transport under it.

A transport moves JSON-RPC messages; it never interprets results. Cancelling the task awaiting
`request` cancels the request in the transport's own way (stdio and in-memory send
`notifications/cancelled`; Streamable HTTP closes the response stream).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

#: Default limit on one message a transport reads from its peer (a stdio line, an HTTP body, an
#: SSE event). Generous: a message holds a whole resource, base64 blobs included; the limit only
#: stops a runaway or hostile peer from exhausting memory.
MAX_MESSAGE_SIZE = 16 * 1024 * 1024

#: Receives each notification the server sends (progress, log messages, list changes).
NotificationHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class ClientTransport(Protocol):
    """Send a request and get its response; receive notifications."""

    async def connect(self, on_notification: NotificationHandler) -> None:
        """Open the transport; notifications go to `on_notification` from then on."""

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the response message (result or error)."""

    async def notify(self, message: dict[str, Any]) -> None:
        """Send one notification."""

    async def close(self) -> None:
        """Close the transport and release what it holds."""
