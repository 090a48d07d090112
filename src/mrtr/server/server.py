"""`Server`: the public face of an MCP server: decorators, options, `run()`/`asgi_app()`.

It wires the parts and delegates to them; each part is its own module, importing only those
below it:

* `registry.py`: what is registered, and what a client may see of it (no eras);
* `invocation.py`: the one path from a request to a registered function and back;
* `modern.py` and `legacy.py`: each era's dispatcher, rendering its own results;
* `entry.py`: where a message enters, its era is decided once, and its answer leaves.
* `mount.py`: another server's tools, prompts and resources offered under a prefix.

Transports move bytes and call `handle_message`/`handle_request`; nothing here knows of
sockets, HTTP or stdio.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from ..protocol.types import Icon, Implementation
from ..settings import http_options, request_state_key, request_state_verify_keys, server_options
from ._engine.rounds import RoundKeeper
from .context import NotifySink, context_factory
from .entry import Entry
from .invocation import Invocation
from .legacy import LegacyMethods
from .lifespan import LifespanRunner
from .live import LIVE
from .middleware import Middleware, check_middleware
from .modern import ModernMethods
from .mount import Mountable, ServerMountable, mount
from .options import ServerOptions
from .primitives import (
    PromptEntry,
    PromptFields,
    ResourceEntry,
    ResourceFields,
    TemplateFields,
    ToolEntry,
    ToolFields,
)
from .registry import Registry
from .serving import run_loop, until_terminated
from .session import LegacySession
from .subscriptions import (
    PROMPTS_LIST_CHANGED,
    RESOURCES_LIST_CHANGED,
    TOOLS_LIST_CHANGED,
    SubscriptionHub,
)
from .tasks import TaskManager
from .worker_threads import call_on_loop

if TYPE_CHECKING:
    from ..client.client import Client
    from ..protocol.era import Era
    from ..proxy.proxy import ProxyBackend

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=Middleware)
#: `Server(lifespan=...)`: a function of the server giving an async context manager.
Lifespan = Callable[["Server"], contextlib.AbstractAsyncContextManager[Any]]
Response = Coroutine[Any, Any, dict[str, Any]]


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
        """`info`: what clients are told the server is. `options`: by default from `MRTR_*`.
        `lifespan`: a function of the server giving an async context manager, entered once
        per process while served; what it yields is `ctx.state` (see `lifespan.py`).
        `middleware`: run around every request, first outermost (see `middleware.py`)."""
        self.name = name  # the name clients are told
        self.version = version  # the version clients are told
        # Without explicit options, the deployment's `MRTR_*` settings (see `mrtr.settings`).
        options = self.options = options if options is not None else server_options()
        self.instructions = instructions or options.instructions  # how to use the server
        self.info = Implementation(
            name=name, version=version, title=title, website_url=website_url,
            icons=list(icons) if icons else None,
        )  # fmt: skip
        # Changes are shared with the other instances on a channel named for the server.
        self._subscriptions = SubscriptionHub(
            options.broker, f"mrtr/changes/{name}", budgets=options.budgets
        )
        changed = functools.partial(call_on_loop, self._subscriptions.list_changed)
        self._registry = registry = Registry(options, changed)  # registered in a thread too
        registry.on_updated = functools.partial(call_on_loop, self._subscriptions.resource_updated)
        self._rounds = RoundKeeper(name, options, request_state_key(), request_state_verify_keys())
        self._invocation = invocation = Invocation(name, registry, self._rounds, options)
        caps, info = self.capabilities, self.info
        self._modern = ModernMethods(
            registry, invocation, self._subscriptions, options, caps, info.to_wire(),
            self.instructions,
        )  # fmt: skip
        legacy = LegacyMethods(registry, invocation, options, caps, info, self.instructions)
        contexts = context_factory(self), context_factory(self, LIVE)
        entry = self._entry = Entry(self._modern, legacy, self._rounds, options, *contexts)
        methods = {"handle_message": entry.handle_message, "handle_request": entry.handle_request}
        _shortcut(self, tool_definition=registry.tool_definition, **methods)
        bound = functools.partial(lifespan, self) if lifespan is not None else None
        self._lifespan = LifespanRunner(name, bound)
        self._middleware: list[Middleware] = []
        for layer in middleware:
            self.middleware(layer)

    # --- registration ----------------------------------------------------------------------

    @overload
    def tool(self, name: F, /) -> F: ...
    @overload
    def tool(self, name: str | None = None, **fields: Unpack[ToolFields]) -> Callable[[F], F]: ...
    def tool(
        self, name: str | F | None = None, **fields: Unpack[ToolFields]
    ) -> F | Callable[[F], F]:
        """Register a function as a tool, bare (`@server.tool`) or called with a name and the
        settings of `ToolFields`; its signature gives the input schema."""

        def register(fn: F) -> F:
            entry = ToolEntry(fn, name=name if isinstance(name, str) else None, **fields)
            self._registry.add_tool(entry)
            if entry.task is not None and self._invocation.tasks is None:
                tasks = TaskManager(self.name, self.options, self._subscriptions)
                self._invocation.tasks = tasks
                self._modern.add(tasks.methods())
            return fn

        return register(name) if callable(name) else register

    @overload
    def prompt(self, name: F, /) -> F: ...
    @overload
    def prompt(
        self, name: str | None = None, **fields: Unpack[PromptFields]
    ) -> Callable[[F], F]: ...
    def prompt(
        self, name: str | F | None = None, **fields: Unpack[PromptFields]
    ) -> F | Callable[[F], F]:
        """Register a function as a prompt, bare or called with a name and the settings of
        `PromptFields`; its parameters are the prompt's arguments."""

        def register(fn: F) -> F:
            name_ = name if isinstance(name, str) else None
            self._registry.add_prompt(PromptEntry(fn, name=name_, **fields))
            return fn

        return register(name) if callable(name) else register

    def resource(self, uri: str, **fields: Unpack[ResourceFields]) -> Callable[[F], F]:
        """Register the resource at `uri`, a template if it has `{...}` (`ResourceFields`)."""
        _check_uri(uri, "resource", "uri")

        def register(fn: F) -> F:
            self._registry.add_resource(ResourceEntry(fn, uri, **fields))
            return fn

        return register

    def resource_template(
        self, uri_template: str, **fields: Unpack[TemplateFields]
    ) -> Callable[[F], F]:
        """Register a function for every URI matching `uri_template` (its variables are
        the function's parameters; settings: `TemplateFields`)."""
        _check_uri(uri_template, "resource_template", "'scheme://{variable}'")

        def register(fn: F) -> F:
            entry = ResourceEntry(fn, uri_template, template=True, **fields)
            self._registry.add_resource(entry)
            return fn

        return register

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a tool, as `@server.tool(name, **settings)` would."""
        self.tool(name, **settings)(fn)

    def add_prompt(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a prompt, as `@server.prompt(name, **settings)` would."""
        self.prompt(name, **settings)(fn)

    def add_resource(self, fn: Callable[..., Any], uri: str, **settings: Any) -> None:
        """Register `fn` as the resource at `uri`, as `@server.resource(uri, ...)` would."""
        self.resource(uri, **settings)(fn)

    def add_resource_template(
        self, fn: Callable[..., Any], uri_template: str, **settings: Any
    ) -> None:
        """Register `fn` for `uri_template`, as `@server.resource_template(...)` would."""
        self.resource_template(uri_template, **settings)(fn)

    def remove_tool(self, name: str) -> None:
        """Remove the tool `name` (a `KeyError` if there is none) and announce the change."""
        self._registry.remove_tool(name)

    def remove_prompt(self, name: str) -> None:
        """Remove the prompt `name` (a `KeyError` if there is none) and announce the change."""
        self._registry.remove_prompt(name)

    def remove_resource(self, uri: str) -> None:
        """Remove the resource or template `uri` (a `KeyError` if none) and announce it."""
        self._registry.remove_resource(uri)

    def disable(self, *tags: str) -> None:
        """Hide every tool, prompt, resource and template tagged one of `tags` (until `enable`)."""
        self._registry.disable(tags)

    def enable(self, *tags: str) -> None:
        """Show again what `disable(*tags)` hid (unless another disabled tag still hides it)."""
        self._registry.enable(tags)

    def mount(self, prefix: str, other: Server | Client | ProxyBackend | Mountable) -> None:
        """Offer `other`'s tools, prompts and resources under `prefix` (see `server/mount.py`)."""
        mount(self._registry, self._lifespan, prefix, _mountable(other))

    def completion(self) -> Callable[[F], F]:
        """Register the argument-completion handler: `fn(ref, argument, context_arguments)`
        (plus `ctx=` if it takes one) gives a list of strings or a `Completion`/dict."""

        def register(fn: F) -> F:
            self._registry.set_completion(fn)
            return fn

        return register

    def tool_scopes(self, name: str) -> frozenset[str]:
        """The OAuth scopes a token needs to call tool `name` (none for an unknown tool)."""
        return self._registry.tool_scopes(name)

    def tool_definition(self, name: str) -> dict[str, Any] | None:
        """The wire definition of tool `name`, as `tools/list` shows it, or None."""
        return self._registry.tool_definition(name)

    def has_resource(self, uri: str) -> bool:
        """Whether `uri` names a registered resource or matches a resource template."""
        return self._registry.has_resource(uri)

    def capabilities(self) -> dict[str, Any]:
        """The capabilities `server/discover` advertises."""
        return self._registry.capabilities(tasks=self._invocation.tasks is not None)

    # --- lifespan, middleware and entry ------------------------------------------------------

    def identify(self, info: Implementation, instructions: str | None) -> None:
        """Tell clients from now on that it is `info`, with `instructions` (`name` stays)."""
        _identify(self, self._entry, info, instructions)

    @property
    def lifespan_state(self) -> Any:
        """What the lifespan yielded (None without a lifespan); a `LifespanError` while it is
        not running. Handlers read it as `ctx.state` or take it as a `State[T]` parameter."""
        return self._lifespan.state

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Server]:
        """Run the lifespan while inside: `async with server.running(): ...`. Every transport
        enters it; nested and concurrent entries share one run (the last exit runs it out)."""
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
        """Register `async def mw(ctx, call_next) -> dict`, run around every request."""
        check_middleware(fn)
        self._middleware.append(fn)
        self._entry.build(self._middleware)
        return fn

    def handle_message(
        self, message: Any, notify: NotifySink | None = None, transport_info: Any = None,
        session: LegacySession | None = None, era: Era | None = None,
    ) -> Coroutine[Any, Any, dict[str, Any] | None]:  # fmt: skip
        """Handle any decoded JSON-RPC message: the response, or None for a notification."""
        return self._entry.handle_message(message, notify, transport_info, session, era)

    def handle_request(
        self, message: dict[str, Any], notify: NotifySink | None = None,
        transport_info: Any = None, session: LegacySession | None = None,
        era: Era | None = None,
    ) -> Response:  # fmt: skip
        """Handle one validated request and return its response; never raises but for the
        cancellation of the task running it. `era`: the request's, as the transport decoding
        it classified it (`protocol/era.classify`; `entry.py` says how it is dispatched)."""
        return self._entry.handle_request(message, notify, transport_info, session, era)

    # --- sessions, keys and change notifications ---------------------------------------------

    @property
    def seals_with_random_key(self) -> bool:
        """Whether request states are sealed with a random per-process key (none configured):
        fine for one process, while any other instance refuses its tokens."""
        return (ring := self._rounds.key_ring) is not None and ring.random

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

    def notify_tools_changed(self) -> None:
        """Tell listening clients that the tool list changed (registering a tool does this)."""
        self._registry.on_change(TOOLS_LIST_CHANGED)  # a server mounting this one hears it

    def notify_prompts_changed(self) -> None:
        """Tell listening clients that the prompt list changed."""
        self._registry.on_change(PROMPTS_LIST_CHANGED)  # a server mounting this one hears it

    def notify_resources_changed(self) -> None:
        """Tell listening clients that the resource list changed."""
        self._registry.on_change(RESOURCES_LIST_CHANGED)  # a server mounting this one hears it

    def notify_resource_updated(self, uri: str) -> None:
        """Tell clients subscribed to `uri` that the resource changed."""
        self._registry.on_updated(uri)  # a server mounting this one hears it too

    def close_subscriptions(self) -> None:
        """End every open `subscriptions/listen` stream gracefully (e.g. at shutdown)."""
        self._subscriptions.close()

    # --- serving -----------------------------------------------------------------------------

    def asgi_app(self, **kwargs: Any) -> Any:
        """An ASGI app serving this server over Streamable HTTP at `/mcp` (HTTP+SSE at `/sse`)."""
        from ..transport.http_app import StreamableHTTPApp

        return StreamableHTTPApp(self, **kwargs)

    def run(self, transport: str = "stdio", **kwargs: Any) -> None:
        """Serve until stopped over `transport`: "stdio" (keyword arguments to `serve_stdio`) or
        "http" (to `serve_http`: `host=`, `port=`, limits). Runs on uvloop when installed."""
        if transport == "stdio":
            from ..transport.stdio_server import serve_stdio

            run_loop(until_terminated(serve_stdio(self, **kwargs)))
        elif transport == "http":
            from ..transport.http_serve import serve_http

            run_loop(serve_http(self, **{**http_options(), **kwargs}))
        else:
            raise ValueError(f"unknown transport {transport!r}: use 'stdio' or 'http'")


