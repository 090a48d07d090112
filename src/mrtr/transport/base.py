"""The contract between a `Client` and the transport under it.

A transport moves JSON-RPC messages; it never interprets results. Cancelling the task awaiting
`request` cancels the request in the transport's own way (stdio and in-memory send
`notifications/cancelled`; Streamable HTTP closes the response stream).

Server-to-client requests exist only on legacy (`initialize`-based) sessions: a transport
hands each one (`elicitation/create`, `sampling/createMessage`, `roots/list`, `ping`), from
whichever stream it arrives on, to `on_request`, and sends back the response that returns
(stdio: a line on the child's stdin; HTTP: a POST carrying the session id). `on_request` never
raises: the client turns every failure into a JSON-RPC error response (a method it has no
handler for is answered -32601 at once, so the server fails fast rather than waiting).

Optional hooks, looked up with `getattr` (a transport, or a test double, may lack them):

* `async start_legacy_session(protocol_version: str) -> None`: called by the client right
  after a successful `initialize` (and its `notifications/initialized`). Over HTTP the
  transport from then on sends `MCP-Protocol-Version: <protocol_version>` and the
  `Mcp-Session-Id` it captured from the initialize response, and opens the `GET` stream for
  session-wide messages.
* `async end_legacy_session() -> None`: called when the client closes a legacy session (HTTP:
  `DELETE` with the session id).
* `async restart() -> None`: start the peer afresh (stdio: the same command, a new process),
  for the era fallback after a legacy server died or wrote garbage on the `server/discover`
  probe. `noise: asyncio.Event`, set once the peer wrote something that is not JSON-RPC, lets
  the client stop waiting for the probe's answer early.
* `era_probe: str`: how to find out the server's era in `protocol="auto"` mode. `"discover"`
  (stdio): send `server/discover` before anything else, as the stdio binding asks. Absent or
  `"inline"` (HTTP, in-memory): the first request goes out in the modern shape and its answer
  decides. `"legacy"` (HTTP+SSE, 2024-11-05): the transport carries `initialize`-based
  sessions only, so the client opens one without probing.
* `url`: where the server is (HTTP); the era verdict is cached per origin and path.
* `era_key: str`: what the era verdict is cached under instead of `url` (stdio: the command
  and its configuration), so a server is probed once per process, not on every connection.
* `async request_within(message, limit: float) -> dict`: `request`, bounded as a whole by
  `limit` seconds (0: no bound), raising `TimeoutError` past it. The client sends every
  request this way when the transport has it, so that a transport with timeouts of its own
  (HTTP) arms one deadline per request instead of two; without it the client bounds `request`
  itself.

A legacy session the server no longer knows (HTTP 404 on a request carrying its session id)
surfaces from `request` as `McpError(SESSION_EXPIRED)`; the client then initializes once more
and retries the request.
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

#: Answers one server-to-client request with the response message to send back; never raises.
RequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ClientTransport(Protocol):
    """Send a request and get its response; receive notifications and server requests."""

    async def connect(
        self, on_notification: NotificationHandler, on_request: RequestHandler | None = None
    ) -> None:
        """Open the transport; notifications go to `on_notification` and server-to-client
        requests to `on_request` from then on (without `on_request`, a server request is
        answered -32601)."""

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the response message (result or error)."""

    async def notify(self, message: dict[str, Any]) -> None:
        """Send one notification."""

    async def close(self) -> None:
        """Close the transport and release what it holds."""
