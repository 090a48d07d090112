"""mrtr: a Python SDK for the Model Context Protocol (2026-07-28) built around Multi Round-Trip
Requests. A handler writes `answer = await ctx.elicit(...)` and the SDK turns it into stateless
rounds with a sealed `requestState`; the client answers and retries for you.
"""

from typing import TYPE_CHECKING

from .client import (
    Change,
    Client,
    ClientGroup,
    ClientOptions,
    InputHandlerError,
    InputRequiredError,
    RoundInfo,
    Subscription,
)
from .client.options import TaskOptions
from .client.tasks import TaskHandle
from .inputs import (
    InputRequest,
    InputRequests,
    InputRequiredResult,
    elicit_request,
    extract_input_requests,
    input_response,
    is_input_required_result,
    roots_request,
    sample_request,
)
from .protocol import errors
from .protocol.errors import McpError
from .protocol.tasks import DetailedTask
from .protocol.types import (
    Annotations,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ClientCapabilities,
    CompleteResult,
    Completion,
    ContentBlock,
    CreateMessageRequestParams,
    CreateMessageResult,
    DiscoverResult,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ElicitResultTyped,
    EmbeddedResource,
    GetPromptResult,
    Icon,
    ImageContent,
    Implementation,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListRootsRequestParams,
    ListRootsResult,
    ListToolsResult,
    ModelPreferences,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceResult,
    Resource,
    ResourceLink,
    ResourceTemplate,
    Root,
    SamplingMessage,
    ServerCapabilities,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from .protocol.versions import (
    LATEST_PROTOCOL_VERSION,
    LEGACY_PROTOCOL_VERSIONS,
    SUPPORTED_PROTOCOL_VERSIONS,
)
from .server import RequestContext, Server, ServerOptions
from .server.auth import AccessToken, AuthSettings, DPoPSettings, TokenVerifier
from .server.content import Audio, File, Image
from .server.lifespan import LifespanError, State
from .server.session import LegacySession
from .server.tasks import TaskSettings
from .server.tool_error import ToolError
from .version import __version__

if TYPE_CHECKING:
    from .server.endpoint import ServerEndpoint

    def _serves_as_endpoint(server: Server) -> ServerEndpoint:
        # Type checking fails here when `Server` stops satisfying the contract its
        # transports are typed against.
        return server


__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "LEGACY_PROTOCOL_VERSIONS",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "AccessToken",
    "Annotations",
    "Audio",
    "AudioContent",
    "AuthSettings",
    "BlobResourceContents",
    "CallToolResult",
    "Change",
    "Client",
    "ClientCapabilities",
    "ClientGroup",
    "ClientOptions",
    "CompleteResult",
    "Completion",
    "ContentBlock",
    "CreateMessageRequestParams",
    "CreateMessageResult",
    "DPoPSettings",
    "DetailedTask",
    "DiscoverResult",
    "ElicitRequestFormParams",
    "ElicitRequestParams",
    "ElicitRequestURLParams",
    "ElicitResult",
    "ElicitResultTyped",
    "EmbeddedResource",
    "File",
    "GetPromptResult",
    "Icon",
    "Image",
    "ImageContent",
    "Implementation",
    "InputHandlerError",
    "InputRequest",
    "InputRequests",
    "InputRequiredError",
    "InputRequiredResult",
    "LegacySession",
    "LifespanError",
    "ListPromptsResult",
    "ListResourceTemplatesResult",
    "ListResourcesResult",
    "ListRootsRequestParams",
    "ListRootsResult",
    "ListToolsResult",
    "McpError",
    "ModelPreferences",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "RequestContext",
    "Resource",
    "ResourceLink",
    "ResourceTemplate",
    "Root",
    "RoundInfo",
    "SamplingMessage",
    "Server",
    "ServerCapabilities",
    "ServerOptions",
    "State",
    "Subscription",
    "TaskHandle",
    "TaskOptions",
    "TaskSettings",
    "TextContent",
    "TextResourceContents",
    "TokenVerifier",
    "Tool",
    "ToolAnnotations",
    "ToolError",
    "__version__",
    "elicit_request",
    "errors",
    "extract_input_requests",
    "input_response",
    "is_input_required_result",
    "roots_request",
    "sample_request",
]
