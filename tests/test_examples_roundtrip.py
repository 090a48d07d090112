"""Every example of the spec decodes into the SDK's types and encodes back to the same JSON.

The examples live in the spec's `examples/<TypeName>/*.json`; `CODECS` maps each folder to how
the SDK reads and writes that kind of value (a model, a JSON-RPC request, response, notification
or error, or an MRTR object). `SKIPPED` lists the files that cannot round-trip, each with the
reason, and a test checks that they still cannot (so a skip never outlives its reason).

The examples are kept in this repository under `tests/data/spec-2026-07-28/` (see the README
there for their source and licence). Set `MRTR_SPEC_DIR` to another spec folder (one holding
`examples/`) to run the test against a newer copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mrtr.inputs import (
    InputRequest,
    InputRequiredResult,
    input_response,
)
from mrtr.protocol import errors, jsonrpc
from mrtr.protocol import types as t
from mrtr.protocol.errors import McpError
from mrtr.server._engine.questions import validate_answer

SPEC_DIR = Path(
    os.environ.get(
        "MRTR_SPEC_DIR",
        Path(__file__).resolve().parent / "data" / "spec-2026-07-28",
    )
)
EXAMPLES = SPEC_DIR / "examples"

Codec = Callable[[Any], Any]


# --- how each kind of example is decoded and encoded by the SDK ------------------------------


def model(cls: type[t.McpModel]) -> Codec:
    """A bare type: validate into the model, then `to_wire()`."""
    return lambda data: cls.model_validate(data).to_wire()


def request(method: str) -> Codec:
    """A JSON-RPC request of `method`: framing, then params through the method's model."""

    def codec(message: Any) -> Any:
        assert jsonrpc.classify(message) == "request"
        assert message["method"] == method
        params = t.REQUEST_PARAMS[method].model_validate(message.get("params", {}))
        return jsonrpc.request(message["id"], method, params.to_wire())

    return codec


def response(method: str) -> Codec:
    """A JSON-RPC result response to `method`: framing, then the method's result model."""

    def codec(message: Any) -> Any:
        assert jsonrpc.classify(message) == "response"
        result = t.RESULTS[method].model_validate(message["result"])
        return jsonrpc.result_response(message["id"], result.to_wire())

    return codec


def notification(method: str) -> Codec:
    """A JSON-RPC notification of `method`: framing, then params through the method's model."""

    def codec(message: Any) -> Any:
        assert jsonrpc.classify(message) == "notification"
        assert message["method"] == method
        params = t.NOTIFICATION_PARAMS[method].model_validate(message.get("params", {}))
        return jsonrpc.notification(method, params.to_wire())

    return codec


def error(code: int) -> Codec:
    """A JSON-RPC `error` member with `code`, through `McpError`."""

    def codec(data: Any) -> Any:
        exc = McpError.from_error(data)
        assert exc.code == code
        return exc.to_error()

    return codec


def error_response(code: int) -> Codec:
    """A JSON-RPC error response with `code`, through `McpError`."""

    def codec(message: Any) -> Any:
        assert jsonrpc.classify(message) == "response"
        exc = McpError.from_error(message["error"])
        assert exc.code == code
        return jsonrpc.error_response(message.get("id"), exc)

    return codec


def _input_request(data: Any) -> dict[str, Any]:
    req = InputRequest.model_validate(data)
    params = t.INPUT_REQUEST_PARAMS[req.method].model_validate(req.params)
    return InputRequest(method=req.method, params=params.to_wire()).to_wire()


def input_request(method: str) -> Codec:
    """An MRTR input request (`{method, params}`), params through the method's model."""

    def codec(data: Any) -> Any:
        assert data["method"] == method
        return _input_request(data)

    return codec


def input_requests(data: Any) -> Any:
    """`inputRequests`: key -> input request."""
    return {key: _input_request(value) for key, value in data.items()}


def input_required_result(data: Any) -> Any:
    """`InputRequiredResult`, with every input request's params through its model."""
    decoded = InputRequiredResult.model_validate(data)
    for req in (decoded.input_requests or {}).values():
        t.INPUT_REQUEST_PARAMS[req.method].model_validate(req.params)
    return decoded.to_wire()


def input_responses(data: Any) -> Any:
    """`inputResponses`: each answer read the way the server reads it, for the method it
    answers (the questions are the `InputRequests` example's, under the same keys)."""
    asked = jsonrpc.loads((EXAMPLES / "InputRequests" / _ASKED).read_bytes())
    out = {}
    for key, value in data.items():
        method = asked[key]["method"]
        out[key] = input_response(validate_answer(key, method, value))
    return out


