"""The MRTR loop: send a request, answer the server's questions, retry until a final result.

When the server answers `InputRequiredResult`, each input request is resolved through the
registered handler (elicitation, sampling, roots), then the original request is sent again
with a new id, the answers under the same keys, and `requestState` echoed byte for byte.
How many questions a round may ask, and how many rounds a call may take, is checked where
every bound on the server's questions is (`server_asks.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from ..deadline import Deadline
from ..inputs import INPUT_REQUIRED, InputRequiredResult
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    McpError,
)
from ..protocol.tasks import RESULT_TYPE_TASK
from .connection import Connection
from .input_handlers import InputHandlers
from .options import RoundInfo
from .results import parse_result, result_of

logger = logging.getLogger("mrtr.client")

R = TypeVar("R", bound=BaseModel)
ProgressCallback = Callable[[float, float | None, str | None], Any]
#: What the loop does with a `CreateTaskResult`: returns the final result's raw object.
TaskHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

#: What bounds an MRTR flow that has no `max_total_timeout`.
_UNBOUNDED = contextlib.nullcontext()


class InputRequiredError(Exception):
    """With `auto_fulfill=False`: the server needs input; `result` says what it asked."""

    def __init__(self, result: InputRequiredResult) -> None:
        keys = ", ".join(result.input_requests or {}) or "none"
        super().__init__(f"the server needs input before it can complete (keys: {keys})")
        #: The `InputRequiredResult` the server answered.
        self.result = result


class Flows:
    """Runs MRTR flows over a `Connection`, answering questions with `inputs` and routing
    each flow's progress notifications through `progress` (by progress token)."""

    def __init__(
        self,
        connection: Connection,
        inputs: InputHandlers,
        progress: dict[str | int, ProgressCallback],
    ) -> None:
        self._connection = connection
        self._inputs = inputs
        self._progress = progress

    async def run(
        self,
        method: str,
        target: str,
        base: dict[str, Any],
        model: type[R],
        responses: Mapping[str, Any] | None,
        state: str | None,
        progress: ProgressCallback | None,
        meta: Mapping[str, Any] | None,
        task: TaskHook | None = None,
    ) -> R:
        """The MRTR loop: send, answer the server's questions, retry until a final result."""
        connection = self._connection
        config = connection.options.input_required
        token: str | None = None
        if progress is not None:
            token = f"progress-{next(connection.ids)}"
            self._progress[token] = progress
            meta = {**(meta or {}), meta_keys.PROGRESS_TOKEN: token}
        budget = config.max_total_timeout
        # Where the flow stands: the `requestState` and answers the next round carries, which
        # an error that ends the flow records, so that it can be resumed from there.
        answers = dict(responses) if responses else None
        # The flow keeps the version it started with: its requestState is bound to it, so a
        # switch made meanwhile by another flow on this client must not reach its rounds.
        version = connection.modern_version
        limit = _round_limit(connection.options.request_timeout, config.round_timeout)
        rounds = 0
        backoff = 0.05
        try:
            with Deadline(budget) if budget > 0 else _UNBOUNDED:
                while True:
                    params = dict(base)
                    if answers:
                        params["inputResponses"] = answers
                    if state is not None:
                        params["requestState"] = state
                    started = time.perf_counter()
                    response = await connection.send(method, params, meta, limit, None, version)
                    if "error" in response:
                        response, version = await connection.retry_version(
                            method, params, meta, limit, version, response
                        )
                    result = result_of(method, response)
                    kind = result.get("resultType", "complete")
                    if kind == "complete":
                        return parse_result(method, model, result)
                    if kind == RESULT_TYPE_TASK and task is not None:
                        return parse_result(method, model, await task(result))
                    if kind != INPUT_REQUIRED:
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: the server sent an unknown resultType {kind!r}",
                        )
                    if not config.auto_fulfill:
                        raise InputRequiredError(parse_result(method, InputRequiredResult, result))
                    requests = result.get("inputRequests")
                    asked = result.get("requestState")
                    if asked is not None and not isinstance(asked, str):
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: the server's requestState is not a string",
                        )
                    if not requests and asked is None:
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: input_required result with neither inputRequests nor "
                            "requestState",
                        )
                    # From here on the flow resumes from this state, with the answers
                    # gathered so far (`_resolve` fills the dict in as they come).
                    state, answers = asked, {}
                    rounds += 1
                    connection.asks.check_rounds(rounds, method, target)
                    if requests:
                        await self.resolve(requests, answers)
                    else:
                        # Only a state: the server says "not yet". Back off, not busy-poll.
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, 0.25)
                    if connection.options.on_round is not None or logger.isEnabledFor(
                        logging.DEBUG
                    ):
                        self._report_round(method, target, rounds, requests or {}, state, started)
        except TimeoutError:
            raise _mark(
                McpError(
                    REQUEST_TIMEOUT,
                    f"{method} {target!r} did not complete within max_total_timeout "
                    f"({budget:g} s); the request in flight was cancelled",
                ),
                state,
                answers,
            ) from None
        except McpError as error:
            _mark(error, state, answers)  # whatever ended the flow, it can be resumed from here
            raise
        finally:
            if token is not None:
                self._progress.pop(token, None)

    def _report_round(
        self,
        method: str,
        target: str,
        round_number: int,
        requests: Mapping[str, Any],
        state: str | None,
        started: float,
    ) -> None:
        info = RoundInfo(
            method=method,
            target=target,
            round=round_number,
            keys=tuple(requests),
            state_size=len(state) if state is not None else 0,
            elapsed=time.perf_counter() - started,
        )
        if self._connection.options.on_round is not None:
            self._connection.options.on_round(info)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %r round %d: asked %s, state %d chars, %.1f ms",
                method,
                target,
                info.round,
                list(info.keys),
                info.state_size,
                info.elapsed * 1000,
            )

    async def resolve(self, requests: Any, answers: dict[str, Any]) -> None:
        """Answer every input request of one round, concurrently, into `answers` (which holds
        the answers that were given even when another handler fails)."""
        if not isinstance(requests, dict):
            raise McpError(PROTOCOL_VIOLATION, "inputRequests from the server is not an object")
        # Refused before any handler runs: each may prompt a person or call a model.
        self._connection.asks.check_round(len(requests))
        if len(requests) == 1:
            ((key, request),) = requests.items()
            answers[key] = await self._inputs.answer(key, request)
            return
        tasks: dict[str, asyncio.Task[dict[str, Any]]] = {}
        try:
            async with asyncio.TaskGroup() as group:
                for key, request in requests.items():
                    tasks[key] = group.create_task(self._inputs.answer(key, request))
        except BaseExceptionGroup as group_error:
            first = group_error.exceptions[0]
            raise first from first.__cause__  # keeps the handler's own exception as the cause
        finally:
            for key, task in tasks.items():  # in the server's order, as they were asked
                if task.done() and not task.cancelled() and task.exception() is None:
                    answers[key] = task.result()


def _mark(error: McpError, state: str | None, answers: dict[str, Any] | None) -> McpError:
    """Record on `error` what resuming the flow needs (see `McpError.request_state`): the
    `requestState` and the answers the next round would have carried."""
    if state is not None or answers:
        error.request_state = state
        error.input_responses = dict(answers) if answers else None
    return error


def _round_limit(request_timeout: float, round_timeout: float) -> float:
    """The bound of one MRTR round trip: the tighter of the two options (0: no limit)."""
    bounds = [t for t in (request_timeout, round_timeout) if t > 0]
    return min(bounds) if bounds else 0.0
