"""In-memory transport: a `Client` and a `Server` in one process, no sockets.

Messages still cross as encoded JSON-RPC bytes in both directions, so what the server sees is
exactly what a socket would have carried. The server's lifespan runs from `connect` to `close`
(shared with any other entry into it).

Both eras are served:

* 2026-07-28 requests are handled in the calling task: cancelling the client's call cancels
  the handler directly, which is what `notifications/cancelled` achieves on a stream
  transport, without a task switch per message.
* A legacy `initialize` opens a session, served from then on as stdio serves one (through
  `ServerConnection`): each request in its own task, cancelled by `notifications/cancelled`,
  and the server's own requests (a live `elicitation/create`, `sampling/createMessage`,
  `roots/list`) answered by the client's handlers and fed back to the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol.era import classify
from ..protocol.errors import CONNECTION_CLOSED, INTERNAL_ERROR, McpError, method_not_found
from ..server.connection import ServerConnection
from .base import NotificationHandler, RequestHandler

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint


def _copy(message: Any) -> Any:
    """`message` as the other side decodes it from the bytes a socket would carry."""
    # orjson itself rather than `jsonrpc.dumps`/`loads`: what it encoded, it decodes (no parse
    # error to translate), and an unencodable message raises the same TypeError.
    return orjson.loads(orjson.dumps(message))


class MemoryTransport:
    """Connects a client straight to `server.handle_message`, through the JSON codec."""

    def __init__(self, server: ServerEndpoint) -> None:
        self._server = server
        self._on_notification: NotificationHandler | None = None
        self._on_request: RequestHandler | None = None
        self._open = False
        self._lifespan: contextlib.AsyncExitStack | None = None
        #: The legacy session's connection, from a legacy `initialize` on (None: 2026-07-28).
        self._session: ServerConnection | None = None
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self._answering: set[asyncio.Task[None]] = set()

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        # `on_request` answers a legacy session's live questions; 2026-07-28 asks in results.
        self._on_notification = on_notification
        self._on_request = on_request
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
        decoded = _copy(message)
        if self._session is None and _opens_session(decoded):
            self._session = ServerConnection(self._server, self._from_session, "memory")
        if self._session is not None:
            return await self._session_request(self._session, decoded)
        response = await self._server.handle_message(decoded, self._from_server, "memory")
        if response is None:  # pragma: no cover - a request always gets a response
            raise McpError(CONNECTION_CLOSED, "the server sent no response")
        return _copy(response)  # type: ignore[no-any-return]

    async def notify(self, message: dict[str, Any]) -> None:
        if not self._open:
            return
        if self._session is not None:
            await self._session.feed(_copy(message))
        else:
            await self._server.handle_message(jsonrpc.loads(jsonrpc.dumps(message)))

    async def close(self) -> None:
        self._open = False
        session, self._session = self._session, None
        if session is not None:
            await session.aclose()
        for task in list(self._answering):
            task.cancel()
        closed = McpError(CONNECTION_CLOSED, "the in-memory transport is closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(closed)
        self._pending.clear()
        stack, self._lifespan = self._lifespan, None
        if stack is not None:
            await stack.aclose()

    # --- a legacy session --------------------------------------------------------------------

    async def _session_request(
        self, session: ServerConnection, message: dict[str, Any]
    ) -> dict[str, Any]:
        request_id = message["id"]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await session.feed(message)
            response = await future
        except asyncio.CancelledError:
            if self._pending.pop(request_id, None) is not None and self._open:
                cancelled = {"requestId": request_id, "reason": "cancelled by the client"}
                await session.feed(jsonrpc.notification("notifications/cancelled", cancelled))
            raise
        finally:
            self._pending.pop(request_id, None)
        if message["method"] == "initialize" and session.session is None:
            # Refused (the server serves no legacy clients): no session was opened.
            self._session = None
        return response

    async def _from_session(self, message: dict[str, Any]) -> None:
        """What the session's connection sends: a response, a notification or a request."""
        if "method" not in message:
            future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
            if future is not None and not future.done():
                try:
                    future.set_result(_copy(message))
                except TypeError as exc:  # a handler produced a non-JSON value
                    future.set_exception(exc)
        elif "id" not in message:
            await self._from_server(message)
        else:
            task = asyncio.get_running_loop().create_task(self._answer(_copy(message)))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        """Answer one of the server's requests with the client's handler, in its own task
        (a person may take their time), and hand the answer to the session."""
        handler = self._on_request
        if handler is None:
            response = jsonrpc.error_response(message["id"], method_not_found(message["method"]))
        else:
            try:
                response = await handler(message)
            except Exception as exc:  # the handler must not raise; if it does, the server hears
                error = McpError(INTERNAL_ERROR, f"the client failed to answer: {exc}")
                response = jsonrpc.error_response(message["id"], error)
        session = self._session
        if session is not None:
            await session.feed(_copy(response))


def _opens_session(message: dict[str, Any]) -> bool:
    """Whether `message` is a legacy `initialize`, which opens a session (its era, by
    `protocol/era.classify`: the session's connection classifies every later request)."""
    return classify(message, False) == "opens-session"
