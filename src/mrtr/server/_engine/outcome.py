"""How a run of a handler ends (replay rule 4): its value, `STOPPED` for input, or a `Failure`.

Also the engine's own signals: `InputPending` (a `BaseException`, so that `except Exception`
in a handler does not swallow it) and `ReplayError` (a broken rule, named with its key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ...deadline import current_task
from ...protocol.errors import McpError


class InputPending(BaseException):
    """Raised where a handler awaits an unanswered question; the server catches it."""


class ReplayError(RuntimeError):
    """A handler broke a rule of the replay engine; the message names the rule and the key."""


class UnaskableMethod(ReplayError, ValueError):
    """A handler asked a method that is not an input request (a `ValueError` too)."""


class _Stopped:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STOPPED"


#: What `Replay.run` gives when the round ends for input (rule 4): `Replay.outgoing` is asked.
STOPPED: Final[Any] = _Stopped()


class Failure:
    """How a run ended when the handler failed (rule 4): reported, not raised."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    @property
    def is_error(self) -> bool:
        """An `Exception` (or a group of them) of the handler's own, which a tool reports as its
        result; not a `BaseException` such as `KeyboardInterrupt` or a stray cancellation."""
        found = leaves(self.exc)
        return all(isinstance(leaf, Exception | InputPending) for leaf in found) and any(
            isinstance(leaf, Exception) for leaf in found
        )

    def describe(self) -> str:
        """What went wrong, for a person: the message of each error (groups flattened)."""
        parts = [
            str(leaf) or type(leaf).__name__
            for leaf in leaves(self.exc)
            if not isinstance(leaf, InputPending | asyncio.CancelledError)
        ]
        return "; ".join(parts) or type(self.exc).__name__


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions of a group, flattened (a lone exception is its own leaf)."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        item = todo.pop()
        if isinstance(item, BaseExceptionGroup):
            todo.extend(reversed(item.exceptions))
        else:
            out.append(item)
    return out


def from_pending(exc: BaseException) -> bool:
    """`InputPending`, or an error raised from one or while handling one (rule 4)."""
    todo: list[BaseException] = [exc]
    for _ in range(64):  # chains are short; a bound keeps a pathological one cheap
        if not todo:
            break
        item = todo.pop()
        if isinstance(item, InputPending):
            return True
        if item.__cause__ is not None:
            todo.append(item.__cause__)
        if item.__context__ is not None and item.__context__ is not item.__cause__:
            todo.append(item.__context__)
    return False


def stops_for_input(exc: BaseException) -> bool:
    """Rule 4: whether `exc` ends a run for input (given a question is pending)."""
    if not isinstance(exc, BaseExceptionGroup):
        return from_pending(exc)
    found = False
    for leaf in leaves(exc):
        if from_pending(leaf):
            found = True
        elif not isinstance(leaf, asyncio.CancelledError):
            return False
    return found


async def run_unasking(start: Callable[[], Awaitable[Any]]) -> Any:
    """`Replay.run` for a handler given no context, which therefore cannot ask, track a task
    or record a `ctx.once` call: runs `start()`; its value or a `Failure`, a protocol error
    raised as it is, and the cancellation of the request itself let through."""
    try:
        return await start()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            # The task running the request, looked up only now (it is this one): finding it
            # costs a system call on 3.11, which the common run does without.
            main = current_task()
            if main is not None and main.cancelling():
                raise
        failed = exc
    error = protocol_error(failed)
    if error is not None:
        raise error
    return Failure(failed)


def protocol_error(exc: BaseException) -> McpError | None:
    """A protocol error (a malformed answer, a missing capability) stays a JSON-RPC error."""
    for leaf in leaves(exc):
        if isinstance(leaf, McpError):
            return leaf
    return None
