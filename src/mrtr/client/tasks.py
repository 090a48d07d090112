"""Tasks (`io.modelcontextprotocol/tasks`) on the client: drive a task to its final result.

A server the client declared the extension to may answer a `tools/call` with a
`CreateTaskResult`. `Client.call_tool` then drives the task here and returns the tool's result
as if it had come at once; `Client.call_tool_as_task` and `Client.task(task_id)` give a
`TaskHandle` instead, to look at, wait for, or cancel the task, from this process or another.

Rules (the server may lie; the network may drop, duplicate or reorder):

1. A task only moves forward. The first terminal snapshot ends the wait; a snapshot equal to
   the last changes nothing, and a non-terminal notification whose `lastUpdatedAt` is older
   than the newest seen is ignored, so a duplicated or late notification is harmless. A poll's
   answer is taken as it is (the server's clocks may disagree; the next poll corrects a
   stale one, and rule 2 keeps it from asking anything twice).
2. Each `inputRequests` key is answered once (keys are unique over a task's lifetime): a key
   shown again after its answer went out is skipped; the same key naming another request is
   the server's protocol violation.
3. The wait between polls is the server's `pollIntervalMs`, clamped to the client's bounds,
   and backs off while the task's status stays the same: the shortest wait, from
   `min_poll_interval`, doubles with each poll that finds no new status, up to
   `backstop_interval` (a server's longer hint still wins), and starts again when the status
   changes. With a `notifications/tasks` stream the server agreed to, a notification ends
   the wait at once and polling goes on as a backstop only.
4. A `tasks/get` or `tasks/update` that fails in transit (a timeout, a dropped connection)
   or with -32603 is tried again, up to `max_poll_failures` times in a row; -32602 means the
   task is gone (expired, never existed, or not this caller's) and ends the wait.
5. A task still unfinished `ttl_grace` seconds past its `createdAt + ttlMs` is given up
   (`TASK_EXPIRED`): the server may already have discarded it.
6. A task `call_tool` drives for its caller is cancelled (`tasks/cancel`, best effort) when
   the call ends without its result: cancelled, past its deadline, or failed on this side.
   A `TaskHandle` never cancels unless asked.
7. No wait is endless: one gives up after `TaskOptions.max_wait` seconds (an hour; for a
   `TaskHandle`, unless `result(timeout=)` says otherwise) with `REQUEST_TIMEOUT` naming the
   bound, whatever the task's TTL says (a server may move it on forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from ..deadline import Deadline
from ..protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MAX_ROUNDS_EXCEEDED,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    TASK_CANCELLED,
    TASK_EXPIRED,
    McpError,
)
from ..protocol.meta import SUBSCRIPTION_ID
from ..protocol.tasks import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    NOTIFICATION_TASKS,
    TASK_IDS_FILTER,
    TASK_STATUSES,
    TASKS_CANCEL,
    TASKS_GET,
    TASKS_UPDATE,
    TERMINAL_STATUSES,
    WORKING,
    DetailedTask,
)
from ..protocol.types import CallToolResult
from .options import InputRequiredConfig, TaskOptions
from .subscription import ACKNOWLEDGED, Subscription
from .tool_output import first_problem

logger = logging.getLogger("mrtr.client")

#: Called with each new snapshot of a task the client waits on (sync or async).
TaskStatusCallback = Callable[[DetailedTask], Any]

# Failures of one request that say nothing about the task: worth trying again (rule 4).
_TRANSIENT = frozenset({REQUEST_TIMEOUT, CONNECTION_CLOSED, HTTP_ERROR, INTERNAL_ERROR})
_ACK_TIMEOUT = 5.0  # seconds a server has to acknowledge the notifications stream
_CANCEL_TIMEOUT = 5.0  # seconds a best-effort tasks/cancel may take
_PUSHED_KEPT = 16  # notifications kept unread: each is a whole snapshot, the newest wins


class Requester(Protocol):
    """`Client.request`, as the task machinery uses it."""

    async def __call__(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-request bound
    ) -> dict[str, Any]: ...


Resolver = Callable[[Any, dict[str, Any]], Awaitable[None]]
StreamOpener = Callable[
    [dict[str, Any], Subscription, float], contextlib.AbstractAsyncContextManager[Any]
]


@dataclass(frozen=True, slots=True)
class TaskChannel:
    """What driving a task needs from its client: requests, answers to input requests (the
    same handlers as MRTR rounds), a notifications stream (None: poll only), its options,
    and how a final result becomes a `CallToolResult`."""

    request: Requester
    resolve: Resolver
    #: How to open a notifications stream, asked when one is wanted (None: poll only).
    streams: Callable[[], StreamOpener | None]
    options: TaskOptions
    input_config: InputRequiredConfig
    finish: Callable[[str | None, dict[str, Any], Any], CallToolResult]
    #: Where the stream's other notifications (progress, logs) go, as if sent on their own.
    notify: Callable[[dict[str, Any]], Any] | None = None


def read_task(
    method: str, raw: Any, task_id: str | None = None, *, seed: bool = False
) -> DetailedTask:
    """`raw` (a task from `method`'s answer) as a `DetailedTask`; `McpError(PROTOCOL_VIOLATION)`
    for one that is not a valid task, is another task than `task_id`, or lacks what its status
    requires (a seed, a `CreateTaskResult`, carries no payload)."""
    if not isinstance(raw, dict):
        raise McpError(PROTOCOL_VIOLATION, f"{method}: the server's task is not an object")
    status = raw.get("status")
    if status not in TASK_STATUSES:
        raise McpError(
            PROTOCOL_VIOLATION,
            f"{method}: the server sent an unknown task status {_show(status)} "
            f"(expected one of {', '.join(TASK_STATUSES)})",
        )
    try:
        task = DetailedTask.model_validate(_task_fields(raw))
    except ValidationError as exc:
        raise McpError(
            PROTOCOL_VIOLATION, f"{method}: the server's task is not valid: {first_problem(exc)}"
        ) from None
    if task_id is not None and task.task_id != task_id:
        raise McpError(
            PROTOCOL_VIOLATION,
            f"{method}: asked about task {_show(task_id)}, the server answered about "
            f"{_show(task.task_id)}",
        )
    if not seed:
        needed = {COMPLETED: task.result, FAILED: task.error, INPUT_REQUIRED: task.input_requests}
        if status in needed and needed[status] is None:
            field = {COMPLETED: "result", FAILED: "error", INPUT_REQUIRED: "inputRequests"}[status]
            raise McpError(
                PROTOCOL_VIOLATION, f"{method}: the server's {status} task has no {field}"
            )
    return task


def _task_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The task in `raw`, without what belongs to the message (`resultType`, `_meta`), so
    that a snapshot compares equal to the same state however it arrived; `ttlMs` and
    `pollIntervalMs` are JSON numbers, so a fractional one is rounded, not refused."""
    fields = {name: value for name, value in raw.items() if name not in ("resultType", "_meta")}
    for name in ("ttlMs", "pollIntervalMs"):
        value = fields.get(name)
        if isinstance(value, float) and value == value and abs(value) < 1e15:
            fields[name] = round(value)
    return fields


def _digest(request: Any) -> str:
    """A question, as compared across polls (the same JSON, whatever the key order)."""
    return json.dumps(request, sort_keys=True, separators=(",", ":"))


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _instant(text: str) -> float | None:
    """An ISO 8601 timestamp as POSIX seconds (naive ones taken as UTC), or None."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class TaskStream(Subscription):
    """A `subscriptions/listen` stream that carries `notifications/tasks` for one task (and
    the task's progress and logs, handed to `forward`)."""

    def __init__(
        self, task_id: str, forward: Callable[[dict[str, Any]], Any] | None = None
    ) -> None:
        super().__init__()
        self.task_id = task_id
        self.over = False
        self._forward = forward
        self._pushed: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._forwarding: set[asyncio.Future[Any]] = set()

    def deliver(self, message: dict[str, Any]) -> None:
        """Take one message of the stream: this task's snapshots are kept, its progress and
        logs forwarded, the rest ignored."""
        method = message.get("method")
        if method != NOTIFICATION_TASKS:
            if method != ACKNOWLEDGED and self._forward is not None:
                self._pass_on(message)
            else:
                super().deliver(message)
            return
        params = message.get("params")
        if isinstance(params, dict) and params.get("taskId") == self.task_id:
            if self._pushed.qsize() >= _PUSHED_KEPT:  # a flood: the oldest matter least
                self._pushed.get_nowait()
            self._pushed.put_nowait(params)

    def _pass_on(self, message: dict[str, Any]) -> None:
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
            # Without the stream's id, so the client handles it as a notification of its own.
            meta = {k: v for k, v in params["_meta"].items() if k != SUBSCRIPTION_ID}
            message = {**message, "params": {**params, "_meta": meta}}
        assert self._forward is not None
        outcome = self._forward(message)
        if inspect.isawaitable(outcome):
            future = asyncio.ensure_future(outcome)
            self._forwarding.add(future)
            future.add_done_callback(self._forwarding.discard)

    def end(self, error: BaseException | None = None) -> None:
        """The stream is over: waiters go back to polling."""
        super().end(error)
        self._pushed.put_nowait(None)

    def honours(self) -> bool:
        """Whether the acknowledgement lists this task."""
        agreed = self.honoured.get(TASK_IDS_FILTER)
        return isinstance(agreed, list) and self.task_id in agreed

    async def next_pushed(self, timeout: float) -> dict[str, Any] | None:  # noqa: ASYNC109
        """The next notification's params within `timeout` seconds, or None."""
        if self.over:
            await asyncio.sleep(timeout)
            return None
        try:
            # Not `asyncio.wait_for`: on 3.11 it swallows a cancellation that comes as an
            # item arrives, and a cancelled call would then go on waiting for its task.
            async with asyncio.timeout(timeout):
                item = await self._pushed.get()
        except TimeoutError:
            return None
        if item is None:
            self.over = True
        return item


@contextlib.asynccontextmanager
async def _task_stream(channel: TaskChannel, task_id: str) -> AsyncIterator[TaskStream | None]:
    """A notifications stream for `task_id` the server agreed to, or None (then: poll)."""
    open_stream = channel.streams() if channel.options.notifications else None
    if open_stream is None:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        stream = TaskStream(task_id, channel.notify)
        usable: TaskStream | None = None
        try:
            await stack.enter_async_context(
                open_stream({TASK_IDS_FILTER: [task_id]}, stream, _ACK_TIMEOUT)
            )
            usable = stream if stream.honours() else None
        except (McpError, OSError) as error:
            logger.info("no notifications for task %r (%s); polling", task_id, error)
        if usable is None:
            await stack.aclose()
        yield usable


class TaskRun:
    """One wait for one task, to its end (see the module's rules)."""

    def __init__(
        self,
        channel: TaskChannel,
        task_id: str,
        on_status: TaskStatusCallback | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        self.channel = channel
        self.task_id = task_id
        self.on_status = on_status
        self.current: DetailedTask | None = None
        self.gone = False  # the server said it does not know the task
        self._newest_at: float | None = None
        self._answered: dict[str, str] = {}
        self._rounds = 0
        self._quiet = 0  # polls in a row that found no new status (rule 3's backoff)
        # A task created just now started now, whatever the server's clock says (rule 5).
        self._created_here = time.time() if fresh else None

    @property
    def ended(self) -> bool:
        """Whether a terminal snapshot was seen."""
        return self.current is not None and self.current.status in TERMINAL_STATUSES

    async def run(self, seed: DetailedTask | None = None) -> dict[str, Any]:
        """Wait for the task to end, answering its input requests; its final result.

        Raises the task's own JSON-RPC error when it failed, `TASK_CANCELLED` when it was
        cancelled, `TASK_EXPIRED` past its TTL, and -32602 when the server no longer knows it.
        """
        looked = seed is None
        if seed is None:  # a task picked up by id: see where it stands (and that it exists)
            seed = await self.get()
            if seed.status in TERMINAL_STATUSES:
                await self.accept(seed)
                assert self.current is not None
                return self.outcome(self.current)
        async with _task_stream(self.channel, self.task_id) as stream:
            # With a stream, look again at once: a change between that look (or the task's
            # creation) and the acknowledgement was sent before anyone listened. A seed from
            # `CreateTaskResult` carries no payload, so only a working one stands for a look.
            if stream is None and (looked or seed.status == WORKING):
                task = seed
            else:
                task = await self.get()
            pushed = False
            while True:
                before = self.current.status if self.current is not None else None
                await self.accept(task, pushed=pushed)
                current = self.current
                assert current is not None
                if not pushed:
                    self._quiet = self._quiet + 1 if current.status == before else 0
                if current.status in TERMINAL_STATUSES:
                    return self.outcome(current)
                self.check_ttl(current)
                if current.status == INPUT_REQUIRED:
                    await self.answer(current)
                task, pushed = await self._next(stream)

    async def get(self) -> DetailedTask:
        """One `tasks/get` (with rule 4's retries)."""
        raw = await self._call(TASKS_GET, {"taskId": self.task_id})
        return read_task(TASKS_GET, raw, self.task_id)

    async def cancel(self) -> None:
        """`tasks/cancel`: ask the server to stop the task (it may finish first)."""
        await self._call(TASKS_CANCEL, {"taskId": self.task_id})

    async def accept(self, task: DetailedTask, *, pushed: bool = False) -> bool:
        """Take a snapshot unless it is a repeat, after the end, or (`pushed`, from a
        notification) stale (rule 1); tell `on_status` of a new one."""
        if self.ended:
            return False
        current = self.current
        at = _instant(task.last_updated_at)
        if current is not None:
            if task == current:
                return False
            stale = at is not None and self._newest_at is not None and at < self._newest_at
            if pushed and stale and task.status not in TERMINAL_STATUSES:
                return False
        self.current = task
        if at is not None:
            self._newest_at = at if self._newest_at is None else max(at, self._newest_at)
        if self.on_status is not None:
            outcome = self.on_status(task)
            if inspect.isawaitable(outcome):
                await outcome
        return True

    def outcome(self, task: DetailedTask) -> dict[str, Any]:
        """A terminal task's final result, or the error it ended with."""
        if task.status == COMPLETED:
            result = task.result or {}
            kind = result.get("resultType", "complete")
            if kind != "complete":
                raise McpError(
                    PROTOCOL_VIOLATION,
                    f"task {_show(self.task_id)} completed with a result of resultType "
                    f"{_show(kind)}; a task's result is a complete one",
                )
            return result
        if task.status == FAILED:
            raise McpError.from_error(task.error)
        said = f": {task.status_message}" if task.status_message else ""
        raise McpError(
            TASK_CANCELLED,
            f"task {_show(self.task_id)} was cancelled{said}",
            {"taskId": self.task_id},
        )

    def expires(self, task: DetailedTask) -> float | None:
        """When (POSIX seconds) the task's TTL runs out; None for an unlimited one."""
        if task.ttl_ms is None:
            return None
        created = self._created_here
        if created is None:
            created = _instant(task.created_at)
            now = time.time()
            if created is None or created > now:  # unreadable, or the server's clock is ahead
                created = self._created_here = now
        return created + task.ttl_ms / 1000

    def check_ttl(self, task: DetailedTask) -> None:
        """Rule 5."""
        expires = self.expires(task)
        if expires is None:
            return
        past = time.time() - expires
        if past > self.channel.options.ttl_grace:
            raise McpError(
                TASK_EXPIRED,
                f"task {_show(self.task_id)} is still {task.status} {past:.1f} s past its "
                f"ttlMs ({task.ttl_ms} ms); the server may have discarded it, so the client "
                "stopped waiting",
                {"taskId": self.task_id},
            )

    async def answer(self, task: DetailedTask) -> None:
        """Answer the input requests not answered yet, in one `tasks/update` (rule 2)."""
        fresh: dict[str, Any] = {}
        digests: dict[str, str] = {}
        for key, request in (task.input_requests or {}).items():
            digest = _digest(request)
            known = self._answered.get(key)
            if known is None:
                fresh[key], digests[key] = request, digest
            elif known and known != digest:  # "": answered by hand, whatever was asked
                raise McpError(
                    PROTOCOL_VIOLATION,
                    f"task {_show(self.task_id)} asked input {_show(key)} again as another "
                    "request; input keys are unique over a task's lifetime",
                )
        if not fresh:
            return
        self._rounds += 1
        limit = self.channel.input_config.max_rounds
        if self._rounds > limit:
            raise McpError(
                MAX_ROUNDS_EXCEEDED,
                f"task {_show(self.task_id)} still asked for input after {limit} rounds "
                "(max_rounds); giving up",
            )
        answers: dict[str, Any] = {}
        await self.channel.resolve(fresh, answers)
        await self._call(TASKS_UPDATE, {"taskId": self.task_id, "inputResponses": answers})
        for key in answers:
            self._answered[key] = digests[key]

    async def respond(self, responses: dict[str, Any]) -> None:
        """Send answers given by hand (`tasks/update`); they are not asked again."""
        asked = (self.current.input_requests if self.current is not None else None) or {}
        await self._call(TASKS_UPDATE, {"taskId": self.task_id, "inputResponses": responses})
        for key in responses:
            request = asked.get(key)
            self._answered[key] = "" if request is None else _digest(request)

    def interval(self) -> float:
        """Seconds until the next poll: the server's hint, within the client's bounds, and
        no shorter than the backoff of rule 3 has reached."""
        options = self.channel.options
        hint = self.current.poll_interval_ms if self.current is not None else None
        seconds = options.default_poll_interval if hint is None else hint / 1000
        seconds = min(max(seconds, options.min_poll_interval), options.max_poll_interval)
        if self._quiet:
            floor = options.min_poll_interval * 2 ** min(self._quiet, 32)
            seconds = max(seconds, min(floor, options.backstop_interval))
        return seconds

    async def _next(self, stream: TaskStream | None) -> tuple[DetailedTask, bool]:
        """The next snapshot, and whether it was pushed: a notification, or a poll after
        the interval (rule 3)."""
        interval = self.interval()
        if stream is None or stream.over:
            await asyncio.sleep(interval)
            return await self.get(), False
        backstop = max(interval, self.channel.options.backstop_interval)
        expires = self.expires(self.current) if self.current is not None else None
        if expires is not None:  # the task may vanish then, without a notification
            backstop = min(backstop, max(expires - time.time(), interval))
        pushed = await stream.next_pushed(backstop)
        if pushed is not None:
            try:
                return read_task(NOTIFICATION_TASKS, pushed, self.task_id), True
            except McpError as error:  # a bad notification costs a poll, not the task
                logger.warning("ignoring a notification: %s", error.message)
        return await self.get(), False

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        failures = 0
        while True:
            try:
                return await self.channel.request(method, params)
            except McpError as error:
                if error.code == INVALID_PARAMS:
                    self.gone = True
                    raise McpError(
                        error.code,
                        f"{method}: the server no longer knows task {_show(self.task_id)} "
                        f"(expired, never created, or another caller's): {error.message}",
                        error.data,
                    ) from error
                if error.code not in _TRANSIENT:
                    raise
                failures += 1
                if failures >= self.channel.options.max_poll_failures:
                    raise McpError(
                        error.code,
                        f"{method} for task {_show(self.task_id)} failed {failures} times in "
                        f"a row; the last time: {error.message}",
                        error.data,
                    ) from error
                logger.info("%s for task %r failed (%s); trying again", method, self.task_id,
                            error.message)  # fmt: skip
                await asyncio.sleep(self.interval())


async def drive(
    channel: TaskChannel, created: dict[str, Any], on_status: TaskStatusCallback | None
) -> dict[str, Any]:
    """Drive the task a `CreateTaskResult` announced to its final result, for a caller that
    asked for the result, not the task: a call that ends early cancels it (rule 6)."""
    seed = read_task("tools/call", created, seed=True)
    run = TaskRun(channel, seed.task_id, on_status, fresh=True)
    try:
        return await _bounded(
            run,
            seed,
            channel.options.max_wait,
            "TaskOptions.max_wait",
            "asks the server to cancel it",
        )
    except (Exception, asyncio.CancelledError):
        if not run.ended and not run.gone:
            await _cancel_quietly(run)
        raise


async def _bounded(
    run: TaskRun, seed: DetailedTask | None, limit: float, bound: str, then: str
) -> dict[str, Any]:
    """`run.run(seed)` within `limit` seconds (0: no limit), else `REQUEST_TIMEOUT` naming
    `bound` and saying what `then` becomes of the task (rule 7)."""
    if limit <= 0:
        return await run.run(seed)
    deadline = Deadline(limit)
    try:
        with deadline:
            return await run.run(seed)
    except TimeoutError:
        if not deadline.expired:
            raise
        raise McpError(
            REQUEST_TIMEOUT,
            f"task {_show(run.task_id)} did not end within {limit:g} s ({bound}); the client "
            f"stopped waiting, and {then}",
            {"taskId": run.task_id, "timeout": limit},
        ) from None


async def _cancel_quietly(run: TaskRun) -> None:
    """`tasks/cancel` in a task of its own, so that a cancellation of the caller (which may
    be why it is sent) does not stop it; never raises."""

    async def cancel() -> None:
        try:
            with Deadline(_CANCEL_TIMEOUT):
                await run.channel.request(TASKS_CANCEL, {"taskId": run.task_id})
        except (McpError, OSError, TimeoutError) as error:
            logger.info("tasks/cancel for task %r failed: %s", run.task_id, error)

    sending = asyncio.ensure_future(cancel())
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(sending)


class TaskCreated(Exception):
    """Internal: a `tools/call` was answered with a task, which the caller wants as a handle."""

    def __init__(self, created: dict[str, Any]) -> None:
        super().__init__("the server answered with a task")
        self.created = created


async def keep_task(created: dict[str, Any]) -> dict[str, Any]:
    """The task hook of `call_tool_as_task`: stop the call at the task (see `TaskCreated`)."""
    raise TaskCreated(created)


class TaskHandle:
    """A tool call the server may be running as a task: `task_id`, `status()`, `result()`,
    `cancel()`. Persist `task_id` to pick the task up again later, from any process, with
    `Client.task(task_id)`.

    When the server answered the call at once, `task_id` is None, `result()` returns that
    answer, `status()` says `completed`, and `cancel()` does nothing.
    """

    def __init__(
        self,
        channel: TaskChannel,
        task_id: str | None,
        *,
        seed: DetailedTask | None = None,
        result: CallToolResult | None = None,
        tool: str | None = None,
        output_type: Any = None,
    ) -> None:
        #: The task's id (to resume it with `Client.task`); None if the server answered at once.
        self.task_id = task_id
        #: The tool the task runs, when known.
        self.tool = tool
        self._channel = channel
        self._result = result
        self._output_type = output_type
        self._run = TaskRun(channel, task_id, fresh=seed is not None) if task_id else None
        self._waiting = asyncio.Lock()  # one wait at a time answers the task's questions
        self.last: DetailedTask | None = seed
        """The newest snapshot this handle has seen (None before any)."""

    def __repr__(self) -> str:
        status = self.last.status if self.last is not None else "unknown"
        return f"TaskHandle(task_id={self.task_id!r}, status={status!r})"

    async def status(self) -> DetailedTask:
        """The task as the server has it now (one `tasks/get`)."""
        if self._run is None:
            return self._finished_snapshot()
        task = await self._run.get()
        await self._run.accept(task)
        self.last = self._run.current
        return task

    async def result(
        self,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - bounds the whole wait
        on_status: TaskStatusCallback | None = None,
    ) -> CallToolResult:
        """Wait for the task's final result, answering its input requests with the client's
        handlers; `timeout` seconds at most (None: `TaskOptions.max_wait`, an hour; 0: until
        the task ends or expires).

        Raises the task's JSON-RPC error when it failed, `McpError(TASK_CANCELLED)` when it
        was cancelled, `McpError(REQUEST_TIMEOUT)` past `timeout` (the task goes on: call
        `cancel()` to stop it), and -32602 when the server no longer knows it.
        """
        if self._run is None:
            assert self._result is not None
            return self._result
        async with self._waiting:
            if self._result is None:
                self._result = await self._wait(self._run, timeout, on_status)
        return self._result

    async def _wait(
        self,
        run: TaskRun,
        timeout: float | None,  # noqa: ASYNC109 - bounds the whole wait
        on_status: TaskStatusCallback | None,
    ) -> CallToolResult:
        run.on_status = on_status
        seed = self.last if self.last is not None and run.current is None else None
        limit = self._channel.options.max_wait if timeout is None else timeout
        bound = "TaskOptions.max_wait" if timeout is None else "the timeout given"
        try:
            raw = await _bounded(
                run, seed, limit, bound, "it goes on on the server (cancel() stops it)"
            )
        finally:
            run.on_status = None
            if run.current is not None:
                self.last = run.current
        return self._channel.finish(self.tool, raw, self._output_type)

    async def respond(self, input_responses: Mapping[str, Any]) -> None:
        """Answer (some of) the task's questions yourself, with one `tasks/update`: for an
        application that shows them its own way (`status()` lists them, as
        `input_requests`). Keys answered here are not asked again by `result()`."""
        if self._run is None:
            raise ValueError("the server answered this call at once: there is no task to answer")
        await self._run.respond(dict(input_responses))

    async def cancel(self) -> None:
        """Ask the server to cancel the task (`tasks/cancel`). Cancellation is cooperative:
        the task may still complete; `result()` then says which happened."""
        if self._run is not None and not self._run.ended:
            await self._run.cancel()

    def _finished_snapshot(self) -> DetailedTask:
        now = datetime.now(UTC).isoformat()
        result = self._result.to_wire() if self._result is not None else {}
        result.pop("resultType", None)
        return DetailedTask(
            task_id="",
            status=COMPLETED,
            created_at=now,
            last_updated_at=now,
            result=result,
        )


__all__ = [
    "TaskChannel",
    "TaskCreated",
    "TaskHandle",
    "TaskRun",
    "TaskStatusCallback",
    "TaskStream",
    "drive",
    "keep_task",
    "read_task",
]
