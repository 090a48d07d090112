"""`subscriptions/listen` streams, and their stand-in on a legacy session.

A modern server is asked for a stream of the changes named; the block starts once it
acknowledged, so no later change is missed. A legacy server's changes come from its
session-wide list-change notifications (those its capabilities announce) and
`resources/subscribe`, counted per resource so that two listeners share one subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..deadline import Deadline
from ..protocol.errors import CONNECTION_CLOSED, REQUEST_TIMEOUT, McpError
from .connection import Connection
from .era import LEGACY
from .inbound import Inbound
from .legacy import LegacyListener, honoured
from .subscription import ACKNOWLEDGED, Subscription, run_stream

logger = logging.getLogger("mrtr.client")


class Listening:
    """Opens change streams over a `Connection`; `inbound` delivers what arrives on them."""

    def __init__(self, connection: Connection, inbound: Inbound) -> None:
        self._connection = connection
        self._inbound = inbound

    @contextlib.asynccontextmanager
    async def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources: bool = False,
        resource_uris: Sequence[str] = (),
        timeout: float = 30.0,  # noqa: ASYNC109 - bounds the wait for the acknowledgement only
    ) -> AsyncIterator[Subscription]:
        """Open a `subscriptions/listen` stream for the changes named; iterate it for `Change`s.

        The block starts once the server acknowledged (within `timeout` seconds), so a change
        made after that is never missed; `subscription.honoured` says what the server agreed
        to send. Leaving the block cancels the stream. On a legacy server the changes come
        from its session-wide notifications (those its capabilities announce) and
        `resources/subscribe`; leaving the block unsubscribes.
        """
        if self._connection.era is None:
            await self._connection.settle()
        if self._connection.era == LEGACY:
            async with self._listen_legacy(tools, prompts, resources, resource_uris) as changes:
                yield changes
            return
        wanted: dict[str, Any] = {}
        if tools:
            wanted["toolsListChanged"] = True
        if prompts:
            wanted["promptsListChanged"] = True
        if resources:
            wanted["resourcesListChanged"] = True
        if resource_uris:
            wanted["resourceSubscriptions"] = list(resource_uris)
        async with self.open_stream(wanted, Subscription(), timeout) as subscription:
            yield subscription

    @contextlib.asynccontextmanager
    async def open_stream(
        self,
        wanted: dict[str, Any],
        subscription: Subscription,
        timeout: float,  # noqa: ASYNC109 - bounds the wait for the acknowledgement only
    ) -> AsyncIterator[Subscription]:
        """A modern `subscriptions/listen` stream asking for `wanted`, feeding `subscription`,
        open once acknowledged; leaving the block cancels it."""
        request_id = next(self._connection.ids)
        self._inbound.subscriptions[request_id] = subscription

        async def stream() -> dict[str, Any]:
            body = {"notifications": wanted}
            response = await self._connection.send(
                "subscriptions/listen", body, None, 0, request_id
            )
            if "error" in response:
                raise McpError.from_error(response["error"])
            return response

        task = asyncio.create_task(run_stream(subscription, stream))
        try:
            try:
                with Deadline(timeout):
                    await subscription.acknowledged()
            except TimeoutError:
                raise McpError(
                    REQUEST_TIMEOUT,
                    f"subscriptions/listen was not acknowledged within {timeout:g} s",
                ) from None
            yield subscription
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._inbound.subscriptions.pop(request_id, None)

    @contextlib.asynccontextmanager
    async def _listen_legacy(
        self, tools: bool, prompts: bool, resources: bool, uris: Sequence[str]
    ) -> AsyncIterator[Subscription]:
        session = self._connection.legacy
        if session is None:  # pragma: no cover - LEGACY is only set with a session
            raise McpError(CONNECTION_CLOSED, "the legacy session is closed")
        agreed, kinds = honoured(
            session, tools=tools, prompts=prompts, resources=resources, uris=list(uris)
        )
        subscription = Subscription()
        subscription.deliver({"method": ACKNOWLEDGED, "params": {"notifications": agreed}})
        uris_agreed = frozenset(agreed.get("resourceSubscriptions", ()))
        listener = LegacyListener(subscription, kinds, uris_agreed)
        subscribed: list[str] = []
        try:
            for uri in listener.uris:
                count = self._connection.legacy_uri_counts.get(uri, 0)
                if count == 0:
                    response = await self._connection.send_legacy(
                        "resources/subscribe",
                        {"uri": uri},
                        None,
                        self._connection.options.request_timeout,
                    )
                    if "error" in response:
                        raise McpError.from_error(response["error"])
                self._connection.legacy_uri_counts[uri] = count + 1
                subscribed.append(uri)
            self._inbound.legacy_listeners.append(listener)
            yield subscription
        finally:
            with contextlib.suppress(ValueError):
                self._inbound.legacy_listeners.remove(listener)
            subscription.end()
            for uri in subscribed:
                left = self._connection.legacy_uri_counts.pop(uri, 1) - 1
                if left:
                    self._connection.legacy_uri_counts[uri] = left
                elif self._connection.connected and self._connection.legacy is not None:
                    try:
                        limit = self._connection.options.request_timeout
                        await self._connection.send_legacy(
                            "resources/unsubscribe", {"uri": uri}, None, limit
                        )
                    except McpError as exc:  # the server may be gone; nothing is left to undo
                        logger.info("resources/unsubscribe %r failed: %s", uri, exc)

    # --- server-to-client requests (legacy sessions) -------------------------------------------
