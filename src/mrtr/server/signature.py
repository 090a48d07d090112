"""Turn a plain Python function into an MCP handler: argument schema, validation, injection.

The argument model is built once, at registration, from the signature (pydantic models,
TypedDicts, dataclasses, `Annotated` descriptions), so a call costs one pydantic validation.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, get_args, get_origin

import pydantic
import pydantic_core
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..inputs import InputRequiredResult
from ..protocol.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)
from ._engine.validation import describe_validation_error
from .content import Audio, File, Image
from .docstrings import parse_docstring
from .injection import is_context_annotation, is_state_annotation
from .worker_threads import WorkerPool

AnyFunction = Callable[..., Any]


_PORTED: dict[Any, Any] = {}


def _portable(tp: Any) -> Any:
    """Rebuild `typing.TypedDict` classes anywhere inside `tp` as `typing_extensions` ones:
    before Python 3.12 pydantic accepts only the latter, and users write the former."""
    if sys.version_info >= (3, 12):
        return tp
    if typing.is_typeddict(tp):  # the stdlib check matches only `typing.TypedDict` here
        if tp not in _PORTED:
            fields = {}
            for key, hint in typing.get_type_hints(tp, include_extras=True).items():
                # The resolved qualifier decides: `__required_keys__` is wrong for string
                # annotations (`from __future__ import annotations`) before 3.12.
                wrap = get_origin(hint)
                if wrap in (typing.Required, typing.NotRequired):
                    hint = get_args(hint)[0]
                else:
                    required = key in tp.__required_keys__
                    wrap = typing.Required if required else typing.NotRequired
                fields[key] = wrap[_portable(hint)]
            ported = typing_extensions.TypedDict(tp.__name__, fields)  # type: ignore[misc]
            ported.__doc__, ported.__module__ = tp.__doc__, tp.__module__
            _PORTED[tp] = ported
        return _PORTED[tp]
    args = get_args(tp)
    new_args = tuple(_portable(a) for a in args)
    if all(a is b for a, b in zip(args, new_args, strict=True)):
        return tp
    origin = get_origin(tp)
    if origin is Annotated:
        return Annotated[(new_args[0], *tp.__metadata__)]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[new_args]  # noqa: UP007 - built from a tuple
    if isinstance(tp, types.GenericAlias):
        return types.GenericAlias(origin, new_args)
    return tp.copy_with(new_args) if hasattr(tp, "copy_with") else tp


def _described(annotation: Any) -> Any:
    """Let `Annotated[T, "a description"]` stand for `Annotated[T, Field(description=...)]`."""
    if get_origin(annotation) is not Annotated:
        return annotation
    base, *extras = get_args(annotation)
    rewritten = [Field(description=e) if isinstance(e, str) else e for e in extras]
    return Annotated[(base, *rewritten)]


class ValidationFailure(Exception):
    """Arguments that do not fit the signature; the message says which and why."""


class FunctionSignature:
    """What a handler function takes: its arguments' model and where the context goes."""

    __slots__ = (
        "_fields",
        "_validate",
        "arg_model",
        "context_param",
        "fn",
        "is_async",
        "param_names",
        "required",
        "return_annotation",
        "state_params",
    )

    def __init__(self, fn: AnyFunction, *, skip: tuple[str, ...] = ()) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        self.context_param: str | None = None
        #: Parameters annotated `State[T]`: given the lifespan's state, never in the schema.
        self.state_params: tuple[str, ...] = ()
        fields: dict[str, Any] = {}
        for name, param in inspect.signature(fn).parameters.items():
            if name in skip:
                continue
            annotation = hints.get(name, Any)
            if is_context_annotation(annotation) or (name == "ctx" and annotation is Any):
                self.context_param = name
                continue
            if is_state_annotation(annotation):
                self.state_params += (name,)
                continue
            _refuse_foreign_context(fn, name, annotation)
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"{fn.__qualname__}: *args/**kwargs cannot be MCP arguments")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[name] = (_described(_portable(annotation)), default)
        self.arg_model: type[BaseModel] = pydantic.create_model(
            f"{fn.__name__}_arguments",
            __config__=ConfigDict(arbitrary_types_allowed=True, extra="ignore"),
            **fields,
        )
        self._fields = tuple(fields)
        model = self.arg_model
        # A complete model's validator can be held; an incomplete one is rebuilt on use.
        self._validate: Callable[[Any], BaseModel] = (
            model.__pydantic_validator__.validate_python
            if model.__pydantic_complete__
            else model.model_validate
        )
        self.param_names = self._fields
        self.required = tuple(n for n, (_, d) in fields.items() if d is ...)
        self.return_annotation = hints.get("return", inspect.Signature.empty)

    def input_schema(self) -> dict[str, Any]:
        """JSON Schema (2020-12) of the arguments object.

        A parameter the docstring documents (an `Args:` or `Parameters` section) gets that
        text as its description, unless its annotation gives one.
        """
        schema = self.arg_model.model_json_schema()
        schema.pop("title", None)
        properties = schema.setdefault("properties", {})
        for name, text in parse_docstring(self.fn.__doc__).params.items():
            prop = properties.get(name)
            if isinstance(prop, dict) and text:
                prop.setdefault("description", text)
        return schema

    def bind(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validate raw arguments into keyword arguments, or raise `ValidationFailure`."""
        if not self._fields:
            return {}
        try:
            # The model's validator itself: `model_validate` only wraps it.
            model = self._validate(arguments or {})
        except pydantic.ValidationError as exc:
            raise ValidationFailure(describe_validation_error(exc)) from None
        # The model's own attribute dict: it holds exactly the fields (extra="ignore"), and the
        # model goes away here, so it is handed on without a copy.
        values: dict[str, Any] = model.__dict__
        return values

    def start(
        self, kwargs: dict[str, Any], ctx: Any, pool: WorkerPool | None = None
    ) -> Awaitable[Any]:
        """What `call(dict(kwargs), ctx, pool)` awaits, started now: for an async function its
        own coroutine, without a coroutine of ours around it. `kwargs` is not changed, so the
        same arguments can start the function again (a legacy session's driven rounds)."""
        if not self.is_async:
            return self.call(dict(kwargs), ctx, pool)
        if self.context_param is None and not self.state_params:
            return self.fn(**kwargs)  # type: ignore[no-any-return]
        given = dict(kwargs)
        if self.context_param is not None:
            given[self.context_param] = ctx
        for name in self.state_params:
            given[name] = ctx.state
        return self.fn(**given)  # type: ignore[no-any-return]

    async def call(self, kwargs: dict[str, Any], ctx: Any, pool: WorkerPool | None = None) -> Any:
        """Call the function with validated arguments and the context: a sync one in a thread
        of `pool` when given (see `worker_threads.py`), else on the event loop."""
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        for name in self.state_params:
            kwargs[name] = ctx.state
        if self.is_async:
            return await self.fn(**kwargs)
        if pool is not None:
            return await pool.call(self.fn, kwargs)
        return self.fn(**kwargs)


def _refuse_foreign_context(fn: AnyFunction, name: str, annotation: Any) -> None:
    """Refuse a parameter annotated with another SDK's `Context` (an import left over from a
    port): it would be taken for an argument every call lacks."""
    # `Context[...]` too: a typing generic's origin, or a pydantic generic model's (whose
    # parametrized class pydantic may place in the caller's module).
    kind = get_origin(annotation) or annotation
    generic = getattr(kind, "__pydantic_generic_metadata__", None)
    if isinstance(generic, dict) and generic.get("origin") is not None:
        kind = generic["origin"]
    module = getattr(kind, "__module__", "") or ""
    named = str(getattr(kind, "__name__", "")).partition("[")[0]
    if named == "Context" and module.split(".")[0] in ("mcp", "fastmcp"):
        raise TypeError(
            f"{fn.__qualname__}: parameter {name!r} is annotated {module}.Context; in mrtr the "
            "context is `mrtr.RequestContext`: annotate it so (or leave `ctx` unannotated)"
        )


# --- return values -> structured output ---------------------------------------------------

_CONTENT_TYPES: tuple[type, ...] = (
    Image,
    Audio,
    File,
    TextContent,
    ImageContent,
    AudioContent,
    ResourceLink,
    EmbeddedResource,
)


def _is_content(tp: Any, in_list: bool = False) -> bool:
    """A content block type (or `Image`, `Audio`, `File`), a union of them, or a list of
    either, where a list may also hold `str` (text blocks): returned as content."""
    if isinstance(tp, type):
        return issubclass(tp, _CONTENT_TYPES) or (in_list and tp is str)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return all(_is_content(a, in_list) for a in args) and not all(a is str for a in args)
    if origin in (list, tuple, Sequence) and args:
        items = [a for a in args if a is not Ellipsis]
        return all(_is_content(a, True) for a in items) and not all(a is str for a in items)
    return False


def _without_input_required(annotation: Any) -> Any:
    """Drop `InputRequiredResult` (and None) from a union return annotation."""
    args = get_args(annotation)
    if args and get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [a for a in args if a not in (InputRequiredResult, type(None))]
        if len(kept) == 1:
            return kept[0]
    return annotation


def _is_object_type(tp: Any) -> bool:
    if isinstance(tp, type) and (
        issubclass(tp, BaseModel)
        or dataclasses.is_dataclass(tp)
        or typing_extensions.is_typeddict(tp)
    ):
        return True
    return get_origin(tp) in (dict, Mapping) and (get_args(tp) or (str,))[0] is str


@dataclasses.dataclass(frozen=True, slots=True)
class OutputShape:
    """How a tool's return value becomes `structuredContent`: as is, wrapped, or not at all."""

    schema: dict[str, Any] | None
    adapter: TypeAdapter[Any] | None
    wrap: bool

    @classmethod
    def from_annotation(cls, annotation: Any) -> OutputShape:
        tp = _portable(_without_input_required(annotation))
        if tp in (inspect.Signature.empty, None, type(None), Any, str, bytes, CallToolResult):
            return cls(None, None, False)
        if _is_content(tp):
            return cls(None, None, False)
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(tp)
            inner = adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError):
            return cls(None, None, False)
        if _is_object_type(tp):
            inner.pop("title", None)
            return cls(inner, adapter, False)
        # `$ref`s point into the root's `$defs`, so the definitions move up to the wrapper.
        defs = inner.pop("$defs", None)
        wrapped = {"type": "object", "properties": {"result": inner}, "required": ["result"]}
        if defs:
            wrapped["$defs"] = defs
        return cls(wrapped, adapter, True)

    def structured(self, value: Any) -> Any:
        """The `structuredContent` for a returned value, checked against the return type.

        Raises `OutputMismatch` when the value does not fit: the declared type is the tool's
        `outputSchema`, so a client may rely on it (dumping alone would only warn).
        """
        assert self.adapter is not None
        try:
            data = self.adapter.dump_python(self.adapter.validate_python(value), mode="json")
        except pydantic.ValidationError as exc:
            raise OutputMismatch(describe_validation_error(exc, "result")) from None
        except pydantic_core.PydanticSerializationError as exc:
            raise OutputMismatch(str(exc)) from None
        return {"result": data} if self.wrap else data


class OutputMismatch(Exception):
    """A tool returned a value that does not match its declared return type."""
