"""In-memory transport: a `Client` and a `Server` in one process, no sockets.

Messages still cross as encoded JSON-RPC bytes in both directions, so what the server sees is
exactly what a socket would have carried.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from ..protocol import jsonrpc
from ..protocol.errors import CONNECTION_CLOSED, McpError
from ..server.connection import ServerConnection
from .base import NotificationHandler

if TYPE_CHECKING:
    from ..server.server import Server


class MemoryTransport:
    """Connects a client to `server` through a `ServerConnection`, as stdio would."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._on_notification: NotificationHandler | None = None
        self._connection: ServerConnection | None = None

    async def connect(self, on_notification: NotificationHandler) -> None:
        self._on_notification = on_notification
        self._connection = ServerConnection(self._server, self._from_server, "memory")

    async def _from_server(self, message: dict[str, Any]) -> None:
        decoded = jsonrpc.loads(jsonrpc.dumps(message))
        if "method" in decoded:
            if self._on_notification is not None:
                outcome = self._on_notification(decoded)
                if inspect.isawaitable(outcome):
                    await outcome
            return
        future = self._pending.pop(decoded.get("id"), None)
        if future is not None and not future.done():
            future.set_result(decoded)

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        connection = self._connection
        if connection is None:
            raise McpError(CONNECTION_CLOSED, "transport is not connected")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        request_id = message["id"]
        self._pending[request_id] = future
        try:
            await connection.feed_bytes(jsonrpc.dumps(message))
            return await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None:
                await connection.feed_bytes(
                    jsonrpc.dumps(
                        jsonrpc.notification(
                            "notifications/cancelled",
                            {"requestId": request_id, "reason": "cancelled by the client"},
                        )
                    )
                )
            raise

    async def notify(self, message: dict[str, Any]) -> None:
        if self._connection is not None:
            await self._connection.feed_bytes(jsonrpc.dumps(message))

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(McpError(CONNECTION_CLOSED, "connection closed"))
        self._pending.clear()
