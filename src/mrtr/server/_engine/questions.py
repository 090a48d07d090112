"""What a handler asks, and how an answer comes back to it (replay rules 1-3 and 10).

A `Question` is created by the engine (`Replay.ask`) with its key and the digest of its exact
method and params; awaiting it asks the engine (`QuestionEngine`, the engine as a question
sees it) for the recorded answer, or hands it to the engine's `Asker` when there is one.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import logging
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import Any, Final, Generic, NoReturn, Protocol, TypeVar

import orjson
import pydantic

from ...inputs import (
    ELICITATION_CREATE,
    ROOTS_LIST,
    SAMPLING_CREATE_MESSAGE,
    InputRequest,
)
from ...protocol.errors import McpError, invalid_params
from ...protocol.types import CreateMessageResult, ElicitResult, ListRootsResult
from .validation import describe_validation_error

logger = logging.getLogger("mrtr.server")

T = TypeVar("T")
MISSING: Any = object()

_ANSWER_MODELS: dict[str, type[pydantic.BaseModel]] = {
    ELICITATION_CREATE: ElicitResult,
    SAMPLING_CREATE_MESSAGE: CreateMessageResult,
    ROOTS_LIST: ListRootsResult,
}


#: The methods a handler can ask, with the prefix of their automatic keys (rule 1).
KEY_PREFIX = {ELICITATION_CREATE: "elicit", SAMPLING_CREATE_MESSAGE: "sample", ROOTS_LIST: "roots"}


def question_hash(method: str, params: dict[str, Any]) -> bytes:
    """The raw digest of a question (method + canonical params); its key is taken from it."""
    hashed = _QUESTION_HASH.copy()  # a copy costs less than making a hasher
    hashed.update(orjson.dumps([method, params], option=orjson.OPT_SORT_KEYS))
    return hashed.digest()


_QUESTION_HASH: Final = hashlib.blake2b(digest_size=12)


def digest_text(hashed: bytes) -> str:
    """A question's digest as sealed."""
    # Only ever compared, inside the sealed state: any compact alphabet will do.
    return binascii.b2a_base64(hashed, newline=False).decode()


def question_digest(method: str, params: dict[str, Any]) -> str:
    """A short, stable digest of a question (method + canonical params)."""
    return digest_text(question_hash(method, params))


def asked_again(key: str) -> str:
    """The `ReplayError` message for a key asked twice in one run (rule 2)."""
    return (
        f"input key {key!r} was already asked and awaited in this run: asked again, it would "
        f"get the same recorded answer every time; give each question its own key (in a "
        f'loop, key=f"{key}-{{i}}")'
    )


def describe_question(method: str, params: dict[str, Any]) -> str:
    """A question as a log line names it: its message, or its params (at most 200 chars)."""
    message = params.get("message")
    if isinstance(message, str):
        text = f"{method} with message {message!r}"
    else:
        text = f"{method} with params {orjson.dumps(params, option=orjson.OPT_SORT_KEYS).decode()}"
    return text if len(text) <= 200 else text[:197] + "..."


def validate_answer(key: str, method: str, value: Any) -> pydantic.BaseModel:
    """Check an `inputResponses` value against what was asked, or raise -32602 naming the key."""
    model = _ANSWER_MODELS.get(method)
    if model is None:  # pragma: no cover - questions are only built for these methods
        raise invalid_params(f"inputResponses[{key!r}]: no answer expected for {method}")
    try:
        # `model_validate` without its wrapper: the same validator with the same defaults.
        validated: pydantic.BaseModel = model.__pydantic_validator__.validate_python(value)
        return validated
    except pydantic.ValidationError as exc:
        raise invalid_params(
            f"inputResponses[{key!r}] is not a valid {model.__name__} answer to {method}: "
            f"{describe_validation_error(exc)}"
        ) from None


class Stepped(Coroutine[Any, Any, T], Generic[T]):
    """An awaitable that is a coroutine too, so that everything taking a coroutine takes it:
    `asyncio.create_task(ctx.elicit(...))`, `TaskGroup.create_task`, `ensure_future`,
    `wait_for`, `gather`. Stepping it (`send`, `throw`) runs its `__await__` once, exactly as
    `await` would, so the rules above hold whichever way it is run."""

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: Generator[Any, None, T] | None = None

    def __await__(self) -> Generator[Any, None, T]:
        raise NotImplementedError  # pragma: no cover - each subclass awaits its own way

    def _started(self) -> Generator[Any, None, T]:
        steps = self._steps
        if steps is None:
            steps = self._steps = self.__await__()
        return steps

    def send(self, value: Any) -> Any:
        """Step as a coroutine (what a task does); see the class."""
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        """Raise into the step in progress (what a task does on cancellation)."""
        if val is None and tb is None:
            return self._started().throw(typ)
        return self._started().throw(typ, val, tb)  # the old three-argument form, passed on

    def close(self) -> None:
        """Close a step in progress; nothing to do if it never started."""
        if self._steps is not None:
            self._steps.close()


