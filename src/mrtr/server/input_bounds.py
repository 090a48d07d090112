"""Bounds on what a client puts into an MRTR request: how deep, how big, what is kept.

Arguments and answers reach the sealed `requestState` (arguments through their digest,
answers verbatim), and orjson, which seals them, refuses anything nested more than 254
levels. So they are checked where they arrive, before any handler runs: too deep, too many
or too big is a -32602 naming the limit, never a -32603 from deep inside sealing. The checks
lean on orjson's own C encoder (one pass that also measures the size) and walk the value in
Python, without recursion, only to word a refusal.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import orjson
import pydantic

from ..protocol.errors import McpError, invalid_params

__all__ = [
    "MAX_DEPTH",
    "ResponseLimits",
    "check_arguments",
    "check_responses",
    "nesting_exceeds",
    "state_too_large",
    "stored_answer",
]


class ResponseLimits(Protocol):
    """The bounds on `inputResponses` (`options.InputRequiredConfig` holds them)."""

    @property
    def max_responses(self) -> int:
        """The most `inputResponses` entries one request may carry."""

    @property
    def max_response_bytes(self) -> int:
        """The most bytes of JSON they may take together."""


#: The deepest nesting (objects and arrays) accepted in arguments and `inputResponses`.
MAX_DEPTH: Final = 250
# orjson's encoder refuses more levels than this; wrapping a value in this many extra lists
# before encoding it makes orjson test the value against MAX_DEPTH itself. The margin also
# covers the levels sealing adds around each answer ({"a": {key: [digest, answer]}}).
_MARGIN: Final = 254 - MAX_DEPTH


def nesting_exceeds(value: Any, limit: int) -> bool:
    """True when `value` nests objects/arrays more than `limit` levels deep (no recursion); a
    pydantic model's fields are its children, as its JSON's would be."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        elif isinstance(node, pydantic.BaseModel):
            children = [*node.__dict__.values(), *(node.__pydantic_extra__ or {}).values()]
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, _NESTS))
    return False


#: What `nesting_exceeds` looks inside.
_NESTS: Final = (dict, list, tuple, pydantic.BaseModel)


def _encoded_size(value: Any) -> int:
    """Length of `value` as JSON; raises orjson's TypeError past MAX_DEPTH or for non-JSON."""
    wrapped = value
    for _ in range(_MARGIN):
        wrapped = [wrapped]
    return len(orjson.dumps(wrapped)) - 2 * _MARGIN


def check_arguments(arguments: Any, what: str) -> None:
    """Refuse (-32602) arguments nested more than `MAX_DEPTH` levels deep."""
    if not arguments:
        return
    try:
        _encoded_size(arguments)
    except TypeError:
        # Also raised for integers beyond 64 bits or lone surrogates, which the argument
        # digest handles with the stdlib encoder: only the depth is refused here.
        if nesting_exceeds(arguments, MAX_DEPTH):
            raise invalid_params(
                f"{what}: arguments are nested more than {MAX_DEPTH} levels deep"
            ) from None


def check_responses(responses: dict[str, Any], config: ResponseLimits) -> None:
    """Refuse (-32602) `inputResponses` with too many entries, too many bytes, too deep
    nesting, or values that could not be sealed into the next `requestState`."""
    if len(responses) > config.max_responses:
        raise invalid_params(
            f"inputResponses has {len(responses)} entries; this server takes at most "
            f"{config.max_responses} per request (max_responses)"
        )
    try:
        size = _encoded_size(responses)
    except TypeError as exc:
        if nesting_exceeds(responses, MAX_DEPTH):
            raise invalid_params(
                f"inputResponses is nested more than {MAX_DEPTH} levels deep"
            ) from None
        # orjson's reason (an integer beyond 64 bits, a lone surrogate) names the value's
        # fault and nothing of the server.
        raise invalid_params(f"inputResponses cannot be recorded as JSON: {exc}") from None
    if size > config.max_response_bytes:
        raise invalid_params(
            f"inputResponses is {size} bytes of JSON; this server takes at most "
            f"{config.max_response_bytes} per request (max_response_bytes)"
        )


def stored_answer(model: pydantic.BaseModel) -> Any:
    """The JSON of a validated answer with only the fields its type defines, as sent.

    Answer models keep unknown fields (for forward compatibility), but a sealed state is no
    place for them: each round would carry, decrypt and parse them again.
    """
    given = model.model_fields_set  # holds the unknown fields' names too
    return {
        info.alias or name: _stored_value(getattr(model, name))
        for name, info in type(model).model_fields.items()
        if name in given
    }


def _stored_value(value: Any) -> Any:
    # Recursion follows the answer types' own structure (a few levels), not the client's
    # nesting: plain dicts and lists of JSON are kept as they are.
    if isinstance(value, pydantic.BaseModel):
        return stored_answer(value)
    if isinstance(value, list) and any(isinstance(v, pydantic.BaseModel) for v in value):
        return [_stored_value(v) for v in value]
    return value


def state_too_large(what: str, size: int, limit: int) -> McpError:
    """-32602 for a state that grew past `max_state_bytes` (the answers gathered so far)."""
    return invalid_params(
        f"{what}: the state to carry to the next round would be {size} bytes, over this "
        f"server's max_state_bytes ({limit}); answer with less data"
    )
