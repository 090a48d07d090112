"""`ToolError`, and what any other failure of a handler tells the client.

A handler's exception text is written for its developer: it may hold paths, SQL, hostnames
or secrets. So by default (`ServerOptions.mask_errors`) the client is told only that an
internal error occurred and under which short id the server logged it, with the traceback;
an error meant for the model is raised as `ToolError`, whose message goes through as it is.
`McpError`s raised by handlers are protocol errors and never masked (the engine raises them).
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from ._engine.outcome import InputPending, ReplayError, leaves
from .worker_threads import OffLoopError

logger = logging.getLogger("mrtr.server")


class ToolError(Exception):
    """An error whose message is meant for the model: shown as it is, never masked.

    Raised from a tool it becomes the tool's result (`isError: true`); from a prompt or a
    resource handler, the message of the -32603 error the request gets.
    """


#: Errors whose text mrtr itself wrote (a broken replay rule, a sync handler asking): they
#: hold nothing of the handler's data and tell its developer what to fix, so never masked.
_OURS = (ReplayError, OffLoopError, ToolError)


def _errors(exc: BaseException) -> list[BaseException]:
    """The errors of a (possibly grouped) exception, without the engine's own signals."""
    out = [e for e in leaves(exc) if not isinstance(e, InputPending | asyncio.CancelledError)]
    return out or [exc]


def failure_text(exc: BaseException, what: str, mask: bool, prefix: str) -> str:
    """What the client is told about `exc`, raised by the handler of `what` (logged here).

    A `ToolError`'s message (or several, from a group of nothing else) goes as it is. Anything
    else is logged with its traceback and told as `prefix` and then, masked, the log line's
    short id (so the two can be matched without the text reaching the client), or unmasked
    the exception's text (its type when it has none). mrtr's own rule errors (`ReplayError`,
    `OffLoopError`) are never masked.
    """
    errors = _errors(exc)
    if all(isinstance(e, ToolError) for e in errors):
        return "; ".join(str(e) or "an error occurred" for e in errors)
    if not mask or all(isinstance(e, _OURS) for e in errors):
        logger.error("%s failed", what, exc_info=exc)
        return prefix + "; ".join(str(e) or type(e).__name__ for e in errors)
    incident = secrets.token_hex(4)
    logger.error("%s failed [%s]", what, incident, exc_info=exc)
    return f"{prefix}an internal error occurred (logged on the server as {incident})"


__all__ = ["ToolError", "failure_text"]
