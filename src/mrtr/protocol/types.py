"""MCP 2026-07-28 types as pydantic models, camelCase on the wire, snake_case in Python.

Every model keeps unknown fields (`extra="allow"`) so that a message from a newer peer survives
a decode/encode round trip, and `to_wire()` drops unset optional fields instead of sending nulls.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from .elicitation import (
    BooleanSchema,
    ElicitAction,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ElicitResultTyped,
    EnumOption,
    LegacyTitledEnumSchema,
    NumberSchema,
    PrimitiveSchemaDefinition,
    StringSchema,
    TitledEnumItems,
    TitledMultiSelectEnumSchema,
    TitledSingleSelectEnumSchema,
    UntitledEnumItems,
    UntitledMultiSelectEnumSchema,
    UntitledSingleSelectEnumSchema,
)
from .model import McpModel, Meta

Role = Literal["user", "assistant"]
LoggingLevel = Literal[
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
]
CacheScope = Literal["public", "private"]
ProgressToken = str | int


class Icon(McpModel):
    """An icon for a tool, prompt, resource or implementation: its `src` URI, MIME type, sizes
    and theme."""

    src: str
    mime_type: str | None = None
    sizes: list[str] | None = None
    theme: Literal["light", "dark"] | None = None


class Implementation(McpModel):
    """A client's or server's name and version."""

    name: str
    version: str
    title: str | None = None
    description: str | None = None
    icons: list[Icon] | None = None
    website_url: str | None = None


class Annotations(McpModel):
    """Hints for the client about a content block or resource: who it is for, its priority,
    when it last changed."""

    audience: list[Role] | None = None
    priority: float | None = None
    last_modified: str | None = None


class TextResourceContents(McpModel):
    """The contents of a text resource: its `uri`, `text` and MIME type."""

    uri: str
    text: str
    mime_type: str | None = None
    meta: Meta = None


class BlobResourceContents(McpModel):
    """The contents of a binary resource: its `uri`, the bytes as base64 in `blob`, and MIME
    type."""

    uri: str
    blob: str
    mime_type: str | None = None
    meta: Meta = None


ResourceContents = TextResourceContents | BlobResourceContents


class TextContent(McpModel):
    """A block of text in a tool result, prompt message or sampling message."""

    type: Literal["text"] = "text"
    text: str
    annotations: Annotations | None = None
    meta: Meta = None


class ImageContent(McpModel):
    """An image as base64 `data` with its `mime_type`."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str
    annotations: Annotations | None = None
    meta: Meta = None


class AudioContent(McpModel):
    """Audio as base64 `data` with its `mime_type`."""

    type: Literal["audio"] = "audio"
    data: str
    mime_type: str
    annotations: Annotations | None = None
    meta: Meta = None


class ResourceLink(McpModel):
    """A link to a resource the client may read with `resources/read` (not its contents)."""

    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    icons: list[Icon] | None = None
    annotations: Annotations | None = None
    meta: Meta = None


class EmbeddedResource(McpModel):
    """A resource's contents embedded in a tool result or prompt message."""

    type: Literal["resource"] = "resource"
    resource: TextResourceContents | BlobResourceContents
    annotations: Annotations | None = None
    meta: Meta = None


ContentBlock = Annotated[
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource,
    Field(discriminator="type"),
]
"""A content block of a tool result or prompt message: text, image, audio, a resource link or an
embedded resource, told apart by `type`."""


class ToolUseContent(McpModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]
    meta: Meta = None


