"""The MRTR engine: deterministic replay of a handler across stateless rounds.

Rules (everything the engine guarantees lives here):

1. A handler asks by creating a question (`ctx.elicit(...)`, `ctx.sample(...)`, ...). Each
   question has a key (given, or `<kind>-<n>` by creation order, which replay reproduces) and a
   digest of its exact method and params.
2. Awaiting a question whose key holds an answer recorded for the same digest returns that
   answer at once; no task switch, no suspension.
3. Awaiting an unanswered question raises `InputPending` (a `BaseException`, so `except
   Exception` in user code does not swallow it) out of the handler. Every question created in
   that run and still unanswered goes out in the same `InputRequiredResult`: `ctx.ask`,
   `asyncio.gather` of questions, and gathered coroutines that reach their question in the
   same step all ask in one round. (A branch that first awaits something else asks in a later
   round; correctness never depends on batching.)
4. A handler that returns normally while a question it created went unanswered computed its
   result without that answer; the round ends as input-required all the same.
5. The state sealed into `requestState` holds every recorded answer with its digest, the keys
   and digests asked in the last round, `ctx.once` results, and the handler's own plaintext.
   An `inputResponses` entry is taken only for a key the last round asked, and is pinned to the
   digest it was asked with: a handler that asks something else under that key is asked again.
6. A request without `requestState` has no last round to pin to; an `inputResponses` entry it
   carries answers the question asked under that key in this run (validated against it), as
   the spec lets a client answer on any attempt. Keys nothing asks for are ignored.
7. A round "replays" until the handler reaches a question the last round asked (or one still
   unanswered): code before that point already ran, so its logs and progress are not sent
   again (`ctx.replaying`).
"""

from __future__ import annotations

import binascii
import functools
import hashlib
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson
import pydantic

from ..inputs import ELICITATION_CREATE, ROOTS_LIST, SAMPLING_CREATE_MESSAGE, InputRequest
from ..protocol.errors import McpError, invalid_params
from ..protocol.types import CreateMessageResult, ElicitResult, ListRootsResult
from .signature import describe_validation_error

if TYPE_CHECKING:
    from .context import RequestContext

T = TypeVar("T")
MISSING: Any = object()

_ANSWER_MODELS: dict[str, type[pydantic.BaseModel]] = {
    ELICITATION_CREATE: ElicitResult,
    SAMPLING_CREATE_MESSAGE: CreateMessageResult,
    ROOTS_LIST: ListRootsResult,
}


class InputPending(BaseException):
    """Raised where a handler awaits an unanswered question; the server catches it."""


def question_digest(method: str, params: dict[str, Any]) -> str:
    """A short, stable digest of a question (method + canonical params)."""
    raw = orjson.dumps([method, params], option=orjson.OPT_SORT_KEYS)
    # Only ever compared, inside the sealed state: any compact alphabet will do.
    return binascii.b2a_base64(
        hashlib.blake2b(raw, digest_size=12).digest(), newline=False
    ).decode()


def validate_answer(key: str, method: str, value: Any) -> pydantic.BaseModel:
    """Check an `inputResponses` value against what was asked, or raise -32602 naming the key."""
    model = _ANSWER_MODELS.get(method)
    if model is None:  # pragma: no cover - questions are only built for these methods
        raise invalid_params(f"inputResponses[{key!r}]: no answer expected for {method}")
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise invalid_params(
            f"inputResponses[{key!r}] is not a valid {model.__name__} answer to {method}: "
            f"{describe_validation_error(exc)}"
        ) from None


@dataclass(slots=True)
class RoundState:
    """What the sealed `requestState` carries between rounds (see the module rules)."""

    round: int = 0
    answers: dict[str, list[Any]] = field(default_factory=dict)  # key -> [digest, answer]
    asked: dict[str, list[str]] = field(default_factory=dict)  # key -> [digest, method]
    once: dict[str, Any] = field(default_factory=dict)
    user: str | None = None
    unsealed: dict[str, Any] | None = None  # answers sent without a state (rule 6); never sealed
    caught_up: bool = False  # rule 7: the run reached where the last round stopped
    # This round's answers as already-validated models, so awaiting them validates nothing
    # twice; never sealed.
    validated: dict[str, pydantic.BaseModel] = field(default_factory=dict)

    @property
    def replaying(self) -> bool:
        """Rule 7: re-running code that an earlier round already ran."""
        return bool(self.asked) and not self.caught_up

    def reached(self, key: str, answered: bool) -> None:
        """Note that the handler awaited the question `key` (rule 7)."""
        if not answered or key in self.asked:
            self.caught_up = True

    def encode(self) -> bytes:
        """Compact JSON; empty parts are left out to keep small states small."""
        out: dict[str, Any] = {}
        if self.answers:
            out["a"] = self.answers
        if self.asked:
            out["q"] = self.asked
        if self.once:
            out["o"] = self.once
        if self.user is not None:
            out["u"] = self.user
        return orjson.dumps(out)

    @classmethod
    def decode(cls, data: bytes, round: int) -> RoundState:
        """Inverse of `encode` (the bytes were authenticated, so they are ours)."""
        raw = orjson.loads(data) if data else {}
        return cls(round, raw.get("a", {}), raw.get("q", {}), raw.get("o", {}), raw.get("u"))

    def take_responses(self, responses: dict[str, Any]) -> None:
        """Record this round's answers to the questions the last round asked."""
        for key, (digest, method) in self.asked.items():
            if key in responses:
                self.validated[key] = validate_answer(key, method, responses[key])
                self.answers[key] = [digest, responses[key]]


