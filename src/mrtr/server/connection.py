"""`ServerConnection`: serves one message stream (stdio, in-memory) with concurrent requests.

Each request runs in its own task so a slow handler never blocks a fast one; the connection
keeps those tasks by request id so that `notifications/cancelled` can cancel the right one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..protocol import jsonrpc
from ..protocol.errors import McpError

if TYPE_CHECKING:
    from .server import Server

logger = logging.getLogger("mrtr.server")

#: Writes one outgoing message (a response or a notification) to the stream.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ServerConnection:
    """Feeds incoming messages to a `Server` and writes what it answers."""

    def __init__(self, server: Server, send: Send, transport_info: Any = None) -> None:
        self.server = server
        self._send = send
        self._transport_info = transport_info
        self._tasks: dict[jsonrpc.RequestId, asyncio.Task[None]] = {}

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
            task = asyncio.create_task(self._run(message))
            self._tasks[request_id] = task
            task.add_done_callback(functools.partial(self._forget, request_id))
        elif kind == "notification" and message["method"] == "notifications/cancelled":
            self._cancel(message.get("params") or {})

    def _forget(self, request_id: jsonrpc.RequestId, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    def _cancel(self, params: dict[str, Any]) -> None:
        request_id = params.get("requestId")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return  # malformed cancellations are ignored (an unhashable id must not raise)
        task = self._tasks.get(request_id)
        if task is not None:
            logger.debug("cancelling request %r: %s", params.get("requestId"), params.get("reason"))
            task.cancel()

    async def _run(self, message: dict[str, Any]) -> None:
        try:
            response = await self.server.handle_request(message, self._send, self._transport_info)
        except asyncio.CancelledError:
            return  # a cancelled request gets no response
        await self._send(response)

    async def aclose(self) -> None:
        """Cancel every request still running and wait for them to end."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
