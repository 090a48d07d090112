"""JSON-RPC 2.0 framing: decode, classify, build and encode messages. No I/O.

Messages are plain dicts on the hot path: one `orjson` call turns bytes into them and one turns
them back, and nothing in between copies them into another representation.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from .errors import INVALID_REQUEST, PARSE_ERROR, McpError

RequestId = str | int
Message = dict[str, Any]
MessageKind = Literal["request", "notification", "response"]


def dumps(message: Any) -> bytes:
    """Encode a message (or any JSON value) to UTF-8 JSON bytes."""
    return orjson.dumps(message)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON, raising `McpError(-32700)` with the decoder's reason on failure."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise McpError(PARSE_ERROR, f"Parse error: {exc}") from None


def is_valid_id(value: Any) -> bool:
    """Request ids are strings or integers, never null (nor bool, which Python counts as int)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


#: Integers this large no longer fit 64 bits: JSON decoders (ours included) read them as floats.
_INT64_RANGE = 2.0**63


def describe_bad_id(value: Any) -> str:
    """What a request sent as its id, for an error message: its JSON type, and for a number a
    short rendering of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= _INT64_RANGE:
            return f"an integer outside the 64-bit range ({value:.6g})"
        if value.is_integer():  # 5.0 or 5e2: JSON-RPC ids are written as integers
            return f"a number written with a decimal point or exponent ({value!r})"
        return f"a fractional number ({value!r})"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def classify(message: Any) -> MessageKind:
    """Say what a decoded message is, raising `McpError(-32600)` for anything else."""
    # A well-formed request first, by exact types (every message's path): a decoder makes
    # exact dicts, strs and ints, and a bool is no int to `type`, so this passes only what the
    # tests below call a request; anything else, subclasses included, is left to them.
    if (
        type(message) is dict
        and message.get("jsonrpc") == "2.0"
        and type(message.get("method")) is str
        and ((params := message.get("params")) is None or type(params) is dict)
        and (type(request_id := message.get("id")) is str or type(request_id) is int)
    ):
        return "request"
    if not isinstance(message, dict):
        raise McpError(INVALID_REQUEST, "Invalid Request: a JSON-RPC message must be an object")
    if message.get("jsonrpc") != "2.0":
        raise McpError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be exactly "2.0"')
    if "method" in message:
        if not isinstance(message["method"], str):
            raise McpError(INVALID_REQUEST, 'Invalid Request: "method" must be a string')
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            raise McpError(INVALID_REQUEST, 'Invalid Request: "params" must be an object')
        if "id" not in message:
            return "notification"
        if not is_valid_id(message["id"]):
            raise McpError(
                INVALID_REQUEST,
                'Invalid Request: "id" must be a string or an integer, not '
                + describe_bad_id(message["id"]),
            )
        return "request"
    if "result" in message or "error" in message:
        return "response"
    raise McpError(INVALID_REQUEST, "Invalid Request: neither a request nor a response")


def request(id: RequestId, method: str, params: dict[str, Any] | None = None) -> Message:
    """Build a request message."""
    msg: Message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> Message:
    """Build a notification message."""
    msg: Message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result_response(id: RequestId, result: dict[str, Any]) -> Message:
    """Build a successful response."""
    return {"jsonrpc": "2.0", "id": id, "result": result}


def error_response(id: RequestId | None, error: McpError) -> Message:
    """Build an error response; `id` is omitted when the request's id could not be read."""
    msg: Message = {"jsonrpc": "2.0", "error": error.to_error()}
    if id is not None:
        msg["id"] = id
    return msg


def readable_id(message: Any) -> RequestId | None:
    """The id of a message that may be malformed, when it is a valid one."""
    if isinstance(message, dict):
        value = message.get("id")
        if is_valid_id(value):
            return value
    return None
