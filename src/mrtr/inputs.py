"""MRTR wire objects: input requests a server asks, the results that carry them, and helpers.

A server that needs something only the client has answers `InputRequiredResult`; its
`inputRequests` map server-chosen keys to `{method, params}` request objects, and the client
retries the original request with `inputResponses` (bare results under the same keys) and the
echoed `requestState`.

Rules:
1. One spelling each: `elicit_request`, `sample_request`, `roots_request` build the questions
   and `input_response` the answers; these are what `mrtr` exports.
2. The seed's names (`make_input_request_for_elicitation`, `_for_sampling`, `_for_roots`,
   `make_input_response_from_elicit_result`, `_from_create_message_result`,
   `_from_list_roots_result`) stay importable from this module as the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from .protocol.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    McpModel,
    SamplingMessage,
    TextContent,
)

ELICITATION_CREATE = "elicitation/create"
SAMPLING_CREATE_MESSAGE = "sampling/createMessage"
ROOTS_LIST = "roots/list"
INPUT_METHODS: tuple[str, ...] = (ELICITATION_CREATE, SAMPLING_CREATE_MESSAGE, ROOTS_LIST)

INPUT_REQUIRED = "input_required"
COMPLETE = "complete"

#: Methods whose results may be `InputRequiredResult`; the spec forbids it on any other.
MRTR_METHODS: frozenset[str] = frozenset({"tools/call", "prompts/get", "resources/read"})


class InputRequest(McpModel):
    """One question for the client: a request object (`method` and its `params`)."""

    method: str
    params: dict[str, Any] = Field(default_factory=dict)


InputRequests = dict[str, InputRequest]
"""The `inputRequests` of an `InputRequiredResult`: each key names one question."""


class InputRequiredResult(McpModel):
    """An interim result asking the client for input before the request can complete.

    In a handler, `request_state` is the handler's own plaintext: the server seals it on the way
    out and hands it back, verified, as `ctx.request_state` on the retry. On the wire (what a
    client sees) it is the opaque sealed token, to be echoed byte for byte.
    """

    result_type: Literal["input_required"] = "input_required"
    input_requests: dict[str, InputRequest] | None = None
    request_state: str | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


_ANSWERS = (ElicitResult, CreateMessageResult, ListRootsResult)


def input_response(result: ElicitResult | CreateMessageResult | ListRootsResult) -> dict[str, Any]:
    """The bare answer to put under the question's key in `inputResponses`.

    `{action, content}` for an `ElicitResult`, `{role, content, model, stopReason}` for a
    `CreateMessageResult`, `{roots}` for a `ListRootsResult`.
    """
    if not isinstance(result, _ANSWERS):
        raise TypeError(
            "input_response takes an ElicitResult, CreateMessageResult or ListRootsResult, "
            f"not {type(result).__name__}"
        )
    # Input responses are bare results: no resultType and no _meta envelope.
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("resultType", None)
    data.pop("_meta", None)
    return data


def is_input_required_result(raw: Any) -> bool:
    """True when a raw result asks for input (`resultType == "input_required"`)."""
    return isinstance(raw, Mapping) and raw.get("resultType") == INPUT_REQUIRED


def extract_input_requests(raw: Any) -> InputRequests | None:
    """The `inputRequests` of a raw input-required result, or None when it has none."""
    if not is_input_required_result(raw):
        return None
    requests = raw.get("inputRequests")
    if not isinstance(requests, Mapping):
        return None
    return {str(key): InputRequest.model_validate(value) for key, value in requests.items()}


def elicit_request(
    message: str | ElicitRequestParams,
    requested_schema: dict[str, Any] | None = None,
    *,
    url: str | None = None,
) -> InputRequest:
    """An `elicitation/create` request: form mode (a schema), URL mode (`url`), or the params.

    `elicit_request("Name?", {json schema})`, `elicit_request("Sign in", url=...)`, or
    `elicit_request(ElicitRequestParams(...))` for the params written out.
    """
    if isinstance(message, ElicitRequestParams):
        if requested_schema is not None or url is not None:
            raise TypeError("elicit_request(params) takes no schema or url: they are in params")
        params = message
    elif url is not None:
        params = ElicitRequestParams(message=message, mode="url", url=url)
    else:
        schema = (
            requested_schema
            if requested_schema is not None
            else {"type": "object", "properties": {}}
        )
        params = ElicitRequestParams(message=message, requested_schema=schema)
    return InputRequest(method=ELICITATION_CREATE, params=params.to_wire())


def sample_request(
    prompt: str | list[SamplingMessage] | CreateMessageRequestParams,
    *,
    max_tokens: int = 1000,
    system_prompt: str | None = None,
) -> InputRequest:
    """A `sampling/createMessage` request from a user prompt, a list of messages, or the params.

    With `CreateMessageRequestParams`, `max_tokens` and `system_prompt` are the params' own.
    """
    if isinstance(prompt, CreateMessageRequestParams):
        params = prompt
    else:
        messages = (
            [SamplingMessage(role="user", content=TextContent(text=prompt))]
            if isinstance(prompt, str)
            else prompt
        )
        params = CreateMessageRequestParams(
            messages=messages, max_tokens=max_tokens, system_prompt=system_prompt
        )
    return InputRequest(method=SAMPLING_CREATE_MESSAGE, params=params.to_wire())


def roots_request(params: ListRootsRequestParams | None = None) -> InputRequest:
    """A `roots/list` request."""
    return InputRequest(method=ROOTS_LIST, params=params.to_wire() if params else {})


# The seed's spelling, for code written against it: the same functions under its names. `mrtr`
# exports only the names above.
make_input_request_for_elicitation = elicit_request
make_input_request_for_sampling = sample_request
make_input_request_for_roots = roots_request
make_input_response_from_elicit_result = input_response
make_input_response_from_create_message_result = input_response
make_input_response_from_list_roots_result = input_response
