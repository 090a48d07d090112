"""`TaskRun`: one tool call that became a task, in the instance running it.

The call starts as an ordinary MRTR round (`TaskRound`) in an asyncio task of its own, so that
the request can answer before the handler finishes. It becomes a task at the first of: the
handler calling `await ctx.run_as_task()`, or the manager deciding so (`start_after`). Then:

1. The record is stored (`TaskStore.create`) before the `CreateTaskResult` goes out, so a
   `tasks/get` on any instance sharing the store finds it. First the task takes a place among
   its principal's live tasks and all live tasks (`Budgets.tasks_per_principal`,
   `Budgets.tasks`, counted across instances with a Redis store); past either the call is
   refused, and the place is given back when the task ends.
2. The engine is given a `TaskAsker` (replay rule 10, a third asker beside replay and live):
   a question awaited from now on is put in the record's `inputRequests` (status
   `input_required`) and the handler waits until `tasks/update` stored an answer for its key.
   It is woken at once by the instance that stored it: directly on this one, through the
   broker from another (`SubscriptionHub.task_answered`). With a store of this process only
   that wake-up counts (nothing else can store an answer), so a waiting task costs nothing;
   with a shared store it also looks at the store now and then: every `ANSWER_POLL` seconds
   without a broker, every `ANSWER_FALLBACK_POLL` with one (a signal the broker lost).
   Questions answered by
   MRTR before the task existed were answered on the original request, as the spec asks.
3. The handler's logs and progress go to the listeners of the task (`notifications/tasks`
   streams); a progress message also becomes the task's `statusMessage`.
4. While it runs, the instance renews the record's lease every third of `TaskSettings.lease`, and
   looks for a `tasks/cancel` sent to another instance. Past the task's TTL the run is
   cancelled (its record expires with it).
5. When the handler ends, the outcome is stored: `completed` with the tool's result (a tool
   error included), `failed` with the JSON-RPC error of a protocol error, `cancelled` when
   `tasks/cancel` stopped it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pydantic

from ...protocol import tasks as wire
from ...protocol.errors import INTERNAL_ERROR, McpError
from .._engine.capabilities import require_capabilities
from .._engine.outcome import STOPPED, Failure
from .._engine.questions import validate_answer
from .._engine.rounds import Invoke, Round
from ..redemption import EarlyOutcome
from ..store import MemoryStore, is_store_refusal
from .record import TaskRecord
from .storage import TaskStore

if TYPE_CHECKING:
    from ...inputs import InputRequest
    from ..context import RequestContext
    from .settings import TaskSettings

logger = logging.getLogger("mrtr.server")

T = TypeVar("T")

#: Seconds between two looks at the store for answers sent to another instance, when no
#: broker wakes the task.
ANSWER_POLL = 0.2
#: The same with a broker: only a lost wake-up signal waits this long.
ANSWER_FALLBACK_POLL = 2.0


class TaskHost(Protocol):
    """What a task's run needs of the tasks of its server (`manager.TaskManager` is that)."""

    #: The tasks this instance runs, by id.
    runs: dict[str, TaskRun]

    @property
    def store(self) -> TaskStore:
        """Where tasks are kept."""

    @property
    def sharing(self) -> bool:
        """Whether answers stored by another instance wake this one (through the broker)."""

    def principal(self, ctx: RequestContext) -> str | None:
        """The caller who owns the tasks it creates."""

    async def claim(self, ctx: RequestContext, record: TaskRecord) -> McpError | None:
        """Take a place for a new task, or the refusal to answer when there is none."""

    async def unclaim(self, record: TaskRecord) -> None:
        """Give back the place of a task that ended (or was never stored)."""

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in the background, keeping it alive until done."""

    def publish(self, record: TaskRecord) -> None:
        """Tell listeners of the task its new state."""

    def forward(self, task_id: str, message: dict[str, Any]) -> None:
        """Send a log or progress notification of the task's handler to its listeners."""


def new_task_id() -> str:
    """An unguessable task id: 192 random bits, URL-safe."""
    return secrets.token_urlsafe(24)


class TaskRound(Round):
    """A round of a task-capable call: as any other, but not bounded by `round_timeout` (the
    manager bounds the in-line part; a task is bounded by its TTL), and, once it is a task,
    redeemed as the `CreateTaskResult` its request answered."""

    __slots__ = ()

    ctx: RequestContext  # the manager makes task rounds of the server's own contexts

    def _early_outcome(self) -> EarlyOutcome | None:
        run = self.ctx.task_run
        return None if run is None else run.early

    async def _execute(
        self,
        invoke: Invoke,
        render: Callable[[Any], Any],
        what: str | None,
    ) -> dict[str, Any]:
        ctx = self.ctx
        engine = ctx.engine
        engine.target = self.target
        outcome = await engine.run(invoke, ctx)
        value = outcome if not isinstance(outcome, Failure) else self._failed(outcome, what)
        return self.finish({} if value is STOPPED else render(value))


