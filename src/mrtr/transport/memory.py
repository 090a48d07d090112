"""In-memory transport: a `Client` and a `Server` in one process, no sockets.

Messages still cross as encoded JSON-RPC bytes in both directions, so what the server sees is
exactly what a socket would have carried. The server handles each request in the calling
task: cancelling the client's call cancels the handler directly, which is what
`notifications/cancelled` achieves on a stream transport, without a task switch per message.
The server's lifespan runs from `connect` to `close` (shared with any other entry into it).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.errors import CONNECTION_CLOSED, McpError
from .base import NotificationHandler, RequestHandler

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint


class MemoryTransport:
    """Connects a client straight to `server.handle_message`, through the JSON codec."""

    def __init__(self, server: ServerEndpoint) -> None:
        self._server = server
        self._on_notification: NotificationHandler | None = None
        self._open = False
        self._lifespan: contextlib.AsyncExitStack | None = None

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        # `on_request` is never called: the server is spoken to in 2026-07-28 form, where it
        # asks its questions in results, never in requests of its own.
        self._on_notification = on_notification
        if self._lifespan is None:
            stack = contextlib.AsyncExitStack()
            await stack.enter_async_context(self._server.running())
            self._lifespan = stack
        self._open = True

    async def _from_server(self, message: dict[str, Any]) -> None:
        handler = self._on_notification
        if handler is not None:
            outcome = handler(jsonrpc.loads(jsonrpc.dumps(message)))
            if inspect.isawaitable(outcome):
                await outcome

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        if not self._open:
            raise McpError(CONNECTION_CLOSED, "transport is not connected")
        # orjson itself rather than `jsonrpc.dumps`/`loads`: what it encoded, it decodes (no
        # parse error to translate), and an unencodable message raises the same TypeError.
        decoded = orjson.loads(orjson.dumps(message))
        response = await self._server.handle_message(decoded, self._from_server, "memory")
        if response is None:  # pragma: no cover - a request always gets a response
            raise McpError(CONNECTION_CLOSED, "the server sent no response")
        return orjson.loads(orjson.dumps(response))  # type: ignore[no-any-return]

    async def notify(self, message: dict[str, Any]) -> None:
        if self._open:
            await self._server.handle_message(jsonrpc.loads(jsonrpc.dumps(message)))

    async def close(self) -> None:
        self._open = False
        stack, self._lifespan = self._lifespan, None
        if stack is not None:
            await stack.aclose()
