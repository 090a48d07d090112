"""The client's answers to a server's questions, whichever way they arrive.

On a 2026-07-28 server a question comes inside an `InputRequiredResult` (answered by retrying
the request); on a legacy session it comes as a server-to-client request (answered with a
JSON-RPC response). Both go through `InputHandlers.answer`, so validation, the handlers called
and the wording of every failure are the same in both eras.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ..inputs import ELICITATION_CREATE, ROOTS_LIST, SAMPLING_CREATE_MESSAGE
from ..protocol import jsonrpc
from ..protocol.errors import (
    INPUT_HANDLER_FAILED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    JSONRPC_RESERVED,
    METHOD_NOT_FOUND,
    NO_INPUT_HANDLER,
    PROTOCOL_VIOLATION,
    McpError,
)
from ..protocol.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
)

logger = logging.getLogger("mrtr.client")

ElicitationHandler = Callable[[ElicitRequestParams], "ElicitResult | Awaitable[ElicitResult]"]
SamplingHandler = Callable[
    [CreateMessageRequestParams], "CreateMessageResult | Awaitable[CreateMessageResult]"
]
RootsHandler = Callable[[ListRootsRequestParams], "ListRootsResult | Awaitable[ListRootsResult]"]

_PARAMS_MODELS: dict[str, type[BaseModel]] = {
    ELICITATION_CREATE: ElicitRequestParams,
    SAMPLING_CREATE_MESSAGE: CreateMessageRequestParams,
    ROOTS_LIST: ListRootsRequestParams,
}
_RESULT_MODELS: dict[str, type[BaseModel]] = {
    ELICITATION_CREATE: ElicitResult,
    SAMPLING_CREATE_MESSAGE: CreateMessageResult,
    ROOTS_LIST: ListRootsResult,
}
_HANDLER_NAMES = {
    ELICITATION_CREATE: "elicitation",
    SAMPLING_CREATE_MESSAGE: "sampling",
    ROOTS_LIST: "roots",
}
# How a failure of the client's own is told to a legacy server: a JSON-RPC code (local codes
# never go on the wire), and a message that does not pass on the handler's exception text,
# which is the application's business, not the server's.
_WIRE_CODES = {
    NO_INPUT_HANDLER: METHOD_NOT_FOUND,
    PROTOCOL_VIOLATION: INVALID_PARAMS,
}


class InputHandlerError(McpError):
    """A registered input handler failed (or is missing) for one of the server's questions."""

    def __init__(self, code: int, message: str, key: str, method: str) -> None:
        super().__init__(code, message, {"key": key, "method": method})
        #: The key of the question whose handler failed.
        self.key = key
        #: The question's method (`elicitation/create`, ...).
        self.method = method