def _shortcut(server: Server, **methods: Callable[..., Any]) -> None:
    """Give `server` its parts' own bound methods for those a transport calls per request, so a
    request costs no call through the facade (the methods of `Server` document them); a
    subclass's override is kept."""
    for name, method in methods.items():
        if getattr(type(server), name) is getattr(Server, name):
            setattr(server, name, method)


def _mountable(other: Server | Client | ProxyBackend | Mountable) -> Mountable:
    """`other` as `mount` takes it: a `Server` through its registry, a `Client` or a proxy's
    backend through the proxy's held calls (`mrtr.proxy.mounted`), a `Mountable` as it is."""
    if isinstance(other, Server):  # the same class: its registry is this class's own
        return ServerMountable(other, other._registry)  # noqa: SLF001
    from ..proxy.mounted import as_mountable  # deferred: the proxy package builds on `Server`

    return as_mountable(other)


def _identify(server: Server, entry: Entry, info: Implementation, instructions: str | None) -> None:
    """What `Server.identify` does: the attributes, and what each era's answers tell. Its
    `name` stays: it names the server's shared channels and keys, which must not move."""
    server.info, server.instructions = info, instructions
    entry.modern.server_info, entry.modern.instructions = info.to_wire(), instructions
    entry.legacy.info, entry.legacy.instructions = info, instructions


def _check_uri(uri: object, decorator: str, example: str) -> None:
    """Refuse a decorator used bare, which hands it the function where its URI belongs."""
    if callable(uri):
        raise TypeError(f"@server.{decorator} needs its URI: @server.{decorator}({example})")


__all__ = ["Lifespan", "Server"]
