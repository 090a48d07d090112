"""What a server sends a client unasked: notifications, and a legacy server's own requests.

Progress goes to the callback of the flow whose token it names, a change to the subscription
whose id it carries (or, on a legacy session, to the listeners of its session-wide
notifications), a log message to the log handler. A legacy server's `elicitation/create`,
`sampling/createMessage` and `roots/list` are answered by the same handlers as MRTR rounds
(`input_handlers.py`), within the bounds on how many at once and in all (`server_asks.py`,
past them an error goes back and no handler runs), and `notifications/cancelled` cancels the
answer in progress.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import INTERNAL_ERROR, McpError
from .flow import ProgressCallback
from .input_handlers import InputHandlers
from .legacy import LegacyListener
from .server_asks import ServerAsks
from .subscription import Subscription

logger = logging.getLogger("mrtr.client")

LogHandler = Callable[[dict[str, Any]], Any]

#: Session-wide notifications of a legacy server that `client.listen` blocks receive.
_LIST_CHANGES = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)


class Inbound:
    """Routes what the server sends unasked: the transport's `on_notification` and
    `on_request` callbacks."""

    def __init__(
        self, inputs: InputHandlers, log_handler: LogHandler | None, asks: ServerAsks
    ) -> None:
        self._inputs = inputs
        self._asks = asks
        self._log_handler = log_handler
        #: Progress callbacks of the flows running, by progress token.
        self.progress: dict[str | int, ProgressCallback] = {}
        #: Open `subscriptions/listen` streams, by the id of their request.
        self.subscriptions: dict[jsonrpc.RequestId, Subscription] = {}
        #: The listeners of a legacy session's list-change notifications.
        self.legacy_listeners: list[LegacyListener] = []
        self._server_requests: dict[Any, asyncio.Task[dict[str, Any]]] = {}

    def cancel_server_requests(self) -> None:
        """Cancel every answer to a server request still in progress (the client closes)."""
        for task in list(self._server_requests.values()):
            task.cancel()

    async def on_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Answer a legacy server's request (the transport's `on_request`); never raises but
        for the transport's own cancellation."""
        request_id = jsonrpc.readable_id(message)
        if request_id is None:  # refused by `respond`, which calls no handler for it
            return await self._inputs.respond(message)
        try:
            place = self._asks.admit(message.get("method"))
        except McpError as refusal:  # one too many: answered at once, no handler called
            return jsonrpc.error_response(request_id, refusal)
        with place:
            return await self._answer(request_id, message)

    async def _answer(
        self, request_id: jsonrpc.RequestId, message: dict[str, Any]
    ) -> dict[str, Any]:
        work = asyncio.ensure_future(self._inputs.respond(message))
        self._server_requests[request_id] = work
        try:
            return await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                work.cancel()
                raise  # the transport is closing
            # The server cancelled its request (notifications/cancelled): it expects no
            # answer, and one that is sent anyway is ignored.
            return jsonrpc.error_response(
                request_id, McpError(INTERNAL_ERROR, "the request was cancelled by the server")
            )
        finally:
            if self._server_requests.get(request_id) is work:
                del self._server_requests[request_id]

    async def on_notification(self, message: dict[str, Any]) -> None:
        """Route one notification from the server; a malformed one is logged and dropped."""
        method = message.get("method")
        params = message.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            logger.warning("ignoring a %.80r notification whose params are not an object", method)
            return
        if self.legacy_listeners and method in _LIST_CHANGES:
            for listener in list(self.legacy_listeners):
                listener.offer(message)
            return
        if method == "notifications/cancelled":
            target = params.get("requestId")
            work = self._server_requests.get(target) if jsonrpc.is_valid_id(target) else None
            if work is not None:
                work.cancel()
            return
        meta = params.get("_meta")
        if isinstance(meta, dict) and meta_keys.SUBSCRIPTION_ID in meta:
            subscription_id = meta[meta_keys.SUBSCRIPTION_ID]
            known = isinstance(subscription_id, str | int)
            subscription = self.subscriptions.get(subscription_id) if known else None
            if subscription is not None:
                subscription.deliver(message)
            return
        if method == "notifications/progress":
            token = params.get("progressToken")
            valid = isinstance(token, str | int)
            callback = self.progress.get(token) if valid else None  # type: ignore[arg-type]
            if callback is not None:
                progress, total = params.get("progress", 0), params.get("total")
                text = params.get("message")
                if not (
                    _is_number(progress)
                    and (total is None or _is_number(total))
                    and (text is None or isinstance(text, str))
                ):
                    logger.warning("ignoring a malformed progress notification: %.200r", params)
                    return
                outcome = callback(progress, total, text)
                if inspect.isawaitable(outcome):
                    await outcome
        elif method == "notifications/message":
            if self._log_handler is not None:
                outcome = self._log_handler(params)
                if inspect.isawaitable(outcome):
                    await outcome
            else:
                logger.info("server log [%s]: %s", params.get("level"), params.get("data"))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
