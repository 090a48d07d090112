"""`Client`: typed calls over any transport, and the MRTR loop that answers a server's questions.

`call_tool`, `get_prompt` and `read_resource` return the final result: when the server answers
`InputRequiredResult`, the loop (`flow.py`) resolves each input request through the registered
handler (elicitation, sampling, roots), then retries the original request with a new id, the
answers under the same keys, and `requestState` echoed byte for byte.

The same calls work on a legacy (`initialize`-based) server: with `ClientOptions.protocol`
`"auto"` (the default) the first exchange finds out the server's era (`connection.py`,
`era.py`), and on a legacy server the client opens a session (`legacy.py`) and answers the
server's own `elicitation/create`, `sampling/createMessage` and `roots/list` requests through
the same handlers (`inbound.py`, `input_handlers.py`). `listen` streams changes
(`listening.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ..inputs import ELICITATION_CREATE, ROOTS_LIST, SAMPLING_CREATE_MESSAGE
from ..protocol import meta as meta_keys
from ..protocol.types import (
    CallToolResult,
    CompleteResult,
    DiscoverResult,
    GetPromptResult,
    Implementation,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    Tool,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION
from .connection import DISCOVER, Connection
from .era import LEGACY, MODERN, Era
from .flow import Flows, InputRequiredError, ProgressCallback, TaskHook
from .inbound import Inbound, LogHandler
from .input_handlers import (
    ElicitationHandler,
    InputHandlers,
    RootsHandler,
    SamplingHandler,
)
from .input_handlers import (
    InputHandlerError as InputHandlerError,  # re-exported: applications import it from here
)
from .listening import Listening
from .options import ClientOptions
from .pagination import DEFAULT_MAX_PAGES, pages
from .results import parse_result
from .subscription import Subscription
from .tasks import (
    TaskChannel,
    TaskCreated,
    TaskHandle,
    TaskStatusCallback,
    drive,
    keep_task,
    read_task,
)
from .tool_output import KnownOutput, known_output, read_output

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint
    from ..transport.base import ClientTransport
    from .auth.oauth import OAuth
    from .config import ConfigSource, ServerConfig

#: Names that moved to the modules the client is made of, importable from here as before.
__all__ = [
    "Client",
    "InputHandlerError",
    "InputRequiredError",
    "LogHandler",
    "ProgressCallback",
    "TaskHook",
]

R = TypeVar("R", bound=BaseModel)


class Client:
    """An MCP client. Use `Client.in_memory(server)`, `Client.http(url)` or
    `Client.stdio(command)` as an async context manager."""

    def __init__(
        self,
        transport: ClientTransport,
        *,
        options: ClientOptions | None = None,
        client_info: Implementation | None = None,
        elicitation_handler: ElicitationHandler | None = None,
        elicitation_modes: Sequence[str] = ("form",),
        sampling_handler: SamplingHandler | None = None,
        roots_handler: RootsHandler | None = None,
        log_handler: LogHandler | None = None,
        log_level: str | None = None,
        protocol_version: str = LATEST_PROTOCOL_VERSION,
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        if log_level is not None and log_level not in meta_keys.LOG_LEVEL_RANK:
            raise ValueError(
                f"log_level must be one of {', '.join(meta_keys.LOG_LEVELS)}, not {log_level!r}"
            )
        self._inputs = InputHandlers()
        self._connection = Connection(
            transport,
            options=options or ClientOptions(),
            client_info=client_info or Implementation(name="mrtr-client", version="0.1.0"),
            inputs=self._inputs,
            capabilities=capabilities or {},
            log_level=log_level,
            protocol_version=protocol_version,
        )
        self._inbound = Inbound(self._inputs, log_handler, self._connection.asks)
        self._flows = Flows(self._connection, self._inputs, self._inbound.progress)
        self._listening = Listening(self._connection, self._inbound)
        # Each listed tool's outputSchema, by tool name, to read `CallToolResult.data` with.
        self._tool_outputs: dict[str, KnownOutput] = {}
        self._plain_task_hook: TaskHook | None = None
        if elicitation_handler is not None:
            self.set_elicitation_handler(elicitation_handler, modes=elicitation_modes)
        if sampling_handler is not None:
            self.set_sampling_handler(sampling_handler)
        if roots_handler is not None:
            self.set_roots_handler(roots_handler)

    @property
    def transport(self) -> ClientTransport:
        """The transport requests go through."""
        return self._connection.transport

    @transport.setter
    def transport(self, transport: ClientTransport) -> None:
        self._connection.transport = transport

    @property
    def options(self) -> ClientOptions:
        """The client's options."""
        return self._connection.options

    @options.setter
    def options(self, options: ClientOptions) -> None:
        self._connection.options = options

    @property
    def client_info(self) -> Implementation:
        """The client's name and version, sent to the server."""
        return self._connection.client_info

    @client_info.setter
    def client_info(self, info: Implementation) -> None:
        self._connection.client_info = info

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def in_memory(cls, server: ServerEndpoint, **kwargs: Any) -> Client:
        """A client connected to `server` in this process (real JSON-RPC, no sockets), in
        either era: `options=ClientOptions(protocol="legacy")` opens a legacy session."""
        from ..transport.memory import MemoryTransport

        return cls(MemoryTransport(server), **kwargs)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        connect_attempts: int = 3,
        auth: OAuth | None = None,
        **kwargs: Any,
    ) -> Client:
        """A client for a Streamable HTTP endpoint (`http://host:port/mcp`), or an HTTP+SSE
        one of 2024-11-05 (`http://host:port/sse`, or found when `initialize` is refused).

        `connect_attempts`: how many times a request whose connection is refused (so nothing
        was sent) is tried, with a short backoff, before it fails. `auth`: authorization for a
        protected server (`mrtr.client.auth.OAuth`; default: `options.auth`).
        """
        from ..transport.http_client import HTTPTransport

        options = kwargs.get("options")
        if auth is None and options is not None:
            auth = options.auth
        transport = HTTPTransport(
            url, headers=headers, timeout=timeout, connect_attempts=connect_attempts, auth=auth
        )
        return cls(transport, **kwargs)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **kwargs: Any,
    ) -> Client:
        """A client that spawns `command args...` and speaks to it over stdin/stdout."""
        from ..transport.stdio_client import StdioTransport

        return cls(StdioTransport(command, list(args), env=env, cwd=cwd), **kwargs)

    @classmethod
    def from_config(cls, source: ConfigSource, name: str | None = None, **kwargs: Any) -> Client:
        """A client for one server of an MCP host configuration (`mcp.json`: a path, or its
        content as a dict; see `mrtr.client.config`): the one named, or the only one. For
        several at once, use `ClientGroup.from_config`. Keyword arguments go to `Client`.

        Raises `ValueError` when the entry is missing or invalid, or when `name` is None and
        the configuration holds several servers.
        """
        from .config import parse_config

        servers, invalid = parse_config(source)
        if name is None:
            every = [*servers, *invalid]
            if len(every) != 1:
                raise ValueError(
                    f"the configuration holds {len(every)} servers "
                    f"({', '.join(map(repr, every)) or 'none'}): pass name=... to pick one, "
                    "or open them all with ClientGroup.from_config"
                )
            name = every[0]
        if name in invalid:
            raise invalid[name]
        if name not in servers:
            raise ValueError(
                f"the configuration has no server {name!r} "
                f"(it has: {', '.join(map(repr, servers)) or 'none'})"
            )
        return cls.from_server_config(servers[name], **kwargs)

    @classmethod
    def from_server_config(cls, config: ServerConfig, **kwargs: Any) -> Client:
        """A client for one parsed configuration entry (stdio or Streamable HTTP)."""
        from .config import StdioServerConfig

        if isinstance(config, StdioServerConfig):
            env = dict(config.env) or None
            return cls.stdio(config.command, config.args, env=env, cwd=config.cwd, **kwargs)
        return cls.http(config.url, headers=dict(config.headers) or None, **kwargs)

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the transport (the context manager does this)."""
        inbound = self._inbound
        await self._connection.open(inbound.on_notification, inbound.on_request)

    @property
    def connected(self) -> bool:
        """Whether the transport is open: `connect` ran, and `close` did not since."""
        return self._connection.connected

    async def close(self) -> None:
        """Close the transport (the context manager does this), ending a legacy session."""
        if self._connection.connected:
            self._connection.connected = False
            self._inbound.cancel_server_requests()
            await self._connection.close()

    # --- handlers and capabilities -----------------------------------------------------------

    def set_elicitation_handler(
        self, fn: ElicitationHandler, *, modes: Sequence[str] = ("form",)
    ) -> None:
        """Answer `elicitation/create`; `modes` are the modes it handles (`form`, `url`)."""
        self._inputs.set_elicitation_modes(modes)
        self._inputs.set(ELICITATION_CREATE, fn)
        self._connection.rebuild_meta()

    def set_sampling_handler(self, fn: SamplingHandler) -> None:
        """Answer `sampling/createMessage`."""
        self._inputs.set(SAMPLING_CREATE_MESSAGE, fn)
        self._connection.rebuild_meta()

    def set_roots_handler(self, fn: RootsHandler) -> None:
        """Answer `roots/list`."""
        self._inputs.set(ROOTS_LIST, fn)
        self._connection.rebuild_meta()

    @property
    def capabilities(self) -> dict[str, Any]:
        """The `clientCapabilities` sent on every request: those the registered handlers
        declare, over the `capabilities=` given at construction (which is how an application
        that answers input requests itself, with `auto_fulfill=False`, declares what it can),
        and the tasks extension unless `ClientOptions.tasks.enabled` is False."""
        return self._connection.capabilities

    @property
    def era(self) -> Era | None:
        """`"modern"` (2026-07-28) or `"legacy"` (an `initialize`-based session): what this
        client speaks with its server; None until the first exchange settled it."""
        return self._connection.era

    @property
    def protocol_version(self) -> str:
        """The protocol version new requests are sent with: on a legacy session, the one the
        server chose in `initialize`. On a modern server, a -32022 answer naming a version
        this client speaks switches it, for later requests (a flow already running keeps the
        version it started with, which its `requestState` is bound to)."""
        return self._connection.protocol_version

    @protocol_version.setter
    def protocol_version(self, version: str) -> None:
        self._connection.protocol_version = version

    # --- plain requests ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-request bound, applied below
    ) -> dict[str, Any]:
        """Send one request with the required `_meta` and return its raw result.

        Raises `McpError` for an error response, and `McpError(REQUEST_TIMEOUT)` when no answer
        comes within `timeout` (default `ClientOptions.request_timeout`; 0 = no limit), after
        cancelling the request.
        """
        result, _ = await self._connection.request(
            method, params, meta, timeout, self._connection.modern_version
        )
        return result

    async def ping(self) -> None:
        """Check that the server answers: `ping` on a legacy session; a 2026-07-28 server has
        no ping, so there it is `server/discover`, which every such server answers."""
        connection = self._connection
        if connection.era is None:
            await connection.settle()
        await self.request("ping" if connection.era == LEGACY else DISCOVER)

    async def _typed(self, method: str, model: type[R], params: Mapping[str, Any] | None) -> R:
        return parse_result(method, model, await self.request(method, params))

    async def discover(self) -> DiscoverResult:
        """`server/discover`: the server's versions, capabilities and identity."""
        return await self._typed("server/discover", DiscoverResult, None)

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        """One page of tools (`next_cursor` gives the next). Their `outputSchema`s are kept,
        to check and read the results of later calls (`CallToolResult.data`)."""
        page = await self._typed("tools/list", ListToolsResult, _cursor(cursor))
        for tool in page.tools:
            if tool.output_schema is not None:
                self._tool_outputs[tool.name] = known_output(tool.output_schema)
            else:
                self._tool_outputs.pop(tool.name, None)
        return page

    async def list_prompts(self, cursor: str | None = None) -> ListPromptsResult:
        """One page of prompts."""
        return await self._typed("prompts/list", ListPromptsResult, _cursor(cursor))

    async def list_resources(self, cursor: str | None = None) -> ListResourcesResult:
        """One page of resources."""
        return await self._typed("resources/list", ListResourcesResult, _cursor(cursor))

    async def list_resource_templates(
        self, cursor: str | None = None
    ) -> ListResourceTemplatesResult:
        """One page of resource templates."""
        return await self._typed(
            "resources/templates/list", ListResourceTemplatesResult, _cursor(cursor)
        )

    # --- every page ----------------------------------------------------------------------------

    async def iter_tools(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> AsyncIterator[Tool]:
        """Every tool, following `nextCursor` page by page as the iteration goes; at most
        `max_pages` pages, and a cursor the server repeats ends it (both `McpError`)."""
        async for page in pages("tools/list", self.list_tools, max_pages):
            for tool in page.tools:
                yield tool

    async def all_tools(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Tool]:
        """Every tool, all pages (see `iter_tools`)."""
        return [tool async for tool in self.iter_tools(max_pages=max_pages)]

    async def iter_prompts(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> AsyncIterator[Prompt]:
        """Every prompt, page by page (see `iter_tools`)."""
        async for page in pages("prompts/list", self.list_prompts, max_pages):
            for prompt in page.prompts:
                yield prompt

    async def all_prompts(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Prompt]:
        """Every prompt, all pages."""
        return [prompt async for prompt in self.iter_prompts(max_pages=max_pages)]

    async def iter_resources(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> AsyncIterator[Resource]:
        """Every resource, page by page (see `iter_tools`)."""
        async for page in pages("resources/list", self.list_resources, max_pages):
            for resource in page.resources:
                yield resource

    async def all_resources(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Resource]:
        """Every resource, all pages."""
        return [resource async for resource in self.iter_resources(max_pages=max_pages)]

    async def iter_resource_templates(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> AsyncIterator[ResourceTemplate]:
        """Every resource template, page by page (see `iter_tools`)."""
        method = "resources/templates/list"
        async for page in pages(method, self.list_resource_templates, max_pages):
            for template in page.resource_templates:
                yield template

    async def all_resource_templates(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> list[ResourceTemplate]:
        """Every resource template, all pages."""
        return [t async for t in self.iter_resource_templates(max_pages=max_pages)]

    async def complete(
        self,
        ref: Mapping[str, Any],
        argument: Mapping[str, str],
        context_arguments: Mapping[str, str] | None = None,
    ) -> CompleteResult:
        """`completion/complete` for a prompt or resource-template argument."""
        params: dict[str, Any] = {"ref": dict(ref), "argument": dict(argument)}
        if context_arguments:
            params["context"] = {"arguments": dict(context_arguments)}
        return await self._typed("completion/complete", CompleteResult, params)

    # --- MRTR calls ----------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        progress_callback: ProgressCallback | None = None,
        meta: Mapping[str, Any] | None = None,
        output_type: Any = None,
        on_task_status: TaskStatusCallback | None = None,
    ) -> CallToolResult:
        """Call a tool and return its final result, answering the server's questions.

        The result's structured content is checked against the tool's `outputSchema` when an
        earlier `tools/list` gave one, and `result.data` is it as a value: validated into
        `output_type` (a pydantic model, dataclass, `list[int]`...) when given, unwrapped from
        `{"result": ...}` when the schema wraps a non-object. Content that does not fit is
        `McpError(PROTOCOL_VIOLATION)`.

        When the server runs the call as a task, the task is driven to its end here (polled,
        its input requests answered by the same handlers, cancelled if this call is) and
        `on_task_status` is told of each new status; see `mrtr.client.tasks`.
        """
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        result = await self._flows.run(
            "tools/call",
            name,
            params,
            CallToolResult,
            input_responses,
            request_state,
            progress_callback,
            meta,
            self._task_driver(on_task_status) if self.options.tasks.enabled else None,
        )
        known = self._tool_outputs.get(name) if self._tool_outputs else None
        if known is not None or output_type is not None:
            read_output(name, result, known, output_type)
        return result

    async def call_tool_as_task(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        output_type: Any = None,
    ) -> TaskHandle:
        """Call a tool and return a `TaskHandle` as soon as the server answered: the task it
        runs the call as (persist `handle.task_id` to resume with `task(...)`), or, when it
        answered at once, a handle whose `result()` is that answer and `task_id` None.

        Questions the server asks before it creates the task (MRTR rounds) are answered here;
        those of the task itself when `result()` waits for it.
        """
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        channel = self._task_channel()
        try:
            result = await self._flows.run(
                "tools/call",
                name,
                params,
                CallToolResult,
                None,
                None,
                None,
                meta,
                keep_task if self.options.tasks.enabled else None,
            )
        except TaskCreated as created:
            seed = read_task("tools/call", created.created, seed=True)
            return TaskHandle(channel, seed.task_id, seed=seed, tool=name, output_type=output_type)
        return TaskHandle(
            channel, None, result=self._finish_tool(name, result, output_type), tool=name
        )

    def task(self, task_id: str, *, tool: str | None = None, output_type: Any = None) -> TaskHandle:
        """A handle on a task created earlier, by this client or another one (even in another
        process): nothing is sent until it is used. `tool` (the tool's name) lets `result()`
        check the output against that tool's `outputSchema` from `tools/list`."""
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"task_id must be a non-empty string, not {task_id!r}")
        return TaskHandle(self._task_channel(), task_id, tool=tool, output_type=output_type)

    def _task_driver(self, on_status: TaskStatusCallback | None) -> TaskHook:
        if on_status is None and self._plain_task_hook is not None:
            return self._plain_task_hook  # the same for every call: made once

        async def hook(created: dict[str, Any]) -> dict[str, Any]:
            return await drive(self._task_channel(), created, on_status)

        if on_status is None:
            self._plain_task_hook = hook
        return hook

    def _task_channel(self) -> TaskChannel:
        return TaskChannel(
            request=self.request,
            resolve=self._flows.resolve,
            streams=lambda: self._listening.open_stream if self.era == MODERN else None,
            options=self.options.tasks,
            input_config=self.options.input_required,
            finish=self._finish_tool,
            notify=self._inbound.on_notification,
        )

    def _finish_tool(
        self, name: str | None, result: CallToolResult | dict[str, Any], output_type: Any
    ) -> CallToolResult:
        """A tool's final result, parsed, with `data` set up to read its output."""
        if isinstance(result, dict):
            result = parse_result("tools/call", CallToolResult, result)
        known = self._tool_outputs.get(name) if name is not None else None
        if name is not None and (known is not None or output_type is not None):
            read_output(name, result, known, output_type)
        return result

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> GetPromptResult:
        """Get a prompt, answering the server's questions."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return await self._flows.run(
            "prompts/get",
            name,
            params,
            GetPromptResult,
            input_responses,
            request_state,
            None,
            meta,
        )

    async def read_resource(
        self,
        uri: str,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ReadResourceResult:
        """Read a resource, answering the server's questions."""
        return await self._flows.run(
            "resources/read",
            uri,
            {"uri": uri},
            ReadResourceResult,
            input_responses,
            request_state,
            None,
            meta,
        )

    # --- subscriptions -------------------------------------------------------------------------

    def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources: bool = False,
        resource_uris: Sequence[str] = (),
        timeout: float = 30.0,  # bounds the wait for the acknowledgement only
    ) -> AbstractAsyncContextManager[Subscription]:
        """Open a `subscriptions/listen` stream for the changes named; iterate it for `Change`s.

        The block starts once the server acknowledged (within `timeout` seconds), so a change
        made after that is never missed; `subscription.honoured` says what the server agreed
        to send. Leaving the block cancels the stream. On a legacy server the changes come
        from its session-wide notifications (those its capabilities announce) and
        `resources/subscribe`; leaving the block unsubscribes.
        """
        return self._listening.listen(
            tools=tools,
            prompts=prompts,
            resources=resources,
            resource_uris=resource_uris,
            timeout=timeout,
        )


def _cursor(cursor: str | None) -> dict[str, Any] | None:
    return {"cursor": cursor} if cursor is not None else None
