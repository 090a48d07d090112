"""A scripted fake server transport for client tests.

`FakeServer` is a `ClientTransport` that plays a server from a script: it records every message
the client sends (as the JSON that would have crossed the wire, with the monotonic time it
arrived) and answers each request with exactly the next scripted reply. A reply is a result
object (sent as the response's `result`, untouched), an `Error`, `Raw(fields)` (a response
with exactly those members beside `jsonrpc` and `id`, to play a server that breaks the
protocol), `NEVER` (the request is never answered), `Delayed(seconds, reply)`, `Raise(error)`
(the transport raises `error` instead of answering, as an HTTP transport does for an expired
session), or a callable that computes the reply from the request.

Server-to-client requests (legacy sessions) are played with `server_request`, which hands one
to the client's `on_request` and returns the client's response. `SessionFakeServer` also has
the optional hooks of the transport contract (`start_legacy_session`, `end_legacy_session`,
`era_probe`, `url`) and records their calls.

Like the stream transports, cancelling the task awaiting `request` sends (here: records)
`notifications/cancelled` for that request, so a test can see that the client cancelled rather
than abandoned it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from mrtr.protocol.errors import McpError
from mrtr.transport.base import NotificationHandler, RequestHandler


class _Never:
    def __repr__(self) -> str:
        return "NEVER"


#: Scripted reply: the request is never answered.
NEVER: Any = _Never()


@dataclass(frozen=True)
class Error:
    """Scripted reply: a JSON-RPC error response."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class Raw:
    """Scripted reply: a response whose members besides `jsonrpc` and `id` are `fields`."""

    fields: dict[str, Any]


@dataclass(frozen=True)
class Delayed:
    """Scripted reply: `reply`, sent after `seconds`."""

    seconds: float
    reply: Any


@dataclass(frozen=True)
class Raise:
    """Scripted reply: the transport raises `error` rather than return a response."""

    error: McpError


class ScriptExhausted(AssertionError):
    """The client sent a request the script has no reply for (a test failure, not an MCP error)."""


@dataclass
class Received:
    """One message the client sent, as decoded from the bytes it would have put on the wire."""

    message: dict[str, Any]
    raw: bytes
    at: float
    answered_at: float | None = None

    @property
    def method(self) -> str:
        return self.message["method"]  # type: ignore[no-any-return]

    @property
    def id(self) -> Any:
        return self.message.get("id")

    @property
    def params(self) -> dict[str, Any]:
        return self.message.get("params") or {}  # type: ignore[no-any-return]


Reply = Any
ReplyFn = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]


