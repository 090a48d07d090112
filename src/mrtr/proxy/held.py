"""Held calls: a proxied `tools/call` kept running on this instance between MRTR rounds.

When the backend asks a question mid-call, the proxy cannot replay the call on the client's
retry: that would call the backend's tool again (its side effect twice). So the backend call
runs in a task of its own, held here, and the tool's handler (manual style) hands the
backend's questions to the client as `inputRequests` and its answers back to the backend.
Rules:

1. The sealed `requestState` names the held call: `proxy:<instance>:<call id>:<step>`. The
   instance id is random per process; a retry that reaches another instance is relayed to
   this one (`relay.py`) or, without a shared broker, is -32602 saying so. A call no longer
   held (it ended longer than `ENDED_KEEP` seconds ago, timed out, the proxy restarted) is
   -32602 saying so with `data.mayHaveRun` true: its backend call may have had its effect,
   so the client is told to check before calling again, never just to call again. The
   backend call is never run again by a retry.
2. Each round the client is shown moves the call one step on. An answer is applied once, to
   the question it answers (a question's key is unique within its call), whichever round's
   retry carries it. A retry whose answers were all applied already (a re-send after a lost
   response) re-attaches to the call: it is served the call's result, or its questions now,
   and its answers go nowhere. An answer missing from a retry is asked again.
3. Calls held at once are bounded per caller and in all. A caller is counted as by every
   budget of the server (`mrtr.server.budgets.holder`): its principal
   (`ServerOptions.principal`, with `auth` the verified token's), else the address it
   connects from, else the one local peer; so one unauthenticated client cannot use up the
   bound of others. Past either bound a new call is refused as a budget is (-32602,
   `data.reason` "budget_exceeded", `data.bound` "principal" or "total"); no held call is
   dropped for it. A round continuing a call must come from the caller that started it (the
   token's subject or client id, else the legacy session, else `ServerOptions.principal`'s
   answer for the request). A call waiting for the client
   longer than `hold_timeout` seconds is cancelled (the backend is told by the client's
   `notifications/cancelled`) and forgotten.
4. A question the client did not declare it can answer is refused to the backend (-32601)
   rather than put to the client; the call goes on with the backend's reaction.
5. Exactly once through the proxy. A round's request cancelled by its client
   (`notifications/cancelled`, `mrtr.server.cancellation`), any round of a legacy session,
   and a first round cancel the backend call. A later 2026-07-28 round whose request is
   cancelled otherwise (its connection dropped, or it closed its HTTP stream, which a drop
   looks like) only detaches from it: the client's answers have reached the backend, so the
   call goes on, and the client's re-send of the round re-attaches to it (rule 2) within
   `hold_timeout`. A call that ends with no round attached keeps its outcome (its result,
   or its error) for `ENDED_KEEP` seconds for that re-send, at most `max_held_per_principal`
   per caller (a caller's oldest goes first) and `max_held` in all (past that a new one is
   not kept, and its re-send is told `mayHaveRun`: nobody else's is given up).
6. On a legacy session the client is asked live, within the one request (`ctx.ask`): no
   `requestState`, no hold between requests; a question the client fails to answer ends
   the request, and the backend call with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from ..inputs import ELICITATION_CREATE, InputRequest, InputRequiredResult
from ..protocol.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, McpError, invalid_params
from ..server.budgets import holder, refusal
from ..server.cancellation import by_client

if TYPE_CHECKING:
    from ..server.context import RequestContext

#: What marks a `requestState` as the proxy's own.
STATE_PREFIX = "proxy:"
#: Seconds a call that ended with no round attached keeps its outcome for a re-send (rule 5).
ENDED_KEEP = 60.0


def principal_of(ctx: RequestContext) -> str:
    """Whose call this is, for a round continuing it (rule 3)."""
    token = ctx.auth
    if token is not None and (token.subject or token.client_id):
        return f"token:{token.subject or token.client_id}"
    if ctx.session is not None:
        return f"session:{id(ctx.session)}"
    resolver = ctx.server.options.principal
    principal = resolver(ctx.transport_info) if resolver is not None else None
    return f"principal:{principal}" if principal else "anonymous"


def holder_of(ctx: RequestContext) -> str:
    """Who a held call counts against, for the bound per caller (rule 3)."""
    resolver = ctx.server.options.principal
    principal = resolver(ctx.transport_info) if resolver is not None else None
    return holder(principal, ctx.transport_info)


class RoundListener(Protocol):
    """Who hears a held call's logs and progress during a round: the round's context, or, for
    a round relayed from another instance, what carries them back there (`relay.py`)."""

    def log(self, level: str, data: Any, logger: str | None = None) -> Awaitable[None]:
        """A log message of the backend's."""
        ...

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> Awaitable[None]:
        """A progress notification of the backend's."""
        ...


