"""`Subscription`: the client's side of a `subscriptions/listen` stream.

`async with client.listen(tools=True) as changes:` sends the listen request, waits for the
server's acknowledgement (so no change made after the block starts is missed), and yields an
async iterator of `Change`s; leaving the block cancels the request, which ends the stream on
every transport. Changes are "look again" signals: act on one by listing or reading afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.errors import PROTOCOL_VIOLATION, McpError

ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
RESOURCE_UPDATED = "notifications/resources/updated"
#: The notification methods a stream carries, by what they announce.
KINDS = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
    RESOURCE_UPDATED: "resource",
}


@dataclass(frozen=True, slots=True)
class Change:
    """One change: `kind` is `tools`, `prompts` or `resources` (a list changed) or `resource`
    (the resource at `uri` changed)."""

    kind: str  # "tools", "prompts", "resources" or "resource"
    uri: str | None = None  # the resource that changed, for kind "resource"


_END = object()


class Subscription:
    """An open listen stream; iterate it for `Change`s (it ends when the server ends it)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._acknowledged: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )

    @property
    def honoured(self) -> dict[str, Any]:
        """What the server agreed to send (its acknowledgement's `notifications`)."""
        return self._acknowledged.result()

    def deliver(self, message: dict[str, Any]) -> None:
        """Take one notification of this stream (called by the client)."""
        method = message.get("method")
        params = message.get("params") or {}
        if method == ACKNOWLEDGED:
            if not self._acknowledged.done():
                notifications = params.get("notifications")
                self._acknowledged.set_result(
                    notifications if isinstance(notifications, dict) else {}
                )
            return
        kind = KINDS.get(str(method))
        if kind is None:
            return  # a notification type this client does not know: nothing to announce
        uri = params.get("uri") if kind == "resource" else None
        self._queue.put_nowait(Change(kind, uri if isinstance(uri, str) else None))

    def end(self, error: BaseException | None = None) -> None:
        """The stream is over (its request completed, failed or was cancelled)."""
        if not self._acknowledged.done():
            self._acknowledged.set_exception(
                error
                or McpError(
                    PROTOCOL_VIOLATION, "the listen stream ended before it was acknowledged"
                )
            )
        self._queue.put_nowait(_END)

    async def acknowledged(self) -> dict[str, Any]:
        """Wait for the server's acknowledgement; returns what it agreed to send."""
        return await asyncio.shield(self._acknowledged)

    def __aiter__(self) -> AsyncIterator[Change]:
        return self._changes()

    async def _changes(self) -> AsyncIterator[Change]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item


async def run_stream(
    subscription: Subscription, request: Callable[[], Awaitable[dict[str, Any]]]
) -> None:
    """Run the listen request to its end, then end the subscription."""
    try:
        await request()
    except asyncio.CancelledError:
        subscription.end()
        raise
    except BaseException as exc:
        subscription.end(exc)
        if not isinstance(exc, Exception):
            raise
    else:
        subscription.end()
