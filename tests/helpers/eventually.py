"""A bounded wait for a condition that another task, thread or process makes true.

Rules: every wait has a bound, and a wait that reaches it fails naming what it waited for; the
bound only ever guards against a hang, it is never what a test measures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(
    check: Callable[[], object],
    what: str,
    timeout: float = 10.0,  # noqa: ASYNC109  (the bound is what the call states, per call)
    interval: float = 0.01,
) -> None:
    """Return once `check()` is true, looking every `interval` seconds; fail after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() >= deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