_ASKED = "elicitation-and-sampling-input-requests.json"


CODECS: dict[str, Codec] = {
    # content blocks and resource contents
    "TextContent": model(t.TextContent),
    "ImageContent": model(t.ImageContent),
    "AudioContent": model(t.AudioContent),
    "ResourceLink": model(t.ResourceLink),
    "EmbeddedResource": model(t.EmbeddedResource),
    "TextResourceContents": model(t.TextResourceContents),
    "BlobResourceContents": model(t.BlobResourceContents),
    "ToolUseContent": model(t.ToolUseContent),
    "ToolResultContent": model(t.ToolResultContent),
    # primitives and capabilities
    "Tool": model(t.Tool),
    "Resource": model(t.Resource),
    "Root": model(t.Root),
    "ClientCapabilities": model(t.ClientCapabilities),
    "ServerCapabilities": model(t.ServerCapabilities),
    "ModelPreferences": model(t.ModelPreferences),
    "SamplingMessage": model(t.SamplingMessage),
    # elicitation form fields
    "StringSchema": model(t.StringSchema),
    "NumberSchema": model(t.NumberSchema),
    "BooleanSchema": model(t.BooleanSchema),
    "UntitledSingleSelectEnumSchema": model(t.UntitledSingleSelectEnumSchema),
    "TitledSingleSelectEnumSchema": model(t.TitledSingleSelectEnumSchema),
    "UntitledMultiSelectEnumSchema": model(t.UntitledMultiSelectEnumSchema),
    "TitledMultiSelectEnumSchema": model(t.TitledMultiSelectEnumSchema),
    # request params
    "CallToolRequestParams": model(t.CallToolRequestParams),
    "GetPromptRequestParams": model(t.GetPromptRequestParams),
    "CompleteRequestParams": model(t.CompleteRequestParams),
    "PaginatedRequestParams": model(t.PaginatedRequestParams),
    "CreateMessageRequestParams": model(t.CreateMessageRequestParams),
    "ElicitRequestFormParams": model(t.ElicitRequestFormParams),
    "ElicitRequestURLParams": model(t.ElicitRequestURLParams),
    # results
    "DiscoverResult": model(t.DiscoverResult),
    "ListToolsResult": model(t.ListToolsResult),
    "ListPromptsResult": model(t.ListPromptsResult),
    "ListResourcesResult": model(t.ListResourcesResult),
    "ListResourceTemplatesResult": model(t.ListResourceTemplatesResult),
    "CallToolResult": model(t.CallToolResult),
    "GetPromptResult": model(t.GetPromptResult),
    "ReadResourceResult": model(t.ReadResourceResult),
    "CompleteResult": model(t.CompleteResult),
    "SubscriptionsListenResult": model(t.SubscriptionsListenResult),
    "CreateMessageResult": model(t.CreateMessageResult),
    "ElicitResult": model(t.ElicitResult),
    "ListRootsResult": model(t.ListRootsResult),
    # notification params
    "CancelledNotificationParams": model(t.CancelledNotificationParams),
    "ProgressNotificationParams": model(t.ProgressNotificationParams),
    "LoggingMessageNotificationParams": model(t.LoggingMessageNotificationParams),
    "ResourceUpdatedNotificationParams": model(t.ResourceUpdatedNotificationParams),
    # JSON-RPC requests
    "DiscoverRequest": request("server/discover"),
    "ListToolsRequest": request("tools/list"),
    "CallToolRequest": request("tools/call"),
    "ListPromptsRequest": request("prompts/list"),
    "GetPromptRequest": request("prompts/get"),
    "ListResourcesRequest": request("resources/list"),
    "ListResourceTemplatesRequest": request("resources/templates/list"),
    "ReadResourceRequest": request("resources/read"),
    "CompleteRequest": request("completion/complete"),
    "SubscriptionsListenRequest": request("subscriptions/listen"),
    # JSON-RPC result responses
    "DiscoverResultResponse": response("server/discover"),
    "ListToolsResultResponse": response("tools/list"),
    "CallToolResultResponse": response("tools/call"),
    "ListPromptsResultResponse": response("prompts/list"),
    "GetPromptResultResponse": response("prompts/get"),
    "ListResourcesResultResponse": response("resources/list"),
    "ListResourceTemplatesResultResponse": response("resources/templates/list"),
    "ReadResourceResultResponse": response("resources/read"),
    "CompleteResultResponse": response("completion/complete"),
    "SubscriptionsListenResultResponse": response("subscriptions/listen"),
    # JSON-RPC notifications
    "CancelledNotification": notification("notifications/cancelled"),
    "ProgressNotification": notification("notifications/progress"),
    "LoggingMessageNotification": notification("notifications/message"),
    "ToolListChangedNotification": notification("notifications/tools/list_changed"),
    "PromptListChangedNotification": notification("notifications/prompts/list_changed"),
    "ResourceListChangedNotification": notification("notifications/resources/list_changed"),
    "ResourceUpdatedNotification": notification("notifications/resources/updated"),
    "SubscriptionsAcknowledgedNotification": notification(
        "notifications/subscriptions/acknowledged"
    ),
    # JSON-RPC errors (bare `error` members and whole error responses)
    "ParseError": error(errors.PARSE_ERROR),
    "MethodNotFoundError": error(errors.METHOD_NOT_FOUND),
    "InvalidParamsError": error(errors.INVALID_PARAMS),
    "InternalError": error(errors.INTERNAL_ERROR),
    "HeaderMismatchError": error_response(errors.HEADER_MISMATCH),
    "MissingRequiredClientCapabilityError": error_response(
        errors.MISSING_REQUIRED_CLIENT_CAPABILITY
    ),
    "UnsupportedProtocolVersionError": error_response(errors.UNSUPPORTED_PROTOCOL_VERSION),
    # MRTR: input requests (server -> client, carried in results) and their answers
    "ElicitRequest": input_request("elicitation/create"),
    "CreateMessageRequest": input_request("sampling/createMessage"),
    "InputRequests": input_requests,
    "InputRequiredResult": input_required_result,
    "InputResponses": input_responses,
}

