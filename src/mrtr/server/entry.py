"""`Entry`: where a decoded message enters a server, and its one answer leaves.

Rules:

1. A request goes to its era's dispatcher, the era being the one the transport decided
   (`protocol/era.classify`, once per message) and handed in as `era`: a request handed with a
   legacy session and of a legacy era goes to the legacy dispatcher (while the legacy shim is
   on), every other one to the modern dispatcher, without the session. A caller that hands a
   session but no era has its request classified here, by the same `classify`; one without a
   session hands a modern request (era rule 1).
2. Each era's path is built when the middleware changes, not per request: the middleware
   composed around the era's dispatcher, or without middleware the dispatcher itself. Every
   request passes through the middleware, legacy `initialize` included; a modern MRTR round's
   sealed state is verified before the first middleware runs (middleware rule 3), and the
   `_meta` check runs inside `call_next`, so the middleware sees its errors.
3. One error policy for both eras: an `McpError` is its JSON-RPC error; any other exception,
   or a `BaseException` a handler raised, is a logged -32603 naming the method; a handler that
   asked for input where no round can carry it is -32603 saying so. Only the cancellation of
   the task running the request goes out (a cancelled request gets no response).
4. A result leaves through its era: the modern one stamps the fields every 2026-07-28 result
   has (`ModernMethods.respond`); the legacy dispatcher rendered its own already.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol import jsonrpc
from ..protocol.era import Era, classify
from ..protocol.errors import INTERNAL_ERROR, McpError
from ._engine.outcome import stops_for_input
from .inbound import Inbound
from .middleware import CallNext, Middleware, compose, restore_round

if TYPE_CHECKING:
    from ._engine.rounds import RoundKeeper
    from .context import NotifySink
    from .inbound import ContextFactory
    from .legacy import LegacyMethods
    from .modern import ModernMethods
    from .options import ServerOptions
    from .session import LegacySession

logger = logging.getLogger("mrtr.server")

#: One era's path: the request in, its result out.
Path = Callable[[Inbound], Awaitable[dict[str, Any]]]


class Entry:
    """The entry of one server (see the module rules)."""

    def __init__(
        self,
        modern: ModernMethods,
        legacy: LegacyMethods,
        rounds: RoundKeeper,
        options: ServerOptions,
        make_context: ContextFactory,
        make_legacy_context: ContextFactory,
    ) -> None:
        self.modern = modern
        self.legacy = legacy
        self.rounds = rounds
        self.options = options
        self.make_context = make_context
        self.make_legacy_context = make_legacy_context
        self._modern_path: Path = modern.dispatch
        self._legacy_path: Path = legacy.dispatch
        self._modern_chain: CallNext | None = None
        self._legacy_chain: CallNext | None = None

    def build(self, middleware: Sequence[Middleware]) -> None:
        """Compose each era's path with `middleware`, first outermost (rule 2)."""
        if not middleware:
            self._modern_path = self.modern.dispatch
            self._legacy_path = self.legacy.dispatch
            return
        self._modern_chain = compose(middleware, self.modern.dispatch_context)
        self._legacy_chain = compose(middleware, self.legacy.dispatch_context)
        self._modern_path = self._through_modern_chain
        self._legacy_path = self._through_legacy_chain

    async def _through_modern_chain(self, request: Inbound) -> dict[str, Any]:
        assert self._modern_chain is not None
        ctx = request.context()
        await restore_round(self.rounds, ctx)
        return _checked(await self._modern_chain(ctx))

    async def _through_legacy_chain(self, request: Inbound) -> dict[str, Any]:
        assert self._legacy_chain is not None
        return _checked(await self._legacy_chain(request.context()))

    # --- messages ----------------------------------------------------------------------------

    async def handle_message(
        self,
        message: Any,
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
        era: Era | None = None,
    ) -> dict[str, Any] | None:
        """Handle any decoded JSON-RPC message: the response, or None for a notification
        (`session`'s notifications are acted on by the legacy dispatcher); `era`: a request's,
        as the transport classified it (rule 1)."""
        try:
            kind = jsonrpc.classify(message)
        except McpError as exc:
            return jsonrpc.error_response(jsonrpc.readable_id(message), exc)
        if kind == "request":
            return await self.handle_request(message, notify, transport_info, session, era)
        if kind == "notification" and session is not None:
            self.legacy.notification(message["method"], session)
        return None

    async def handle_request(
        self,
        message: dict[str, Any],
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
        era: Era | None = None,
    ) -> dict[str, Any]:
        """Handle one validated request and return its response (rules 1, 3 and 4); `era`:
        the request's, as the transport classified it."""
        request_id = message["id"]
        method = message["method"]
        try:
            params = message.get("params")
            if params is None:
                params = {}
            if (
                session is not None
                and (era or classify(message, True)) != "modern"
                and self.options.input_required.legacy_shim
            ):
                request = Inbound(
                    self.make_legacy_context, request_id, method, params, notify,
                    transport_info, session,
                )  # fmt: skip
                result = await self._legacy_path(request)
                return {"jsonrpc": "2.0", "id": request_id, "result": result}
            request = Inbound(
                self.make_context, request_id, method, params, notify, transport_info, None
            )
            result = await self._modern_path(request)
        except McpError as exc:
            return jsonrpc.error_response(request_id, exc)
        except Exception:
            logger.exception("internal error handling %s (id %r)", method, request_id)
            return jsonrpc.error_response(
                request_id, McpError(INTERNAL_ERROR, f"Internal error while handling {method}")
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and _being_cancelled():
                raise
            return jsonrpc.error_response(request_id, _internal(exc, method, request_id))
        return self.modern.respond(request_id, result)


def _internal(exc: BaseException, method: str, request_id: Any) -> McpError:
    """The -32603 for a `BaseException` out of a handler (rule 3)."""
    if not stops_for_input(exc):
        # A KeyboardInterrupt-like exception, or a cancellation the handler raised itself:
        # answered like any internal error, and the server goes on.
        logger.error("internal error handling %s (id %r)", method, request_id, exc_info=exc)
        return McpError(INTERNAL_ERROR, f"Internal error while handling {method}")
    # Only tools/call, prompts/get and resources/read may answer input_required.
    logger.error("a %s handler asked the client for input, which it cannot do", method)
    return McpError(
        INTERNAL_ERROR,
        f"Internal error while handling {method}: its handler asked for client "
        "input, which only tools/call, prompts/get and resources/read may do",
    )


def _checked(result: Any) -> dict[str, Any]:
    """A middleware's result, which must be the result dict `call_next` gave (or one like it)."""
    if not isinstance(result, dict):
        raise TypeError(f"a middleware returned {type(result).__name__}, not the result dict")
    return result


def _being_cancelled() -> bool:
    """Whether the running task was asked to stop (rather than a handler raising the error)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


__all__ = ["Entry", "Path"]
