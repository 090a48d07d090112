"""`Deadline`: a lean timeout for the hot path.

Every MRTR round crosses a timeout on each side (the client's wait for an answer, the
server's `round_timeout`). Those are guards of minutes that almost never fire, so arming an
event-loop timer for each (what `asyncio.timeout` does) costs more than it protects: a timer
handle per use, kept alive until the loop turns, which on an in-process flow means thousands of
dead handles and extra garbage collections. Here a long deadline is an entry in a per-loop
watchdog that looks at the clock a few times a second; only short deadlines, where a quarter
second matters, get a timer of their own. When one expires, the task is cancelled and the
cancellation becomes a `TimeoutError`; a cancellation that came from elsewhere passes through.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from types import TracebackType
from typing import Any

#: Deadlines at least this long are watched by the shared watchdog (and may fire up to one
#: tick late); shorter ones get a precise timer.
COARSE_AFTER = 2.0
TICK = 0.25


class _Watchdog:
    """One per event loop: expires the long deadlines that are due, `TICK` by `TICK`.

    It holds no reference to its loop (not even to its own tick timer, which does), so the
    registry's weak key can let a finished loop go.
    """

    __slots__ = ("live", "ticking")

    def __init__(self) -> None:
        #: The long deadlines entered and not yet left or expired (a dict: ordered, O(1)).
        self.live: dict[Deadline, None] = {}
        #: Whether a tick is scheduled.
        self.ticking = False

    def add(self, deadline: Deadline, loop: asyncio.AbstractEventLoop) -> None:
        self.live[deadline] = None
        if not self.ticking:
            self.ticking = True
            loop.call_later(TICK, self.tick)

    def discard(self, deadline: Deadline) -> None:
        self.live.pop(deadline, None)

    def tick(self) -> None:
        """Expire the deadlines that are due; come back in a `TICK` while any is left."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = [deadline for deadline in self.live if deadline.when <= now]
        for deadline in due:
            del self.live[deadline]
            deadline.expire()
        if self.live:
            loop.call_later(TICK, self.tick)
        else:
            self.ticking = False


if sys.version_info >= (3, 12):
    current_task = asyncio.current_task
else:
    # 3.11's `asyncio.current_task` is a Python function around this same lookup: called on
    # every round (here and by the replay engine), the direct lookup costs a third as much.
    # A private of asyncio, read once here and only on 3.11 (3.12's lookup is in C already).
    _current_tasks = asyncio.tasks._current_tasks  # type: ignore[attr-defined]  # noqa: SLF001
    _running_loop = asyncio.get_running_loop

    def current_task() -> asyncio.Task[Any] | None:
        """The task running now (`asyncio.current_task()`); raises outside a running loop."""
        task: asyncio.Task[Any] | None = _current_tasks.get(_running_loop())
        return task


_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = (
    weakref.WeakKeyDictionary()
)
# The last loop asked about and its watchdog: nearly every call is for the same loop, and this
# spares the weak-dictionary lookup (which builds a weak reference per call).
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Watchdog] | None = None


def _watchdog(loop: asyncio.AbstractEventLoop) -> _Watchdog:
    global _last
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]
    dog = _watchdogs.get(loop)
    if dog is None:
        dog = _watchdogs[loop] = _Watchdog()
    _last = (weakref.ref(loop), dog)
    return dog


class Deadline:
    """`with Deadline(seconds): await ...` raises `TimeoutError` once `seconds` have passed."""

    __slots__ = ("_cancelling", "_expired", "_seconds", "_task", "_timer", "when")

    def __init__(self, seconds: float, task: asyncio.Task[Any] | None = None) -> None:
        """`task`: the task the deadline guards, when the caller has it at hand (by default
        the task entering it)."""
        self._seconds = seconds
        self._expired = False
        self._task = task
        # The watchdog watching it (a long deadline) or its own timer (a short one).
        self._timer: _Watchdog | asyncio.TimerHandle | None = None
        #: The event-loop time it expires at (set on entering it).
        self.when = 0.0

    @property
    def expired(self) -> bool:
        """True once the time ran out (whether or not the awaited work noticed)."""
        return self._expired

    def expire(self) -> None:
        """Expire now: mark it expired and cancel the task it guards (the timer's callback)."""
        self._expired = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> Deadline:
        task = self._task
        if task is None:
            task = self._task = current_task()
            if task is None:
                raise RuntimeError("Deadline must be used inside a task")
        self._cancelling = task.cancelling()
        loop = task.get_loop()
        seconds = self._seconds
        when = self.when = loop.time() + seconds
        if seconds >= COARSE_AFTER:
            dog = self._timer = _watchdog(loop)
            dog.add(self, loop)
        else:
            self._timer = loop.call_at(when, self.expire)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timer = self._timer
        if isinstance(timer, _Watchdog):
            timer.live.pop(self, None)
        elif timer is not None:
            timer.cancel()
        if self._expired:
            assert self._task is not None
            # Take back the cancellation this deadline requested; if it is what stopped the
            # work (and no other cancellation is pending), it is a timeout.
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc
