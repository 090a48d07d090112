"""MRTR wire objects: input requests a server asks, the results that carry them, and helpers.

A server that needs something only the client has answers `InputRequiredResult`; its
`inputRequests` map server-chosen keys to `{method, params}` request objects, and the client
retries the original request with `inputResponses` (bare results under the same keys) and the
echoed `requestState`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

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


def make_input_request_for_elicitation(params: ElicitRequestParams) -> InputRequest:
    """An `elicitation/create` input request."""
    return InputRequest(method=ELICITATION_CREATE, params=params.to_wire())


def make_input_request_for_sampling(params: CreateMessageRequestParams) -> InputRequest:
    """A `sampling/createMessage` input request."""
    return InputRequest(method=SAMPLING_CREATE_MESSAGE, params=params.to_wire())


def make_input_request_for_roots(params: ListRootsRequestParams | None = None) -> InputRequest:
    """A `roots/list` input request."""
    return InputRequest(method=ROOTS_LIST, params=params.to_wire() if params else {})


def _bare(result: BaseModel) -> dict[str, Any]:
    # Input responses are bare results: no resultType and no _meta envelope.
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("resultType", None)
    data.pop("_meta", None)
    return data


def make_input_response_from_elicit_result(result: ElicitResult) -> dict[str, Any]:
    """The bare `{action, content}` value to put under the question's key."""
    return _bare(result)


def make_input_response_from_create_message_result(result: CreateMessageResult) -> dict[str, Any]:
    """The bare `{role, content, model, stopReason}` value to put under the question's key."""
    return _bare(result)


def make_input_response_from_list_roots_result(result: ListRootsResult) -> dict[str, Any]:
    """The bare `{roots}` value to put under the question's key."""
    return _bare(result)


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
    message: str, requested_schema: dict[str, Any] | None = None, *, url: str | None = None
) -> InputRequest:
    """Shorthand for a form-mode (schema) or URL-mode (url) elicitation request."""
    if url is not None:
        return make_input_request_for_elicitation(
            ElicitRequestParams(message=message, mode="url", url=url)
        )
    schema = (
        requested_schema if requested_schema is not None else {"type": "object", "properties": {}}
    )
    return make_input_request_for_elicitation(
        ElicitRequestParams(message=message, requested_schema=schema)
    )


def sample_request(
    prompt: str | list[SamplingMessage], *, max_tokens: int = 1000, system_prompt: str | None = None
) -> InputRequest:
    """Shorthand for a sampling request from a user prompt (or a list of messages)."""
    messages = (
        [SamplingMessage(role="user", content=TextContent(text=prompt))]
        if isinstance(prompt, str)
        else prompt
    )
    return make_input_request_for_sampling(
        CreateMessageRequestParams(
            messages=messages, max_tokens=max_tokens, system_prompt=system_prompt
        )
    )


def roots_request() -> InputRequest:
    """Shorthand for a `roots/list` request."""
    return make_input_request_for_roots()
