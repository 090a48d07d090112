"""`TimingMiddleware`: one log line per request, with what it was and how it went."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..protocol.errors import McpError
from ..server.middleware import CallNext, request_target

if TYPE_CHECKING:
    from ..server.context import RequestContext


class TimingMiddleware:
    """Logs each request once it is answered: method, target, round, duration and outcome.

    For example `tools/call 'order' round=1 flow=3f9a... 2.41 ms input_required`. The outcome
    is `ok`, `input_required`, `tool_error` (a tool result with `isError`), `error -32602`
    (an `McpError`, with its code), `failed` (any other exception) or `cancelled`. The same
    values go in the record's `mcp` attribute (`extra`), for structured log handlers.
    Add it first to time what the other middleware costs as well.
    """

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("mrtr.requests")
        self.level = level

    async def __call__(self, ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        if not self.logger.isEnabledFor(self.level):
            return await call_next(ctx)
        start = time.perf_counter()
        outcome = "failed"
        try:
            result = await call_next(ctx)
        except McpError as exc:
            outcome = f"error {exc.code}"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        else:
            if result.get("resultType") == "input_required":
                outcome = "input_required"
            elif result.get("isError") is True:
                outcome = "tool_error"
            else:
                outcome = "ok"
            return result
        finally:
            self._log(ctx, outcome, (time.perf_counter() - start) * 1000.0)

    def _log(self, ctx: RequestContext, outcome: str, elapsed_ms: float) -> None:
        target = request_target(ctx)
        # A flow id only means something once the request has rounds: read, never minted here.
        state = ctx.engine.state
        flow = state.flow_id or None
        fields = {
            "method": ctx.method,
            "target": target,
            "round": state.round,
            "flow_id": flow,
            "duration_ms": round(elapsed_ms, 3),
            "outcome": outcome,
            "legacy": ctx.session is not None,
        }
        self.logger.log(
            self.level,
            "%s%s round=%d%s %.2f ms %s",
            ctx.method,
            f" {target!r}" if target is not None else "",
            state.round,
            f" flow={flow}" if flow else "",
            elapsed_ms,
            outcome,
            extra={"mcp": fields},
        )