class TaskAsker:
    """Answers a task's questions through `tasks/get` and `tasks/update` (rule 2 above)."""

    __slots__ = ("_run",)

    def __init__(self, run: TaskRun) -> None:
        self._run = run

    async def ask(self, key: str, method: str, params: dict[str, Any]) -> pydantic.BaseModel:
        """Ask one question through the task; its answer, validated."""
        got = await self._run.ask({key: (method, params)})
        return got[key]

    async def ask_all(
        self, questions: Mapping[str, tuple[str, dict[str, Any]]]
    ) -> dict[str, pydantic.BaseModel]:
        """Ask several questions at once; `{key: validated answer}`."""
        return await self._run.ask(dict(questions))

    async def answer_requests(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        """Ask input requests; `{key: result}` as wire JSON."""
        got = await self._run.ask({k: (r.method, r.params) for k, r in requests.items()})
        return {key: model.model_dump(mode="json", by_alias=True) for key, model in got.items()}


class TaskRun:
    """One call of a task-capable tool, and the task it may become (see the module rules)."""

    def __init__(
        self, manager: TaskHost, ctx: RequestContext, settings: TaskSettings, tool: str
    ) -> None:
        self.manager = manager
        self.ctx = ctx
        self.settings = settings
        self.tool = tool
        self.record: TaskRecord | None = None
        #: True once the call is on its way to being a task (set before anything is awaited).
        self.began = False
        #: The `CreateTaskResult`, once the task is stored.
        self.started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.worker: asyncio.Task[dict[str, Any]] | None = None
        self._lock = asyncio.Lock()
        self._waiters: set[asyncio.Event] = set()
        self._lease_task: asyncio.Task[None] | None = None
        self._stop_reason: str | None = None
        #: The redeemed round's outcome, settled to the `CreateTaskResult` (redemption rule 5).
        self.early = EarlyOutcome()

    @property
    def task_id(self) -> str | None:
        """The task's id once it exists."""
        return self.record.task_id if self.record is not None else None

    # --- becoming a task -------------------------------------------------------------------

    async def begin(self) -> dict[str, Any]:
        """Make the call a task (once): store it, then switch the handler over; the
        `CreateTaskResult`."""
        if self.began:
            return await asyncio.shield(self.started)
        self.began = True
        now = time.time()
        settings = self.settings
        record = TaskRecord(
            task_id=new_task_id(),
            owner=self.manager.principal(self.ctx),
            tool=self.tool,
            created=now,
            updated=now,
            ttl_ms=settings.ttl_ms,
            poll_ms=settings.poll_ms,
            lease=now + self.settings.lease,
        )
        refused: McpError | None = None
        failed: McpError | None = None
        try:
            refused = await self.manager.claim(self.ctx, record)
            stored = refused is None and await self.manager.store.create(record)
        except Exception as exc:
            stored = False
            if isinstance(exc, McpError) and is_store_refusal(exc):
                # The store is down or full: the client gets that retryable answer (HTTP 503).
                failed = exc
            else:
                logger.exception("tools/call %r: could not store a new task", self.tool)
        if not stored:
            if refused is None:
                self.manager.spawn(self.manager.unclaim(record))
            error = (
                refused
                or failed
                or McpError(
                    INTERNAL_ERROR,
                    f"tools/call {self.tool!r}: could not create a task for the call",
                )
            )
            # Whoever else waits for the task (the request, the handler) gets the error too.
            self.started.set_exception(error)
            self.started.exception()  # retrieved: nobody may be waiting
            raise error
        self.record = record
        ctx = self.ctx
        ctx.engine.asker = TaskAsker(self)
        # The request's own stream ends with the CreateTaskResult: what the handler says from
        # now on goes to the task's listeners.
        ctx.notify_sink = self._notify
        self.manager.runs[record.task_id] = self
        self._lease_task = asyncio.ensure_future(self._keep_lease())
        result = record.created_result()
        # A re-sent round (its answer lost) gets this same task, however long the task runs.
        await self.early.settle(result)
        self.started.set_result(result)
        self.manager.publish(record)
        logger.info("tools/call %r runs as task %s", self.tool, record.task_id[:8])
        return result

    # --- while it runs ---------------------------------------------------------------------

    async def ask(
        self, questions: dict[str, tuple[str, dict[str, Any]]]
    ) -> dict[str, pydantic.BaseModel]:
        """Put `questions` on the task and wait for their answers (validated models)."""
        require_capabilities(self.ctx, questions)
        record = self.record
        assert record is not None
        for key, (method, params) in questions.items():
            record.inputs[key] = {"method": method, "params": params}
        record.status = wire.INPUT_REQUIRED
        # One turn of the loop first: branches asking in the same step (`asyncio.gather` of
        # questions) go on the task together, in one write, as they would in one MRTR round.
        await asyncio.sleep(0)
        async with self._lock:
            await self._save()
        got: dict[str, pydantic.BaseModel] = {}
        wake = asyncio.Event()
        self._waiters.add(wake)
        store = self.manager.store
        poll: float | None = None  # a store of this process: only a wake-up brings answers
        if not isinstance(store.store, MemoryStore):
            poll = ANSWER_FALLBACK_POLL if self.manager.sharing else ANSWER_POLL
        completed = False
        try:
            while True:
                # Cleared before looking: a wake-up arriving while the store answers counts.
                wake.clear()
                for key, (method, _) in questions.items():
                    if key not in got:
                        raw = await store.answer(record.task_id, key)
                        if raw is not None:
                            got[key] = validate_answer(key, method, raw)
                if len(got) == len(questions):
                    break
                try:
                    async with asyncio.timeout(poll):
                        await wake.wait()
                except TimeoutError:
                    pass
            completed = True
        finally:
            self._waiters.discard(wake)
            for key in questions:
                record.inputs.pop(key, None)
            if not record.inputs and record.status == wire.INPUT_REQUIRED:
                record.status = wire.WORKING
        if completed:
            async with self._lock:
                await self._save()
        return got

    def wake(self) -> None:
        """Answers were stored for this task: let its waiting questions look."""
        for event in self._waiters:
            event.set()

    async def _notify(self, message: dict[str, Any]) -> None:
        record = self.record
        if record is None or record.terminal:
            return
        if message.get("method") == "notifications/progress":
            params = message.get("params") or {}
            text = params.get("message")
            if not isinstance(text, str):
                total = params.get("total")
                text = f"{params.get('progress')}" + (f"/{total}" if total is not None else "")
            async with self._lock:
                record.message = text
                await self._save()
        self.manager.forward(record.task_id, message)

    async def _save(self) -> None:
        record = self.record
        assert record is not None
        record.updated = time.time()
        if await self.manager.store.save(record):
            self.manager.publish(record)

    def stop(self, reason: str) -> None:
        """Cancel the handler (`cancelled` by the client, or `expired`)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()

    async def _keep_lease(self) -> None:
        record = self.record
        assert record is not None
        manager = self.manager
        lease = self.settings.lease
        while True:
            await asyncio.sleep(min(lease / 3, max(0.01, record.expires - time.time())))
            now = time.time()
            if now >= record.expires:
                self.stop("expired")
                return
            try:
                if await manager.store.cancel_requested(record.task_id):
                    self.stop("cancelled")
                    return
                async with self._lock:
                    record.lease = now + lease
                    await manager.store.save(record)
            except Exception:
                # The store may come back before the lease runs out: keep trying.
                logger.exception("task %s: could not renew its lease", record.task_id[:8])

    # --- the end ---------------------------------------------------------------------------

    def worker_done(self, worker: asyncio.Task[dict[str, Any]]) -> None:
        """The handler ended: store the outcome if the call is a task."""
        if not worker.cancelled():
            worker.exception()  # retrieved here, whoever else reads it
        if self.began:
            self.manager.spawn(self._finish(worker))

    async def _finish(self, worker: asyncio.Task[dict[str, Any]]) -> None:
        try:
            await asyncio.shield(self.started)
        except Exception:
            return  # never became a task: the request answered with the error
        lease = self._lease_task
        if lease is not None:
            lease.cancel()
        record = self.record
        assert record is not None
        try:
            self._settle(record, worker)
            record.inputs = {}
            record.lease = 0.0
            async with self._lock:
                await self._save()
        except Exception:
            logger.exception("task %s: could not store its outcome", record.task_id[:8])
        finally:
            self.manager.runs.pop(record.task_id, None)
            await self.manager.unclaim(record)

    def _settle(self, record: TaskRecord, worker: asyncio.Task[dict[str, Any]]) -> None:
        if worker.cancelled():
            reason = self._stop_reason or "cancelled"
            if reason == "expired":
                record.status = wire.FAILED
                record.message = "Task has expired: it ran past its ttlMs"
                record.error = {"code": INTERNAL_ERROR, "message": record.message}
            else:
                record.status = wire.CANCELLED
                record.message = "Cancelled at the client's request (tasks/cancel)"
            return
        exc = worker.exception()
        if exc is None:
            result = worker.result()
            if result.get("resultType") == "input_required":
                error = McpError(
                    INTERNAL_ERROR,
                    f"tool {self.tool!r} returned an InputRequiredResult while running as a "
                    "task; ask with ctx.elicit, ctx.sample or ctx.ask instead",
                )
                logger.error("task %s: %s", record.task_id[:8], error.message)
                exc = error
            else:
                result.setdefault("resultType", "complete")
                if _only_related(result):
                    del result["_meta"]
                record.status = wire.COMPLETED
                record.result = result
                record.message = None  # a progress message would be stale now
                return
        record.status = wire.FAILED
        if isinstance(exc, McpError):
            record.error = exc.to_error()
            record.message = exc.message
        else:
            logger.error("task %s: the handler raised", record.task_id[:8], exc_info=exc)
            record.message = f"Internal error while running {self.tool!r}"
            record.error = McpError(INTERNAL_ERROR, record.message).to_error()


def _only_related(result: dict[str, Any]) -> bool:
    """Whether the result's `_meta` holds nothing but the v1 related-task key (dropped: the
    task id is at the root of `tasks/get`)."""
    meta = result.get("_meta")
    return isinstance(meta, dict) and set(meta) == {wire.RELATED_TASK_META}
