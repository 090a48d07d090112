"""Running a coroutine's first step inline, and awaiting the rest only if it waits.

Most requests are answered without waiting for anything: a plain tool call, a round that
stops at a question or replays its answers. For those, what an `await` would set up around the
work (a disconnect watcher, a deadline) is pure cost. The caller runs the first step itself
(`coro.send(None)`): a `StopIteration` carries the value at once, and only a coroutine that
yields something to wait on gets the guards, before `resume` awaits the rest of it.
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

_T = TypeVar("_T")


@types.coroutine
def resume(coro: Coroutine[Any, Any, _T], pending: Any) -> Generator[Any, Any, _T]:
    """Await `coro` on from the point where its first step (`coro.send(None)`) stopped,
    waiting on `pending`: as `await coro` would have, whatever the task sends or throws."""
    while True:
        try:
            sent = yield pending
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation, mostly: the coroutine gets it
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                result: _T = stop.value
                return result
            continue
        if sent is None:  # what asyncio sends: the rest is a plain `await`
            result = yield from coro
            return result
        try:
            pending = coro.send(sent)
        except StopIteration as stop:
            result = stop.value
            return result


__all__ = ["resume"]
