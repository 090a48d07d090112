"""Middleware: functions run around every request a `Server` answers.

A middleware is `async def mw(ctx, call_next) -> dict`: it may look at the request
(`ctx.method`, `ctx.params`, `ctx.transport_info`, `ctx.session`...), refuse it by raising
`McpError`, call `await call_next(ctx)` to go on, and look at or change the result dict that
comes back (or the `McpError` that comes out). Rules:

1. Order: the first registered is the outermost; it sees the request first and the result last.
2. Every request passes through, on both eras and whatever its method: lists,
   `server/discover`, `subscriptions/listen` (whose result comes when the stream ends), and on
   a legacy session `initialize`, `ping` and the rest. Notifications do not (they get no
   response). A request the server refuses before its handler runs (an unknown method, a bad
   `_meta`, an invalid `requestState`) passes through too: `call_next` raises its `McpError`.
3. On 2026-07-28, each MRTR round is a request of its own and passes through on its own. Its
   sealed `requestState` is verified before the first middleware runs (the
   `request_state_guard` runs later, once, after the middleware), so `ctx.round`,
   `ctx.flow_id` and `ctx.replaying` already describe the round: 0 and a new flow on the first
   try; on a retry the round number and the flow id it carries, and `replaying` True (the
   handler will re-run answered code). A state that does not verify leaves them at round 0;
   `call_next` then raises the -32602. On a legacy session a request is one round (0).
4. What `call_next` returns is the result before the server adds what the era requires
   (`resultType` and the serverInfo `_meta` on 2026-07-28); an input-required round returns
   `{"resultType": "input_required", ...}`. An exception other than `McpError` out of a
   middleware is an internal error (-32603, logged), as from a handler.
5. The chain is composed once per registration, around each era's dispatcher (`entry.py`);
   without middleware an era's path is its dispatcher itself: registering none costs nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol.errors import McpError
from ._engine.round_state import RoundState
from .request_state import InvalidRequestState, VerifiedState, verify_request_state

if TYPE_CHECKING:
    from ._engine.rounds import RoundKeeper
    from .context import RequestContext

#: Goes on to the next middleware, or to the server: gives the result or raises `McpError`.
CallNext = Callable[["RequestContext"], Awaitable[dict[str, Any]]]
#: `async def middleware(ctx, call_next) -> dict[str, Any]`.
Middleware = Callable[["RequestContext", CallNext], Awaitable[dict[str, Any]]]

#: The MRTR methods, with the parameter naming what their state is bound to.
_TARGETS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def request_target(ctx: RequestContext) -> str | None:
    """What a request is about: the tool or prompt name, the resource URI, or None."""
    params = ctx.params
    field = _TARGETS.get(ctx.method)
    if field is None:
        if ctx.method == "resources/subscribe" or ctx.method == "resources/unsubscribe":
            field = "uri"
        else:
            return None
    target = params.get(field)
    return target if isinstance(target, str) else None


def is_mrtr_method(method: str) -> bool:
    """Whether `method` can take MRTR rounds (`tools/call`, `prompts/get`, `resources/read`)."""
    return method in _TARGETS


def check_middleware(middleware: Any) -> None:
    """Refuse at registration what cannot be a middleware (the mistake shows at once)."""
    if not callable(middleware):
        raise TypeError(f"a middleware is a callable (ctx, call_next); got {middleware!r}")
    call = middleware if inspect.isroutine(middleware) else type(middleware).__call__
    if not inspect.iscoroutinefunction(call):
        raise TypeError(
            f"middleware {middleware!r} must be async: `async def mw(ctx, call_next)` awaiting "
            "`call_next(ctx)`"
        )


def compose(middleware: Sequence[Middleware], inner: CallNext) -> CallNext:
    """One callable running `middleware` in order around `inner` (rule 1)."""
    chain = inner
    for layer in reversed(middleware):
        chain = _bind(layer, chain)
    return chain


def _bind(layer: Middleware, call_next: CallNext) -> CallNext:
    async def step(ctx: RequestContext) -> dict[str, Any]:
        return await layer(ctx, call_next)

    return step


async def restore_round(keeper: RoundKeeper, ctx: RequestContext) -> None:
    """Verify a modern MRTR round's state before the middleware runs (rule 3).

    Only verification (no `request_state_guard`, which may count uses): the round then reuses
    the verified state instead of verifying again. Anything wrong is left for the round to
    refuse, with its one error and its log line.
    """
    field = _TARGETS.get(ctx.method)
    if field is None:
        return
    params = ctx.params
    token = params.get("requestState")
    target = params.get(field)
    if not isinstance(token, str) or not isinstance(target, str):
        return
    if len(token) > keeper.options.max_state_bytes:
        return
    arguments = params.get("arguments") if field == "name" else None
    if arguments is not None and not isinstance(arguments, dict):
        return
    try:
        round_ = keeper.round(ctx, target, arguments)
        binding = round_.binding
        verifier = keeper.options.request_state_verifier
        verified: VerifiedState
        if verifier is None:
            assert keeper.key_ring is not None
            verified = verify_request_state(keeper.key_ring, binding, token)
        else:
            got = verifier(token, binding)
            verified = await got if inspect.isawaitable(got) else got
        state = RoundState.decode(verified.data, verified.round, verified.flow_id)
    except (McpError, InvalidRequestState):
        return
    except Exception:  # a verifier's own failure: the round logs it when it verifies again
        return
    ctx.engine.restore(state, (binding, verified))


__all__ = [
    "CallNext",
    "Middleware",
    "check_middleware",
    "compose",
    "is_mrtr_method",
    "request_target",
    "restore_round",
]
