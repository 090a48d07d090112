"""The MRTR engine: deterministic replay of a handler across stateless rounds.

`Replay` owns everything about one attempt (round) of a request: the recorded answers, the
questions asked, their keys, `once` results, the tasks of the run and what goes out. It does no
I/O; `RequestContext` is its face towards the handler, and `rounds.py` restores and seals it.

Rule 0: every rule that decides how a round goes lives in this package (`mrtr.server._engine`),
stated here, and the package does no I/O of its own: the client is reached through an `Asker`,
the store through the `OnceJournal` and `Redemptions` it is handed, and the request through
the protocols it names (`RoundContext`, `QuestionEngine`). It imports nothing from the
registry, the dispatchers or the transports.

The round (`rounds.py`), for every request that can ask (`tools/call`, `prompts/get`,
`resources/read`):

R1. A sealed `requestState` is verified before any middleware or handler code runs, and
    `request_state_guard` runs exactly once per round, on the state the round takes up: a state
    verified before the middleware (`Replay.restore` with what was checked) is not verified
    again, only guarded. Every refusal is the same -32602; its cause goes to the log.
R2. Client input that could not be carried into a sealed state (too deep, too many or too big
    answers) is refused with -32602 when the round is made, before any handler code runs.
R3. A redeemed round (a state with a flow id, and a store) runs its handler at most once:
    `Redemptions.claim` admits exactly one run, and a repeat of the round gets its outcome.
R4. A run ends in one of three ways (rule 4): a value, `STOPPED` (its questions go out in one
    sealed `InputRequiredResult`) or a `Failure`. `InputPending` is a `BaseException` and never
    leaves the engine; nothing comes out of a round but its result, an `McpError` or the
    cancellation of the request itself.
R5. The context, and the engine in it, exist before the handler runs: the run's mark is set in
    the task that runs the handler, so every task the handler starts inherits it (rule 8).
R6. A round that never waits arms no deadline; one that waits is bounded by `round_timeout`
    from its start (a legacy session's whole request by `round_timeout * max_rounds`).
R7. On a legacy session the engine has a live asker (rule 10) and a round is the whole request;
    the asker is cut from the engine when the request ends, so that the request's objects go
    with their last reference rather than waiting for the cycle collector.

The run (`Replay`; everything the engine guarantees to a handler):

1. A handler asks by creating a question (`ctx.elicit(...)`, `ctx.sample(...)`, ...; only
   `elicitation/create`, `sampling/createMessage` and `roots/list` can be asked). Each question
   has a digest of its exact method and params, and a key: the one given, or `<kind>-<8 hex>`
   taken from the digest (`-2`, `-3`, ... appended for the second, third identical question of
   a run). Automatic keys thus follow the question, not the order concurrent branches reach it
   in: the same question has the same key on every round.
2. Awaiting a question whose key holds an answer recorded for the same digest returns that
   answer without suspending (but every 64th recorded answer or `once` result a run takes lets
   the event loop turn once, so that `round_timeout` can stop a handler looping over them). A
   key is asked once per run: asking again under a key this run already awaited is a
   `ReplayError` naming the key (a loop re-asking `key="more"` would otherwise get the same
   recorded answer forever).
3. Awaiting an unanswered question raises `InputPending` (a `BaseException`, so `except
   Exception` in user code does not swallow it) out of the handler. Every question created in
   that run and still unanswered goes out in the same `InputRequiredResult`: `ctx.ask`,
   `asyncio.gather` or an `asyncio.TaskGroup` of questions, and concurrent branches that reach
   their question in the same step all ask in one round. (A branch that first awaits something
   else may ask in a later round; correctness never depends on batching.)
4. The question wins. A run with an unanswered question ends as input-required when the handler
   returns normally (it computed its result without that answer), raises `InputPending`, raises
   an error chained from one (`except BaseException as e: raise Other() from e`, or raised
   while handling it), or raises a group (TaskGroup) of nothing but these and cancellations. A
   group holding any other error is that error: a tool reports it as its result. Cancelling the
   request itself (the client's cancellation, `round_timeout`) is never turned into anything.
5. The state sealed into `requestState` holds every recorded answer with its digest, the keys
   and digests asked in the last round, `ctx.once` results, and the handler's own plaintext.
   An `inputResponses` entry is taken only for a key the last round asked, and is pinned to the
   digest it was asked with: a handler that asks something else under that key is asked again,
   and a warning names the key and the question it now asks. A warning also names an answered
   automatic key the run did not ask again while asking a new one (a question that changes
   from run to run, such as one holding a timestamp, gets a new key every round).
6. A request without `requestState` has no last round to pin to; an `inputResponses` entry it
   carries answers the question asked under that key in this run (validated against it), as
   the spec lets a client answer on any attempt. Keys nothing asks for are ignored.
7. A round "replays" until the handler reaches a question the last round asked (or one still
   unanswered): code before that point already ran, so its logs and progress are not sent
   again (`ctx.replaying`). A manual-style handler reaches it by reading `ctx.input_responses`
   or `ctx.request_state`.
8. Tasks created while the handler runs belong to the run (a context variable marks them), and
   a task of the run that uses the context is tracked. When the run stops for input, `once`
   calls already started finish and are recorded, then every tracked task still running is
   cancelled and awaited before the state is sealed; when it fails or is cancelled, they are
   cancelled too. Once a question is pending no `once` starts (it raises `InputPending`: the
   round ends input-required anyway, and it runs in a later round). A task that asks or calls
   `once` after its run ended gets `InputPending` if the run stopped for input (its branch
   asks in a later round), and otherwise a `ReplayError`, which is also logged: nothing it
   asks could reach the client. (A task that never used the context before the run stopped
   cannot be seen: Python 3.11 cannot tell which run a task belongs to without a task factory,
   and the loop's task factory belongs to the application. It ends at its next use.)
9. `ctx.once(key, fn)` runs `fn` once across the rounds of a request; concurrent calls with one
   key share that one run. Its result is recorded in the state and given back through `fn`'s
   return annotation or `type=` (see `once_codec.py`), or as plain JSON without one; a result
   that would not come back the same is a `ReplayError` when it is produced, and the round is
   not sealed even if the handler swallows that error. Two `once` calls of one run with the
   same key and different functions are a `ReplayError`.
10. How a question is answered is the engine's asker. Without one (every 2026-07-28 request:
   the hot path) it is answered by replay, as above. On a legacy (`initialize`) session the
   engine is given a live asker (`live.py`): awaiting a question claims its key (rule 2's
   once-per-run check) and the asker sends it to the client and awaits the answer, validated
   as an `inputResponses` entry would be. The handler then runs straight through once: nothing
   is replayed, `replaying` stays False, a question created but never awaited is never asked,
   and `ctx.once` runs `fn` once per request, keeping its result in memory only. A call that
   becomes a task (the tasks extension) is given the task asker (`tasks/run.py`) from that
   point on: what it asked before was answered by replay, what it asks after goes on the task.
11. In a redeemed round (one that may run a second time: after a cancellation, or taken over
   from a process that died) the engine has a journal (`once_journal.py`): a `once` not yet
   in the state is recorded in the store as started before `fn` runs and as finished with its
   result after. A second attempt gives a finished result back without running `fn`; one
   started and never finished is run again only if its `on_uncertain` says so, and otherwise
   fails the round with -32603 `effect_uncertain`. When such a round's request is cancelled,
   a `once` already running is not cut off: it has `ONCE_GRACE` seconds to finish and record
   its result before the cancellation goes through (as rule 8 lets it finish when the run
   stops for input), so a cancellation leaves "may have run" only past that.
12. A checked run (`check`: while tests run, in development mode, or asked for) that
   replays is watched until it reaches the question the last round asked (`replay_check.py`):
   an effect there (rows changed in SQLite, a file written, a process started, network I/O)
   is logged as a warning naming the fix, `ctx.once`. Code inside `ctx.once` is not watched.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

from ...deadline import current_task
from ..once_codec import codec_for
from ..once_journal import OnceJournal, OnUncertain
from ..worker_threads import check_on_loop
from . import replay_check
from .capabilities import Asked
from .once import OnceCalls, restore_once
from .outcome import (
    STOPPED,
    Failure,
    InputPending,
    ReplayError,
    UnaskableMethod,
    protocol_error,
    stops_for_input,
)
from .questions import (
    KEY_PREFIX,
    MISSING,
    Asker,
    Question,
    asked_again,
    convert_answer,
    describe_question,
    digest_text,
    question_hash,
    validate_answer,
)
from .round_state import RoundState

if TYPE_CHECKING:
    from ..request_state import StateBinding, VerifiedState

logger = logging.getLogger("mrtr.server")

A = TypeVar("A")

#: The run a task belongs to (rule 8): set in the request's task, inherited by the tasks the
#: handler creates (each copies its creator's context). A task is tracked when it uses the
#: context and carries this mark, so a task of another request (or of the application) that is
#: handed the context is never cancelled. Not a loop task factory: it is one per loop, it
#: belongs to the application (which may set its own, or replace ours), and it would put every
#: task of the process through our code. Not a `create_task` of our own either: handlers create
#: tasks through `asyncio.gather` and `TaskGroup`, which we do not see.
_RUN: contextvars.ContextVar[Replay | None] = contextvars.ContextVar("mrtr_replay", default=None)

#: Rule 2: recorded answers (and `once` results) a run takes between two turns of the loop.
YIELD_EVERY = 64

# The life of a run: it runs; a question is pending but the handler goes on; it stopped for
# input (tasks that come late get InputPending); it completed; it failed or was cancelled.
_RUNNING, _STOPPING, _STOPPED, _DONE, _ENDED = range(5)
_NONE_RUNNING: Final[dict[str, asyncio.Future[Any]]] = {}  # never written: read-only stand-in
#: Seconds a journaled `once` already running when its request is cancelled may take to
#: finish (rule 11): past that it is cancelled too, and left "may have run".
ONCE_GRACE: Final = 10.0


class Replay:
    """The replay engine of one attempt at a request (see the module rules). No I/O."""

    __slots__ = (
        "_awaited",
        "_budget",
        "_caught_up",
        "_main",
        "_occurrences",
        "_once",
        "_phase",
        "_tasks",
        "_warned",
        "asker",
        "check",
        "checked",
        "journal",
        "method",
        "outgoing",
        "questions",
        "state",
        "target",
    )

    def __init__(
        self, state: RoundState | None = None, method: str = "request", asker: Asker | None = None
    ) -> None:
        self.state = state if state is not None else RoundState()
        #: How questions are answered (rule 10): None answers them by replay.
        self.asker = asker
        #: Whether a replaying run is watched for effects (rule 12).
        self.check = False
        #: Where a redeemed round records its `once` runs (rule 11); None elsewhere.
        self.journal: OnceJournal | None = None
        #: The binding and state verified before the middleware ran (`restore`), if any.
        self.checked: tuple[StateBinding, VerifiedState] | None = None
        #: The request's method and target (a tool or prompt name, a URI), named in logs.
        self.method = method
        self.target: str | None = None
        self.questions: dict[str, Question[Any]] = {}
        #: The questions the round asks, once `run` gave `STOPPED`.
        self.outgoing: dict[str, Asked] = {}
        self._occurrences: dict[str, int] = {}
        self._awaited: dict[str, Question[Any]] = {}
        self._caught_up = False
        self._budget = YIELD_EVERY
        self._phase = _RUNNING
        self._main: asyncio.Task[Any] | None = None
        # Made when first needed: most runs never use them.
        self._tasks: set[asyncio.Task[Any]] | None = None
        self._once: OnceCalls | None = None
        self._warned: set[str] | None = None

    def restore(
        self, state: RoundState, checked: tuple[StateBinding, VerifiedState] | None = None
    ) -> None:
        """Take up `state`, restored from the request's verified `requestState` (`checked`:
        the binding and what it verified to, when that happens before the middleware runs, so
        that the round does not verify it again)."""
        self.state = state
        if checked is not None:
            self.checked = checked

    @property
    def label(self) -> str:
        """The request, as logs name it (`tools/call 'order'`)."""
        return self.method if self.target is None else f"{self.method} {self.target!r}"

    # --- the run (rules 4 and 8) -----------------------------------------------------------

    async def run(
        self,
        invoke: Callable[[A], Awaitable[Any]],
        arg: A,
        main: asyncio.Task[Any] | None = None,
    ) -> Any:
        """Run the handler once (`invoke(arg)`): its value, `STOPPED`, or a `Failure`.

        `main` is the task running it, when the caller has it at hand. A protocol error
        (`McpError`) is raised as it is, and so is the cancellation of the request itself;
        nothing else comes out.
        """
        if main is None:
            main = current_task()
        self._main = main
        token = _RUN.set(self)
        watch = replay_check.start(self) if self.check and self.state.asked else None
        try:
            try:
                value = await invoke(arg)
            except BaseException as exc:
                cancelled = isinstance(exc, asyncio.CancelledError)
                if cancelled and main is not None and main.cancelling():
                    # The request is cancelled or out of time: let it through, once a
                    # journaled `once` that started has finished and recorded (rule 11).
                    if self.journal is not None and self._once_running():
                        await self._finish_journaled()
                    raise
                if not stops_for_input(exc):
                    return await self._failed(exc)
                return await self._stop(exc)
            if self.questions and self.asker is None and self._has_pending():
                return await self._stop(None)
            self._phase = _DONE
            return value
        finally:
            if watch is not None:
                replay_check.stop(watch)
            _RUN.reset(token)
            self._close()

    async def _failed(self, exc: BaseException) -> Any:
        self._phase = _ENDED
        if self._tasks or self._once_running():
            await self._settle(wait_once=False)
        error = protocol_error(exc)
        if error is not None:
            raise error
        return Failure(exc)

    async def _stop(self, exc: BaseException | None) -> Any:
        """End the run for input: settle its tasks, then say what goes out (rules 3, 4, 8)."""
        if self._phase == _RUNNING:
            self._phase = _STOPPING
        cut_short = False
        if self._tasks or self._once_running():
            cut_short = await self._settle(wait_once=True)
        # What goes out: every question of this run still unanswered (`pending`), in one pass.
        outgoing: dict[str, Asked] = {
            key: (q.method, q.params, q.digest)
            for key, q in self.questions.items()
            if self.answer(q) is MISSING
        }
        if exc is not None and not outgoing:
            # InputPending with no question of this run pending: raised by hand, or for
            # another request's question. Nothing could answer it.
            return await self._failed(exc)
        if self._once is not None and self._once.unrecordable:
            # Rule 9: sealing now would let the side effect run again next round.
            self._phase = _ENDED
            key, problem = next(iter(self._once.unrecordable.items()))
            return Failure(ReplayError(f"ctx.once({key!r}): {problem}"))
        self._phase = _STOPPED
        self.outgoing = outgoing
        if not cut_short:  # a branch cut short may not have reached its question yet
            self._warn_unasked()
        return STOPPED

    async def _settle(self, wait_once: bool) -> bool:
        """Rule 8: let started `once` calls finish (or cancel them), then cancel and await the
        run's tracked tasks. True if one was still running."""
        waiting: list[asyncio.Future[Any]] = []
        once_running = self._once_running()
        if once_running:
            running = [f for f in once_running.values() if not f.done()]
            if wait_once and running:
                await asyncio.wait(running)
            elif running:
                waiting.extend(running)
        live = [t for t in self._tasks if not t.done()] if self._tasks else []
        waiting.extend(live)
        for future in waiting:
            future.cancel()
        if waiting:
            await asyncio.wait(waiting)
        return bool(live)

    async def _finish_journaled(self) -> None:
        """Rule 11: give the `once` calls still running `ONCE_GRACE` seconds to finish, so
        that a retry of the cancelled round finds their results instead of "may have run"."""
        running = [f for f in self._once_running().values() if not f.done()]
        if running:
            await asyncio.wait(running, timeout=ONCE_GRACE)

    def _close(self) -> None:
        if self._phase < _STOPPED:  # interrupted: the request was cancelled or timed out
            self._phase = _ENDED
            for future in [*(self._tasks or ()), *self._once_running().values()]:
                future.cancel()
        # What refers back to this engine (questions, tasks) is dropped: no cycle outlives the
        # run, so nothing of a request waits for the cycle collector.
        if self.questions:
            self.questions = {}
            self._awaited = {}
        self._tasks = None

    def _once_running(self) -> dict[str, asyncio.Future[Any]]:
        """The run's `ctx.once` calls running now, by key."""
        return self._once.running if self._once is not None else _NONE_RUNNING

    def _late(self, action: str, key: str | None) -> NoReturn:
        """Rule 8: something of the run used after the run ended."""
        if self._phase == _STOPPED:
            raise InputPending  # the run stopped for input: this branch asks next round
        what = f"{action} {key!r}" if key is not None else action
        message = (
            f"{what} after the handler of {self.label} ended: it cannot reach the client; "
            "await every question and ctx.once call before the handler returns"
        )
        logger.error(message)
        raise ReplayError(message)

    def track(self) -> None:
        """Rule 8: note the calling task if it is one the handler started in this run."""
        main = self._main
        if main is not None and self._phase < _STOPPED:
            task = current_task()
            if task is not main and task is not None and _RUN.get() is self:
                if self._tasks is None:
                    self._tasks = set()
                self._tasks.add(task)

    # --- questions (rules 1-3, 5-7) ---------------------------------------------------------

    def ask(
        self,
        method: str,
        params: dict[str, Any],
        key: str | None = None,
        convert: Callable[[str, Any], Any] | None = None,
    ) -> Question[Any]:
        """Create (and register) a question; awaiting it gives the answer or stops the run."""
        check_on_loop("ctx.elicit, ctx.sample, ctx.list_roots or ctx.ask (asking the client)")
        prefix = KEY_PREFIX.get(method)
        if prefix is None:
            raise UnaskableMethod(
                f"cannot ask {method!r}: a handler can ask {', '.join(KEY_PREFIX)} (use "
                "ctx.elicit, ctx.sample, ctx.list_roots or the *_request helpers)"
            )
        if self._phase >= _STOPPED:
            self._late("asking", key)
        # Not tracked here: a task matters once it awaits the question (finding the current
        # task costs more than the rest of creating a question).
        hashed = question_hash(method, params)
        digest = digest_text(hashed)
        if key is None:
            base = f"{prefix}-{hashed[:4].hex()}"
            seen = self._occurrences[base] = self._occurrences.get(base, 0) + 1
            key = base if seen == 1 else f"{base}-{seen}"
        elif key in self._awaited:
            raise ReplayError(asked_again(key))
        existing = self.questions.get(key)
        if existing is not None and existing.digest != digest:
            raise ReplayError(
                f"input key {key!r} is already used for another question in this request; "
                "give each question its own key"
            )
        question: Question[Any] = Question(
            self, key, method, params, digest, convert or convert_answer(method)
        )
        self.questions[key] = question
        return question

    def claim(self, question: Question[Any]) -> None:
        """Note that `question` is awaited now: once per key and run (rule 2), while the run
        lasts (rule 8)."""
        key = question.key
        if self._phase >= _STOPPED:
            self._late("awaiting question", key)
        self.track()
        if self._awaited.setdefault(key, question) is not question:
            raise ReplayError(asked_again(key))

    def take(self, question: Question[Any], stop: bool = True) -> Any:
        """Await `question`: its recorded answer, or `InputPending` (`MISSING` if not `stop`)."""
        key = question.key
        self.claim(question)
        value = self.answer(question)
        if value is MISSING:
            self._caught_up = True
            if stop:
                self.stop_here()
        elif key in self.state.asked:
            self._caught_up = True
        return value

    def stop_here(self) -> NoReturn:
        """Stop the handler where it awaits an unanswered question (rule 3)."""
        if self._phase == _RUNNING:
            self._phase = _STOPPING
        raise InputPending

    def answer(self, question: Question[Any]) -> Any:
        """The recorded raw answer for exactly `question`, or `MISSING`."""
        state = self.state
        key = question.key
        entry = state.answers.get(key)
        if entry is not None:
            if entry[0] == question.digest:
                return entry[1]
            self._changed(question)
        unsealed = state.unsealed
        if unsealed is not None and key in unsealed:
            # A first request (no requestState) that already carries an answer under this
            # key: take it, checked against the question it now answers (rule 6).
            value = unsealed[key]
            state.validated[key] = validate_answer(key, question.method, value)
            state.answers[key] = [question.digest, value]
            return value
        return MISSING

    def pending(self) -> dict[str, Question[Any]]:
        """Questions created in this run that still have no answer."""
        return {k: q for k, q in self.questions.items() if self.answer(q) is MISSING}

    def _has_pending(self) -> bool:
        return any(self.answer(q) is MISSING for q in self.questions.values())

    @property
    def replaying(self) -> bool:
        """Rule 7: re-running code that an earlier round already ran."""
        return bool(self.state.asked) and not self._caught_up

    def saw_inputs(self) -> None:
        """A manual-style handler read what the last round's questions brought (rule 7)."""
        self._caught_up = True

    def tick(self) -> bool:
        """Count one thing taken without suspending; True when the loop should turn (rule 2)."""
        self._budget -= 1
        if self._budget:
            return False
        self._budget = YIELD_EVERY
        return True

    def _changed(self, question: Question[Any]) -> None:
        if self._warned is None:
            self._warned = set()
        elif question.key in self._warned:
            return
        self._warned.add(question.key)
        logger.warning(
            "%s: question %r changed since the client answered it, so it is asked again (it "
            "is now %s); build each question the same way on every run: keep what changes "
            "between runs (a timestamp, a random value) out of it, or compute it in ctx.once",
            self.label,
            question.key,
            describe_question(question.method, question.params),
        )

    def _warn_unasked(self) -> None:
        state = self.state
        if self._awaited.keys() >= state.asked.keys():
            return  # the common case: every question the last round asked was asked again
        answered = [
            key
            for key, asked in state.asked.items()
            if key not in self._awaited
            and (entry := state.answers.get(key)) is not None
            and entry[0] == asked[0]
        ]
        new = [key for key in self.outgoing if key not in state.asked]
        if not answered or not new:
            return
        method, params, _ = self.outgoing[new[0]]
        logger.warning(
            "%s: the last round asked %s and got an answer, but this run did not ask it again "
            "and asks %s instead (the first is %s); a question that changes from run to run "
            "gets a new key and is asked again every round until max_rounds: build it the "
            "same way on every run, or give it an explicit key",
            self.label,
            ", ".join(map(repr, answered)),
            ", ".join(map(repr, new)),
            describe_question(method, params),
        )

    # --- ctx.once (rule 9) -----------------------------------------------------------------

    async def once(
        self,
        key: str,
        fn: Callable[[], Any],
        annotation: Any = None,
        on_uncertain: OnUncertain = "fail",
    ) -> Any:
        """Run `fn` once across rounds; its result as recorded (see rules 9 and 11)."""
        if on_uncertain != "fail" and on_uncertain != "retry" and not callable(on_uncertain):
            raise ValueError(
                f"ctx.once({key!r}): on_uncertain must be 'fail', 'retry' or a callable "
                f"answering whether the effect may have run, not {on_uncertain!r}"
            )
        if self._phase >= _STOPPED:
            self._late("ctx.once", key)
        self.track()
        calls = self._once
        if calls is None:
            calls = self._once = OnceCalls(self.state.once, self.label)
        calls.check_fn(key, fn)
        if self.asker is not None:
            return await calls.live(key, fn)
        codec = codec_for(fn, annotation)
        store = self.state.once
        if key in store:
            value = restore_once(key, codec, store[key])
            if self.tick():
                await asyncio.sleep(0)  # rule 2
            return value
        if key not in calls.running and self._phase != _RUNNING:
            raise InputPending  # rule 8: no side effect starts once a question is pending
        paused = replay_check.pause()  # rule 12: what `fn` does is meant to happen, once
        try:
            return await calls.run(key, codec, fn, self.journal, on_uncertain)
        finally:
            replay_check.resume(paused)
