"""A server's lifespan: what it opens once per process (a DB pool, an HTTP client) and closes
at shutdown, and how handlers reach what it yields.

`Server(lifespan=fn)` takes a function of the server returning an async context manager
(usually an `@asynccontextmanager` generator). Every way of serving enters it through
`Server.running()`: `run()`/`mrtr serve` (stdio and HTTP), the ASGI app's `lifespan` startup
and shutdown, and `Client.in_memory`. Rules:

1. Entries are counted: the first runs the lifespan up to its `yield`, later ones (an ASGI app
   that is mounted and also served, two in-memory clients) share it, and the last exit runs it
   out. So it runs once per process however many ways serve it at once.
2. The context manager is entered and exited in one task of its own, whichever task entered
   first or exits last: a lifespan holding an `asyncio.TaskGroup` or an anyio cancel scope
   stays within the task that opened it.
3. A failure before the `yield` is a `LifespanError` naming the server and the cause, raised
   to whoever entered: the server does not start. A failure while running it out is logged
   and raised to the last exit.
4. What it yields is `server.state` and `ctx.state` in handlers, or is injected into a
   handler parameter annotated `State[T]` (never part of the input schema). Reading it
   while the lifespan is not running is a `LifespanError` saying so.
5. Nested lifespans (`nest`: a mounted server's) are entered, in order, after this one
   starts, and left, in reverse, before it is run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from .endpoint import LifespanError
from .injection import State, is_state_annotation

logger = logging.getLogger("mrtr.server")

#: A server's lifespan bound to its server: called once per run, it gives the context manager.
BoundLifespan = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


class _NotRunning:
    __slots__ = ()


_NOT_RUNNING: Any = _NotRunning()


class LifespanRunner:
    """Runs one server's lifespan (see the module rules)."""

    def __init__(self, name: str, lifespan: BoundLifespan | None) -> None:
        """`name`: the server's, for messages; `lifespan`: the server's lifespan, bound to it."""
        self.name = name
        self._lifespan = lifespan
        self._entries = 0
        self._state: Any = _NOT_RUNNING if lifespan is not None else None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        #: Lifespans run inside this one (rule 5), and while running, how to leave them.
        self._nested: list[Callable[[], contextlib.AbstractAsyncContextManager[Any]]] = []
        self._inside: contextlib.AsyncExitStack | None = None

    @property
    def state(self) -> Any:
        """What the lifespan yielded (None for a server without a lifespan)."""
        state = self._state
        if state is _NOT_RUNNING:
            raise LifespanError(
                f"server {self.name!r}: the lifespan state is read while the lifespan "
                "is not running; serve the server (run(), the ASGI app, Client.in_memory) or "
                "enter `async with server.running():` first"
            )
        return state

    @property
    def active(self) -> bool:
        """Whether the lifespan has started and not yet been run out."""
        return self._entries > 0

    def nest(self, running: Callable[[], contextlib.AbstractAsyncContextManager[Any]]) -> None:
        """Run `running()` inside this lifespan from its next start (rule 5)."""
        self._nested.append(running)

    async def enter(self) -> None:
        """Start the lifespan, or share the one already running (rule 1)."""
        if self._lifespan is None and not self._nested:
            self._entries += 1
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._entries == 0:
                if self._lifespan is not None:
                    await self._start(self._lifespan)
                if self._nested:
                    await self._enter_nested()
            self._entries += 1

    async def _enter_nested(self) -> None:
        inside = contextlib.AsyncExitStack()
        try:
            for running in self._nested:
                await inside.enter_async_context(running())
        except BaseException:
            await inside.aclose()
            await self._finish()
            raise
        self._inside = inside

    async def exit(self) -> None:
        """Leave the lifespan; the last exit runs it out (rule 1)."""
        if self._entries <= 0:
            return
        if self._lock is None:
            self._entries -= 1
            return
        async with self._lock:
            self._entries -= 1
            if self._entries == 0:
                inside, self._inside = self._inside, None
                try:
                    if inside is not None:
                        await inside.aclose()
                finally:
                    await self._finish()

    async def _start(self, lifespan: BoundLifespan) -> None:
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        stop = asyncio.Event()
        task = loop.create_task(
            self._host(lifespan, started, stop), name=f"lifespan of {self.name}"
        )
        try:
            await asyncio.shield(started)
        except BaseException:
            # It failed to start (rule 3), or whoever was starting it went away: either way
            # nothing is left running.
            stop.set()
            with contextlib.suppress(BaseException):
                await task
            raise
        self._task, self._stop = task, stop

    async def _host(
        self, lifespan: BoundLifespan, started: asyncio.Future[None], stop: asyncio.Event
    ) -> None:
        # Rule 2: the context manager lives in this one task from enter to exit.
        try:
            manager = lifespan()
            state = await manager.__aenter__()
        except BaseException as exc:
            error = LifespanError(
                f"server {self.name!r} did not start: its lifespan raised "
                f"{type(exc).__name__}: {exc}"
            )
            error.__cause__ = exc
            if not started.done():
                started.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        self._state = state
        started.set_result(None)
        try:
            await stop.wait()
        except BaseException as exc:  # the loop is shutting down under us
            self._state = _NOT_RUNNING
            await manager.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._state = _NOT_RUNNING
        await manager.__aexit__(None, None, None)

    async def _finish(self) -> None:
        task, stop = self._task, self._stop
        self._task = self._stop = None
        if task is None or stop is None:
            return
        stop.set()
        try:
            # Shielded: an exit that is itself cancelled still lets the lifespan run out.
            await asyncio.shield(task)
        except Exception as exc:
            raise LifespanError(
                f"server {self.name!r}: its lifespan raised at shutdown: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


__all__ = ["BoundLifespan", "LifespanError", "LifespanRunner", "State", "is_state_annotation"]
