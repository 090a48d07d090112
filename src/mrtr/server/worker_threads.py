"""Sync handlers run in worker threads, so one that blocks never stalls the event loop.

A plain `def` handler (a tool doing `time.sleep`, blocking I/O, heavy work) runs in a bounded
pool of threads (`ServerOptions.sync_workers`) with a copy of the request's context
variables; the loop goes on serving other requests meanwhile, and `round_timeout` or a
tool's `timeout=` fire on time. They stop waiting, not the thread: Python cannot interrupt a
thread, so the handler runs on to its end and its result is dropped.

A sync handler may change the server's tools, prompts and resources (`server.disable`,
`add_tool`...): the announcement to listening clients is handed to the event loop. It may
also call `ctx.log` and `ctx.report_progress` (without `await`): the send runs on the event
loop and the thread waits for it, so messages go out in order and before the result.

A handler in a thread cannot await, so it cannot ask the client (`ctx.elicit`, `ctx.sample`,
`ctx.list_roots`, `ctx.ask`) or use `ctx.once`: doing so raises `OffLoopError` at once, naming
what to do instead, rather than leaving a question nobody awaits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import os
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

#: The handler running in this worker thread (its function's name) and the loop it came
#: from; None on the event loop.
_OFF_LOOP: contextvars.ContextVar[tuple[str, asyncio.AbstractEventLoop] | None] = (
    contextvars.ContextVar("mrtr_off_loop", default=None)
)


def default_workers() -> int:
    """The default size of the pool: as `concurrent.futures` sizes its own."""
    return min(32, (os.cpu_count() or 1) + 4)


class OffLoopError(RuntimeError):
    """A sync handler running in a worker thread used what only an async handler can."""


def check_on_loop(action: str) -> None:
    """Raise `OffLoopError` if a sync handler in a worker thread is doing `action`."""
    running = _OFF_LOOP.get()
    if running is not None:
        raise OffLoopError(
            f"{running[0]}() is a sync handler running in a worker thread and cannot use "
            f"{action}: make it `async def` and await it, or register it with "
            "run_in_thread=False and keep it off ctx's asking methods"
        )


def call_on_loop(fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)` now, or, from a sync handler's worker thread, soon on its event loop.

    What publishes to listeners (a list change a sync tool makes) is safe on the loop only.
    """
    running = _OFF_LOOP.get()
    if running is None:
        fn(*args)
    else:
        running[1].call_soon_threadsafe(fn, *args)


#: How often a worker thread waiting for a send looks whether its loop still runs (seconds).
_LOOP_CHECK: Final = 1.0


class _Done:
    """An awaitable that is already over: what a send made from a worker thread returns."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE: Final = _Done()


def in_worker_thread() -> bool:
    """Whether this code runs in a sync handler's worker thread."""
    return _OFF_LOOP.get() is not None


def on_loop(make: Callable[[], Coroutine[Any, Any, None]]) -> Awaitable[None]:
    """`make()`, to be awaited on the event loop; from a sync handler's worker thread, `make()`
    run on the handler's loop right away and waited for (its exception raised here), and an
    awaitable that is already over returned.

    The thread waits so that what it sends keeps its order and goes out before the handler's
    result; if the loop stops meanwhile, the send is given up.
    """
    running = _OFF_LOOP.get()
    if running is None:
        return make()
    loop = running[1]
    if loop.is_closed():
        return _DONE
    # The send runs as the loop's own code: nothing it calls may take it for the thread.
    context = contextvars.copy_context()
    context.run(_OFF_LOOP.set, None)
    future: concurrent.futures.Future[None] = context.run(
        asyncio.run_coroutine_threadsafe, make(), loop
    )
    while True:
        try:
            future.result(_LOOP_CHECK)
            return _DONE
        except concurrent.futures.TimeoutError:
            if loop.is_closed() or not loop.is_running():
                future.cancel()
                return _DONE


def _in_thread(
    fn: Callable[..., Any], kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> Any:
    _OFF_LOOP.set((getattr(fn, "__name__", "handler"), loop))
    return fn(**kwargs)


class WorkerPool:
    """A bounded pool of worker threads for one server's sync handlers, made on first use."""

    __slots__ = ("_executor", "_name", "size")

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._name = name
        self._executor: ThreadPoolExecutor | None = None

    async def call(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """`fn(**kwargs)` in a worker thread, with a copy of the caller's context variables."""
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(
                self.size, thread_name_prefix=f"mrtr-{self._name}"
            )
        loop = asyncio.get_running_loop()
        job = functools.partial(contextvars.copy_context().run, _in_thread, fn, kwargs, loop)
        return await loop.run_in_executor(executor, job)

    def shutdown(self) -> None:
        """Stop the threads once their handlers return (new calls start a new pool)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "OffLoopError",
    "WorkerPool",
    "call_on_loop",
    "check_on_loop",
    "default_workers",
    "in_worker_thread",
    "on_loop",
]
