"""Running a server's transport as the process's main work: on uvloop when it is installed,
and ended cleanly by SIGTERM as by the end of input."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        # Not run in here: every exception raised under the loop would be chained to this one.
        run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    else:
        run = uvloop.run
    run(main)


async def until_terminated(main: Coroutine[Any, Any, None]) -> None:
    """Run `main`, ending it on SIGTERM as on end of input: cancelled, so that its cleanup
    (requests ended, the lifespan run out) still runs, and the process exits normally."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
        await main
        return
    try:
        await main
    except asyncio.CancelledError:
        if not terminated:
            raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


__all__ = ["run_loop", "until_terminated"]
