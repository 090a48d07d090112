"""The MRTR engine: deterministic replay of a handler across stateless rounds.

Rules (everything the engine guarantees lives here):

1. A handler asks by creating a question (`ctx.elicit(...)`, `ctx.sample(...)`, ...). Each
   question has a key (given, or `<kind>-<n>` by creation order, which replay reproduces) and a
   digest of its exact method and params.
2. Awaiting a question whose key holds an answer recorded for the same digest returns that
   answer at once; no task switch, no suspension.
3. Awaiting an unanswered question raises `InputPending` (a `BaseException`, so `except
   Exception` in user code does not swallow it) out of the handler. Every question created in
   that run and still unanswered goes out in the same `InputRequiredResult` (so `ctx.ask` and
   `asyncio.gather` ask in one round).
4. A handler that returns normally while a question it created went unanswered computed its
   result without that answer; the round ends as input-required all the same.
5. The state sealed into `requestState` holds every recorded answer with its digest, the keys
   and digests asked in the last round, `ctx.once` results, and the handler's own plaintext.
   An `inputResponses` entry is taken only for a key the last round asked, and is pinned to the
   digest it was asked with: a handler that asks something else under that key is asked again.
"""

from __future__ import annotations

import base64
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
    return base64.urlsafe_b64encode(hashlib.blake2b(raw, digest_size=12).digest()).decode()


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
                validate_answer(key, method, responses[key])
                self.answers[key] = [digest, responses[key]]


class Question(Generic[T]):
    """One question a handler asked; awaiting it gives the answer or stops the handler."""

    __slots__ = ("_convert", "_ctx", "digest", "key", "request")

    def __init__(
        self,
        ctx: RequestContext,
        key: str,
        request: InputRequest,
        convert: Callable[[str, Any], T],
    ) -> None:
        self._ctx = ctx
        self.key = key
        self.request = request
        self.digest = question_digest(request.method, request.params)
        self._convert = convert
        ctx._register(self)

    def answer(self) -> Any:
        """The recorded raw answer for this exact question, or `MISSING`."""
        entry = self._ctx._state.answers.get(self.key)
        if entry is not None and entry[0] == self.digest:
            return entry[1]
        return MISSING

    def __await__(self) -> Generator[Any, None, T]:
        value = self.answer()
        if value is MISSING:
            raise InputPending
        return self._convert(self.key, value)
        yield  # unreachable: makes __await__ a generator without ever suspending


class Batch:
    """Several questions awaited together (`ctx.ask`): answered all at once, or asked at once."""

    __slots__ = ("questions",)

    def __init__(self, questions: dict[str, Question[Any]]) -> None:
        self.questions = questions

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        values = {key: q.answer() for key, q in self.questions.items()}
        if any(v is MISSING for v in values.values()):
            raise InputPending
        return {key: self.questions[key]._convert(key, v) for key, v in values.items()}
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


def convert_answer(method: str) -> Callable[[str, Any], Any]:
    """The converter from a raw answer to the result model of `method`."""
    model = _ANSWER_MODELS[method]

    def convert(key: str, value: Any) -> Any:
        return model.model_validate(value)

    return convert


def typed_elicit_converter(model: type[T]) -> Callable[[str, Any], Any]:
    """Converter for `ctx.elicit(message, Model)`: content validated into `Model`."""
    from ..protocol.types import ElicitResultTyped

    adapter: pydantic.TypeAdapter[T] = pydantic.TypeAdapter(model)

    def convert(key: str, value: Any) -> Any:
        result = ElicitResult.model_validate(value)
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
        return ElicitResultTyped[model](action=result.action, content=content)  # type: ignore[valid-type]

    return convert
