"""Reading a tool's `structuredContent` as a value: `CallToolResult.data`.

The client remembers each tool's `outputSchema` from `tools/list` pages. When `data` is first
read, the result is checked against it (with the `jsonschema` package when it is installed, a
maintained validator the client does not depend on; without it, that the content is an object
holding the schema's `required` properties), and `data` is the content, unwrapped from
`{"result": ...}` when the schema is that wrapper: how mrtr (and the official SDK) give a
tool returning a non-object an object-shaped output. `call_tool(..., output_type=T)`
validates the content into `T` at once instead, unwrapping when `T` is not an object type.
What does not fit is the server's protocol violation, an `McpError(PROTOCOL_VIOLATION)`
saying where.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping
from typing import Any, get_origin

import typing_extensions
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..protocol.errors import PROTOCOL_VIOLATION, McpError
from ..protocol.types import CallToolResult

#: The property a non-object output is wrapped in.
WRAPPER_KEY = "result"


@dataclasses.dataclass(slots=True)
class KnownOutput:
    """One tool's `outputSchema`, and what reading a result against it needs."""

    schema: dict[str, Any]
    wrapped: bool
    # A compiled `jsonschema` validator (when the package is installed), built on first use.
    validator: Any = None


def is_wrapper_schema(schema: Mapping[str, Any]) -> bool:
    """Whether `schema` is the `{"result": ...}` wrapper of a non-object output: an object
    whose only property, required, is `result` (a model with just a required `result` field
    looks the same; pass `output_type` to read such a tool's output as that model)."""
    properties = schema.get("properties")
    return (
        schema.get("type") == "object"
        and isinstance(properties, dict)
        and list(properties) == [WRAPPER_KEY]
        and schema.get("required") == [WRAPPER_KEY]
    )


def known_output(schema: dict[str, Any]) -> KnownOutput:
    """What the client keeps of a listed tool's `outputSchema`."""
    return KnownOutput(schema, is_wrapper_schema(schema))


def is_object_type(tp: Any) -> bool:
    """Whether values of `tp` are JSON objects as they are (never wrapped): models,
    dataclasses, TypedDicts and string-keyed mappings, as the server decides."""
    if isinstance(tp, type) and (issubclass(tp, BaseModel) or dataclasses.is_dataclass(tp)):
        return True
    if typing_extensions.is_typeddict(tp) or tp in (dict, Mapping):
        return True
    origin = get_origin(tp)
    if origin in (dict, Mapping):
        args = getattr(tp, "__args__", ())
        return not args or args[0] is str
    return False


@functools.lru_cache(maxsize=256)
def _cached_adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _adapter(tp: Any) -> TypeAdapter[Any]:
    try:
        return _cached_adapter(tp)
    except TypeError:  # unhashable (an `Annotated` with a dict in it): build it each time
        return TypeAdapter(tp)


@functools.cache
def _jsonschema() -> Any:
    """The `jsonschema` module, or None when it is not installed."""
    try:
        return importlib.import_module("jsonschema")
    except ImportError:
        return None


def read_output(
    name: str, result: CallToolResult, known: KnownOutput | None, output_type: Any
) -> None:
    """Set how `result.data` reads tool `name`'s output.

    With `output_type` the content is validated now (raising `McpError(PROTOCOL_VIOLATION)`
    when it does not fit); with only a listed schema, when `data` is first read, so a call
    whose `data` nobody reads pays nothing for it. An error result is not checked (its
    `data` is None).
    """
    if result.is_error:
        result.set_data(None)
    elif output_type is not None:
        content = result.structured_content
        if known is not None:
            _check_schema(name, content, known)
        result.set_data(_as_type(name, content, output_type))
    elif known is not None:
        result.set_data_reader(lambda: _from_schema(name, result.structured_content, known))


def _from_schema(name: str, content: Any, known: KnownOutput) -> Any:
    _check_schema(name, content, known)
    return content[WRAPPER_KEY] if known.wrapped else content


def _check_schema(name: str, content: Any, known: KnownOutput) -> None:
    if content is None:
        raise _violation(name, "the tool has an outputSchema but sent no structuredContent")
    if not isinstance(content, dict):
        raise _violation(name, "structuredContent is not an object")
    module = _jsonschema()
    if module is None:
        required = known.schema.get("required")
        missing = [key for key in required or () if isinstance(key, str) and key not in content]
        if missing:
            raise _violation(name, f"structuredContent lacks {', '.join(missing)}")
        return
    if known.validator is None:
        try:
            cls = module.validators.validator_for(known.schema)
            cls.check_schema(known.schema)
            known.validator = cls(known.schema)
        except module.exceptions.SchemaError as exc:
            problem = f"its outputSchema is not a valid JSON schema: {exc.message}"
            raise _violation(name, problem) from None
    error = module.exceptions.best_match(known.validator.iter_errors(content))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path)
        raise _violation(
            name,
            "structuredContent does not match the tool's outputSchema: "
            + (f"at {where}: " if where else "")
            + str(error.message)[:300],
        )


def _as_type(name: str, content: Any, output_type: Any) -> Any:
    plain = isinstance(output_type, type) and get_origin(output_type) is None
    label = output_type.__name__ if plain else repr(output_type)  # `list[str]`, not `list`
    if content is None:
        raise _violation(name, f"there is no structuredContent to read as {label}")
    value = content
    if not is_object_type(output_type):
        if not isinstance(content, dict) or WRAPPER_KEY not in content:
            raise _violation(
                name, f'{label} is not an object type, so the output must come as {{"result": ...}}'
            )
        value = content[WRAPPER_KEY]
    try:
        return _adapter(output_type).validate_python(value)
    except ValidationError as exc:
        raise _violation(
            name, f"structuredContent does not fit {label}: {first_problem(exc)}"
        ) from None


def first_problem(exc: ValidationError) -> str:
    """A server's value that does not validate, in one line: where, what, and how many more."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    more = exc.error_count() - 1
    return (
        (f"{where}: " if where else "")
        + first["msg"]
        + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
    )


def _violation(name: str, problem: str) -> McpError:
    return McpError(PROTOCOL_VIOLATION, f"tools/call {name!r}: {problem}")