class InputHandlers:
    """The elicitation, sampling and roots handlers a client registered, and the capabilities
    they declare (in the shape of either era)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Callable[[Any], Any]] = {}
        self.elicitation_modes: tuple[str, ...] = ("form",)

    def set(self, method: str, fn: Callable[[Any], Any]) -> None:
        """Register `fn` for `method` (one of the three input request methods)."""
        self._handlers[method] = fn

    def set_elicitation_modes(self, modes: Sequence[str]) -> None:
        """The elicitation modes handled (`form`, `url`); raises ValueError for others."""
        bad = set(modes) - {"form", "url"} or (set() if modes else {"(none)"})
        if bad:
            raise ValueError(f"elicitation modes must be 'form' and/or 'url', not {sorted(bad)}")
        self.elicitation_modes = tuple(modes)

    def has(self, method: str) -> bool:
        """Whether a handler answers `method`."""
        return method in self._handlers

    def capabilities(self, *, legacy: bool) -> dict[str, Any]:
        """What the handlers declare: the 2026-07-28 shape, or the `initialize` one (where
        roots announce `listChanged`)."""
        caps: dict[str, Any] = {}
        if ELICITATION_CREATE in self._handlers:
            caps["elicitation"] = {mode: {} for mode in self.elicitation_modes}
        if SAMPLING_CREATE_MESSAGE in self._handlers:
            caps["sampling"] = {}
        if ROOTS_LIST in self._handlers:
            caps["roots"] = {"listChanged": True} if legacy else {}
        return caps

    async def answer(self, key: str, request: Any) -> dict[str, Any]:
        """Dispatch one question (`{"method", "params"}`) to its handler; return the bare
        result. Raises `InputHandlerError` naming `key` and the method on any failure."""
        method = request.get("method") if isinstance(request, dict) else None
        if not isinstance(method, str):
            raise InputHandlerError(
                PROTOCOL_VIOLATION, f"input request {key!r} has no method", key, str(method)
            )
        handler = self._handlers.get(method)
        if handler is None:
            known = _HANDLER_NAMES.get(method)
            why = (
                f"no {known} handler is registered"
                if known
                else "this method is not an input request this client knows"
            )
            raise InputHandlerError(
                NO_INPUT_HANDLER,
                f"the server asked for input {key!r} with {method}, but {why}",
                key,
                method,
            )
        try:
            # The validator itself, without `model_validate`'s Python frame around it.
            params = _PARAMS_MODELS[method].__pydantic_validator__.validate_python(
                request.get("params") or {}
            )
        except Exception as exc:
            raise InputHandlerError(
                PROTOCOL_VIOLATION,
                f"input request {key!r} ({method}) has invalid params: {exc}",
                key,
                method,
            ) from None
        try:
            answer = handler(params)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            # An McpError keeps its code unless it is a JSON-RPC one, which would read as the
            # server's answer; either way the error names the input that failed.
            own = exc.code if isinstance(exc, McpError) else None
            raise InputHandlerError(
                own if own is not None and own not in JSONRPC_RESERVED else INPUT_HANDLER_FAILED,
                f"the {_HANDLER_NAMES[method]} handler failed on input {key!r}: "
                f"{type(exc).__name__}: {exc}",
                key,
                method,
            ) from exc
        if isinstance(answer, dict):
            try:
                answer = _RESULT_MODELS[method].__pydantic_validator__.validate_python(answer)
            except ValidationError as exc:
                raise InputHandlerError(
                    INPUT_HANDLER_FAILED,
                    f"the {_HANDLER_NAMES[method]} handler's answer to input {key!r} is not a "
                    f"valid {_RESULT_MODELS[method].__name__}: {exc.errors()[0]['msg']}",
                    key,
                    method,
                ) from None
        if not isinstance(answer, BaseModel):
            raise InputHandlerError(
                INPUT_HANDLER_FAILED,
                f"the {_HANDLER_NAMES[method]} handler returned {type(answer).__name__} for "
                f"input {key!r}; expected {_RESULT_MODELS[method].__name__}",
                key,
                method,
            )
        bare: dict[str, Any]
        if type(answer) is _RESULT_MODELS[method]:
            # Our own model (no `model_dump` of a subclass to honour): its serializer itself,
            # without `model_dump`'s Python frame (half the cost of a small answer).
            bare = answer.__pydantic_serializer__.to_python(
                answer, mode="json", by_alias=True, exclude_none=True
            )
        else:
            bare = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        bare.pop("resultType", None)
        bare.pop("_meta", None)
        return bare

    async def respond(self, message: dict[str, Any]) -> dict[str, Any]:
        """The response to a legacy server's request; never raises (see the module docstring).

        `ping` is answered at once; the input methods go through `answer`, keyed by the
        request id; anything else is -32601.
        """
        request_id = jsonrpc.readable_id(message)
        method = message.get("method")
        if request_id is None:
            return jsonrpc.error_response(
                None, McpError(INVALID_REQUEST, "Invalid Request: the request has no valid id")
            )
        if method == "ping":
            return jsonrpc.result_response(request_id, {})
        if method not in _HANDLER_NAMES:
            shown = method[:100] if isinstance(method, str) else repr(method)[:100]
            return jsonrpc.error_response(
                request_id, McpError(METHOD_NOT_FOUND, f"Method not found: {shown}")
            )
        try:
            params = message.get("params")
            result = await self.answer(str(request_id), {"method": method, "params": params})
        except InputHandlerError as exc:
            return jsonrpc.error_response(request_id, self._wire_error(exc))
        except Exception:  # pragma: no cover - answer() turns every failure into its error
            logger.exception("answering the server's %s request failed", method)
            return jsonrpc.error_response(
                request_id, McpError(INTERNAL_ERROR, "the client failed to answer")
            )
        return jsonrpc.result_response(request_id, result)

    def _wire_error(self, exc: InputHandlerError) -> McpError:
        """`exc` as the legacy server hears it."""
        if exc.code in _WIRE_CODES:
            return McpError(_WIRE_CODES[exc.code], exc.message)
        cause = exc.__cause__
        if isinstance(cause, McpError) and cause.code in JSONRPC_RESERVED:
            return McpError(cause.code, cause.message, cause.data)  # the handler's own answer
        logger.warning("%s", exc.message)  # the whole story stays on this side
        name = _HANDLER_NAMES.get(exc.method, exc.method)
        return McpError(INTERNAL_ERROR, f"the client's {name} handler failed")
