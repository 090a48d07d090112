"""`TaskStore`: task records and the answers and cancellations sent for them, in a `Store`.

Each writer has keys of its own, so that no two instances ever rewrite one value and lose
each other's change (the `Store` has no compare-and-swap):

* `<prefix><id>`: the record, written by the instance running the task (and, once, by a
  reader that finds the worker dead);
* `<prefix><id>/a/<key>`: the answer to input key `<key>`, written by `tasks/update` with
  `add`, so the first answer for a key wins and a repeat is ignored;
* `<prefix><id>/c`: the cancellation request, written by `tasks/cancel`.

Every value lives until the task's own expiry (creation plus its TTL). Answers are never
deleted when taken: keys are unique over a task's lifetime, so a stale one answers nothing.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..store import Store
from .record import TaskRecord


class TaskStore:
    """Task records in `store`, under keys starting with `prefix`."""

    __slots__ = ("prefix", "store")

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def _key(self, task_id: str) -> str:
        return self.prefix + task_id

    @staticmethod
    def _left(record: TaskRecord) -> float:
        return record.expires - time.time()

    async def create(self, record: TaskRecord) -> bool:
        """Store a new record; False if the id is taken (or the TTL already over)."""
        left = self._left(record)
        if left <= 0:
            return False
        return await self.store.add(self._key(record.task_id), record.encode(), left)

    async def save(self, record: TaskRecord) -> bool:
        """Rewrite a record; False (nothing written) once the task has expired."""
        left = self._left(record)
        if left <= 0:
            return False
        await self.store.set(self._key(record.task_id), record.encode(), left)
        return True

    async def load(self, task_id: str) -> TaskRecord | None:
        """The record of `task_id`, or None (unknown, expired, or not a record)."""
        data = await self.store.get(self._key(task_id))
        return None if data is None else TaskRecord.decode(data)

    async def put_answer(self, record: TaskRecord, key: str, answer: Any) -> bool:
        """Record the answer to input `key`; False if the key already has one."""
        left = self._left(record)
        if left <= 0:
            return False
        key_name = f"{self._key(record.task_id)}/a/{key}"
        return await self.store.add(key_name, orjson.dumps(answer), left)

    async def answer(self, task_id: str, key: str) -> Any:
        """The answer recorded for input `key`, or None."""
        data = await self.store.get(f"{self._key(task_id)}/a/{key}")
        return None if data is None else orjson.loads(data)

    async def answered(self, task_id: str, keys: list[str]) -> set[str]:
        """Which of `keys` have an answer recorded."""
        found = set()
        for key in keys:
            if await self.store.get(f"{self._key(task_id)}/a/{key}") is not None:
                found.add(key)
        return found

    async def request_cancel(self, record: TaskRecord) -> None:
        """Ask whoever runs the task to cancel it."""
        left = self._left(record)
        if left > 0:
            await self.store.set(f"{self._key(record.task_id)}/c", b"1", left)

    async def cancel_requested(self, task_id: str) -> bool:
        """Whether `tasks/cancel` was sent for the task."""
        return await self.store.get(f"{self._key(task_id)}/c") is not None
