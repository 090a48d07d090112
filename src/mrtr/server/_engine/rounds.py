"""One MRTR round of a `tools/call`, `prompts/get` or `resources/read` request.

A round restores what earlier rounds recorded (verifying the sealed `requestState` before any
handler code runs), takes this round's `inputResponses`, runs or replays the handler under
`round_timeout`, and then either lets the result through or seals a new state and shapes the
`InputRequiredResult`. The rules it keeps (R1-R7) and the replay rules are stated at the top
of `replay.py`.

On a legacy session (the context's engine has a live asker, `server/live.py`) a round is the whole
request: nothing is sealed or restored, questions are answered as the handler awaits them,
and a manual-style `InputRequiredResult` is driven here on the client's behalf: its input
requests are asked live and the handler is called again with `ctx.input_responses` and its
own `ctx.request_state` (kept in memory), up to `max_rounds` times. Each wait for the client
is bounded by `round_timeout`, and the whole request by `round_timeout * max_rounds` (what a
modern flow of that many rounds may take). A run of either era is the same one call
(`_run`, under `RoundKeeper.run`, whose deadline is armed only once the run waits).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ...deadline import Deadline, current_task
from ...inputs import InputRequiredResult
from ...protocol.errors import INTERNAL_ERROR, McpError, invalid_params, invalid_request_state
from ...stepping import resume
from ..input_bounds import check_arguments, check_responses, state_too_large
from ..redemption import Claim, EarlyOutcome, Redemptions
from ..request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    VerifiedState,
    digest_arguments,
    mint_for_flow,
    verify_request_state,
)
from ..tool_error import failure_text
from .capabilities import Asked, AskedQuestions, Capable, require_capabilities
from .outcome import STOPPED, Failure
from .questions import Asker, question_digest
from .replay import Replay
from .round_state import RoundState

if TYPE_CHECKING:
    from ..options import ServerOptions

logger = logging.getLogger("mrtr.server")
_monotonic = time.monotonic  # a round's start, read on every round

#: Types of argument values that nest nothing.
_FLAT: frozenset[type] = frozenset((str, int, float, bool, type(None)))

#: `(method, params)` of each question going out, by key.
Questions = dict[str, tuple[str, dict[str, Any]]]
#: Turns a handler's value (or a tool's `Failure`) into its wire result, or an input request.
Render = Callable[[Any], "dict[str, Any] | InputRequiredResult"]
#: Runs the handler once, given the request's context (`RequestContext`).
Invoke = Callable[[Any], Awaitable[Any]]


class RoundContext(Capable, Protocol):
    """The request as a round sees it (`RequestContext` is one)."""

    params: dict[str, Any]
    transport_info: Any
    #: The engine of this attempt; a legacy session's driven round replaces it.
    engine: Replay

    @property
    def input_responses(self) -> dict[str, Any]:
        """This round's `inputResponses`."""

    @input_responses.setter
    def input_responses(self, responses: dict[str, Any]) -> None: ...


class RejectionLog:
    """Logs refused request states: one line per cause per `interval` seconds, with a hint.

    A misconfigured deployment (two instances with different keys) refuses every retry; one
    line per request would drown the log and say nothing new, so repeats of a cause are
    counted and the count goes out with the next line for that cause.
    """

    interval = 60.0
    _MAX_CAUSES = 64  # causes include verifier/guard exception names: keep the table small

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def log(self, binding: StateBinding, cause: str, hint: str) -> None:
        """Log (or count) one refusal of a state presented for `binding`."""
        now = time.monotonic()
        last = self._last.get(cause)
        if last is not None and now - last[0] < self.interval:
            self._last[cause] = (last[0], last[1] + 1)
            return
        if last is None and len(self._last) >= self._MAX_CAUSES:
            self._last.clear()
        self._last[cause] = (now, 0)
        skipped = last[1] if last is not None else 0
        logger.warning(
            "rejected requestState for %s %r: %s%s%s",
            binding.method,
            binding.target,
            cause,
            f" ({hint})" if hint else "",
            f"; {skipped} more refused for this cause since the last line" if skipped else "",
        )


