"""Requests their client cancelled, told apart from requests whose connection dropped.

Rules:

1. A request cancelled because its client said so (`notifications/cancelled`, on any stream
   transport and either era) has its task marked before it is cancelled (`cancel_by_client`);
   one whose connection dropped or closed its stream (over Streamable HTTP the 2026-07-28
   way to cancel, which a lost connection also looks like) is cancelled unmarked.
2. Code running in the request's task asks `by_client()` while it handles the
   `CancelledError`, to keep what a re-sent request can come back to (the proxy's held
   calls) only when nobody asked for it to stop.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

#: Tasks cancelled at their client's word (rule 1); weak: a task ends, its mark with it.
_BY_CLIENT: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def cancel_by_client(task: asyncio.Task[Any]) -> None:
    """Cancel `task`, a request its client cancelled (rule 1)."""
    _BY_CLIENT.add(task)
    task.cancel()


def by_client() -> bool:
    """Whether the running task is a request its client cancelled (rule 2)."""
    task = asyncio.current_task()
    return task is not None and task in _BY_CLIENT


__all__ = ["by_client", "cancel_by_client"]
