"""`TaskSettings`: how a tool takes part in tasks (`@server.tool(task=...)`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...protocol.tasks import TASK_SUPPORT_VALUES, TaskSupport


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """How calls of one tool become tasks.

    `support`: "optional" (a task when the request declares the tasks extension, an ordinary
    call otherwise) or "required" (a task; a request without the extension gets -32021).
    `start_after`: seconds a call may run in line before it becomes a task; 0 (the default):
    as soon as the handler waits on anything; None: only when it calls `ctx.run_as_task()`.
    A handler may always call `await ctx.run_as_task()` to become a task earlier.
    `ttl`: seconds a task is kept from its creation (its `ttlMs`); a task still running then
    is stopped, and discarded with its record. `poll_interval`: the `pollIntervalMs`
    suggested to clients, in seconds.
    `lease`: seconds the instance running a task vouches for it between renewals (it renews
    every third of that); a task whose instance is silent longer is reported failed.
    """

    support: TaskSupport = "optional"
    start_after: float | None = 0.0
    ttl: float = 3600.0
    poll_interval: float = 1.0
    lease: float = 10.0

    def __post_init__(self) -> None:
        if self.support not in ("optional", "required"):
            raise ValueError(
                f"TaskSettings.support must be 'optional' or 'required', not {self.support!r}"
            )
        if self.start_after is not None and not (
            math.isfinite(self.start_after) and self.start_after >= 0
        ):
            raise ValueError("TaskSettings.start_after must be seconds >= 0, or None")
        if not (math.isfinite(self.ttl) and self.ttl > 0):
            raise ValueError("TaskSettings.ttl must be a finite number of seconds > 0")
        if not (math.isfinite(self.poll_interval) and self.poll_interval > 0):
            raise ValueError("TaskSettings.poll_interval must be a number of seconds > 0")
        if not (math.isfinite(self.lease) and self.lease > 0):
            raise ValueError("TaskSettings.lease must be a finite number of seconds > 0")

    @property
    def ttl_ms(self) -> int:
        """`ttl` in whole milliseconds, as the wire carries it."""
        return max(1, round(self.ttl * 1000))

    @property
    def poll_ms(self) -> int:
        """`poll_interval` in whole milliseconds, as the wire carries it."""
        return max(1, round(self.poll_interval * 1000))


def task_settings(task: Any) -> TaskSettings | None:
    """The settings `@server.tool(task=...)` was given: None for "never" (the default)."""
    if task is None or task == "never":
        return None
    if isinstance(task, TaskSettings):
        return task
    if isinstance(task, str) and task in TASK_SUPPORT_VALUES:
        return TaskSettings(support=task)  # type: ignore[arg-type]
    raise ValueError(
        f"task must be 'never', 'optional', 'required' or a TaskSettings, not {task!r}"
    )