class RoundKeeper:
    """Seals and verifies request states for one server, and runs its rounds."""

    def __init__(
        self,
        audience: str,
        options: ServerOptions,
        env_key: Sequence[str] | None = None,
        env_verify_keys: Sequence[str] | None = None,
    ) -> None:
        """`env_key`, `env_verify_keys`: the deployment's keys from its environment (the
        engine reads no environment itself), used when `options` configure no key."""
        self.audience = audience
        self.options = options
        self.rejections = RejectionLog()
        # Without a configured key, the deployment's shared one from the environment, so that
        # every worker of one deployment verifies what another sealed.
        key = options.request_state_key
        if key is None:
            key = env_key
        verify_only = options.request_state_verify_keys
        if not verify_only and options.request_state_key is None:
            verify_only = env_verify_keys or ()
        if verify_only and key is None:
            raise ValueError(
                "request_state_verify_keys needs a request_state_key to seal with (the key "
                "every instance seals with now; the verify-only keys are accepted besides it)"
            )
        # A custom verifier replaces verification only: a configured key still seals.
        self.key_ring = (
            RequestStateKeyRing(key, verify_only=verify_only)
            if options.request_state_verifier is None or key is not None
            else None
        )
        store = options.store
        self.redemptions = (
            None
            if store is None
            else Redemptions(
                store,
                max_outcome_bytes=options.max_outcome_bytes,
                round_timeout=options.input_required.round_timeout,
                rejections=self.rejections,
            )
        )

    def round(
        self, ctx: RoundContext, target: str, arguments: Any, *, checked: bool = False
    ) -> Round:
        """The round `ctx` is: of the tool/prompt named `target`, or of the resource `target`.

        Client input that could not be carried into a sealed state (too deep, too many or too
        big answers) is refused here with -32602, before any handler code runs; `checked`
        says the arguments passed `check_arguments` already.
        """
        if arguments and not checked:
            self.check_arguments(ctx.method, target, arguments)
        responses = ctx.params.get("inputResponses")
        if responses and isinstance(responses, dict):
            check_responses(responses, self.options.input_required)
        return Round(self, ctx, target, arguments)

    @staticmethod
    def check_arguments(method: str, target: str, arguments: Any) -> None:
        """Refuse (-32602) arguments too deep to be carried into a sealed state."""
        if type(arguments) is dict:
            # Arguments of plain values (the common case) are one level deep: nothing to
            # measure. Anything else is encoded to find its depth.
            for value in arguments.values():
                if type(value) not in _FLAT:
                    check_arguments(arguments, f"{method} {target!r}")
                    return
        else:
            check_arguments(arguments, f"{method} {target!r}")

    async def run(
        self,
        running: Coroutine[Any, Any, Any],
        main: asyncio.Task[Any] | None,
        what: str,
        live: bool = False,
    ) -> Any:
        """Await `running` (a round's run, not started yet) within `round_timeout` (on a legacy
        session, `live`: `round_timeout * max_rounds`, all its questions asked live), whose
        deadline is armed only once the run waits; `main` is the task running it (None: looked
        up then), `what` names the request if it expires."""
        config = self.options.input_required
        timeout = config.round_timeout * config.max_rounds if live else config.round_timeout
        if timeout <= 0:
            return await running
        started = _monotonic()
        try:
            # The first step runs here: a round that never waits (a plain call, one that
            # stops at a question or replays its answers) arms no deadline at all.
            pending = running.send(None)
        except StopIteration as done:
            return done.value
        # It waits: the rest of `round_timeout`, counted from the round's start.
        deadline = Deadline(timeout - (_monotonic() - started), main)
        try:
            with deadline:
                return await resume(running, pending)
        except TimeoutError:
            limit = "round_timeout * max_rounds" if live else "round_timeout"
            raise timed_out(deadline, what, limit, timeout) from None

    async def verify(
        self,
        token: Any,
        binding: StateBinding,
        checked: tuple[StateBinding, VerifiedState] | None = None,
    ) -> VerifiedState:
        """Verify an inbound state, then let `request_state_guard` refuse it.

        `checked` is what `middleware.restore_round` already verified for this request: only
        the guard runs then. Every failure is the same -32602; the cause goes to the log (see
        `RejectionLog`).
        """
        hook = "request_state_verifier"
        try:
            if checked is not None and checked[0] == binding:
                verified = checked[1]
            elif not isinstance(token, str):
                raise InvalidRequestState("not_a_string")
            # Bounded before any decoding or decryption: the cost of a refusal stays small.
            elif len(token) > self.options.max_state_bytes:
                raise InvalidRequestState("too_large")
            elif (verifier := self.options.request_state_verifier) is None:
                assert self.key_ring is not None
                verified = verify_request_state(self.key_ring, binding, token)
            else:
                got = verifier(token, binding)
                verified = await got if inspect.isawaitable(got) else got
            guard = self.options.request_state_guard
            if guard is not None:
                hook = "request_state_guard"
                outcome = guard(verified, binding)
                if inspect.isawaitable(outcome):
                    await outcome
            return verified
        except InvalidRequestState as exc:
            cause = exc.cause
        except Exception as exc:
            cause = f"{hook} raised {type(exc).__name__}"
        self.rejections.log(binding, cause, self._hint(cause))
        raise invalid_request_state()

    def _hint(self, cause: str) -> str:
        """What a refusal for `cause` most likely means, for the person reading the log."""
        options = self.options
        if cause == "unknown_key":
            return (
                "sealed under a key this server does not have: instances not sharing "
                "request_state_key, or a state from before a restart with the default "
                "random key"
            )
        if cause == "expired":
            return (
                f"older than request_state_ttl ({options.request_state_ttl:g} s): the answer "
                "took longer than that"
            )
        if cause == "binding_mismatch":
            return (
                "minted for another request: another tool, prompt or resource, other "
                "arguments, another server name or another caller"
            )
        if cause == "decrypt_failed":
            return "altered or corrupted on its way through the client"
        if cause == "too_large":
            return f"longer than max_state_bytes ({options.max_state_bytes})"
        if cause in ("malformed", "unknown_version"):
            return "not a requestState this version of mrtr minted"
        return ""

    def seal(self, binding: StateBinding, state: RoundState) -> str:
        """Mint the `requestState` token carrying `state`."""
        if self.key_ring is None:
            raise McpError(
                INTERNAL_ERROR,
                "request_state_verifier is set but no request_state_key to seal with",
            )
        try:
            data = state.encode()
        except TypeError as exc:
            # Answers were checked on arrival; what fails here is the server's own part (a
            # `ctx.once` result or a handler's plaintext), so the detail goes to the log.
            logger.error(
                "%s %r: cannot record the state for the next round: %s",
                binding.method,
                binding.target,
                exc,
            )
            raise McpError(
                INTERNAL_ERROR, f"Internal error while handling {binding.method}"
            ) from None
        ttl = self.options.request_state_ttl
        # A flow that has no id yet gets one here (`state.flow_id` is set to it).
        token, state.flow_id = mint_for_flow(
            self.key_ring,
            binding,
            data,
            state.round,
            state.flow_id,
            0 if math.isinf(ttl) else ttl,
        )
        # Never hand out a state the next round would refuse as too large.
        limit = self.options.max_state_bytes
        if len(token) > limit:
            raise state_too_large(f"{binding.method} {binding.target!r}", len(token), limit)
        return token


