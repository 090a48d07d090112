"""JSON-RPC and MCP error codes, and `McpError`, the one exception that carries them."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700  # the message is not JSON
INVALID_REQUEST = -32600  # not a JSON-RPC request
METHOD_NOT_FOUND = -32601  # an unknown method
INVALID_PARAMS = -32602  # bad params, arguments, answers or requestState
INTERNAL_ERROR = -32603  # a handler failed (logged, not sent), or the store did
HEADER_MISMATCH = -32020  # an Mcp-* header disagrees with the body
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021  # asked what the client cannot answer
UNSUPPORTED_PROTOCOL_VERSION = -32022  # a version the server does not speak

# Local to this SDK, never sent by a server: the spec leaves local errors (a timeout raised
# inside a client) without a code and asks that they cannot be mistaken for a peer's error,
# so they live outside the JSON-RPC reserved range (-32768..-32000).
REQUEST_TIMEOUT = -1001  # a request took longer than the client's timeout
CONNECTION_CLOSED = -1002  # the connection closed before the response came
HTTP_ERROR = -1003  # an HTTP error status without a JSON-RPC error in its body
PROTOCOL_VIOLATION = -1004  # the peer sent something the protocol does not allow
MAX_ROUNDS_EXCEEDED = -1005  # the server kept asking for input past `max_rounds`
INPUT_HANDLER_FAILED = -1006  # a client's own input handler raised or answered nonsense
MAX_INPUT_REQUESTS_EXCEEDED = -1007  # one round asked more than `max_input_requests` questions
NO_INPUT_HANDLER = -1008  # the server asked for input the client has no handler for
RESPONSE_TOO_LARGE = -1009  # the peer's message is larger than the client accepts
SESSION_EXPIRED = -1010  # the server no longer knows the legacy session (HTTP 404 with its id)
AUTHORIZATION_FAILED = -1011  # the client could not obtain (or refused to use) an access token
LEGACY_ONLY_SERVER = -1012  # protocol="modern" insisted on, and the server speaks only legacy
TASK_CANCELLED = -1021  # a task the client waited on reached `cancelled`
TASK_EXPIRED = -1022  # a task outlived its ttlMs without ending (the client stopped waiting)

#: Every code above that only this SDK's client raises, never a peer.
LOCAL_CODES = frozenset(
    {
        REQUEST_TIMEOUT,
        CONNECTION_CLOSED,
        HTTP_ERROR,
        PROTOCOL_VIOLATION,
        MAX_ROUNDS_EXCEEDED,
        INPUT_HANDLER_FAILED,
        MAX_INPUT_REQUESTS_EXCEEDED,
        NO_INPUT_HANDLER,
        RESPONSE_TOO_LARGE,
        SESSION_EXPIRED,
        AUTHORIZATION_FAILED,
        LEGACY_ONLY_SERVER,
        TASK_CANCELLED,
        TASK_EXPIRED,
    }
)
JSONRPC_RESERVED = range(-32768, -32000 + 1)  # codes the JSON-RPC spec reserves

#: `data.reason` of the -32602 that refuses a `requestState` (forged, expired, replayed).
INVALID_REQUEST_STATE_REASON = "invalid_request_state"
#: `data.reason` of the -32603 that refuses to run a `ctx.once` whose earlier run may have
#: taken effect (its process died, or it outlived its round's cancellation, unfinished).
EFFECT_UNCERTAIN_REASON = "effect_uncertain"


class McpError(Exception):
    """An error with a JSON-RPC code, a message a person can act on, and optional data.

    When the error ended a client's MRTR flow (`call_tool`, `get_prompt`, `read_resource`),
    `request_state` and `input_responses` say where the flow stood: the last `requestState`
    and the answers already given for it. Passing both back to the same call resumes the
    flow there, without asking those questions again. Both are None when there is nothing
    to carry (the first round, or an error that is not a flow's).
    """

    #: The last `requestState` of the flow the error ended, if any.
    request_state: str | None = None
    #: The answers already given for that state.
    input_responses: dict[str, Any] | None = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        #: The JSON-RPC error code (see the constants of this module).
        self.code = code
        #: What went wrong, for a person.
        self.message = message
        #: Details for a program (`data.reason`, ...), or None.
        self.data = data

    def to_error(self) -> dict[str, Any]:
        """The JSON-RPC `error` member for this error."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @classmethod
    def from_error(cls, error: Any) -> McpError:
        """Build from a received JSON-RPC `error` member.

        A malformed one (not an object, or without an integer `code`) is the peer's fault but
        not an error it meant to send, so it becomes a local `PROTOCOL_VIOLATION` rather than a
        JSON-RPC code the application could take for the peer's own answer.
        """
        if isinstance(error, dict):
            code = error.get("code")
            if isinstance(code, int) and not isinstance(code, bool):
                message = error.get("message")
                return cls(
                    code,
                    message if isinstance(message, str) else "error without a message",
                    error.get("data"),
                )
        shown = repr(error)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        return cls(
            PROTOCOL_VIOLATION,
            f"the peer sent a malformed JSON-RPC error (an object with an integer code is "
            f"required): {shown}",
        )

    def __repr__(self) -> str:
        return f"McpError({self.code}, {self.message!r})"


def invalid_params(message: str, data: Any = None) -> McpError:
    """-32602 Invalid params."""
    return McpError(INVALID_PARAMS, message, data)


def method_not_found(method: str) -> McpError:
    """-32601 with the method named."""
    return McpError(METHOD_NOT_FOUND, f"Method not found: {method}")


def unsupported_protocol_version(requested: Any, supported: list[str]) -> McpError:
    """-32022 with `data.supported` and `data.requested`, as the spec's example shapes it."""
    return McpError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": supported, "requested": requested},
    )


def missing_client_capability(required: dict[str, Any]) -> McpError:
    """-32021 with `data.requiredCapabilities`."""
    names = ", ".join(sorted(required))
    return McpError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: {names}",
        {"requiredCapabilities": required},
    )


def invalid_request_state() -> McpError:
    """The single answer to every requestState that fails verification (cause is logged only)."""
    return McpError(
        INVALID_PARAMS,
        "Invalid requestState: retry the original request without requestState",
        {"reason": INVALID_REQUEST_STATE_REASON},
    )


def effect_uncertain(what: str, key: str, idempotency_key: str) -> McpError:
    """-32603 for a `ctx.once(key, ...)` that started in an earlier attempt of its round and
    did not finish there: it may have taken effect, so it is not run again."""
    return McpError(
        INTERNAL_ERROR,
        f"{what}: ctx.once({key!r}) started in an earlier attempt of this round that did not "
        "finish (its process stopped, or it outlived its request's cancellation), so its "
        "effect may have happened; it is not run again. Its idempotency key in the outside "
        f"system is {idempotency_key!r}: check there whether it took effect before trying again",
        {"reason": EFFECT_UNCERTAIN_REASON, "onceKey": key, "idempotencyKey": idempotency_key},
    )
