"""One Streamable HTTP request's response, as its handler runs: plain JSON, or an SSE stream
once the handler sends a notification (progress, log messages; `subscriptions/listen` streams
from the start and gets keep-alive comments). A client that goes away while the handler waits
cancels it (`watch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .http_responses import SSE_HEADERS, Message, Send, send_json, status_of
from .sse import KEEPALIVE, encode_event

Receive = Callable[[], Awaitable[Message]]


class Exchange:
    """One request's response: plain JSON, or an SSE stream once a notification comes."""

    __slots__ = (
        "accept_sse",
        "disconnected",
        "done",
        "keepalive",
        "keepalive_interval",
        "lock",
        "receive",
        "send",
        "streaming",
        "task",
        "watcher",
    )

    def __init__(
        self, send: Send, receive: Receive, accept_sse: bool, keepalive_interval: float
    ) -> None:
        self.send = send
        self.receive = receive
        #: The task running the handler, known once it waits (only then can it be cancelled).
        self.task: asyncio.Task[Any] | None = None
        self.accept_sse = accept_sse
        self.keepalive_interval = keepalive_interval
        self.streaming = False
        self.done = False
        self.disconnected = False
        self.lock: asyncio.Lock | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.keepalive: asyncio.Task[None] | None = None

    def watch(self) -> None:
        """Cancel `task` if the client goes away from now on (the handler waits)."""
        if not self.done:
            self.watcher = asyncio.ensure_future(self._wait_for_disconnect())

    async def _wait_for_disconnect(self) -> None:
        # The body has been read, so the next message is the disconnect (or, on some servers,
        # the end of our own response). Anything else is ignored, a bounded number of times.
        for _ in range(16):
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
        else:
            return
        if not self.done:
            self.disconnected = True
            self.done = True
            assert self.task is not None  # set before the watcher starts
            self.task.cancel()

    async def notify(self, message: dict[str, Any]) -> None:
        """The handler's notification sink: the first one turns the answer into a stream."""
        if self.done or not self.accept_sse:
            return
        event = encode_event(orjson.dumps(message))
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if self.done:
                return
            if not self.streaming:
                self.streaming = True
                await self.send(
                    {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                )
                if self.keepalive_interval > 0:
                    self.keepalive = asyncio.ensure_future(self._keep_alive())
            await self.send({"type": "http.response.body", "body": event, "more_body": True})

    async def _keep_alive(self) -> None:
        while not self.done:
            await asyncio.sleep(self.keepalive_interval)
            assert self.lock is not None
            async with self.lock:
                if self.done:
                    return
                await self.send(
                    {"type": "http.response.body", "body": KEEPALIVE, "more_body": True}
                )

    def finish(self) -> None:
        """No more notifications: the handler is over (or the client is gone)."""
        self.done = True
        if self.watcher is not None:
            self.watcher.cancel()
        if self.keepalive is not None:
            self.keepalive.cancel()

    async def respond(self, response: dict[str, Any]) -> None:
        """Send the handler's `response`: the stream's last event, or the JSON answer."""
        body = orjson.dumps(response)
        if self.streaming:
            assert self.lock is not None
            async with self.lock:
                await self.send(
                    {"type": "http.response.body", "body": encode_event(body), "more_body": False}
                )
            return
        await send_json(self.send, status_of(response), body)


__all__ = ["Exchange"]
