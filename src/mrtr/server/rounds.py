"""One MRTR round of a `tools/call`, `prompts/get` or `resources/read` request.

A round restores what earlier rounds recorded (verifying the sealed `requestState` before any
handler code runs), takes this round's `inputResponses`, runs or replays the handler under
`round_timeout`, and then either lets the result through or seals a new state and shapes the
`InputRequiredResult`. The replay rules themselves live in `replay.py`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..deadline import Deadline
from ..inputs import INPUT_METHODS, InputRequiredResult
from ..protocol.errors import (
    INTERNAL_ERROR,
    McpError,
    invalid_params,
    invalid_request_state,
    missing_client_capability,
)
from .replay import RoundState, only_pending, question_digest
from .request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    VerifiedState,
    digest_arguments,
    mint_request_state,
    verify_request_state,
)

if TYPE_CHECKING:
    from .context import RequestContext
    from .options import ServerOptions

logger = logging.getLogger("mrtr.server")

#: `(method, params)` of each question going out, by key.
Questions = dict[str, tuple[str, dict[str, Any]]]


class RoundKeeper:
    """Seals and verifies request states for one server, and runs its rounds."""

    def __init__(self, audience: str, options: ServerOptions) -> None:
        self.audience = audience
        self.options = options
        # A custom verifier replaces verification only: a configured key still seals.
        self.key_ring = (
            RequestStateKeyRing(options.request_state_key)
            if options.request_state_verifier is None or options.request_state_key is not None
            else None
        )
        if self.key_ring is not None and self.key_ring.random:
            logger.info(
                "server %r seals requestState with a random per-process key; configure "
                "ServerOptions.request_state_key for multi-instance deployments",
                audience,
            )

    def round(self, ctx: RequestContext, target: str, arguments: Any) -> Round:
        """The round `ctx` is: of the tool/prompt named `target`, or of the resource `target`."""
        return Round(self, ctx, target, arguments)

    async def verify(self, token: Any, binding: StateBinding) -> VerifiedState:
        """Verify an inbound state; every failure is the same -32602, the cause is logged."""
        try:
            if not isinstance(token, str):
                raise InvalidRequestState("not_a_string")
            verifier = self.options.request_state_verifier
            if verifier is None:
                assert self.key_ring is not None
                return verify_request_state(self.key_ring, binding, token)
            verified = verifier(token, binding)
            if inspect.isawaitable(verified):
                verified = await verified
            return verified
        except InvalidRequestState as exc:
            cause = exc.cause
        except Exception as exc:
            cause = f"verifier raised {type(exc).__name__}"
        logger.warning("rejected requestState for %s %r: %s", binding.method, binding.target, cause)
        raise invalid_request_state()

    def seal(self, binding: StateBinding, state: RoundState) -> str:
        """Mint the `requestState` token carrying `state`."""
        if self.key_ring is None:
            raise McpError(
                INTERNAL_ERROR,
                "request_state_verifier is set but no request_state_key to seal with",
            )
        return mint_request_state(
            self.key_ring,
            binding,
            state.encode(),
            round=state.round,
            ttl=self.options.request_state_ttl,
        )


class Round:
    """One attempt at an MRTR request (see the module docstring)."""

    __slots__ = ("_binding", "arguments", "ctx", "keeper", "target")

    def __init__(
        self, keeper: RoundKeeper, ctx: RequestContext, target: str, arguments: Any
    ) -> None:
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
            self._binding = StateBinding(
                method=ctx.method,
                target=self.target,
                arguments_digest=digest_arguments(self.arguments),
                audience=self.keeper.audience,
                principal=resolver(ctx.transport_info) if resolver is not None else None,
            )
        return self._binding

    async def run(
        self, invoke: Callable[[RequestContext], Awaitable[Any]], what: str | None = None
    ) -> Any:
        """Restore the state, take this round's answers, and run (or replay) the handler.

        Returns the handler's value, or None when it stopped at an unanswered question.
        `what` names a prompt or resource, whose failures become -32603 (tools report theirs
        as results).
        """
        ctx = self.ctx
        params = ctx.params
        token = params.get("requestState")
        state = ctx._state
        if token is not None:
            verified = await self.keeper.verify(token, self.binding)
            state = RoundState.decode(verified.data, verified.round)
            ctx._state = state
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
        timeout = self.keeper.options.input_required.round_timeout
        deadline = Deadline(timeout) if timeout > 0 else None
        try:
            if deadline is None:
                return await invoke(ctx)
            with deadline:
                return await invoke(ctx)
        except TimeoutError:
            if deadline is None or not deadline.expired:
                raise  # the handler's own TimeoutError, not the round's
            raise McpError(
                INTERNAL_ERROR,
                f"{what or ctx.method} did not finish within round_timeout ({timeout:g} s)",
            ) from None
        except BaseException as exc:
            if only_pending(exc) and ctx._questions:
                return None
            if what is not None and isinstance(exc, Exception) and not isinstance(exc, McpError):
                logger.exception("%s failed", what)
                raise McpError(INTERNAL_ERROR, f"{what} failed") from None
            raise

    def finish(self, result: dict[str, Any] | InputRequiredResult) -> dict[str, Any]:
        """Let a complete result through, or seal and shape an input-required one."""
        ctx = self.ctx
        pending = ctx.pending()
        if pending:
            questions = {key: (q.method, q.params) for key, q in pending.items()}
            digests = {key: q.digest for key, q in pending.items()}
            user = ctx._state.user
        elif isinstance(result, InputRequiredResult):
            asked = result.input_requests or {}
            questions = {key: (r.method, r.params) for key, r in asked.items()}
            digests = {key: question_digest(m, p) for key, (m, p) in questions.items()}
            user = result.request_state
        else:
            return result
        return self._input_required(questions, digests, user)

    def _input_required(
        self, questions: Questions, digests: dict[str, str], user: str | None
    ) -> dict[str, Any]:
        ctx = self.ctx
        self._check_capabilities(questions)
        state = ctx._state
        next_round = state.round + 1
        limit = self.keeper.options.input_required.max_rounds
        if next_round > limit:
            raise McpError(
                INTERNAL_ERROR,
                f"{ctx.method} {self.target!r} still needs input after {limit} rounds "
                "(max_rounds); giving up",
            )
        sealed = RoundState(
            next_round,
            state.answers,
            {key: [digests[key], method] for key, (method, _) in questions.items()},
            state.once,
            user,
        )
        result: dict[str, Any] = {
            "resultType": "input_required",
            "requestState": self.keeper.seal(self.binding, sealed),
        }
        if questions:
            result["inputRequests"] = {
                key: {"method": method, "params": params}
                for key, (method, params) in questions.items()
            }
        return result

    def _check_capabilities(self, questions: Questions) -> None:
        """Never ask what the client did not declare it can answer: -32021 instead."""
        ctx = self.ctx
        missing: dict[str, Any] = {}
        for key, (method, params) in questions.items():
            if method not in INPUT_METHODS:
                logger.error("handler asked %r with unsupported method %r", key, method)
                raise McpError(INTERNAL_ERROR, f"Internal error while handling {ctx.method}")
            url_mode = params.get("mode") == "url"
            if not ctx.client_supports(method, url_mode=url_mode):
                needed = missing.setdefault(method.split("/")[0], {})
                if method == "elicitation/create":
                    needed["url" if url_mode else "form"] = {}
        if missing.get("elicitation") == {"form": {}}:
            missing["elicitation"] = {}  # form alone is spelled `{}`, as in the spec's example
        if missing:
            raise missing_client_capability(missing)
