"""Wire types of the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663). No I/O.

A server that negotiated the extension on a request may answer a `tools/call` with a
`CreateTaskResult` (`resultType: "task"`) instead of the tool's result; the client then polls
`tasks/get`, answers the task's `inputRequests` with `tasks/update`, and may `tasks/cancel`.
`notifications/tasks` carries the same `DetailedTask` that `tasks/get` returns, to a client
that asked for it with `subscriptions/listen` (`notifications.taskIds`).

The extension is negotiated per request: the client names it under
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`, and the server advertises
it under `capabilities.extensions` in `server/discover`.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from .errors import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, McpError
from .meta import CLIENT_CAPABILITIES
from .types import McpModel, Meta, Result

EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"

TASKS_GET: Final = "tasks/get"
TASKS_UPDATE: Final = "tasks/update"
TASKS_CANCEL: Final = "tasks/cancel"
NOTIFICATION_TASKS: Final = "notifications/tasks"
#: Every request method the extension adds (all carry `params.taskId`).
TASK_METHODS: frozenset[str] = frozenset({TASKS_GET, TASKS_UPDATE, TASKS_CANCEL})
#: Requests a server may answer with a `CreateTaskResult`.
TASK_AUGMENTABLE_METHODS: frozenset[str] = frozenset({"tools/call"})

#: The `resultType` of a `CreateTaskResult`; every other result of the extension is "complete".
RESULT_TYPE_TASK: Final = "task"
#: The v1 `_meta` key a server must not put on an inlined result (the id is at the root).
RELATED_TASK_META: Final = "io.modelcontextprotocol/related-task"
#: The `subscriptions/listen` filter field that asks for `notifications/tasks`.
TASK_IDS_FILTER: Final = "taskIds"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
TASK_STATUSES: tuple[str, ...] = (WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED)
TERMINAL_STATUSES: frozenset[str] = frozenset({COMPLETED, FAILED, CANCELLED})

#: How a tool takes part in tasks: never (always answers in line), optional (a task when the
#: client negotiated the extension, in line otherwise), required (a task, or -32021).
TaskSupport = Literal["never", "optional", "required"]
TASK_SUPPORT_VALUES: tuple[str, ...] = ("never", "optional", "required")


class Task(McpModel):
    """What every task shape carries: id, status, timestamps (ISO 8601), TTL and poll hint.

    `ttl_ms` is always on the wire (null means unlimited), unlike other optional fields.
    """

    task_id: str
    status: TaskStatus
    created_at: str
    last_updated_at: str
    # The schema says "number": a peer may send 1500.5, and an int stays an int on the way out.
    ttl_ms: int | float | None = None
    status_message: str | None = None
    poll_interval_ms: int | float | None = None

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this value; `ttlMs` kept even when null."""
        wire = super().to_wire()
        wire.setdefault("ttlMs", None)
        return wire


class DetailedTask(Task):
    """A task with its status-specific payload: `inputRequests` while `input_required`,
    `result` once `completed`, `error` (a JSON-RPC error object) once `failed`."""

    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class CreateTaskResult(Task):
    """The answer to a task-augmented request: the task's seed state, `resultType: "task"`.

    Never carries `result`, `error`, `inputRequests` or `requestState`.
    """

    result_type: Literal["task"] = "task"
    meta: Meta = None


class GetTaskResult(DetailedTask):
    """The answer to `tasks/get`: the `DetailedTask`, with `resultType: "complete"`."""

    result_type: Literal["complete"] = "complete"
    meta: Meta = None


class UpdateTaskResult(Result):
    """The empty acknowledgement of `tasks/update`."""


class CancelTaskResult(Result):
    """The empty acknowledgement of `tasks/cancel`."""


class TaskRequestParams(McpModel):
    """Params of `tasks/get` and `tasks/cancel`."""

    task_id: str
    meta: Meta = None


GetTaskRequestParams = TaskRequestParams
CancelTaskRequestParams = TaskRequestParams


class UpdateTaskRequestParams(TaskRequestParams):
    """Params of `tasks/update`: answers to (some of) the task's outstanding `inputRequests`."""

    input_responses: dict[str, Any] = Field(default_factory=dict)


class TaskStatusNotificationParams(DetailedTask):
    """Params of `notifications/tasks`: the same `DetailedTask` `tasks/get` would return."""

    meta: Meta = None


#: The params model of each request the extension adds.
REQUEST_PARAMS: dict[str, type[McpModel]] = {
    TASKS_GET: GetTaskRequestParams,
    TASKS_UPDATE: UpdateTaskRequestParams,
    TASKS_CANCEL: CancelTaskRequestParams,
}

#: The result model of each request the extension adds.
RESULTS: dict[str, type[McpModel]] = {
    TASKS_GET: GetTaskResult,
    TASKS_UPDATE: UpdateTaskResult,
    TASKS_CANCEL: CancelTaskResult,
}


def requests_tasks(params: Any) -> bool:
    """Whether a request's params declare the extension in their per-request client
    capabilities (`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`)."""
    if not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return False
    caps = meta.get(CLIENT_CAPABILITIES)
    if not isinstance(caps, dict):
        return False
    extensions = caps.get("extensions")
    return isinstance(extensions, dict) and EXTENSION_ID in extensions


def is_create_task_result(result: Any) -> bool:
    """Whether a decoded result object is a `CreateTaskResult`."""
    return isinstance(result, dict) and result.get("resultType") == RESULT_TYPE_TASK


def missing_tasks_capability(what: str) -> McpError:
    """The -32021 error for a request that needs the extension the client did not declare."""
    return McpError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} needs the {EXTENSION_ID} extension: declare it under "
        f"_meta[{CLIENT_CAPABILITIES!r}].extensions on the request",
        {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}},
    )


def task_not_found(task_id: str, reason: str = "Task not found") -> McpError:
    """The -32602 error for a task id the server does not know (or not for this caller)."""
    shown = task_id if len(task_id) <= 80 else task_id[:77] + "..."
    return McpError(INVALID_PARAMS, f"Failed to retrieve task {shown!r}: {reason}")


__all__ = [
    "CANCELLED",
    "COMPLETED",
    "EXTENSION_ID",
    "FAILED",
    "INPUT_REQUIRED",
    "NOTIFICATION_TASKS",
    "RELATED_TASK_META",
    "REQUEST_PARAMS",
    "RESULTS",
    "RESULT_TYPE_TASK",
    "TASKS_CANCEL",
    "TASKS_GET",
    "TASKS_UPDATE",
    "TASK_AUGMENTABLE_METHODS",
    "TASK_IDS_FILTER",
    "TASK_METHODS",
    "TASK_STATUSES",
    "TASK_SUPPORT_VALUES",
    "TERMINAL_STATUSES",
    "WORKING",
    "CancelTaskRequestParams",
    "CancelTaskResult",
    "CreateTaskResult",
    "DetailedTask",
    "GetTaskRequestParams",
    "GetTaskResult",
    "Task",
    "TaskRequestParams",
    "TaskStatus",
    "TaskStatusNotificationParams",
    "TaskSupport",
    "UpdateTaskRequestParams",
    "UpdateTaskResult",
    "is_create_task_result",
    "missing_tasks_capability",
    "requests_tasks",
    "task_not_found",
]