class Supports(Protocol):
    """Whether the client declared what a question of `method` needs."""

    def __call__(self, method: str, *, url_mode: bool = False) -> bool: ...


def parse_state(state: str) -> tuple[str, str, int]:
    """`(instance, call id, step)` of a held call's `requestState` plaintext (rule 1)."""
    try:
        _, instance, call_id, step_text = state.split(":")
        return instance, call_id, int(step_text)
    except ValueError:
        raise invalid_params("requestState does not name a proxied call") from None


class HeldCall:
    """One backend `tools/call` in flight, and the questions it waits on."""

    def __init__(self, call_id: str, principal: str, tool: str, holder: str) -> None:
        self.id = call_id
        #: Who may continue the call (`principal_of`).
        self.principal = principal
        #: Whom the call counts against (`holder_of`).
        self.holder = holder
        self.tool = tool
        #: The round being served: where the backend's logs and progress go.
        self.ctx: RoundListener | None = None
        #: Moves on each time the client is asked (rule 2).
        self.step = 0
        #: Questions the backend asked that the client has not been shown yet.
        self.new: dict[str, tuple[str, dict[str, Any], asyncio.Future[Any]]] = {}
        #: Questions shown to the client in the current step, awaiting its answers.
        self.asked: dict[str, tuple[str, dict[str, Any], asyncio.Future[Any]]] = {}
        self.changed = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self._keys = itertools.count(1)

    async def ask(self, method: str, params: dict[str, Any]) -> Any:
        """The backend asks (from the backend client's handlers): wait for the client."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.new[f"{method.split('/')[0]}-{next(self._keys)}"] = (method, params, future)
        self.changed.set()
        return await future

    def cancel(self) -> None:
        """Stop the backend call and every wait of it."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.task is not None and not self.task.done():
            self.task.cancel()
        for _, _, future in [*self.new.values(), *self.asked.values()]:
            if not future.done():
                future.cancel()


class Ended:
    """A held call that ended, its outcome kept for a re-send of its last round (rule 5)."""

    __slots__ = ("error", "expires", "holder", "id", "principal", "result")

    def __init__(self, held: HeldCall, result: Any, error: McpError | None) -> None:
        self.id = held.id
        self.principal = held.principal
        self.holder = held.holder
        self.result = result
        self.error = error
        self.expires = time.monotonic() + ENDED_KEEP

    def outcome(self) -> Any:
        """The call's result, or its error raised."""
        if self.error is not None:
            raise McpError(self.error.code, self.error.message, self.error.data)
        return self.result


