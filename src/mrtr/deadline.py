"""`Deadline`: a lean timeout for the hot path.

`asyncio.timeout` is an async context manager that reschedules through a state machine; every
MRTR round crosses one on each side, so this one keeps only what the SDK needs: a single timer
that cancels the current task, and a `TimeoutError` in place of the cancellation it caused.
A cancellation that came from elsewhere passes through untouched.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    """`with Deadline(seconds): await ...` raises `TimeoutError` once `seconds` have passed."""

    __slots__ = ("_expired", "_handle", "_seconds", "_task")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None

    @property
    def expired(self) -> bool:
        """True once the time ran out (whether or not the awaited work noticed)."""
        return self._expired

    def _expire(self) -> None:
        self._expired = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        loop = task.get_loop()
        self._handle = loop.call_at(loop.time() + self._seconds, self._expire)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._expired and exc_type is asyncio.CancelledError:
            assert self._task is not None
            # Undo the cancellation this deadline requested, unless another is also pending.
            if self._task.uncancel() == 0:
                raise TimeoutError from exc
