"""Reading a server's results: the `result` member of a response, and its typed model.

What a server sends is checked like any input: a result that is not an object, or does not
fit its model, is the server's protocol violation, reported as an `McpError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..protocol.errors import PROTOCOL_VIOLATION, McpError
from .tool_output import first_problem

R = TypeVar("R", bound=BaseModel)


def parse_result(method: str, model: type[R], result: Mapping[str, Any]) -> R:
    """`result` as `model`. What a server sends is checked like any input: a result that does
    not fit is its protocol violation, reported as an `McpError`, never a `ValidationError`."""
    try:
        # The model's validator itself: `model_validate` adds only a Python frame and the
        # checks of options not given here (about a third of a small result's validation).
        return model.__pydantic_validator__.validate_python(result)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise McpError(
            PROTOCOL_VIOLATION,
            f"{method}: the server's result is not a valid {model.__name__}: {first_problem(exc)}",
        ) from None


def result_of(method: str, response: dict[str, Any]) -> dict[str, Any]:
    """The `result` object of a successful response to `method`."""
    result = response.get("result")
    if not isinstance(result, dict):
        raise McpError(PROTOCOL_VIOLATION, f"{method}: the server's result is not an object")
    return result