class HeldCalls:
    """The calls this instance holds (rules 1 to 3)."""

    def __init__(self, max_held: int, max_per_principal: int, hold_timeout: float) -> None:
        if max_held < 1 or max_per_principal < 1:
            raise ValueError("max_held and max_held_per_principal must be at least 1")
        if hold_timeout <= 0:
            raise ValueError(f"hold_timeout must be positive seconds, not {hold_timeout!r}")
        self.instance = secrets.token_hex(6)
        self.max_held = max_held
        self.max_per_principal = max_per_principal
        self.hold_timeout = hold_timeout
        self.calls: dict[str, HeldCall] = {}
        #: Calls that ended with no round attached, oldest first (rule 5).
        self.ended: dict[str, Ended] = {}

    def owns(self, state: str | None) -> bool:
        """Whether `state` (a verified `ctx.request_state`) is a held call's."""
        return state is not None and state.startswith(STATE_PREFIX)

    def state(self, held: HeldCall) -> str:
        """The `requestState` plaintext naming `held` at its current step (rule 1)."""
        return f"{STATE_PREFIX}{self.instance}:{held.id}:{held.step}"

    def start(
        self, ctx: RequestContext, tool: str, run: Callable[[HeldCall], Awaitable[Any]]
    ) -> HeldCall:
        """Hold a new call of `tool` and start `run(held)` (the backend call) in a task."""
        who = holder_of(ctx)
        # The caller's own bound first: a caller past it hears that it is the one to wait.
        if sum(1 for held in self.calls.values() if held.holder == who) >= self.max_per_principal:
            raise refusal(
                "proxied calls in flight",
                self.max_per_principal,
                "principal",
                "let one of them finish (answer or cancel it), then call again",
            )
        if len(self.calls) >= self.max_held:
            raise refusal(
                "proxied calls in flight",
                self.max_held,
                "total",
                "try again in a moment, when calls of other callers have finished",
            )
        held = HeldCall(secrets.token_urlsafe(12), principal_of(ctx), tool, who)
        self.calls[held.id] = held
        held.task = asyncio.ensure_future(run(held))
        held.task.add_done_callback(functools.partial(self._done, held))
        return held

    def _done(self, held: HeldCall, _: asyncio.Task[Any]) -> None:
        held.changed.set()
        if held.ctx is None and held.id in self.calls:
            self._end(held)  # nobody serves a round of it now: keep its outcome (rule 5)

    def resume(
        self, call_id: str, step: int, principal: str, responses: Mapping[str, Any]
    ) -> HeldCall | Ended:
        """The held call `call_id` (or its kept outcome), the answers in `responses` to its
        questions applied (rules 1, 2, 5)."""
        held = self.calls.get(call_id)
        if held is None:
            ended = self._kept(call_id)
            if ended is None:
                raise invalid_params(
                    "the proxied call this retry continues is no longer held (it ended, or "
                    f"waited longer than hold_timeout, {self.hold_timeout:g} s, or the proxy "
                    "restarted), and its backend call may have run: check what it did before "
                    "calling the tool again",
                    {"mayHaveRun": True},
                )
            if ended.principal != principal:
                raise invalid_params("the proxied call this retry continues is not yours")
            return ended
        if held.principal != principal:
            raise invalid_params("the proxied call this retry continues is not yours")
        if step > held.step:
            raise invalid_params("requestState names a round this proxied call has not reached")
        for key in [key for key in held.asked if key in responses]:
            _, _, future = held.asked.pop(key)
            if not future.done():
                future.set_result(responses[key])
        if not held.asked and held.timer is not None:
            held.timer.cancel()
            held.timer = None
        return held

    async def outcome(self, call: HeldCall | Ended, ctx: RequestContext) -> Any:
        """Serve one round of `call`: its result, or the client's next questions (asked live
        on a legacy session, within this round)."""
        if isinstance(call, Ended):
            return call.outcome()
        held = call
        held.ctx = ctx
        live = ctx.session is not None
        try:
            while True:
                task = held.task
                assert task is not None
                if task.done():
                    return self._end(held).outcome()
                self._refuse_unsupported(held, ctx.client_supports)
                if held.new or held.asked:
                    if not live:
                        return self._ask(held)
                    await self._ask_live(held, ctx)
                    continue
                held.changed.clear()
                await held.changed.wait()
        except asyncio.CancelledError:
            if held.step and not live and not by_client():
                self._detach(held, ctx)  # rule 5: the re-sent round comes back to it
            else:
                self._forget(held)
            raise
        except BaseException:
            # A live question that failed: nobody is left to hear the result.
            self._forget(held)
            raise

    async def advance(
        self, call: HeldCall | Ended, supports: Supports, listener: RoundListener | None = None
    ) -> Any:
        """Run `call` on, for a round served by another instance (`relay.py`): its result,
        or its next questions; the call is forgotten when it ends or fails. The round's logs
        and progress go to `listener`."""
        if isinstance(call, Ended):
            return call.outcome()
        held = call
        held.ctx = listener
        try:
            while True:
                task = held.task
                assert task is not None
                if task.done():
                    return self._end(held).outcome()
                self._refuse_unsupported(held, supports)
                if held.new or held.asked:
                    return self._ask(held)
                held.changed.clear()
                await held.changed.wait()
        except BaseException:
            self._forget(held)
            raise

    def _detach(self, held: HeldCall, ctx: object) -> None:
        """A round of `held` went away without cancelling it (rule 5)."""
        if held.ctx is ctx:
            held.ctx = None
        if held.task is not None and held.task.done():
            self._end(held)
        elif held.timer is None:
            loop = asyncio.get_running_loop()
            held.timer = loop.call_later(self.hold_timeout, self._expire, held)

    def _end(self, held: HeldCall) -> Ended:
        """`held`, whose backend call is done, no longer held: its outcome, kept for a re-send
        once a round of it was shown to the client (rule 5)."""
        task = held.task
        assert task is not None and task.done()
        result: Any = None
        error: McpError | None = None
        if task.cancelled():
            error = McpError(INTERNAL_ERROR, "the proxied call was cancelled", {"mayHaveRun": True})
        elif isinstance(exc := task.exception(), McpError):
            error = exc
        elif exc is not None:
            error = McpError(INTERNAL_ERROR, "the proxied call failed", {"mayHaveRun": True})
        else:
            result = task.result()
        ended = Ended(held, result, error)
        self._forget(held)
        if held.step:
            self._keep(ended)
        return ended

    def _keep(self, ended: Ended) -> None:
        kept = self.ended
        now = time.monotonic()
        while kept and next(iter(kept.values())).expires <= now:
            kept.pop(next(iter(kept)))
        own = [key for key, other in kept.items() if other.holder == ended.holder]
        if len(own) >= self.max_per_principal:
            del kept[own[0]]  # the caller's own oldest: nobody else's
        elif len(kept) >= self.max_held:
            return
        kept[ended.id] = ended

    def _kept(self, call_id: str) -> Ended | None:
        ended = self.ended.get(call_id)
        if ended is not None and ended.expires <= time.monotonic():
            del self.ended[call_id]
            return None
        return ended

    async def _ask_live(self, held: HeldCall, ctx: RequestContext) -> None:
        """Ask a legacy session's client the new questions now, and hand the backend its
        answers (a failure to ask ends the round, and with it the backend call)."""
        questions = dict(held.new)
        held.new.clear()
        answers = await ctx.ask(
            {
                key: InputRequest(method=method, params=params)
                for key, (method, params, _) in questions.items()
            }
        )
        for key, (_, _, future) in questions.items():
            value = answers[key]
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            if not future.done():
                future.set_result(value)

    def _refuse_unsupported(self, held: HeldCall, supports: Supports) -> None:
        for key, (method, params, future) in list(held.new.items()):
            url_mode = method == ELICITATION_CREATE and params.get("mode") == "url"
            if not supports(method, url_mode=url_mode):
                del held.new[key]
                if not future.done():
                    future.set_exception(
                        McpError(
                            METHOD_NOT_FOUND,
                            f"the proxy's client cannot answer {method} "
                            "(it did not declare the capability)",
                        )
                    )

    def _ask(self, held: HeldCall) -> InputRequiredResult:
        held.ctx = None  # the round ends: until the retry, nobody hears logs or progress
        if held.new:
            held.step += 1
            held.asked.update(held.new)
            held.new.clear()
        if held.timer is None:
            loop = asyncio.get_running_loop()
            held.timer = loop.call_later(self.hold_timeout, self._expire, held)
        return InputRequiredResult(
            input_requests={
                key: InputRequest(method=method, params=params)
                for key, (method, params, _) in held.asked.items()
            },
            request_state=self.state(held),
        )

    def _expire(self, held: HeldCall) -> None:
        held.timer = None
        self._forget(held)

    def _forget(self, held: HeldCall) -> None:
        held.cancel()
        self.calls.pop(held.id, None)

    async def close(self) -> None:
        """Cancel every held call and wait for their tasks to end (the proxy stops)."""
        calls = list(self.calls.values())
        for held in calls:
            self._forget(held)
        for held in calls:
            if held.task is not None:
                with contextlib.suppress(BaseException):
                    await held.task
