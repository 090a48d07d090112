"""Running a coroutine's first step inline, and awaiting the rest only if it waits.

Most requests are answered without waiting for anything: a plain tool call, a round that
stops at a question or replays its answers. For those, what an `await` would set up around the
work (a disconnect watcher, a deadline) is pure cost. The caller runs the first step itself
(`coro.send(None)`): a `StopIteration` carries the value at once, and only a coroutine that
yields something to wait on gets the guards, before `resume` awaits the rest of it.

A request that needs a task of its own (to be cancelled by id while its connection goes on)
gets one from `start_task`, which on Python 3.12 and later runs that first step at once too.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Whether `start_task` runs a task's first step before it returns (Python 3.12 and later).
STARTS_EAGERLY = sys.version_info >= (3, 12)


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


if sys.version_info >= (3, 12):

    def start_task(running: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """A task for `running`, stepped at once up to its first wait (an eager start): one
        that finishes there is done when this returns, without a turn of the loop. Inside
        that step `asyncio.current_task()` is the new task, as in any later one."""
        return asyncio.Task(running, loop=asyncio.get_running_loop(), eager_start=True)

else:

    def start_task(running: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """A task for `running` (started eagerly from Python 3.12 on, which 3.11's tasks
        cannot do: here its first step waits for a turn of the loop)."""
        return asyncio.get_running_loop().create_task(running)


__all__ = ["STARTS_EAGERLY", "resume", "start_task"]