@dataclass
class FakeServer:
    """A `ClientTransport` answering from a script (see the module docstring).

    `script` replies are used in order; once they run out, `then` (if given) answers every
    further request, else the request fails the test with `ScriptExhausted`.
    """

    script: list[Reply] = field(default_factory=list)
    then: Reply | None = None
    received: list[Received] = field(default_factory=list)
    connected: bool = False
    closed: bool = False
    on_notification: NotificationHandler | None = None
    on_request: RequestHandler | None = None

    @property
    def requests(self) -> list[Received]:
        """The requests the client sent, in arrival order."""
        return [r for r in self.received if "id" in r.message]

    @property
    def notifications(self) -> list[Received]:
        """The notifications the client sent (including `notifications/cancelled`)."""
        return [r for r in self.received if "id" not in r.message]

    def cancelled_ids(self) -> list[Any]:
        """The request ids of every `notifications/cancelled` the client sent."""
        return [
            n.params.get("requestId")
            for n in self.notifications
            if n.method == "notifications/cancelled"
        ]

    # --- ClientTransport ---------------------------------------------------------------------

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        self.on_notification = on_notification
        self.on_request = on_request
        self.connected = True

    async def server_request(
        self, method: str, params: dict[str, Any] | None = None, request_id: Any = "s-1"
    ) -> dict[str, Any]:
        """Send the client a request as a legacy server would; return its response (as the
        bytes that would have crossed the wire decode)."""
        assert self.on_request is not None, "the client gave no on_request"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        response = await self.on_request(orjson.loads(orjson.dumps(message)))
        return orjson.loads(orjson.dumps(response))  # type: ignore[no-any-return]

    async def server_notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send the client a notification."""
        assert self.on_notification is not None
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        outcome = self.on_notification(message)
        if inspect.isawaitable(outcome):
            await outcome

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        entry = self._record(message)
        try:
            reply = self._next_reply()
            response = await self._respond(entry, reply)
        except asyncio.CancelledError:
            self._record(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": entry.id, "reason": "cancelled by the client"},
                }
            )
            raise
        entry.answered_at = time.monotonic()
        return response

    async def notify(self, message: dict[str, Any]) -> None:
        self._record(message)

    async def close(self) -> None:
        self.closed = True

    # --- internals ---------------------------------------------------------------------------

    def _record(self, message: dict[str, Any]) -> Received:
        # Encode and decode as a socket would, so the record is what crossed the wire.
        raw = orjson.dumps(message)
        entry = Received(orjson.loads(raw), raw, time.monotonic())
        self.received.append(entry)
        return entry

    def _next_reply(self) -> Reply:
        if self.script:
            return self.script.pop(0)
        if self.then is not None:
            return self.then
        raise ScriptExhausted(f"no scripted reply left; {len(self.requests)} requests so far")

    async def _respond(self, entry: Received, reply: Reply) -> dict[str, Any]:
        while True:
            if callable(reply) and not isinstance(reply, type):
                reply = reply(entry.message)
                if inspect.isawaitable(reply):
                    reply = await reply
                continue
            if isinstance(reply, Delayed):
                await asyncio.sleep(reply.seconds)
                reply = reply.reply
                continue
            break
        if reply is NEVER:
            await asyncio.Event().wait()  # cancelled by the client, or the test's guard
        if isinstance(reply, Raise):
            raise McpError(reply.error.code, reply.error.message, reply.error.data)
        if isinstance(reply, Raw):
            response: dict[str, Any] = {"jsonrpc": "2.0", "id": entry.id, **reply.fields}
        elif isinstance(reply, Error):
            error: dict[str, Any] = {"code": reply.code, "message": reply.message}
            if reply.data is not None:
                error["data"] = reply.data
            response = {"jsonrpc": "2.0", "id": entry.id, "error": error}
        else:
            response = {"jsonrpc": "2.0", "id": entry.id, "result": reply}
        return orjson.loads(orjson.dumps(response))  # type: ignore[no-any-return]


@dataclass
class SessionFakeServer(FakeServer):
    """A `FakeServer` with the transport contract's optional hooks, recording their calls.

    `era_probe="discover"` makes the client probe first (as over stdio); `url` makes its era
    verdict cached per endpoint (as over HTTP).
    """

    era_probe: str = "inline"
    url: str | None = None
    sessions_started: list[str] = field(default_factory=list)
    sessions_ended: int = 0

    async def start_legacy_session(self, protocol_version: str) -> None:
        self.sessions_started.append(protocol_version)

    async def end_legacy_session(self) -> None:
        self.sessions_ended += 1


def initialize_result(
    version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A legacy server's `initialize` result."""
    return {
        "protocolVersion": version,
        "capabilities": capabilities if capabilities is not None else {"tools": {}},
        "serverInfo": {"name": "legacy-fake", "version": "1.0"},
    }


def input_required(
    requests: dict[str, Any] | None = None, state: str | None = None
) -> dict[str, Any]:
    """An `InputRequiredResult` as a server would put it on the wire."""
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests is not None:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


def tool_text(text: str) -> dict[str, Any]:
    """A complete `CallToolResult` with one text block."""
    return {"resultType": "complete", "content": [{"type": "text", "text": text}]}


def elicitation(message: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """An `elicitation/create` input request (form mode)."""
    schema = {"type": "object", "properties": properties or {"ok": {"type": "boolean"}}}
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    }


def sampling(text: str, max_tokens: int = 50) -> dict[str, Any]:
    """A `sampling/createMessage` input request."""
    return {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens,
        },
    }


def roots() -> dict[str, Any]:
    """A `roots/list` input request."""
    return {"method": "roots/list", "params": {}}