def timed_out(deadline: Deadline | None, what: str, limit: str, timeout: float) -> BaseException:
    """What a round whose `deadline` (for `limit`, `timeout` seconds) ran out raises."""
    if deadline is None or not deadline.expired:  # pragma: no cover
        return TimeoutError()  # the engine reports a handler's own timeout as a Failure
    return McpError(INTERNAL_ERROR, f"{what} did not finish within {limit} ({timeout:g} s)")


class Round:
    """One attempt at an MRTR request (see the module docstring)."""

    __slots__ = ("_binding", "arguments", "ctx", "keeper", "target")

    def __init__(self, keeper: RoundKeeper, ctx: RoundContext, target: str, arguments: Any) -> None:
        self.keeper = keeper
        self.ctx = ctx
        self.target = target
        self.arguments = arguments
        self._binding: StateBinding | None = None

    @property
    def binding(self) -> StateBinding:
        """What this request's state is bound to (computed once per round)."""
        if self._binding is None:
            resolver = self.keeper.options.principal
            ctx = self.ctx
            try:
                digest = digest_arguments(self.arguments)
            except (TypeError, ValueError) as exc:
                raise invalid_params(
                    f"{ctx.method} {self.target!r}: arguments cannot be bound to a "
                    f"requestState: {exc}"
                ) from None
            # Positional (method, target, arguments digest, audience, principal): no keywords
            # to match on every round.
            self._binding = StateBinding(
                ctx.method,
                self.target,
                digest,
                self.keeper.audience,
                resolver(ctx.transport_info) if resolver is not None else None,
            )
        return self._binding

    def complete(
        self,
        invoke: Invoke,
        render: Render,
        what: str | None = None,
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """Restore the state, take this round's answers, run (or replay) the handler, and give
        the request's result: `render(value)`, or a sealed `InputRequiredResult`.

        `render` gets the handler's value or, for a tool (`what` is None), the `Failure` it
        reports as its result; `what` names a prompt or resource, whose failures become -32603.
        Nothing else comes out but an `McpError` or the cancellation of the request (replay
        rule 4). On a legacy session see the module docstring.
        """
        ctx = self.ctx
        if ctx.engine.asker is not None:
            return self._complete_live(invoke, render, what)
        params = ctx.params
        if "requestState" not in params and "inputResponses" not in params:
            # A first round (every call that never asks): nothing to restore, take or redeem,
            # so the run starts at once, one coroutine shallower.
            return self._execute(invoke, render, what)
        return self._complete(invoke, render, what)

    async def _complete(
        self,
        invoke: Invoke,
        render: Render,
        what: str | None,
    ) -> dict[str, Any]:
        ctx = self.ctx
        params = ctx.params
        token = params.get("requestState")
        engine = ctx.engine
        state = engine.state
        verified: VerifiedState | None = None
        if token is not None:
            verified = await self.keeper.verify(token, self.binding, engine.checked)
            state = RoundState.decode(verified.data, verified.round, verified.flow_id)
            engine.restore(state)
        responses = params.get("inputResponses")
        if responses is not None:
            if not isinstance(responses, dict):
                raise invalid_params(
                    '"inputResponses" must be an object mapping each asked key to its result'
                )
            if token is None:
                state.unsealed = responses
            else:
                state.take_responses(responses)
            ctx.input_responses = responses
        redemptions = self.keeper.redemptions
        if verified is not None and redemptions is not None and verified.flow_id:
            # A sealed state is redeemed once: a repeat gets the first outcome (redemption.py);
            # a second attempt (cancelled, taken over) finds its `once` runs in the journal.
            engine.journal = redemptions.journal(verified)
            claim = await redemptions.claim(
                self.binding, verified, responses, self._early_outcome()
            )
            if not isinstance(claim, Claim):
                return claim  # a repeat: the first run's outcome
            try:
                result = await self._execute(invoke, render, what)
            except BaseException as exc:
                await redemptions.failed(claim, exc)
                raise
            await redemptions.ran(claim, result)
            return result
        return await self._execute(invoke, render, what)

    def _early_outcome(self) -> EarlyOutcome | None:
        """How this round may settle its redeemed outcome before its run ends: never, but for
        a call that may become a task (`tasks/run.py`)."""
        return None

    async def _execute(
        self,
        invoke: Invoke,
        render: Render,
        what: str | None,
    ) -> dict[str, Any]:
        """Run (or replay) the handler of a modern round and shape its result."""
        # One lookup of the running task serves the deadline and the engine.
        outcome = await self._run(invoke, what, current_task())
        if type(outcome) is Failure:
            outcome = self._failed(outcome, what)
        # A run stopped at a question has no value to render: its questions go out.
        result = {} if outcome is STOPPED else render(outcome)
        if type(result) is dict and not self.ctx.engine.outgoing:
            return result  # `finish` for a complete result
        return self.finish(result)

    async def _complete_live(
        self,
        invoke: Invoke,
        render: Render,
        what: str | None,
        first: Any = None,
    ) -> dict[str, Any]:
        # A legacy session: nothing sealed or restored, and a manual-style handler is driven.
        # `first`: the rendered result of a first run made already (without this round).
        ctx = self.ctx
        asker = ctx.engine.asker
        assert asker is not None
        try:
            result = render(await self._run_live(invoke, what)) if first is None else first
            while isinstance(result, InputRequiredResult):
                result = render(await self._drive(asker, result, invoke, what))
            return result
        finally:
            # The live asker and the context refer to each other: cut at the request's end, so
            # that the request's objects go with their last reference instead of piling up for
            # full collections (under many legacy clients, pauses of tens of ms). A request
            # that became a task has the task's asker by now, which stays.
            engine = ctx.engine
            if engine.asker is asker:
                engine.asker = None

    def _run(
        self, invoke: Invoke, what: str | None, main: asyncio.Task[Any] | None, live: bool = False
    ) -> Awaitable[Any]:
        """The handler's one run in this round, within its time (`RoundKeeper.run`; `live`: on
        a legacy session): its value, `STOPPED` or a `Failure`, to await. `main`: the task
        running it, when the caller has it at hand. A call, not a coroutine: every tool call
        passes here."""
        ctx = self.ctx
        engine = ctx.engine
        engine.target = self.target
        return self.keeper.run(engine.run(invoke, ctx, main), main, what or ctx.method, live)

    async def _run_live(self, invoke: Invoke, what: str | None) -> Any:
        """Run the handler once on a legacy session: its value, or a tool's `Failure`."""
        outcome = await self._run(invoke, what, None, live=True)
        return outcome if not isinstance(outcome, Failure) else self._failed(outcome, what)

    def _failed(self, outcome: Failure, what: str | None) -> Failure:
        """A tool's own failure is its result; a prompt's or resource's is -32603, its text
        masked unless `mask_errors` is off or it is a `ToolError` (see `tool_error.py`)."""
        ctx = self.ctx
        if not outcome.is_error:  # KeyboardInterrupt and the like: never a handler's result
            logger.error("%s: the handler raised", ctx.engine.label, exc_info=outcome.exc)
            raise McpError(INTERNAL_ERROR, f"Internal error while handling {ctx.method}")
        if what is None:
            return outcome
        mask = self.keeper.options.mask_errors
        raise McpError(INTERNAL_ERROR, failure_text(outcome.exc, what, mask, f"{what} failed: "))

    async def _drive(
        self,
        asker: Asker,
        asked: InputRequiredResult,
        invoke: Invoke,
        what: str | None,
    ) -> Any:
        """One round of a manual-style handler on a legacy session, driven live."""
        ctx = self.ctx
        state = ctx.engine.state
        limit = self.keeper.options.input_required.max_rounds
        if state.round + 1 > limit:
            raise self._too_many_rounds(limit)
        answers = await asker.answer_requests(asked.input_requests or {})
        # A fresh attempt: the last one's questions and tasks stay with the engine that ran it.
        ctx.engine = Replay(
            RoundState(
                state.round + 1, once=state.once, user=asked.request_state, flow_id=state.flow_id
            ),
            ctx.method,
            asker,
        )
        ctx.input_responses = answers
        return await self._run_live(invoke, what)

    def _too_many_rounds(self, limit: int) -> McpError:
        return McpError(
            INTERNAL_ERROR,
            f"{self.ctx.method} {self.target!r} still needs input after {limit} rounds "
            "(max_rounds); giving up",
        )

    async def settle(
        self,
        result: Any,
        invoke: Invoke,
        render: Render,
    ) -> dict[str, Any]:
        """Shape the rendered `result` of a first run made without this round (a tool that
        takes no context, run directly): sealed as an input-required result, or on a legacy
        session driven live, as `complete` would have. `invoke` runs the handler again."""
        if self.ctx.engine.asker is not None:
            return await self._complete_live(invoke, render, None, result)
        return self.finish(result)

    def finish(self, result: dict[str, Any] | InputRequiredResult) -> dict[str, Any]:
        """Let a complete result through, or seal and shape an input-required one."""
        engine = self.ctx.engine
        outgoing = engine.outgoing
        if outgoing:
            return self._input_required(outgoing, engine.state.user)
        if isinstance(result, InputRequiredResult):
            asked = result.input_requests or {}
            return self._input_required(
                {
                    key: (r.method, r.params, question_digest(r.method, r.params))
                    for key, r in asked.items()
                },
                result.request_state,
            )
        return result

    def _input_required(self, questions: dict[str, Asked], user: str | None) -> dict[str, Any]:
        self._check_capabilities(questions)
        state = self.ctx.engine.state
        next_round = state.round + 1
        limit = self.keeper.options.input_required.max_rounds
        if next_round > limit:
            raise self._too_many_rounds(limit)
        # What the next round pins each answer to, and what goes out, in one pass.
        pinned: dict[str, list[str]] = {}
        requests: dict[str, Any] = {}
        for key, (method, params, digest) in questions.items():
            pinned[key] = [digest, method]
            requests[key] = {"method": method, "params": params}
        sealed = RoundState(
            next_round, state.stored_answers(), pinned, state.once, user, flow_id=state.flow_id
        )
        try:
            token = self.keeper.seal(self.binding, sealed)
        finally:
            # The flow continues: this round's id is the one sealed (minted by `seal` if none
            # yet), also when the state turned out too large to hand out.
            state.flow_id = sealed.flow_id
        result: dict[str, Any] = {"resultType": "input_required", "requestState": token}
        if requests:
            result["inputRequests"] = requests
        return result

    def _check_capabilities(self, questions: AskedQuestions) -> None:
        require_capabilities(self.ctx, questions)
