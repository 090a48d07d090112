"""`Server`: the registry of tools, prompts and resources, and the dispatcher.

The dispatcher takes a decoded JSON-RPC message and returns the response; it knows nothing of
sockets, HTTP or stdio (transports move bytes and call `handle_message`).

It serves both protocol eras from one endpoint. A request carrying a modern `_meta` protocol
version is served statelessly (2026-07-28); a transport that keeps legacy sessions passes the
request's `LegacySession`, and a request of such a session without that `_meta` is served
with the semantics its `initialize` negotiated (`legacy.py`). The modern path pays one `is
None` test for this.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import inspect
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Sequence
from typing import Any, TypeVar, overload

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
    invalid_params,
    method_not_found,
    unsupported_protocol_version,
)
from ..protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from ..protocol.tasks import TASK_IDS_FILTER, TaskSupport, missing_tasks_capability
from ..protocol.types import Icon, Implementation, ToolAnnotations
from ..protocol.versions import SUPPORTED_PROTOCOL_VERSIONS
from ..settings import http_options, server_options
from .budgets import holder
from .context import NotifySink, RequestContext
from .legacy import LegacyMethods
from .lifespan import Lifespan, LifespanRunner
from .middleware import CallNext, Middleware, check_middleware, compose, restore_round
from .options import ServerOptions
from .primitives import PromptEntry, ResourceEntry, ToolEntry, tool_error
from .replay import Failure, run_unasking, stops_for_input
from .rounds import RoundKeeper
from .session import LegacySession
from .signature import FunctionSignature, ValidationFailure
from .subscriptions import (
    PROMPTS_LIST_CHANGED,
    RESOURCE_SUBSCRIPTIONS,
    RESOURCES_LIST_CHANGED,
    TOOLS_LIST_CHANGED,
    SubscriptionHub,
)
from .tasks import TaskManager, TaskSettings
from .tool_error import ToolError, failure_text
from .worker_threads import WorkerPool, call_on_loop

logger = logging.getLogger("mrtr.server")

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=Middleware)
Handler = Callable[[RequestContext], Awaitable[dict[str, Any]]]
_SUPPORTED = list(SUPPORTED_PROTOCOL_VERSIONS)
_PROTOCOL_VERSION = meta_keys.PROTOCOL_VERSION
_CLIENT_CAPABILITIES = meta_keys.CLIENT_CAPABILITIES
_LOG_LEVEL = meta_keys.LOG_LEVEL
_PROGRESS_TOKEN = meta_keys.PROGRESS_TOKEN
_Entry = ToolEntry | PromptEntry | ResourceEntry


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: Any) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, _, number = raw.partition(":")
        offset = int(number)
        if tag != "o" or offset < 0:
            raise ValueError
        return offset
    except (ValueError, TypeError, UnicodeDecodeError):
        raise invalid_params(
            "Invalid cursor: pass back a nextCursor from an earlier list result, unchanged"
        ) from None


class Server:
    """An MCP server: register handlers with the decorators, then serve it on a transport."""

    def __init__(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        title: str | None = None,
        instructions: str | None = None,
        website_url: str | None = None,
        icons: Sequence[Icon] | None = None,
        options: ServerOptions | None = None,
        lifespan: Lifespan | None = None,
        middleware: Sequence[Middleware] = (),
    ) -> None:
        """`lifespan`: a function of the server giving an async context manager, entered once
        per process while the server is served (see `lifespan.py`); what it yields is
        `ctx.state`. `middleware`: run around every request, first outermost (see
        `middleware.py`; `@server.middleware` adds more)."""
        self.name = name
        self.version = version
        # Without explicit options, the deployment's `MRTR_*` settings (see `mrtr.settings`).
        self.options = options if options is not None else server_options()
        self.instructions = instructions or self.options.instructions
        self.info = Implementation(
            name=name,
            version=version,
            title=title,
            website_url=website_url,
            icons=list(icons) if icons else None,
        )
        self._server_info = self.info.to_wire()
        self._tools: dict[str, ToolEntry] = {}
        self._prompts: dict[str, PromptEntry] = {}
        self._resources: dict[str, ResourceEntry] = {}
        self._templates: list[ResourceEntry] = []
        self._completion: Callable[..., Any] | None = None
        self._completion_takes_ctx = False
        self._rounds = RoundKeeper(name, self.options)
        self._methods: dict[str, Handler] = {
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "prompts/list": self._list_prompts,
            "prompts/get": self._get_prompt,
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._read_resource,
            "completion/complete": self._complete,
            "subscriptions/listen": self._listen,
        }
        # The built-in tools/call, which `handle_request` may run without a context (a tool
        # that takes none); compared by identity, so a replacement handler is always called.
        self._tools_call: Handler = self._methods["tools/call"]
        self._legacy = LegacyMethods(self, self._methods)
        # Changes are shared with the other instances on a channel named for the server.
        self._subscriptions = SubscriptionHub(
            self.options.broker, f"mrtr/changes/{name}", budgets=self.options.budgets
        )
        self._lifespan = LifespanRunner(self, lifespan)
        self._middleware: list[Middleware] = []
        # The composed middleware, or None: a server without any takes its direct path.
        self._chain: CallNext | None = None
        for layer in middleware:
            self.middleware(layer)

    # --- registration ----------------------------------------------------------------------

    # Set on first use rather than in `__init__`: most servers never disable a tag, and the
    # pool of worker threads is made when the first sync handler runs.
    _disabled: frozenset[str] = frozenset()
    _pool: WorkerPool | None = None
    # The tasks extension, made when the first tool registered with `task=` is.
    _tasks: TaskManager | None = None

    @overload
    def tool(self, name: F, /) -> F: ...
    @overload
    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        structured_output: bool | None = None,
        run_in_thread: bool = True,
        timeout: float | None = None,
        tags: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
        task: TaskSupport | TaskSettings = "never",
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        name: str | F | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        structured_output: bool | None = None,
        run_in_thread: bool = True,
        timeout: float | None = None,
        tags: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
        task: TaskSupport | TaskSettings = "never",
    ) -> F | Callable[[F], F]:
        """Register a function as a tool; its signature gives the input schema.

        Used bare (`@server.tool`) or called (`@server.tool("name", ...)`). A sync function
        runs in a worker thread unless `run_in_thread=False`; `timeout` bounds one call (in
        seconds; past it the call is a tool error); `tags` are for `enable`/`disable`;
        `scopes` are the OAuth scopes a caller's token needs to call it (`ServerOptions.auth`);
        `task` lets its calls become tasks: "optional", "required" or a `TaskSettings` (the
        tasks extension; default "never").
        """

        def register(fn: F) -> F:
            entry = ToolEntry(
                fn,
                name=name if isinstance(name, str) else None,
                title=title,
                description=description,
                annotations=annotations,
                icons=icons,
                meta=meta,
                input_schema=input_schema,
                output_schema=output_schema,
                structured_output=structured_output,
                run_in_thread=run_in_thread,
                timeout=timeout,
                tags=tags,
                scopes=scopes,
                task=task,
            )
            self._check_duplicate("tool", entry.name, entry.name in self._tools)
            self._tools[entry.name] = entry
            if entry.task is not None and self._tasks is None:
                self._tasks = TaskManager(self)
                self._methods.update(self._tasks.methods())
            self._list_changed(TOOLS_LIST_CHANGED)
            return fn

        return register(name) if callable(name) else register

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a tool, as `@server.tool(name, **settings)` would."""
        self.tool(name, **settings)(fn)

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The OAuth scopes a token needs to call tool `name` (none for an unknown tool)."""
        entry = self._tools.get(name)
        return frozenset() if entry is None else entry.scopes

    def remove_tool(self, name: str) -> None:
        """Remove the tool `name` (a `KeyError` if there is none) and announce the change."""
        if self._tools.pop(name, None) is None:
            raise KeyError(f"no tool named {name!r}")
        self._list_changed(TOOLS_LIST_CHANGED)

    @overload
    def prompt(self, name: F, /) -> F: ...
    @overload
    def prompt(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> Callable[[F], F]: ...

    def prompt(
        self,
        name: str | F | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> F | Callable[[F], F]:
        """Register a function as a prompt; its parameters are the prompt's arguments.

        Used bare (`@server.prompt`) or called; `run_in_thread` and `tags` as for `tool`.
        """

        def register(fn: F) -> F:
            entry = PromptEntry(
                fn,
                name=name if isinstance(name, str) else None,
                title=title,
                description=description,
                icons=icons,
                meta=meta,
                run_in_thread=run_in_thread,
                tags=tags,
            )
            self._check_duplicate("prompt", entry.name, entry.name in self._prompts)
            self._prompts[entry.name] = entry
            self._list_changed(PROMPTS_LIST_CHANGED)
            return fn

        return register(name) if callable(name) else register

    def add_prompt(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a prompt, as `@server.prompt(name, **settings)` would."""
        self.prompt(name, **settings)(fn)

    def remove_prompt(self, name: str) -> None:
        """Remove the prompt `name` (a `KeyError` if there is none) and announce the change."""
        if self._prompts.pop(name, None) is None:
            raise KeyError(f"no prompt named {name!r}")
        self._list_changed(PROMPTS_LIST_CHANGED)

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        size: int | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a function as the static resource at `uri`."""
        if callable(uri):
            raise TypeError("@server.resource needs the resource's URI: @server.resource(uri)")

        def register(fn: F) -> F:
            entry = ResourceEntry(
                fn,
                uri,
                name=name,
                title=title,
                description=description,
                mime_type=mime_type,
                size=size,
                icons=icons,
                meta=meta,
                run_in_thread=run_in_thread,
                tags=tags,
            )
            self._check_duplicate("resource", uri, uri in self._resources)
            self._resources[uri] = entry
            self._list_changed(RESOURCES_LIST_CHANGED)
            return fn

        return register

    def resource_template(
        self,
        uri_template: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> Callable[[F], F]:
        """Register a function for every URI matching `uri_template` (its variables are
        the function's parameters)."""
        if callable(uri_template):
            raise TypeError(
                "@server.resource_template needs the URI template: "
                "@server.resource_template('scheme://{variable}')"
            )

        def register(fn: F) -> F:
            entry = ResourceEntry(
                fn,
                uri_template,
                template=True,
                name=name,
                title=title,
                description=description,
                mime_type=mime_type,
                icons=icons,
                meta=meta,
                run_in_thread=run_in_thread,
                tags=tags,
            )
            at = next((i for i, t in enumerate(self._templates) if t.uri == uri_template), None)
            self._check_duplicate("resource template", uri_template, at is not None)
            if at is None:
                self._templates.append(entry)
            else:
                self._templates[at] = entry  # replaced where it was: matching order holds
            self._list_changed(RESOURCES_LIST_CHANGED)
            return fn

        return register

    def add_resource(self, fn: Callable[..., Any], uri: str, **settings: Any) -> None:
        """Register `fn` as the resource at `uri`, as `@server.resource(uri, ...)` would."""
        self.resource(uri, **settings)(fn)

    def add_resource_template(
        self, fn: Callable[..., Any], uri_template: str, **settings: Any
    ) -> None:
        """Register `fn` for `uri_template`, as `@server.resource_template(...)` would."""
        self.resource_template(uri_template, **settings)(fn)

    def remove_resource(self, uri: str) -> None:
        """Remove the resource at `uri`, or the template spelled `uri` (a `KeyError` if
        there is neither), and announce the change."""
        if self._resources.pop(uri, None) is None:
            kept = [t for t in self._templates if t.uri != uri]
            if len(kept) == len(self._templates):
                raise KeyError(f"no resource or resource template {uri!r}")
            self._templates = kept
        self._list_changed(RESOURCES_LIST_CHANGED)

    def disable(self, *tags: str) -> None:
        """Hide every tool, prompt, resource and template carrying one of `tags`.

        Hidden ones leave the lists and are unknown to calls until `enable`d again;
        listening clients are told the lists changed.
        """
        self._disabled = self._disabled | frozenset(tags)
        self._tags_changed(tags)

    def enable(self, *tags: str) -> None:
        """Show again what `disable(*tags)` hid (unless another disabled tag still hides it)."""
        self._disabled = self._disabled - frozenset(tags)
        self._tags_changed(tags)

    def _tags_changed(self, tags: Collection[str]) -> None:
        changed = frozenset(tags)
        kinds: list[tuple[Collection[_Entry], str]] = [
            (self._tools.values(), TOOLS_LIST_CHANGED),
            (self._prompts.values(), PROMPTS_LIST_CHANGED),
            ([*self._resources.values(), *self._templates], RESOURCES_LIST_CHANGED),
        ]
        for entries, notification in kinds:
            if any(not e.tags.isdisjoint(changed) for e in entries):
                self._list_changed(notification)

    def _list_changed(self, kind: str) -> None:
        # Registration may happen in a sync tool's worker thread: publishing is for the loop.
        call_on_loop(self._subscriptions.list_changed, kind)

    def _check_duplicate(self, kind: str, key: str, taken: bool) -> None:
        """Apply `ServerOptions.on_duplicate` to a registration under a name already taken."""
        if not taken:
            return
        policy = self.options.on_duplicate
        if policy == "error":
            raise ValueError(
                f"{kind} {key!r} is already registered: remove it first, give the new one "
                "another name, or set ServerOptions(on_duplicate='replace')"
            )
        if policy == "warn":
            logger.warning(
                "%s %r registered again: the new one replaces the first "
                "(ServerOptions.on_duplicate='error' refuses this, 'replace' stays silent)",
                kind,
                key,
            )

    def _workers(self) -> WorkerPool:
        """The pool that runs this server's sync handlers (`ServerOptions.sync_workers`)."""
        pool = self._pool
        if pool is None:
            pool = self._pool = WorkerPool(self.options.sync_workers, self.name)
        return pool

    def completion(self) -> Callable[[F], F]:
        """Register the argument-completion handler.

        It is called as `fn(ref, argument, context_arguments)` (plus a `RequestContext` if it
        takes one) and returns a list of strings or a `Completion`/dict.
        """

        def register(fn: F) -> F:
            self._completion = fn
            self._completion_takes_ctx = "ctx" in inspect.signature(fn).parameters
            return fn

        return register

    # --- lifespan and middleware ------------------------------------------------------------

    @property
    def lifespan_state(self) -> Any:
        """What the lifespan yielded (None without a lifespan); a `LifespanError` while it is
        not running. Handlers read it as `ctx.state` or take it as a `State[T]` parameter."""
        return self._lifespan.state

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Server]:
        """Run the lifespan while inside: `async with server.running(): ...`.

        Every transport enters it; nested and concurrent entries share one run of the lifespan
        (the last exit runs it out). Use it when driving `handle_message` yourself, or from
        the lifespan of an application that mounts `asgi_app()` (a mounted app is not sent
        the ASGI `lifespan` events by every framework).
        """
        await self._lifespan.enter()
        try:
            await self._subscriptions.start()
            try:
                yield self
            finally:
                await self._subscriptions.stop()
        finally:
            await self._lifespan.exit()

    def middleware(self, fn: M) -> M:
        """Register a middleware, `async def mw(ctx, call_next) -> dict`, run around every
        request; the first registered is the outermost (see `middleware.py`)."""
        check_middleware(fn)
        self._middleware.append(fn)
        self._chain = compose(self._middleware, self._dispatch)
        return fn

    async def _dispatch(self, ctx: RequestContext) -> dict[str, Any]:
        """The innermost step under middleware: what `handle_request` does without any."""
        session = ctx.session
        if session is not None:
            return await self._legacy.handle(
                ctx.request_id,
                ctx.method,
                ctx.params,
                ctx._notify,
                ctx.transport_info,
                session,
                ctx,
            )
        method = ctx.method
        params = ctx.params
        if method == "initialize":
            raise _initialize_refused(params)
        self._check_meta(params)
        handler = self._methods.get(method)
        if handler is None:
            raise method_not_found(method)
        return await handler(ctx)

    # --- entry points for transports -----------------------------------------------------

    async def handle_message(
        self,
        message: Any,
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
    ) -> dict[str, Any] | None:
        """Handle any decoded JSON-RPC message; returns the response, or None for a notification.

        `session` is the legacy session the message came on, when the transport keeps one
        (see `handle_request`); its notifications (`notifications/initialized`, ...) are acted
        on here. Cancellation is carried out by the transport, which owns the task running the
        request, and so is a response: the transport hands it to `session.deliver`.
        """
        try:
            kind = jsonrpc.classify(message)
        except McpError as exc:
            return jsonrpc.error_response(jsonrpc.readable_id(message), exc)
        if kind == "request":
            return await self.handle_request(message, notify, transport_info, session)
        if kind == "notification" and session is not None:
            self._legacy.notification(message["method"], session)
        return None

    async def handle_request(
        self,
        message: dict[str, Any],
        notify: NotifySink | None = None,
        transport_info: Any = None,
        session: LegacySession | None = None,
    ) -> dict[str, Any]:
        """Handle one validated request and return its response.

        With a `session` (made by a transport that keeps legacy sessions) a request without a
        modern `_meta` protocol version is served with legacy semantics: `initialize`
        negotiates the session, and the rest follows what it negotiated (`legacy.py`). Without
        one, or with the legacy shim off, `initialize` is -32022 naming the modern versions.

        Never raises, whatever a handler does (its errors, exception groups, `BaseException`s
        are all answered), except for the cancellation of the task running it: a cancelled
        request gets no response.
        """
        request_id = message["id"]
        method = message["method"]
        try:
            params = message.get("params")
            if params is None:
                params = {}
            chain = self._chain
            if session is not None and self.serves_legacy and not _modern(params):
                if chain is None:
                    result = await self._legacy.handle(
                        request_id, method, params, notify, transport_info, session
                    )
                else:
                    ctx = RequestContext(
                        self, request_id, method, params, notify, transport_info, session=session
                    )
                    result = _checked(await chain(ctx))
                return {"jsonrpc": "2.0", "id": request_id, "result": result}
            if chain is not None:
                ctx = RequestContext(self, request_id, method, params, notify, transport_info)
                await restore_round(self._rounds, ctx)
                result = _checked(await chain(ctx))
            elif method == "initialize":
                raise _initialize_refused(params)
            else:
                # The request's _meta is checked before its method, so that a request that is
                # malformed or of an unsupported version says so whatever it asks for. The
                # common _meta (a served version, capabilities, nothing optional) passes here
                # at once; anything else gets the full check and its precise error.
                meta = params.get("_meta")
                if (
                    type(meta) is not dict
                    or type(version := meta.get(_PROTOCOL_VERSION)) is not str
                    or version not in SUPPORTED_PROTOCOL_VERSIONS
                    or type(meta.get(_CLIENT_CAPABILITIES)) is not dict
                    or _LOG_LEVEL in meta
                    or _PROGRESS_TOKEN in meta
                ):
                    self._check_meta(params)
                handler = self._methods.get(method)
                if handler is None:
                    raise method_not_found(method)
                if handler is self._tools_call:
                    result = await self._call_tool_direct(
                        request_id, params, notify, transport_info
                    )
                else:
                    ctx = RequestContext(self, request_id, method, params, notify, transport_info)
                    result = await handler(ctx)
        except McpError as exc:
            return jsonrpc.error_response(request_id, exc)
        except Exception:
            logger.exception("internal error handling %s (id %r)", method, request_id)
            return jsonrpc.error_response(
                request_id, McpError(INTERNAL_ERROR, f"Internal error while handling {method}")
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and _being_cancelled():
                raise
            if not stops_for_input(exc):
                # A KeyboardInterrupt-like exception, or a cancellation the handler raised
                # itself: answered like any internal error, and the server goes on.
                logger.error("internal error handling %s (id %r)", method, request_id, exc_info=exc)
                return jsonrpc.error_response(
                    request_id, McpError(INTERNAL_ERROR, f"Internal error while handling {method}")
                )
            # Only tools/call, prompts/get and resources/read may answer input_required.
            logger.error("a %s handler asked the client for input, which it cannot do", method)
            return jsonrpc.error_response(
                request_id,
                McpError(
                    INTERNAL_ERROR,
                    f"Internal error while handling {method}: its handler asked for client "
                    "input, which only tools/call, prompts/get and resources/read may do",
                ),
            )
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        if meta is None:
            # A fresh dict per result: a caller that adds to one result's _meta changes no other.
            result["_meta"] = {meta_keys.SERVER_INFO: self._server_info}
        elif isinstance(meta, dict):
            meta.setdefault(meta_keys.SERVER_INFO, self._server_info)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _check_meta(self, params: dict[str, Any]) -> None:
        # A request without the required fields is malformed: -32602 (basic/index.md, and what
        # the conformance suite checks). -32022 is for a version that is given but not served.
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            raise invalid_params(
                f'"_meta" is required, with {meta_keys.PROTOCOL_VERSION!r} (one of '
                f"{', '.join(_SUPPORTED)}) and {meta_keys.CLIENT_CAPABILITIES!r}",
                {"supported": _SUPPORTED},
            )
        version = meta.get(meta_keys.PROTOCOL_VERSION)
        if not isinstance(version, str):
            raise invalid_params(
                f"_meta[{meta_keys.PROTOCOL_VERSION!r}] is required and must be a string: one "
                f"of {', '.join(_SUPPORTED)}",
                {"supported": _SUPPORTED},
            )
        if version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise unsupported_protocol_version(version, _SUPPORTED)
        if not isinstance(meta.get(meta_keys.CLIENT_CAPABILITIES), dict):
            raise invalid_params(
                f"_meta[{meta_keys.CLIENT_CAPABILITIES!r}] is required and must be an object"
            )
        level = meta.get(meta_keys.LOG_LEVEL)
        if level is not None and (
            not isinstance(level, str) or level not in meta_keys.LOG_LEVEL_RANK
        ):
            raise invalid_params(
                f"_meta[{meta_keys.LOG_LEVEL!r}] must be one of {', '.join(meta_keys.LOG_LEVELS)}"
            )
        token = meta.get(meta_keys.PROGRESS_TOKEN)
        if token is not None and not jsonrpc.is_valid_id(token):
            raise invalid_params(
                f"_meta[{meta_keys.PROGRESS_TOKEN!r}] must be a string or an integer"
            )

    # --- legacy sessions -------------------------------------------------------------------

    @property
    def seals_with_random_key(self) -> bool:
        """Whether request states are sealed with a random per-process key (none configured):
        fine for one process, while any other instance refuses its tokens."""
        ring = self._rounds.key_ring
        return ring is not None and ring.random

    @property
    def serves_legacy(self) -> bool:
        """Whether `initialize`-based clients are served (`InputRequiredConfig.legacy_shim`)."""
        return self.options.input_required.legacy_shim

    def attach_session(self, session: LegacySession) -> None:
        """Register a negotiated legacy session: list changes and resource updates reach it."""
        self._subscriptions.attach(session)

    def detach_session(self, session: LegacySession) -> None:
        """Forget a legacy session (it ended)."""
        self._subscriptions.detach(session)

    def has_resource(self, uri: str) -> bool:
        """Whether `uri` names a registered resource or matches a resource template."""
        entry = self._resources.get(uri)
        if entry is not None:
            return not self._hidden(entry)
        return any(
            t.template is not None and not self._hidden(t) and t.template.match(uri)
            for t in self._templates
        )

    # --- discovery and lists ---------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        """The capabilities `server/discover` advertises."""
        caps: dict[str, Any] = {"logging": {}}
        # Changes reach clients on `subscriptions/listen` streams, on every transport.
        if self._tools:
            caps["tools"] = {"listChanged": True}
        if self._prompts:
            caps["prompts"] = {"listChanged": True}
        if self._resources or self._templates:
            caps["resources"] = {"listChanged": True, "subscribe": True}
        if self._completion is not None:
            caps["completions"] = {}
        if self._tasks is not None:
            caps["extensions"] = {TASKS_EXTENSION: {}}
        return caps

    # --- change notifications (subscriptions/listen) ---------------------------------------

    def notify_tools_changed(self) -> None:
        """Tell listening clients that the tool list changed (registering a tool does this)."""
        self._list_changed(TOOLS_LIST_CHANGED)

    def notify_prompts_changed(self) -> None:
        """Tell listening clients that the prompt list changed."""
        self._list_changed(PROMPTS_LIST_CHANGED)

    def notify_resources_changed(self) -> None:
        """Tell listening clients that the resource list changed."""
        self._list_changed(RESOURCES_LIST_CHANGED)

    def notify_resource_updated(self, uri: str) -> None:
        """Tell clients subscribed to `uri` that the resource changed."""
        call_on_loop(self._subscriptions.resource_updated, uri)

    def close_subscriptions(self) -> None:
        """End every open `subscriptions/listen` stream gracefully (e.g. at shutdown)."""
        self._subscriptions.close()

    def tool_definition(self, name: str) -> dict[str, Any] | None:
        """The wire definition of tool `name`, as `tools/list` shows it, or None."""
        entry = self._tools.get(name)
        return entry.wire if entry is not None and not self._hidden(entry) else None

    async def _listen(self, ctx: RequestContext) -> dict[str, Any]:
        caps = self.capabilities()
        supported = {TOOLS_LIST_CHANGED} if "tools" in caps else set()
        if "prompts" in caps:
            supported.add(PROMPTS_LIST_CHANGED)
        if "resources" in caps:
            supported.update((RESOURCES_LIST_CHANGED, RESOURCE_SUBSCRIPTIONS))
        tasks: frozenset[str] = frozenset()
        notifications = ctx.params.get("notifications")
        task_ids = notifications.get(TASK_IDS_FILTER) if isinstance(notifications, dict) else None
        if task_ids:
            extensions = ctx.client_capabilities.get("extensions")
            if self._tasks is None or not isinstance(extensions, dict):
                raise missing_tasks_capability("subscriptions/listen with taskIds")
            if TASKS_EXTENSION not in extensions:
                raise missing_tasks_capability("subscriptions/listen with taskIds")
            if isinstance(task_ids, list):
                tasks = await self._tasks.visible_ids(ctx, task_ids)
        resolver = self.options.principal
        principal = resolver(ctx.transport_info) if resolver is not None else None
        return await self._subscriptions.listen(
            ctx.request_id,
            ctx.params,
            ctx._notify,
            frozenset(supported),
            tasks,
            holder(principal, ctx.transport_info),
        )

    async def _discover(self, ctx: RequestContext) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": _SUPPORTED,
            "capabilities": self.capabilities(),
            "ttlMs": self.options.list_ttl_ms,
            "cacheScope": "public",
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _page(
        self, params: dict[str, Any], key: str, items: list[dict[str, Any]]
    ) -> dict[str, Any]:
        cursor = params.get("cursor")
        start = 0 if cursor is None else _decode_cursor(cursor)
        size = self.options.page_size
        result: dict[str, Any] = {
            key: items[start : start + size],
            "ttlMs": self.options.list_ttl_ms,
            "cacheScope": self.options.list_cache_scope,
        }
        if start + size < len(items):
            result["nextCursor"] = _encode_cursor(start + size)
        return result

    async def _list_tools(self, ctx: RequestContext) -> dict[str, Any]:
        return self._page(ctx.params, "tools", self._shown(self._tools.values()))

    async def _list_prompts(self, ctx: RequestContext) -> dict[str, Any]:
        return self._page(ctx.params, "prompts", self._shown(self._prompts.values()))

    async def _list_resources(self, ctx: RequestContext) -> dict[str, Any]:
        return self._page(ctx.params, "resources", self._shown(self._resources.values()))

    async def _list_templates(self, ctx: RequestContext) -> dict[str, Any]:
        return self._page(ctx.params, "resourceTemplates", self._shown(self._templates))

    def _shown(self, entries: Collection[_Entry]) -> list[dict[str, Any]]:
        """The wire listings of `entries`, without those a disabled tag hides."""
        disabled = self._disabled
        if not disabled:
            return [e.wire for e in entries]
        return [e.wire for e in entries if e.tags.isdisjoint(disabled)]

    def _hidden(self, entry: _Entry) -> bool:
        """Whether a disabled tag hides `entry` (it is then unknown to clients)."""
        return bool(entry.tags) and not entry.tags.isdisjoint(self._disabled)

    # --- the three MRTR methods ------------------------------------------------------------

    async def _call_tool_direct(
        self,
        request_id: jsonrpc.RequestId,
        params: dict[str, Any],
        notify: NotifySink | None,
        transport_info: Any,
        session: LegacySession | None = None,
    ) -> dict[str, Any]:
        """tools/call without middleware, of either era (`session`: the legacy session it came
        on). A tool that takes no context cannot ask, so its first round runs without a context
        or the replay engine, and gives what `_call_tool` would; any other call goes there."""
        name: Any = params.get("name")
        entry = self._tools.get(name) if type(name) is str else None
        arguments = params.get("arguments")
        if (
            entry is None
            or entry.tags  # may be hidden: `_call_tool` says so
            or (arguments is not None and type(arguments) is not dict)
        ):
            ctx = RequestContext(
                self, request_id, "tools/call", params, notify, transport_info, session=session
            )
            return await self._call_tool(ctx)  # and its errors
        signature = entry.signature
        if (
            signature.context_param is not None
            or signature.state_params
            or entry.task is not None
            or entry.timeout is not None
            or "requestState" in params
            or "inputResponses" in params
        ):
            ctx = RequestContext(
                self, request_id, "tools/call", params, notify, transport_info, session=session
            )
            return await self._call_found_tool(ctx, name, entry, arguments)
        try:
            kwargs = signature.bind(arguments)
        except ValidationFailure as exc:
            return tool_error(f"Invalid arguments for tool {name!r}: {exc}")
        if arguments:
            self._rounds.check_arguments("tools/call", name, arguments)
        pool = None if signature.is_async or not entry.run_in_thread else self._workers()
        start = functools.partial(signature.start, kwargs, None, pool)
        outcome = await self._rounds.run(
            run_unasking(start), None, "tools/call", live=session is not None
        )
        if type(outcome) is Failure and not outcome.is_error:
            # KeyboardInterrupt and the like: never a tool's result (as `Round._failed`).
            logger.error("tools/call %r: the handler raised", name, exc_info=outcome.exc)
            raise McpError(INTERNAL_ERROR, "Internal error while handling tools/call")
        render = functools.partial(self._render_tool, entry, name)
        result = render(outcome)
        if type(result) is dict:
            return result
        # An `InputRequiredResult` made by hand: sealed (or asked live) as any round's would be.
        ctx = RequestContext(
            self, request_id, "tools/call", params, notify, transport_info, session=session
        )
        return await self._rounds.round(ctx, name, arguments).settle(
            result, lambda c: signature.start(kwargs, c, pool), render
        )

    def _render_tool(self, entry: ToolEntry, name: str, value: Any) -> Any:
        """A tool's result from its value, or from the `Failure` its run ended with (the engine
        sorts out protocol errors, which stay errors, from the tool's own)."""
        if type(value) is Failure:
            prefix = f"Error executing tool {name!r}: "
            mask = self.options.mask_errors
            return tool_error(failure_text(value.exc, f"tool {name!r}", mask, prefix))
        return entry.result(value)

    async def _call_tool(self, ctx: RequestContext) -> dict[str, Any]:
        params = ctx.params
        name = params.get("name")
        if not isinstance(name, str):
            raise invalid_params('tools/call needs "name", the name of a tool (a string)')
        entry = self._tools.get(name)
        if entry is None or (entry.tags and self._disabled and self._hidden(entry)):
            raise invalid_params(f"Unknown tool: {name!r}")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise invalid_params(f'tools/call {name!r}: "arguments" must be an object')
        return await self._call_found_tool(ctx, name, entry, arguments)

    async def _call_found_tool(
        self, ctx: RequestContext, name: str, entry: ToolEntry, arguments: dict[str, Any] | None
    ) -> dict[str, Any]:
        """tools/call of tool `entry`, found under `name`, with its `arguments` object."""
        try:
            kwargs = entry.signature.bind(arguments)
        except ValidationFailure as exc:
            return tool_error(f"Invalid arguments for tool {name!r}: {exc}")
        signature = entry.signature
        pool = None if signature.is_async or not entry.run_in_thread else self._workers()
        timeout = entry.timeout
        invoke: Callable[[RequestContext], Awaitable[Any]]
        if timeout is None:

            def invoke(c: RequestContext) -> Awaitable[Any]:
                return signature.start(kwargs, c, pool)

        else:
            invoke = self._timed(signature, kwargs, pool, name, timeout)

        render = functools.partial(self._render_tool, entry, name)
        round_ = self._rounds.round(ctx, name, arguments)
        if entry.task is not None and self._tasks is not None:
            return await self._tasks.call(ctx, entry.task, name, round_, invoke, render)
        return await round_.complete(invoke, render)

    @staticmethod
    def _timed(
        signature: FunctionSignature,
        kwargs: dict[str, Any],
        pool: WorkerPool | None,
        name: str,
        timeout: float,
    ) -> Callable[[RequestContext], Awaitable[Any]]:
        """A tool's call bounded by its own `timeout` (past it, a tool error)."""

        async def invoke(c: RequestContext) -> Any:
            scope = asyncio.timeout(timeout)
            try:
                async with scope:
                    return await signature.call(dict(kwargs), c, pool)
            except TimeoutError:
                if not scope.expired():
                    raise  # the tool's own TimeoutError: a failure like any other
                raise ToolError(
                    f"Tool {name!r} did not finish within its timeout ({timeout:g} s)"
                ) from None

        return invoke

    async def _get_prompt(self, ctx: RequestContext) -> dict[str, Any]:
        params = ctx.params
        name = params.get("name")
        if not isinstance(name, str):
            raise invalid_params('prompts/get needs "name", the name of a prompt (a string)')
        entry = self._prompts.get(name)
        if entry is None or (entry.tags and self._disabled and self._hidden(entry)):
            raise invalid_params(f"Unknown prompt: {name!r}")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise invalid_params(f'prompts/get {name!r}: "arguments" must be an object')
        try:
            kwargs = entry.signature.bind(arguments)
        except ValidationFailure as exc:
            raise invalid_params(f"Invalid arguments for prompt {name!r}: {exc}") from None
        signature = entry.signature
        pool = None if signature.is_async or not entry.run_in_thread else self._workers()

        async def invoke(c: RequestContext) -> Any:
            return await signature.call(dict(kwargs), c, pool)

        round_ = self._rounds.round(ctx, name, arguments)
        return await round_.complete(invoke, entry.result, what=f"prompt {name!r}")

    async def _read_resource(self, ctx: RequestContext) -> dict[str, Any]:
        uri = ctx.params.get("uri")
        if not isinstance(uri, str):
            raise invalid_params('resources/read needs "uri", the URI of a resource (a string)')
        entry = self._resources.get(uri)
        if entry is not None and self._disabled and self._hidden(entry):
            entry = None
        variables: dict[str, str] = {}
        if entry is None:
            for template in self._templates:
                assert template.template is not None
                if self._disabled and self._hidden(template):
                    continue
                found = template.template.match(uri)
                if found is not None:
                    entry, variables = template, found
                    break
        if entry is None:
            raise invalid_params(self._not_found(uri), {"uri": uri})
        try:
            kwargs = entry.signature.bind(variables)
        except ValidationFailure as exc:
            raise invalid_params(f"Invalid URI {uri!r} for template {entry.uri!r}: {exc}") from None
        resolved = entry
        signature = entry.signature
        pool = None if signature.is_async or not entry.run_in_thread else self._workers()

        async def invoke(c: RequestContext) -> Any:
            return await signature.call(dict(kwargs), c, pool)

        def render(value: Any) -> Any:
            return resolved.result(uri, value)

        round_ = self._rounds.round(ctx, uri, None)
        result = await round_.complete(invoke, render, what=f"resource {uri!r}")
        if result.get("resultType") != "input_required":
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
        return result

    def _not_found(self, uri: str) -> str:
        """The message for a URI no resource serves, saying which value a template refused."""
        for template in self._templates:
            assert template.template is not None
            if self._disabled and self._hidden(template):
                continue
            why = template.template.refusal(uri)
            if why is not None:
                return (
                    f"Resource not found: {uri} (refused by template {template.uri!r}: {why}, "
                    "which could leave its place)"
                )
        return f"Resource not found: {uri}"

    # --- completion ------------------------------------------------------------------------

    async def _complete(self, ctx: RequestContext) -> dict[str, Any]:
        params = ctx.params
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise invalid_params('completion/complete needs "ref" and "argument" objects')
        # isinstance first: an unhashable name or uri must be -32602, not a lookup TypeError.
        if ref.get("type") == "ref/prompt":
            name = ref.get("name")
            if not isinstance(name, str) or name not in self._prompts:
                raise invalid_params(f"Unknown prompt: {name!r}")
        elif ref.get("type") == "ref/resource":
            uri = ref.get("uri")
            if not isinstance(uri, str) or (
                uri not in self._resources and all(t.uri != uri for t in self._templates)
            ):
                raise invalid_params(f"Unknown resource or template: {uri!r}")
        else:
            raise invalid_params('"ref.type" must be "ref/prompt" or "ref/resource"')
        values: Any = []
        if self._completion is not None:
            context = params.get("context") or {}
            call_args: list[Any] = [ref, argument, context.get("arguments") or {}]
            if self._completion_takes_ctx:
                values = self._completion(*call_args, ctx=ctx)
            else:
                values = self._completion(*call_args)
            if inspect.isawaitable(values):
                values = await values
        if isinstance(values, dict):
            completion = values
        elif hasattr(values, "to_wire"):
            completion = values.to_wire()
        else:
            items = [str(v) for v in values]
            completion = {"values": items[:100], "total": len(items), "hasMore": len(items) > 100}
        return {"completion": completion}

    # --- serving -----------------------------------------------------------------------------

    def asgi_app(self, **kwargs: Any) -> Any:
        """A plain ASGI app serving this server over Streamable HTTP at `/mcp` (and the
        HTTP+SSE transport of 2024-11-05 at `/sse`; `sse_path=None` turns it off)."""
        from ..transport.http_server import StreamableHTTPApp

        return StreamableHTTPApp(self, **kwargs)

    def run(self, transport: str = "stdio", **kwargs: Any) -> None:
        """Serve until stopped: `transport="stdio"` or `"http"`.

        Over HTTP the keyword arguments go to `serve_http`: `host=`, `port=`, and the limits
        that bound every connection (`header_timeout=`, `body_timeout=`, `keep_alive=`,
        `max_connections=`, `max_body_size=`, `max_inflight_body_bytes=`...). Over stdio they go
        to `serve_stdio` (`max_message_size=`, `eof_grace=`).

        Runs on uvloop when it is installed (a default dependency on CPython): it halves per-message
        latency.
        """
        if transport == "stdio":
            from ..transport.stdio_server import serve_stdio

            _run_loop(_until_terminated(serve_stdio(self, **kwargs)))
        elif transport == "http":
            from ..transport.http_server import serve_http

            _run_loop(serve_http(self, **{**http_options(), **kwargs}))
        else:
            raise ValueError(f"unknown transport {transport!r}: use 'stdio' or 'http'")


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        # Not run in here: every exception raised under the loop would be chained to this one.
        run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    else:
        run = uvloop.run
    run(main)


async def _until_terminated(main: Coroutine[Any, Any, None]) -> None:
    """Run `main`, ending it on SIGTERM as on end of input: cancelled, so that its cleanup
    (requests ended, the lifespan run out) still runs, and the process exits normally."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
        await main
        return
    try:
        await main
    except asyncio.CancelledError:
        if not terminated:
            raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _checked(result: Any) -> dict[str, Any]:
    """A middleware's result, which must be the result dict `call_next` gave (or one like it)."""
    if not isinstance(result, dict):
        raise TypeError(f"a middleware returned {type(result).__name__}, not the result dict")
    return result


def _modern(params: dict[str, Any]) -> bool:
    """Whether a request's `_meta` names a modern protocol version (served statelessly)."""
    meta = params.get("_meta")
    return (
        isinstance(meta, dict)
        and meta.get(meta_keys.PROTOCOL_VERSION) in SUPPORTED_PROTOCOL_VERSIONS
    )


def _initialize_refused(params: dict[str, Any]) -> McpError:
    """The error for an `initialize` outside a legacy session."""
    message_text = (
        "initialize is not part of MCP 2026-07-28, which has no handshake; this "
        f"endpoint supports protocol versions {', '.join(_SUPPORTED)}"
    )
    if _modern(params):
        # A modern request naming a removed method: unknown, like `ping`.
        return McpError(METHOD_NOT_FOUND, message_text, {"supported": _SUPPORTED})
    # A legacy-era client this endpoint cannot serve: it has no way forward, so name what this
    # server speaks (the HTTP transport answers this with 400).
    return McpError(
        UNSUPPORTED_PROTOCOL_VERSION,
        message_text,
        {"supported": _SUPPORTED, "requested": _requested(params)},
    )


def _requested(params: dict[str, Any]) -> Any:
    """The version an `initialize` asked for, as it gave it (None if it gave none)."""
    return params.get("protocolVersion")


def _being_cancelled() -> bool:
    """Whether the running task was asked to stop (rather than a handler raising the error)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


__all__ = ["Server"]
