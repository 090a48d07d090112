"""`TaskRecord`: what the server keeps of one task, as stored and as shown on the wire.

A record is plain JSON bytes in the store, so any instance sharing the store can answer
`tasks/get` for it. Times are wall-clock epoch seconds (instances compare them), shown as ISO
8601 strings. The instance running the task owns the record and rewrites it on every change;
it also renews `lease` while it runs, so a reader that finds a live status with a lapsed lease
knows the worker died (see `manager.py`).
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...protocol import tasks as wire

logger = logging.getLogger("mrtr.server")


def iso(epoch: float) -> str:
    """`epoch` seconds as an ISO 8601 UTC timestamp with milliseconds."""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class TaskRecord:
    """One task: identity, owner, status and payload (see the module docstring)."""

    task_id: str
    owner: str | None
    tool: str
    created: float
    ttl_ms: int
    poll_ms: int
    status: str = wire.WORKING
    updated: float = 0.0
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    #: Questions still waiting for an answer: key -> `{method, params}`.
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Epoch seconds until which the running instance vouches for the task (0: none needed).
    lease: float = 0.0

    @property
    def terminal(self) -> bool:
        """Whether the task reached `completed`, `failed` or `cancelled`."""
        return self.status in wire.TERMINAL_STATUSES

    @property
    def expires(self) -> float:
        """Epoch seconds after which the task may be discarded (creation plus its TTL)."""
        return self.created + self.ttl_ms / 1000

    def encode(self) -> bytes:
        """The record as stored."""
        out: dict[str, Any] = {
            "id": self.task_id,
            "o": self.owner,
            "t": self.tool,
            "c": self.created,
            "u": self.updated,
            "ttl": self.ttl_ms,
            "poll": self.poll_ms,
            "s": self.status,
            "l": self.lease,
        }
        if self.message is not None:
            out["m"] = self.message
        if self.result is not None:
            out["r"] = self.result
        if self.error is not None:
            out["e"] = self.error
        if self.inputs:
            out["i"] = self.inputs
        return orjson.dumps(out)

    @classmethod
    def decode(cls, data: bytes) -> TaskRecord | None:
        """Inverse of `encode`; None (logged) for bytes that are not a record."""
        try:
            raw = orjson.loads(data)
            record = cls(
                task_id=raw["id"],
                owner=raw["o"],
                tool=raw["t"],
                created=float(raw["c"]),
                ttl_ms=int(raw["ttl"]),
                poll_ms=int(raw["poll"]),
                status=raw["s"],
                updated=float(raw["u"]),
                message=raw.get("m"),
                result=raw.get("r"),
                error=raw.get("e"),
                inputs=raw.get("i") or {},
                lease=float(raw["l"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            logger.error("ignored a task record that does not decode: %s", exc)
            return None
        if record.status not in wire.TASK_STATUSES:
            logger.error("ignored a task record with status %r", record.status)
            return None
        return record

    def detailed(self, outstanding: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The `DetailedTask` wire object; `outstanding` replaces `inputs` when given (the
        questions still unanswered once answers already delivered are taken off)."""
        status = self.status
        inputs = self.inputs if outstanding is None else outstanding
        if status == wire.INPUT_REQUIRED and not inputs:
            status = wire.WORKING  # every question is answered: the task works on
        out = self._task(status)
        if status == wire.INPUT_REQUIRED:
            out["inputRequests"] = inputs
        elif status == wire.COMPLETED:
            out["result"] = self.result if self.result is not None else {"content": []}
        elif status == wire.FAILED:
            out["error"] = self.error or {"code": -32603, "message": "Task failed"}
        return out

    def created_result(self) -> dict[str, Any]:
        """The `CreateTaskResult` for this task (its seed state, without any payload)."""
        status = wire.WORKING if self.status == wire.INPUT_REQUIRED else self.status
        return {"resultType": wire.RESULT_TYPE_TASK, **self._task(status)}

    def _task(self, status: str) -> dict[str, Any]:
        """The fields every wire form of the task has (`Task`), with `status`."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": status,
            "createdAt": iso(self.created),
            "lastUpdatedAt": iso(self.updated or self.created),
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_ms,
        }
        if self.message is not None:
            out["statusMessage"] = self.message
        return out
