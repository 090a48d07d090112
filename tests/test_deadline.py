"""`Deadline`: precise for short timeouts, a shared watchdog for long ones, and a cancellation
from elsewhere is never mistaken for a timeout."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from mrtr import deadline as deadline_module
from mrtr.deadline import Deadline


async def test_short_deadline_raises_timeout_error_and_reports_expired() -> None:
    limit = Deadline(0.01)
    with pytest.raises(TimeoutError), limit:
        await asyncio.sleep(5)
    assert limit.expired


async def test_work_that_finishes_in_time_is_left_alone() -> None:
    limit = Deadline(0.5)
    with limit:
        await asyncio.sleep(0)
    assert not limit.expired
    await asyncio.sleep(0.02)  # no stray cancellation arrives later


async def test_long_deadlines_are_expired_by_the_shared_watchdog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deadline_module, "COARSE_AFTER", 0.05)
    monkeypatch.setattr(deadline_module, "TICK", 0.02)
    loop = asyncio.get_running_loop()
    limits = [Deadline(0.05), Deadline(0.06), Deadline(60)]

    async def wait(limit: Deadline) -> str:
        try:
            with limit:
                await asyncio.sleep(1)
        except TimeoutError:
            return "timeout"
        return "done"

    started = loop.time()
    first, second = await asyncio.gather(wait(limits[0]), wait(limits[1]))
    assert (first, second) == ("timeout", "timeout")
    assert loop.time() - started < 0.9  # expired by the watchdog, not by the sleep ending
    with limits[2]:
        await asyncio.sleep(0)  # a long deadline that is not due stays quiet
    assert not limits[2].expired
    assert deadline_module._watchdog(loop).live == {}  # nothing left behind


async def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def guarded() -> None:
        with Deadline(30):
            await asyncio.sleep(5)

    task = asyncio.create_task(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_deadline_needs_a_task() -> None:
    loop = asyncio.get_running_loop()
    outside: list[BaseException] = []

    def from_a_callback() -> None:  # runs on the loop, but in no task
        try:
            Deadline(1).__enter__()
        except RuntimeError as exc:
            outside.append(exc)

    loop.call_soon(from_a_callback)
    await asyncio.sleep(0.01)
    assert len(outside) == 1 and "inside a task" in str(outside[0])


def test_the_watchdog_does_not_keep_a_finished_loop_alive() -> None:
    async def guarded() -> None:
        with Deadline(30):  # long: goes through the loop's watchdog
            await asyncio.sleep(0)

    finished = []
    for _ in range(3):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(guarded())
        loop.close()
        finished.append(weakref.ref(loop))
        del loop
    gc.collect()
    assert [ref() for ref in finished] == [None, None, None]