class Question(Stepped[T]):
    """One question a handler asked; awaiting it gives the answer or stops the handler.

    It is a coroutine too (see `Stepped`): `asyncio.create_task(ctx.elicit(...))` works."""

    __slots__ = ("_convert", "_engine", "digest", "key", "method", "params")

    def __init__(
        self,
        engine: QuestionEngine,
        key: str,
        method: str,
        params: dict[str, Any],
        digest: str,
        convert: Callable[[str, Any], T],
    ) -> None:
        self._steps = None
        self._engine = engine
        self.key = key
        self.method = method
        self.params = params
        self.digest = digest
        self._convert = convert

    @property
    def request(self) -> InputRequest:
        """The question as an input request (`{method, params}`)."""
        return InputRequest.model_construct(method=self.method, params=self.params)

    def answer(self) -> Any:
        """The recorded raw answer for this exact question, or `MISSING`."""
        return self._engine.answer(self)

    def convert(self, value: Any) -> T:
        """`value` (a validated answer to this question) as the handler gets it."""
        return self._convert(self.key, value)

    def __await__(self) -> Generator[Any, None, T]:
        engine = self._engine
        asker = engine.asker
        if asker is not None:  # rule 10: answered live
            engine.claim(self)
            answer = yield from asker.ask(self.key, self.method, self.params).__await__()
            return self._convert(self.key, answer)
        value = engine.take(self)
        if engine.tick():
            yield  # rule 2: let the loop turn (and a deadline fire) now and then
        return self._convert(self.key, engine.state.validated.get(self.key, value))


class Asker(Protocol):
    """Answers questions other than by replay (rule 10): the live asker of a legacy session.

    It hands back validated answers; the question converts its own, so that asking never
    calls back into the question being awaited."""

    async def ask(self, key: str, method: str, params: dict[str, Any]) -> pydantic.BaseModel:
        """Ask one question now; the client's answer, validated."""

    async def ask_all(
        self, questions: Mapping[str, tuple[str, dict[str, Any]]]
    ) -> dict[str, pydantic.BaseModel]:
        """Ask several questions at once; `{key: validated answer}`."""

    async def answer_requests(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        """Ask a manual-style handler's input requests; `{key: result}` as the client sent it."""


class Batch(Stepped[dict[str, Any]]):
    """Several questions awaited together (`ctx.ask`): answered all at once, or asked at once.

    A coroutine too, as `Question` is."""

    __slots__ = ("_engine", "questions")

    def __init__(self, engine: QuestionEngine, questions: dict[str, Question[Any]]) -> None:
        self._steps = None
        self._engine = engine
        self.questions = questions

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        engine = self._engine
        asker = engine.asker
        if asker is not None:  # rule 10: answered live, all at once
            for question in self.questions.values():
                engine.claim(question)
            asked = {key: (q.method, q.params) for key, q in self.questions.items()}
            answers = yield from asker.ask_all(asked).__await__()
            return {key: q.convert(answers[key]) for key, q in self.questions.items()}
        values = {key: engine.take(q, stop=False) for key, q in self.questions.items()}
        if any(v is MISSING for v in values.values()):
            engine.stop_here()
        if values and engine.tick():
            yield  # see Question.__await__
        validated = engine.state.validated
        return {
            key: question.convert(validated.get(key, values[key]))
            for key, question in self.questions.items()
        }


class Answers(Protocol):
    """This round's answers, already validated (`RoundState.validated`)."""

    validated: dict[str, pydantic.BaseModel]


class QuestionEngine(Protocol):
    """What a question needs from the engine that made it (`Replay`; see its rules 2, 3, 10)."""

    asker: Asker | None

    @property
    def state(self) -> Answers:
        """What this round carries; its `validated` answers are what an await gives."""

    def claim(self, question: Question[Any]) -> None:
        """Note that `question` is awaited now (once per key and run)."""

    def take(self, question: Question[Any], stop: bool = True) -> Any:
        """Await `question`: its recorded answer, or stop (`MISSING` if not `stop`)."""

    def answer(self, question: Question[Any]) -> Any:
        """The recorded raw answer for exactly `question`, or `MISSING`."""

    def stop_here(self) -> NoReturn:
        """Stop the handler where it awaits an unanswered question."""

    def tick(self) -> bool:
        """Count one thing taken without suspending; True when the loop should turn."""


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
    from ...protocol.types import ElicitResultTyped

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