class Question(Generic[T]):
    """One question a handler asked; awaiting it gives the answer or stops the handler."""

    # A question keeps the round's state, not the context: the context holds its questions,
    # and a cycle back to it would leave every round's objects to the cycle collector.
    __slots__ = ("_convert", "_state", "digest", "key", "method", "params")

    def __init__(
        self,
        ctx: RequestContext,
        key: str,
        method: str,
        params: dict[str, Any],
        convert: Callable[[str, Any], T],
    ) -> None:
        self._state = ctx._state
        self.key = key
        self.method = method
        self.params = params
        self.digest = question_digest(method, params)
        self._convert = convert
        ctx._register(self)

    @property
    def request(self) -> InputRequest:
        """The question as an input request (`{method, params}`)."""
        return InputRequest.model_construct(method=self.method, params=self.params)

    def answer(self) -> Any:
        """The recorded raw answer for this exact question, or `MISSING`."""
        state = self._state
        entry = state.answers.get(self.key)
        if entry is not None and entry[0] == self.digest:
            return entry[1]
        if state.unsealed is not None and self.key in state.unsealed:
            # A first request (no requestState) that already carries an answer under this
            # key: take it, checked against the question it now answers (rule 6).
            value = state.unsealed[self.key]
            state.validated[self.key] = validate_answer(self.key, self.method, value)
            state.answers[self.key] = [self.digest, value]
            return value
        return MISSING

    def __await__(self) -> Generator[Any, None, T]:
        value = self.answer()
        self._state.reached(self.key, value is not MISSING)
        if value is MISSING:
            raise InputPending
        return self._convert(self.key, self._state.validated.get(self.key, value))
        yield  # unreachable: makes __await__ a generator without ever suspending


class Batch:
    """Several questions awaited together (`ctx.ask`): answered all at once, or asked at once."""

    __slots__ = ("questions",)

    def __init__(self, questions: dict[str, Question[Any]]) -> None:
        self.questions = questions

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        values = {key: q.answer() for key, q in self.questions.items()}
        state = next(iter(self.questions.values()))._state if self.questions else None
        if state is not None:
            for key, value in values.items():
                state.reached(key, value is not MISSING)
        if any(v is MISSING for v in values.values()):
            raise InputPending
        return {
            key: question._convert(key, question._state.validated.get(key, values[key]))
            for key, question in self.questions.items()
        }
        yield  # unreachable: see Question.__await__


def only_pending(exc: BaseException) -> bool:
    """True for `InputPending`, or a group (TaskGroup) holding nothing but it and cancellations."""
    if isinstance(exc, InputPending):
        return True
    if isinstance(exc, BaseExceptionGroup):
        import asyncio

        rest = exc.subgroup(lambda e: not isinstance(e, (InputPending, asyncio.CancelledError)))
        return rest is None
    return False


def _elicit_result(key: str, value: Any) -> Any:
    # `value` is this round's validated answer, or a recorded one (validated when it arrived,
    # then sealed); pydantic-core's validation is cheaper than `model_construct` for the latter.
    return value if isinstance(value, ElicitResult) else ElicitResult.model_validate(value)


def convert_answer(method: str) -> Callable[[str, Any], Any]:
    """The converter from a raw (already validated) answer to the result model of `method`."""
    if method == ELICITATION_CREATE:
        return _elicit_result
    model = _ANSWER_MODELS[method]

    def convert(key: str, value: Any) -> Any:
        return model.model_validate(value)

    return convert


@functools.lru_cache(maxsize=256)
def typed_elicit_converter(model: type[T]) -> Callable[[str, Any], Any]:
    """Converter for `ctx.elicit(message, Model)`: content validated into `Model` (cached per
    model, so replays do not rebuild validators)."""
    from ..protocol.types import ElicitResultTyped

    adapter: pydantic.TypeAdapter[T] = pydantic.TypeAdapter(model)
    typed = ElicitResultTyped[model]  # type: ignore[valid-type]

    def convert(key: str, value: Any) -> Any:
        result = _elicit_result(key, value)
        content = None
        if result.action == "accept" and result.content is not None:
            try:
                content = adapter.validate_python(result.content)
            except pydantic.ValidationError as exc:
                raise McpError(
                    -32602,
                    f"inputResponses[{key!r}]: content does not match the requested schema: "
                    f"{describe_validation_error(exc)}",
                ) from None
        return typed(action=result.action, content=content)

    return convert
