"""A server's "not now, try again": what the HTTP client re-sends after a 503, and when.

A 503 with `Retry-After` is a refusal: the server did not take the message. What may be sent
again depends on what the message is:

* a JSON-RPC response (the answer to a server's question) or a notification: always, after the
  wait the server named. A copy the server did get is harmless (a response to a question
  already answered is ignored; the notifications a client sends say the same thing twice);
* a request: only when the server said it did not run it (`data.mayHaveRun` false in the
  JSON-RPC error of the 503, which this SDK's server sends for every refusal made before the
  request reaches a handler). Any other 503 fails the request at once, retryable by the caller.

Re-sending is bounded: `ATTEMPTS` tries, waits of at most `MAX_WAIT` seconds each, all within the
request's own timeout. An answer that cannot be delivered fails the call that is waiting for it
at once (`PendingCall`), rather than leaving it to wait out its timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from ..protocol.errors import McpError

#: Tries of one message the server keeps refusing (the first send included).
ATTEMPTS = 5
#: The longest wait honoured between tries, in seconds (a larger `Retry-After` is cut to it).
MAX_WAIT = 5.0
#: The wait after a 503 that names none (or names an HTTP date), in seconds.
DEFAULT_WAIT = 1.0
#: The least wait between tries, so a `Retry-After: 0` never makes a tight loop.
MIN_WAIT = 0.05


def retry_after(value: str | None) -> float:
    """The seconds to wait before trying again, from a `Retry-After` header's value (delay
    seconds; an HTTP date, or none, gives `DEFAULT_WAIT`), within `MIN_WAIT` and `MAX_WAIT`."""
    wait = DEFAULT_WAIT
    if value is not None:
        text = value.strip()
        if text.isdigit() and len(text) <= 6:
            wait = float(text)
    return min(max(wait, MIN_WAIT), MAX_WAIT)


def not_run(answer: dict[str, Any] | None) -> bool:
    """Whether a JSON-RPC error answer says the request was refused before it ran."""
    error = answer.get("error") if isinstance(answer, dict) else None
    data = error.get("data") if isinstance(error, dict) else None
    return isinstance(data, dict) and data.get("mayHaveRun") is False


class PendingCall:
    """A legacy request awaiting its response, which the server's questions asked on its stream
    belong to: when the answer to one cannot be delivered, `fail` ends the call with that error
    (the server would wait for the answer, and the call for the server, until timeouts)."""

    __slots__ = ("_task", "error")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self._task = task
        #: Why the call was ended early; None while it runs on.
        self.error: McpError | None = None

    def fail(self, error: McpError) -> None:
        """End the call with `error` (once; nothing once the call is over)."""
        task = self._task
        if self.error is None and task is not None and not task.done():
            self.error = error
            task.cancel()

    def finish(self) -> None:
        """The call is over: a late `fail` does nothing."""
        self._task = None


#: The call whose response stream is being read (None on the standalone GET stream).
current_call: contextvars.ContextVar[PendingCall | None] = contextvars.ContextVar(
    "mrtr_pending_call", default=None
)

__all__ = [
    "ATTEMPTS",
    "DEFAULT_WAIT",
    "MAX_WAIT",
    "MIN_WAIT",
    "PendingCall",
    "current_call",
    "not_run",
    "retry_after",
]
