"""`TaskManager`: the tasks extension of one server (`io.modelcontextprotocol/tasks`).

It decides how a call of a task-capable tool is served, and answers `tasks/get`,
`tasks/update` and `tasks/cancel` from the task store, so any instance sharing the store
answers for any task. Rules:

1. The extension is negotiated per request: a request names it in
   `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`. Without it a call of an
   "optional" tool runs as an ordinary call, a call of a "required" tool and every `tasks/*`
   request is -32021 naming the extension. A legacy (`initialize`) session runs every tool in
   line: its client is asked live instead.
2. A call becomes a task at the first of `ctx.run_as_task()` and `start_after` seconds (see
   `TaskSettings`); one that finishes first, or stops for MRTR input first, answers in line.
3. A task belongs to the caller that created it (`ServerOptions.principal`): for anyone else it
   does not exist (-32602, the same as an unknown or expired id). Ids are 192 random bits.
4. `tasks/get` shows what `tasks/update` already delivered: an answered key leaves
   `inputRequests` at once, wherever the task runs. `tasks/update` ignores keys that are not
   outstanding, refuses (-32602, naming the key) an answer that is not the result its question
   calls for, and acknowledges with an empty result; so does `tasks/cancel`, on a finished
   task too.
5. A task that is not finished but whose lease lapsed (the instance running it died) is
   reported, and stored, as `failed` with an error saying so: never `working` forever.
6. Every change of a task is published as `notifications/tasks` to `subscriptions/listen`
   streams that asked for its id (the caller's own tasks only), on every instance sharing the
   broker, and a new stream first gets each task's current state; its logs and progress reach
   the same streams.
7. A task holds a place among its caller's live tasks and all live tasks
   (`Budgets.tasks_per_principal`, `Budgets.tasks`) from its creation to its end; a call that
   would pass either is refused (-32602, `data.reason` "budget_exceeded"), never another task
   stopped. The caller is the task's owner, or its remote address when it has none.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ...protocol import jsonrpc
from ...protocol import tasks as wire
from ...protocol.errors import INTERNAL_ERROR, McpError, invalid_params
from .._engine.questions import validate_answer
from ..budgets import Tally, holder, refusal, tally_for
from ..input_bounds import check_responses
from ..store import MemoryStore
from .record import TaskRecord
from .run import TaskRound, TaskRun
from .storage import TaskStore

if TYPE_CHECKING:
    from .._engine.rounds import Render, Round
    from ..context import RequestContext
    from ..options import ServerOptions
    from ..subscriptions import SubscriptionHub
    from .settings import TaskSettings

logger = logging.getLogger("mrtr.server")

#: Longest task id looked up; anything longer was never minted here.
_MAX_ID = 128


class TaskManager:
    """The tasks of one server (see the module rules)."""

    def __init__(self, name: str, options: ServerOptions, subscriptions: SubscriptionHub) -> None:
        self.name = name
        self.options = options
        #: Where task changes are announced (and answers from other instances heard).
        self.subscriptions = subscriptions
        #: The tasks this instance runs, by id.
        self.runs: dict[str, TaskRun] = {}
        self._store: TaskStore | None = None
        self._tally: Tally | None = None
        self._holders: dict[str, str] = {}
        self._background: set[asyncio.Task[Any]] = set()
        subscriptions.on_task_answered = self._answered_elsewhere

    @property
    def store(self) -> TaskStore:
        """Where tasks are kept: the server's `ServerOptions.store` (shared with the other
        instances when it is Redis), or a store of this process when it has none."""
        if self._store is None:
            store = self.options.store
            self._store = TaskStore(
                store if store is not None else MemoryStore(), f"mrtr/task/{self.name}/"
            )
        return self._store

    @property
    def sharing(self) -> bool:
        """Whether answers stored by another instance wake this one (through the broker)."""
        return self.subscriptions.sharing

    @property
    def tally(self) -> Tally:
        """Counts live tasks by holder and in all: in Redis with a Redis store (every instance
        sharing it), in this process otherwise."""
        if self._tally is None:
            self._tally = tally_for(self.options.store)
        return self._tally

    async def claim(self, ctx: RequestContext, record: TaskRecord) -> McpError | None:
        """Take a place for a new task among live tasks (its holder's and all), or the refusal
        to answer when there is none (rule 7)."""
        budgets = self.options.budgets
        who = holder(record.owner, ctx.transport_info)
        bound = await self.tally.claim(
            "tasks",
            who,
            record.task_id,
            record.ttl_ms / 1000,
            budgets.tasks_per_principal,
            budgets.tasks,
        )
        if bound is None:
            self._holders[record.task_id] = who
            return None
        limit = budgets.tasks_per_principal if bound == "principal" else budgets.tasks
        advice = (
            "wait for one of yours to finish, or cancel one (tasks/cancel)"
            if bound == "principal"
            else "retry later"
        )
        return refusal("live tasks", limit, bound, advice)

    async def unclaim(self, record: TaskRecord) -> None:
        """Give a task's place back (it ended, or was never stored)."""
        who = self._holders.pop(record.task_id, None)
        if who is None:
            return
        try:
            await self.tally.release("tasks", who, record.task_id)
        except Exception:
            # Counted until the task's own expiry: the tally's entry lives no longer.
            logger.warning("task %s: could not give its place back", record.task_id[:8])

    def methods(self) -> dict[str, Callable[[RequestContext], Awaitable[dict[str, Any]]]]:
        """The request handlers the extension adds."""
        return {
            wire.TASKS_GET: self.get,
            wire.TASKS_UPDATE: self.update,
            wire.TASKS_CANCEL: self.cancel,
        }

    def principal(self, ctx: RequestContext) -> str | None:
        """The caller a task created by `ctx`'s request belongs to."""
        resolver = self.options.principal
        return resolver(ctx.transport_info) if resolver is not None else None

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in the background, keeping it alive until done."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- tools/call ------------------------------------------------------------------------

    async def call(
        self,
        ctx: RequestContext,
        settings: TaskSettings,
        tool: str,
        round_: Round,
        invoke: Callable[[RequestContext], Awaitable[Any]],
        render: Render,
    ) -> dict[str, Any]:
        """Serve a call of a task-capable tool: in line, or as a task (rules 1 and 2)."""
        if ctx.session is not None:
            return await round_.complete(invoke, render)
        if wire.EXTENSION_ID not in _extensions(ctx):
            if settings.support == "required":
                raise wire.missing_tasks_capability(f"tools/call {tool!r}")
            return await round_.complete(invoke, render)
        run = TaskRun(self, ctx, settings, tool)
        ctx.task_run = run
        task_round = TaskRound(round_.keeper, ctx, round_.target, round_.arguments)
        worker = run.worker = asyncio.ensure_future(task_round.complete(invoke, render))
        worker.add_done_callback(run.worker_done)
        wait = settings.start_after
        if wait is None:
            limit = self.options.input_required.round_timeout
            wait = limit if limit > 0 else None
        try:
            await asyncio.wait(
                (worker, run.started), timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            if not run.began:
                worker.cancel()
            raise
        if not run.began:
            if worker.done():
                return worker.result()  # finished in line, or stopped for MRTR input
            if settings.start_after is None:
                worker.cancel()
                raise McpError(
                    INTERNAL_ERROR,
                    f"tools/call {tool!r} did not finish within round_timeout and did not call "
                    "ctx.run_as_task()",
                )
        try:
            return await run.begin()
        except McpError:
            worker.cancel()  # no task could be stored: the call fails as a whole
            raise

    # --- tasks/get, tasks/update, tasks/cancel -----------------------------------------------

    async def get(self, ctx: RequestContext) -> dict[str, Any]:
        """`tasks/get`: the task as a `DetailedTask`."""
        record = await self._alive(await self._visible(ctx))
        return record.detailed(await self._outstanding(record))

    async def update(self, ctx: RequestContext) -> dict[str, Any]:
        """`tasks/update`: store answers to the task's outstanding questions."""
        record = await self._alive(await self._visible(ctx))
        responses = ctx.params.get("inputResponses")
        if not isinstance(responses, dict):
            raise invalid_params(
                'tasks/update needs "inputResponses", an object mapping each input key of the '
                "task's inputRequests to its result"
            )
        check_responses(responses, self.options.input_required)
        outstanding = await self._outstanding(record)
        if not outstanding:
            return {}
        taken: dict[str, Any] = {}
        for key, value in responses.items():
            asked = outstanding.get(key)
            if asked is not None:  # keys not outstanding are ignored (rule 4)
                validate_answer(key, asked["method"], value)
                taken[key] = value
        for key, value in taken.items():
            await self.store.put_answer(record, key, value)
        if taken:
            run = self.runs.get(record.task_id)
            if run is not None:
                run.wake()
            else:  # the instance running it resumes at once (a lost signal: its poll)
                self.subscriptions.task_answered(record.task_id)
        return {}

    async def cancel(self, ctx: RequestContext) -> dict[str, Any]:
        """`tasks/cancel`: ask the task's handler to stop (cooperatively)."""
        record = await self._alive(await self._visible(ctx))
        if record.terminal:
            return {}
        run = self.runs.get(record.task_id)
        if run is not None:
            run.stop("cancelled")
        else:
            await self.store.request_cancel(record)
        return {}

    async def _visible(self, ctx: RequestContext) -> TaskRecord:
        """The task the request names, if the extension is declared and the task is the
        caller's (rules 1 and 3)."""
        if wire.EXTENSION_ID not in _extensions(ctx):
            raise wire.missing_tasks_capability(ctx.method)
        task_id = ctx.params.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise invalid_params(
                f'{ctx.method} needs "taskId", the id a CreateTaskResult gave (a string)'
            )
        reason = "no such task for this caller (unknown, or expired)"
        if len(task_id) > _MAX_ID:
            raise wire.task_not_found(task_id, reason)
        run = self.runs.get(task_id)
        record = run.record if run is not None else await self.store.load(task_id)
        if record is None or record.owner != self.principal(ctx):
            raise wire.task_not_found(task_id, reason)
        return record

    async def _alive(self, record: TaskRecord) -> TaskRecord:
        """Rule 5: a task whose worker stopped renewing its lease has failed."""
        now = time.time()
        if record.terminal or record.lease >= now or record.task_id in self.runs:
            return record
        record.status = wire.FAILED
        record.message = (
            "The server instance running this task stopped (its lease ran out "
            f"{now - record.lease:.1f} s ago without renewal), so its work is lost; call the "
            "tool again"
        )
        record.error = McpError(INTERNAL_ERROR, record.message).to_error()
        record.inputs = {}
        record.lease = 0.0
        record.updated = now
        logger.warning("task %s of tool %r: %s", record.task_id[:8], record.tool, record.message)
        if await self.store.save(record):
            self.publish(record)
        return record

    async def _outstanding(self, record: TaskRecord) -> dict[str, dict[str, Any]] | None:
        """The task's questions not yet answered (rule 4); None when it asks nothing."""
        if record.status != wire.INPUT_REQUIRED or not record.inputs:
            return None
        answered = await self.store.answered(record.task_id, list(record.inputs))
        return {key: asked for key, asked in record.inputs.items() if key not in answered}

    def _answered_elsewhere(self, task_id: str | None) -> None:
        """Another instance stored answers for `task_id` (None: for any task, maybe)."""
        if task_id is None:
            for each in self.runs.values():
                each.wake()
        elif (run := self.runs.get(task_id)) is not None:
            run.wake()

    # --- notifications ---------------------------------------------------------------------

    def publish(self, record: TaskRecord) -> None:
        """Tell listeners of the task its new state (rule 6)."""
        self.subscriptions.task_changed(record.task_id, record.detailed())

    def forward(self, task_id: str, message: dict[str, Any]) -> None:
        """Send a log or progress notification of a task's handler to the task's listeners."""
        params = dict(message.get("params") or {})
        meta = dict(params.get("_meta") or {})
        meta[wire.RELATED_TASK_META] = {"taskId": task_id}
        params["_meta"] = meta
        self.subscriptions.task_message(task_id, jsonrpc.notification(message["method"], params))

    async def visible_ids(self, ctx: RequestContext, task_ids: list[str]) -> frozenset[str]:
        """Of `task_ids`, those the caller may listen to (its own tasks). Each one's current
        state is sent to listeners right after: a new listener misses nothing that happened
        before it subscribed."""
        owner = self.principal(ctx)
        mine: dict[str, TaskRecord] = {}
        for task_id in task_ids[:256]:
            if not isinstance(task_id, str) or len(task_id) > _MAX_ID:
                continue
            run = self.runs.get(task_id)
            record = run.record if run is not None else await self.store.load(task_id)
            if record is not None and record.owner == owner:
                mine[task_id] = record
        loop = asyncio.get_running_loop()
        for record in mine.values():
            # Soon, not now: the listen stream is registered by then (before its first send).
            loop.call_soon(self.publish, record)
        return frozenset(mine)


def _extensions(ctx: RequestContext) -> dict[str, Any]:
    extensions = ctx.client_capabilities.get("extensions")
    return extensions if isinstance(extensions, dict) else {}
