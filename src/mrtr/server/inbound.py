"""`Inbound`: one request on its way from the entry to its handler, with its context made
only when something needs it.

A `RequestContext` is what a handler (or a middleware) sees; making one sets up the replay
engine, which a tool that takes no context never uses. So the request travels as this small
record and `context()` makes the context the first time it is asked for, once: a middleware
chain, a handler that takes `ctx`, a round that seals a state. A request that never needs one
(a plain call of a context-free tool) never pays for it.
"""

from __future__ import annotations

from typing import Any

from ..protocol import jsonrpc
from .context import ContextFactory, NotifySink, RequestContext
from .session import LegacySession


class Inbound:
    """One request: what it says, where it came from, and its context once made."""

    __slots__ = ("_ctx", "_factory", "method", "notify", "params", "request_id", "session",
                 "transport_info")  # fmt: skip

    def __init__(
        self,
        factory: ContextFactory,
        request_id: jsonrpc.RequestId,
        method: str,
        params: dict[str, Any],
        notify: NotifySink | None,
        transport_info: Any,
        session: LegacySession | None,
        ctx: RequestContext | None = None,
    ) -> None:
        self._factory = factory
        self.request_id = request_id
        self.method = method
        self.params = params
        #: Sends a notification on the request's stream (None: it has none).
        self.notify = notify
        self.transport_info = transport_info
        #: The legacy session the request came on; None for a 2026-07-28 request.
        self.session = session
        self._ctx = ctx

    @classmethod
    def of(cls, ctx: RequestContext) -> Inbound:
        """The request a middleware passed on as `ctx` (which may have changed its params)."""
        return cls(
            _made, ctx.request_id, ctx.method, ctx.params, ctx.notify_sink, ctx.transport_info,
            ctx.session, ctx,
        )  # fmt: skip

    @property
    def has_context(self) -> bool:
        """Whether the request's context was made already (by the middleware chain)."""
        return self._ctx is not None

    def context(self) -> RequestContext:
        """The request's context, made on first use."""
        ctx = self._ctx
        if ctx is None:
            ctx = self._ctx = self._factory(
                self.request_id,
                self.method,
                self.params,
                self.notify,
                self.transport_info,
                None,
                None,
                self.session,
            )
        return ctx


def _made(*args: Any) -> RequestContext:  # pragma: no cover - `of` gives the context
    raise AssertionError("the context of a request from the middleware chain was made")


__all__ = ["ContextFactory", "Inbound"]
