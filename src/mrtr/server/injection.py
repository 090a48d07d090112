"""What a handler parameter is given besides its arguments: the request's context, the
lifespan's state.

Both are recognised by the parameter's annotation when the handler is registered
(`signature.py`), through the markers defined here: low enough that the signature reader
needs nothing of the context or the lifespan themselves.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

T = TypeVar("T")


class InjectedContext:
    """Base of the request context: a parameter annotated with a subclass receives it."""

    __slots__ = ()


def is_context_annotation(annotation: Any) -> bool:
    """Whether a parameter annotation is the request context (`RequestContext`)."""
    return isinstance(annotation, type) and issubclass(annotation, InjectedContext)


class _StateMarker:
    """Marks a handler parameter that receives the lifespan's state."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "mrtr.State"


STATE_MARKER = _StateMarker()

#: `db: State[Database]` in a handler's signature receives what the lifespan yielded (the
#: parameter is typed `Database` for the type checker, and stays out of the input schema).
State = Annotated[T, STATE_MARKER]
"""`State[T]`: a handler parameter that receives what the server's lifespan yielded, typed `T`."""


def is_state_annotation(annotation: Any) -> bool:
    """Whether a parameter annotation is `State[T]`."""
    metadata = getattr(annotation, "__metadata__", None)
    return metadata is not None and any(m is STATE_MARKER for m in metadata)
