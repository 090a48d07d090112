"""How a `ctx.once` result is recorded in the sealed state and given back on later rounds.

A result is recorded as JSON. On a later round it must come back as what the handler got the
first time, or code that uses it (its type, its methods) behaves differently from one round to
the next. So a result is given back through the function's return annotation (or `type=`),
with pydantic, and must survive that round trip unchanged; without an annotation it must be
plain JSON (dicts with string keys, lists, strings, numbers, booleans, None), which comes back
exactly as it was. Anything else is refused when it is produced, before a round is sealed.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
import pydantic
from pydantic_core import PydanticSerializationError

from ._engine.validation import describe_validation_error


class Unrecordable(Exception):
    """A result the sealed state cannot give back as it is (the message says why)."""


class OnceCodec:
    """Records a `once` result as JSON and restores it (plain JSON: as it is)."""

    __slots__ = ()

    def record(self, value: Any) -> tuple[Any, Any]:
        """`(recorded JSON, value for the handler)`, or raise `Unrecordable`."""
        problem = _not_plain_json(value)
        if problem is not None:
            raise Unrecordable(
                f"{problem}, which the sealed state would not give back as it is on later "
                "rounds; annotate the function's return type (or pass type=...) so the result "
                "is restored through it, or return plain JSON (dict, list, str, int, float, "
                "bool, None)"
            )
        # Recorded as a copy: the handler may change what it got, and what is sealed must not.
        return orjson.loads(orjson.dumps(value)), value

    def restore(self, recorded: Any) -> Any:
        """The recorded result as the handler gets it (a fresh copy each time)."""
        return orjson.loads(orjson.dumps(recorded))


class TypedOnceCodec(OnceCodec):
    """Records through a type with pydantic, and restores through it."""

    __slots__ = ("adapter", "name")

    def __init__(self, annotation: Any) -> None:
        self.adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(annotation)
        self.name = getattr(annotation, "__name__", None) or repr(annotation)

    def record(self, value: Any) -> tuple[Any, Any]:
        try:
            # warnings="error": a value that is not of the type is refused, not half-dumped.
            recorded = self.adapter.dump_python(value, mode="json", warnings="error")
            given = self.restore(recorded)
        except (PydanticSerializationError, pydantic.ValidationError, TypeError, ValueError) as exc:
            detail = (
                describe_validation_error(exc)
                if isinstance(exc, pydantic.ValidationError)
                else str(exc)
            )
            raise Unrecordable(
                f"a {type(value).__name__} cannot be recorded as {self.name}: {detail}"
            ) from None
        if not _equal(given, value):
            raise Unrecordable(
                f"a {type(value).__name__} recorded as {self.name} would come back as "
                f"{_short(given)} instead of {_short(value)}"
            )
        return recorded, given

    def restore(self, recorded: Any) -> Any:
        # Validated from JSON text: the result shares nothing with the recorded value.
        return self.adapter.validate_json(orjson.dumps(recorded))


PLAIN = OnceCodec()

# A function's return annotation, by code object: resolving type hints costs more than a round
# of a small handler, and the same `once` call site is met again on every round.
_ANNOTATIONS: dict[Any, Any] = {}
_MAX_CACHED = 1024


def codec_for(fn: Callable[[], Any], annotation: Any = None) -> OnceCodec:
    """The codec for `fn`'s result: through `annotation`, else `fn`'s return annotation."""
    if annotation is None:
        annotation = _return_annotation(fn)
    if annotation is None or annotation is Any or annotation is object:
        return PLAIN
    try:
        return _typed(annotation)
    except TypeError:  # an unhashable annotation: build its codec each time
        return TypedOnceCodec(annotation)


@functools.lru_cache(maxsize=256)
def _typed(annotation: Any) -> TypedOnceCodec:
    return TypedOnceCodec(annotation)


def callable_identity(fn: Callable[..., Any]) -> Any:
    """What makes two `once` functions "the same": their code (a lambda re-created on every
    call is the same function), else the object for builtins, else the callable's class."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    target = getattr(target, "__func__", target)  # a bound method: its function
    code = getattr(target, "__code__", None)
    if code is not None:
        return code
    if inspect.isbuiltin(target):
        return target
    return type(target)


def _return_annotation(fn: Callable[..., Any]) -> Any:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = inspect.getattr_static(type(target), "__call__", None)  # a callable object
        if not inspect.isfunction(target):
            return None
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code in _ANNOTATIONS:
        return _ANNOTATIONS[code]
    try:
        annotation = typing.get_type_hints(target, include_extras=True).get("return")
    except Exception:  # a name the annotation uses cannot be resolved here: none is usable
        annotation = None
    if annotation is not None and not inspect.iscoroutinefunction(target):
        # A sync function returning an awaitable is awaited: record what the awaitable gives.
        origin = typing.get_origin(annotation)
        if origin in (Awaitable, Coroutine) and typing.get_args(annotation):
            annotation = typing.get_args(annotation)[-1]
    if len(_ANNOTATIONS) >= _MAX_CACHED:
        _ANNOTATIONS.clear()
    _ANNOTATIONS[code] = annotation
    return annotation


_INT64 = range(-(2**63), 2**64)


def _not_plain_json(value: Any) -> str | None:
    """Why `value` is not plain JSON (naming where), or None if it is.

    Exact types only: a tuple, a dict subclass or an enum would come back as a list, a dict or
    its value. Iterative, so a deep value cannot exhaust the stack.
    """
    stack: list[tuple[str, Any]] = [("the result", value)]
    while stack:
        where, item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if item not in _INT64:
                return f"{where} is an integer too large for JSON"
            continue
        if kind is float:
            if not math.isfinite(item):
                return f"{where} is {item!r}, which JSON cannot hold"
            continue
        if kind is list:
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
            continue
        if kind is dict:
            for k, v in item.items():
                if type(k) is not str:
                    return f"{where} has a {type(k).__name__} key {k!r}"
                stack.append((f"{where}[{k!r}]", v))
            continue
        return f"{where} is a {kind.__name__}"
    return None


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that does not give a truth value: not the same
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