#: Files that cannot round-trip: path under examples/ -> (reason, the closest codec). Each is
#: checked to still differ, so an entry is removed as soon as it could pass.
SKIPPED: dict[str, tuple[str, Codec]] = {
    "ListRootsRequest/list-roots-request.json": (
        "has a JSON-RPC `id` but no `jsonrpc` and no `params`: neither a JSON-RPC request (the "
        "SDK never sends roots/list as one, servers send no requests) nor an MRTR input request, "
        "which the SDK always writes as `{method, params}` with `params: {}`",
        input_request("roots/list"),
    ),
}


def _example_files() -> list[str]:
    return sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.glob("*/*.json"))


def _load(relative: str) -> Any:
    return jsonrpc.loads((EXAMPLES / relative).read_bytes())


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: like `==`, except that `true`/`false` never equal the numbers 1/0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _round_trip(codec: Codec, original: Any) -> Any:
    # Through bytes, so what is compared is what would go on the wire.
    return jsonrpc.loads(jsonrpc.dumps(codec(original)))


ROUND_TRIP_FILES = [f for f in _example_files() if f not in SKIPPED]


def test_every_example_folder_has_a_codec_or_a_skip_reason() -> None:
    assert EXAMPLES.is_dir(), f"spec examples not found at {EXAMPLES}; set MRTR_SPEC_DIR"
    folders = {p.name for p in EXAMPLES.iterdir() if p.is_dir()}
    skipped_only = {f.split("/")[0] for f in SKIPPED} - {f.split("/")[0] for f in ROUND_TRIP_FILES}
    assert folders - set(CODECS) - skipped_only == set()
    assert set(CODECS) - folders == set(), "codecs for folders the spec does not have"
    assert set(SKIPPED) <= set(_example_files()), "skip entries for files that do not exist"


@pytest.mark.parametrize("relative", ROUND_TRIP_FILES)
def test_example_round_trips(relative: str) -> None:
    original = _load(relative)
    encoded = _round_trip(CODECS[relative.split("/")[0]], original)
    assert encoded == original
    assert same_json(encoded, original)


@pytest.mark.parametrize("relative", sorted(SKIPPED))
def test_skipped_example_still_cannot_round_trip(relative: str) -> None:
    reason, codec = SKIPPED[relative]
    assert reason
    original = _load(relative)
    assert not same_json(_round_trip(codec, original), original)


def test_same_json_tells_booleans_from_numbers() -> None:
    assert same_json({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not same_json({"a": True}, {"a": 1})
    assert not same_json([0], [False])