class ToolResultContent(McpModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: list[ContentBlock]
    structured_content: Any = None
    is_error: bool | None = None
    meta: Meta = None


SamplingContent = Annotated[
    TextContent | ImageContent | AudioContent | ToolUseContent | ToolResultContent,
    Field(discriminator="type"),
]


class ToolAnnotations(McpModel):
    """Hints about a tool's behaviour (read-only, destructive, idempotent, open world);
    untrusted."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class Tool(McpModel):
    """A tool as listed by `tools/list`."""

    name: str
    input_schema: dict[str, Any]
    title: str | None = None
    description: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: ToolAnnotations | None = None
    icons: list[Icon] | None = None
    meta: Meta = None


class PromptArgument(McpModel):
    """One argument a prompt takes: its name, description and whether it is required."""

    name: str
    title: str | None = None
    description: str | None = None
    required: bool | None = None


class Prompt(McpModel):
    """A prompt as listed by `prompts/list`."""

    name: str
    title: str | None = None
    description: str | None = None
    arguments: list[PromptArgument] | None = None
    icons: list[Icon] | None = None
    meta: Meta = None


class PromptMessage(McpModel):
    """One message of a prompt: a `role` (`user` or `assistant`) and a content block."""

    role: Role
    content: ContentBlock


class Resource(McpModel):
    """A resource as listed by `resources/list`."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: Annotations | None = None
    icons: list[Icon] | None = None
    meta: Meta = None


class ResourceTemplate(McpModel):
    """A URI template as listed by `resources/templates/list`."""

    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: Annotations | None = None
    icons: list[Icon] | None = None
    meta: Meta = None


class ClientCapabilities(McpModel):
    """What a client can answer: elicitation, sampling, roots, and the extensions it speaks."""

    elicitation: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    roots: dict[str, Any] | None = None
    experimental: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None


class ServerCapabilities(McpModel):
    """What a server offers: tools, prompts, resources, logging, completions, extensions."""

    tools: dict[str, Any] | None = None
    prompts: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    logging: dict[str, Any] | None = None
    completions: dict[str, Any] | None = None
    experimental: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None


# --- results -----------------------------------------------------------------------------


class Result(McpModel):
    """Base of results: `resultType` is `"complete"` unless said otherwise."""

    result_type: str = "complete"
    meta: Meta = None


class CacheableResult(Result):
    """A result with caching hints. A server always sends both; `None` means the peer sent
    none, which a client treats as `ttlMs` 0 (immediately stale)."""

    ttl_ms: int | None = None
    cache_scope: CacheScope | None = None


class DiscoverResult(CacheableResult):
    """The result of `server/discover`: the versions a server speaks, its capabilities and
    instructions."""

    supported_versions: list[str]
    capabilities: ServerCapabilities
    instructions: str | None = None


class ListToolsResult(CacheableResult):
    """One page of `tools/list`; `next_cursor` is set when there are more."""

    tools: list[Tool]
    next_cursor: str | None = None


class ListPromptsResult(CacheableResult):
    """One page of `prompts/list`; `next_cursor` is set when there are more."""

    prompts: list[Prompt]
    next_cursor: str | None = None


class ListResourcesResult(CacheableResult):
    """One page of `resources/list`; `next_cursor` is set when there are more."""

    resources: list[Resource]
    next_cursor: str | None = None


class ListResourceTemplatesResult(CacheableResult):
    """One page of `resources/templates/list`; `next_cursor` is set when there are more."""

    resource_templates: list[ResourceTemplate]
    next_cursor: str | None = None


class ReadResourceResult(CacheableResult):
    """The result of `resources/read`: the resource's contents (text or blob)."""

    contents: list[TextResourceContents | BlobResourceContents]


class CallToolResult(Result):
    """A tool's result: content blocks, optional structured content, and the error flag.

    A handler may set `input_required` (an `InputRequiredResult`) to ask for input instead,
    as in the seed's manual style; it never goes on the wire as a field.
    """

    # What `data` returns, set by the client that received the result: (value, reader), the
    # reader computing the value when first read. Never on the wire, not compared. A plain
    # slot, not pydantic private attributes: those cost every validation of a result (each
    # tools/call answer) more than the rest of it together.
    __slots__ = ("_output",)

    content: list[ContentBlock] = Field(default_factory=list)
    structured_content: Any = None
    is_error: bool | None = None
    input_required: Any = Field(default=None, exclude=True)

    @property
    def data(self) -> Any:
        """The tool's output as a value: `structured_content` validated into the
        `output_type` given to `Client.call_tool`, or else the JSON value, checked against
        the tool's `outputSchema` (from `tools/list`) when first read and unwrapped from
        `{"result": ...}` when the schema is that wrapper. None for an error result or one
        without structured content. Raises `McpError` when the output breaks the schema."""
        output: tuple[Any, Callable[[], Any] | None] | None = getattr(self, "_output", None)
        if output is None:
            return None if self.is_error else self.structured_content
        value, reader = output
        if reader is not None:
            value = reader()  # raises for output that breaks the schema
            object.__setattr__(self, "_output", (value, None))
        return value

    def set_data(self, value: Any) -> None:
        """Record what `data` returns (the client does, once it has read the output)."""
        object.__setattr__(self, "_output", (value, None))

    def set_data_reader(self, reader: Callable[[], Any]) -> None:
        """Have `data` computed by `reader` when first read (the client's check of the
        output against the tool's schema, which costs nothing until it is wanted)."""
        object.__setattr__(self, "_output", (None, reader))

    def __copy__(self) -> CallToolResult:
        copied = super().__copy__()
        if (output := getattr(self, "_output", None)) is not None:
            object.__setattr__(copied, "_output", output)
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> CallToolResult:
        copied = super().__deepcopy__(memo)
        if (output := getattr(self, "_output", None)) is not None:
            value, reader = output
            object.__setattr__(copied, "_output", (copy.deepcopy(value, memo), reader))
        return copied


class GetPromptResult(Result):
    """The result of `prompts/get`: the prompt's messages, filled in with its arguments."""

    messages: list[PromptMessage]
    description: str | None = None


class Completion(McpModel):
    """Suggested values for an argument (`values`), with `total` and `has_more` when known."""

    values: list[str]
    total: int | None = None
    has_more: bool | None = None


class CompleteResult(Result):
    """The result of `completion/complete`: one `Completion`."""

    completion: Completion


class SubscriptionsListenResult(Result):
    pass


# --- client-side requests carried by MRTR (elicitation's are in `elicitation.py`) ---------


class ModelHint(McpModel):
    name: str | None = None


class ModelPreferences(McpModel):
    """What a server prefers in the model a client samples with: hints and cost, speed,
    intelligence priorities."""

    hints: list[ModelHint] | None = None
    cost_priority: float | None = None
    speed_priority: float | None = None
    intelligence_priority: float | None = None


class SamplingMessage(McpModel):
    """One message of the conversation a sampling request asks the client's model to continue."""

    role: Role
    content: SamplingContent | list[SamplingContent]
    meta: Meta = None


class ToolChoice(McpModel):
    mode: Literal["auto", "required", "none"] | None = None


class CreateMessageRequestParams(McpModel):
    """`sampling/createMessage` params."""

    messages: list[SamplingMessage]
    max_tokens: int
    system_prompt: str | None = None
    include_context: Literal["none", "thisServer", "allServers"] | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    metadata: dict[str, Any] | None = None
    model_preferences: ModelPreferences | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    meta: Meta = None


class CreateMessageResult(McpModel):
    """A sampled message (a bare result inside `inputResponses`)."""

    role: Role
    content: SamplingContent | list[SamplingContent]
    model: str
    stop_reason: str | None = None
    meta: Meta = None


class ListRootsRequestParams(McpModel):
    """`roots/list` params (none but `_meta`)."""

    meta: Meta = None


class Root(McpModel):
    """A root the client offers: a `file://` URI and an optional name."""

    uri: str
    name: str | None = None
    meta: Meta = None


class ListRootsResult(McpModel):
    """The client's roots (a bare result inside `inputResponses`)."""

    roots: list[Root]
    meta: Meta = None


# --- notifications -------------------------------------------------------------------------


class ProgressNotificationParams(McpModel):
    progress_token: ProgressToken
    progress: float
    total: float | None = None
    message: str | None = None
    meta: Meta = None


class LoggingMessageNotificationParams(McpModel):
    level: LoggingLevel
    data: Any
    logger: str | None = None
    meta: Meta = None


class CancelledNotificationParams(McpModel):
    request_id: str | int
    reason: str | None = None
    meta: Meta = None


# --- request params --------------------------------------------------------------------


class RequestParams(McpModel):
    meta: Meta = None


class PaginatedRequestParams(RequestParams):
    cursor: str | None = None


class CallToolRequestParams(RequestParams):
    name: str
    arguments: dict[str, Any] | None = None
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


class GetPromptRequestParams(RequestParams):
    name: str
    arguments: dict[str, str] | None = None
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


class ReadResourceRequestParams(RequestParams):
    uri: str
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


class PromptReference(McpModel):
    type: Literal["ref/prompt"] = "ref/prompt"
    name: str
    title: str | None = None


class ResourceTemplateReference(McpModel):
    type: Literal["ref/resource"] = "ref/resource"
    uri: str


class CompletionArgument(McpModel):
    name: str
    value: str


class CompleteRequestParams(RequestParams):
    ref: Annotated[PromptReference | ResourceTemplateReference, Field(discriminator="type")]
    argument: CompletionArgument
    context: dict[str, Any] | None = None


class SubscriptionFilter(McpModel):
    tools_list_changed: bool | None = None
    prompts_list_changed: bool | None = None
    resources_list_changed: bool | None = None
    resource_subscriptions: list[str] | None = None


class SubscriptionsListenRequestParams(RequestParams):
    notifications: SubscriptionFilter


# --- notifications without their own params section above -------------------------------


class NotificationParams(McpModel):
    """Params of a notification that carries only `_meta` (the `list_changed` ones)."""

    meta: Meta = None


class ResourceUpdatedNotificationParams(NotificationParams):
    uri: str


class SubscriptionsAcknowledgedNotificationParams(NotificationParams):
    notifications: SubscriptionFilter


# --- which model goes with which method ----------------------------------------------------

#: The params model of each request a client sends.
REQUEST_PARAMS: dict[str, type[McpModel]] = {
    "server/discover": RequestParams,
    "tools/list": PaginatedRequestParams,
    "tools/call": CallToolRequestParams,
    "prompts/list": PaginatedRequestParams,
    "prompts/get": GetPromptRequestParams,
    "resources/list": PaginatedRequestParams,
    "resources/templates/list": PaginatedRequestParams,
    "resources/read": ReadResourceRequestParams,
    "completion/complete": CompleteRequestParams,
    "subscriptions/listen": SubscriptionsListenRequestParams,
}

#: The complete-result model of each request a client sends.
RESULTS: dict[str, type[Result]] = {
    "server/discover": DiscoverResult,
    "tools/list": ListToolsResult,
    "tools/call": CallToolResult,
    "prompts/list": ListPromptsResult,
    "prompts/get": GetPromptResult,
    "resources/list": ListResourcesResult,
    "resources/templates/list": ListResourceTemplatesResult,
    "resources/read": ReadResourceResult,
    "completion/complete": CompleteResult,
    "subscriptions/listen": SubscriptionsListenResult,
}

#: The params model of each input request a server asks (inside `inputRequests`).
INPUT_REQUEST_PARAMS: dict[str, type[McpModel]] = {
    "elicitation/create": ElicitRequestParams,
    "sampling/createMessage": CreateMessageRequestParams,
    "roots/list": ListRootsRequestParams,
}

#: The params model of each notification, in either direction.
NOTIFICATION_PARAMS: dict[str, type[McpModel]] = {
    "notifications/cancelled": CancelledNotificationParams,
    "notifications/progress": ProgressNotificationParams,
    "notifications/message": LoggingMessageNotificationParams,
    "notifications/tools/list_changed": NotificationParams,
    "notifications/prompts/list_changed": NotificationParams,
    "notifications/resources/list_changed": NotificationParams,
    "notifications/resources/updated": ResourceUpdatedNotificationParams,
    "notifications/subscriptions/acknowledged": SubscriptionsAcknowledgedNotificationParams,
}

# The models of `model.py` and `elicitation.py` are part of this module's names too.
__all__ = [
    "INPUT_REQUEST_PARAMS",
    "NOTIFICATION_PARAMS",
    "REQUEST_PARAMS",
    "RESULTS",
    "Annotations",
    "AudioContent",
    "BlobResourceContents",
    "BooleanSchema",
    "CacheScope",
    "CacheableResult",
    "CallToolRequestParams",
    "CallToolResult",
    "CancelledNotificationParams",
    "ClientCapabilities",
    "CompleteRequestParams",
    "CompleteResult",
    "Completion",
    "CompletionArgument",
    "ContentBlock",
    "CreateMessageRequestParams",
    "CreateMessageResult",
    "DiscoverResult",
    "ElicitAction",
    "ElicitRequestFormParams",
    "ElicitRequestParams",
    "ElicitRequestURLParams",
    "ElicitResult",
    "ElicitResultTyped",
    "EmbeddedResource",
    "EnumOption",
    "GetPromptRequestParams",
    "GetPromptResult",
    "Icon",
    "ImageContent",
    "Implementation",
    "LegacyTitledEnumSchema",
    "ListPromptsResult",
    "ListResourceTemplatesResult",
    "ListResourcesResult",
    "ListRootsRequestParams",
    "ListRootsResult",
    "ListToolsResult",
    "LoggingLevel",
    "LoggingMessageNotificationParams",
    "McpModel",
    "Meta",
    "ModelHint",
    "ModelPreferences",
    "NotificationParams",
    "NumberSchema",
    "PaginatedRequestParams",
    "PrimitiveSchemaDefinition",
    "ProgressNotificationParams",
    "ProgressToken",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptReference",
    "ReadResourceRequestParams",
    "ReadResourceResult",
    "RequestParams",
    "Resource",
    "ResourceContents",
    "ResourceLink",
    "ResourceTemplate",
    "ResourceTemplateReference",
    "ResourceUpdatedNotificationParams",
    "Result",
    "Role",
    "Root",
    "SamplingContent",
    "SamplingMessage",
    "ServerCapabilities",
    "StringSchema",
    "SubscriptionFilter",
    "SubscriptionsAcknowledgedNotificationParams",
    "SubscriptionsListenRequestParams",
    "SubscriptionsListenResult",
    "TextContent",
    "TextResourceContents",
    "TitledEnumItems",
    "TitledMultiSelectEnumSchema",
    "TitledSingleSelectEnumSchema",
    "Tool",
    "ToolAnnotations",
    "ToolChoice",
    "ToolResultContent",
    "ToolUseContent",
    "UntitledEnumItems",
    "UntitledMultiSelectEnumSchema",
    "UntitledSingleSelectEnumSchema",
]
