"""`ServerEndpoint`: all that a transport may use of a server.

Transports (stdio, in-memory, Streamable HTTP, HTTP+SSE, the legacy HTTP sessions) and the
bearer-token guard type their server as this protocol rather than as `Server`, so they depend
on a contract below the server instead of on the class above them: the server imports its
transports (`run`, `asgi_app`), and nothing a transport imports leads back up to it. `Server`
satisfies the protocol structurally; a typed test assigns one to a `ServerEndpoint` variable.

A new member goes here only when a transport needs it; everything else stays behind `Server`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..protocol.era import Era
    from .options import ServerOptions
    from .session import LegacySession

#: Sends one notification to the client of the request being handled.
NotifySink = Callable[[dict[str, Any]], Awaitable[None]]


class LifespanError(RuntimeError):
    """The lifespan failed to start or to stop, or its state was read while it was not
    running."""


class ServerEndpoint(Protocol):
    """The server as its transports see it: the entry points, the lifespan, legacy sessions."""

    @property
    def name(self) -> str:
        """The server's name (channel names shared between instances derive from it)."""
        ...

    @property
    def options(self) -> ServerOptions:
        """The server's options: budgets, store and broker, auth, principal resolver."""
        ...

    @property
    def seals_with_random_key(self) -> bool:
        """Whether request states are sealed with a random per-process key (none configured)."""
        ...

    @property
    def serves_legacy(self) -> bool:
        """Whether `initialize`-based (legacy) clients are served."""
        ...

    def running(self) -> AbstractAsyncContextManager[object]:
        """The server's lifespan, entered while a transport serves it; a `LifespanError` when
        it fails to start."""
        ...

    async def handle_message(
        self,
        message: Any,
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
        era: Era | None = None,
    ) -> dict[str, Any] | None:
        """Handle any decoded JSON-RPC message; the response, or None for a notification."""
        ...

    async def handle_request(
        self,
        message: dict[str, Any],
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
        era: Era | None = None,
    ) -> dict[str, Any]:
        """Handle one validated request and return its response; never raises. `era`: the
        request's, as the transport classified it (`protocol/era.classify`)."""
        ...

    def attach_session(self, session: LegacySession) -> None:
        """Register a negotiated legacy session: list changes and resource updates reach it."""
        ...

    def detach_session(self, session: LegacySession) -> None:
        """Forget a legacy session (it ended)."""
        ...

    def close_subscriptions(self) -> None:
        """End every open `subscriptions/listen` stream gracefully (shutdown)."""
        ...

    def tool_definition(self, name: str) -> dict[str, Any] | None:
        """The wire definition of tool `name`, as `tools/list` shows it, or None."""
        ...

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The OAuth scopes a call of tool `name` needs (none for an unknown tool)."""
        ...


__all__ = ["LifespanError", "NotifySink", "ServerEndpoint"]
