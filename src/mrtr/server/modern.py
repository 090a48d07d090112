"""`ModernMethods`: serving 2026-07-28 requests, each on its own, with no session.

Rules:

1. `dispatch` refuses `initialize` (there is no handshake), then checks the request's `_meta`
   before its method, so that a malformed request or one of a version not served says so
   whatever it asks for (`protocol/era.py`), then runs the method's handler. It returns the
   handler's awaitable without awaiting it: a layer costs a call, not a coroutine.
2. The era's own result fields are added here: the lists' and `server/discover`'s caching
   hints (`ttlMs`, `cacheScope`), a read resource's (private, not to be cached), and on every
   result, by `respond`, `resultType` and the server's info in `_meta`. Middleware sees a
   result before `respond` (middleware rule 4).
3. Questions a handler asks become MRTR rounds (`rounds.py`, replay as the asker).
4. Extensions add methods with `add` (the tasks extension: `tasks/get`, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.era import check_meta, initialize_refused
from ..protocol.errors import method_not_found
from ..protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from ..protocol.tasks import TASK_IDS_FILTER, missing_tasks_capability
from ..protocol.versions import SUPPORTED_PROTOCOL_VERSIONS
from .budgets import holder
from .inbound import Inbound
from .subscriptions import (
    PROMPTS_LIST_CHANGED,
    RESOURCE_SUBSCRIPTIONS,
    RESOURCES_LIST_CHANGED,
    TOOLS_LIST_CHANGED,
    SubscriptionHub,
)

if TYPE_CHECKING:
    from .context import RequestContext
    from .invocation import Invocation
    from .options import ServerOptions
    from .registry import Registry

#: A method's handler: the request in, its result out (or an `McpError` raised).
Handler = Callable[["Inbound"], Awaitable[dict[str, Any]]]
#: An extension's handler, which takes the request's context.
ContextHandler = Callable[["RequestContext"], Awaitable[dict[str, Any]]]

_SUPPORTED = list(SUPPORTED_PROTOCOL_VERSIONS)
_SERVER_INFO = meta_keys.SERVER_INFO


class ModernMethods:
    """The 2026-07-28 face of one server (see the module rules)."""

    def __init__(
        self,
        registry: Registry,
        invocation: Invocation,
        subscriptions: SubscriptionHub,
        options: ServerOptions,
        capabilities: Callable[[], dict[str, Any]],
        server_info: dict[str, Any],
        instructions: str | None,
    ) -> None:
        self.registry = registry
        self.invocation = invocation
        self.subscriptions = subscriptions
        self.options = options
        self.capabilities = capabilities
        self.server_info = server_info
        self.instructions = instructions
        self.methods: dict[str, Handler] = {
            "server/discover": self._discover,
            "tools/list": self._list,
            "tools/call": invocation.call_tool,
            "prompts/list": self._list,
            "prompts/get": invocation.get_prompt,
            "resources/list": self._list,
            "resources/templates/list": self._list,
            "resources/read": self._read_resource,
            "completion/complete": invocation.complete,
            "subscriptions/listen": self._listen,
        }

    def add(
        self, methods: Mapping[str, Callable[[RequestContext], Awaitable[dict[str, Any]]]]
    ) -> None:
        """Serve `methods` too; their handlers take the request's context (rule 4)."""
        for name, handler in methods.items():
            self.methods[name] = _with_context(handler)

    def dispatch(self, request: Inbound) -> Awaitable[dict[str, Any]]:
        """The result of `request` (rule 1): an awaitable, or an `McpError` raised."""
        method = request.method
        params = request.params
        if method == "initialize":
            raise initialize_refused(params)
        check_meta(params)  # raises the precise error; the common _meta passes at once
        handler = self.methods.get(method)
        if handler is None:
            raise method_not_found(method)
        return handler(request)

    def dispatch_context(self, ctx: RequestContext) -> Awaitable[dict[str, Any]]:
        """`dispatch` of the request a middleware passed on as `ctx` (`call_next`'s end)."""
        return self.dispatch(Inbound.of(ctx))

    def respond(self, request_id: jsonrpc.RequestId, result: dict[str, Any]) -> dict[str, Any]:
        """The response carrying `result`, with the fields every modern result has (rule 2)."""
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        if meta is None:
            # A fresh dict per result: a caller that adds to one result's _meta changes no other.
            result["_meta"] = {_SERVER_INFO: self.server_info}
        elif isinstance(meta, dict):
            meta.setdefault(_SERVER_INFO, self.server_info)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    # --- the era's own methods and fields ----------------------------------------------------

    async def _discover(self, request: Inbound) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": _SUPPORTED,
            "capabilities": self.capabilities(),
            "ttlMs": self.options.list_ttl_ms,
            "cacheScope": "public",
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    async def _list(self, request: Inbound) -> dict[str, Any]:
        result = self.registry.page(request.method, request.params)
        result["ttlMs"] = self.options.list_ttl_ms
        result["cacheScope"] = self.options.list_cache_scope
        return result

    async def _read_resource(self, request: Inbound) -> dict[str, Any]:
        result = await self.invocation.read_resource(request)
        if result.get("resultType") != "input_required":
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
        return result

    async def _listen(self, request: Inbound) -> dict[str, Any]:
        caps = self.capabilities()
        supported = {TOOLS_LIST_CHANGED} if "tools" in caps else set()
        if "prompts" in caps:
            supported.add(PROMPTS_LIST_CHANGED)
        if "resources" in caps:
            supported.update((RESOURCES_LIST_CHANGED, RESOURCE_SUBSCRIPTIONS))
        tasks: frozenset[str] = frozenset()
        params = request.params
        notifications = params.get("notifications")
        task_ids = notifications.get(TASK_IDS_FILTER) if isinstance(notifications, dict) else None
        if task_ids:
            ctx = request.context()
            extensions = ctx.client_capabilities.get("extensions")
            manager = self.invocation.tasks
            if manager is None or not isinstance(extensions, dict):
                raise missing_tasks_capability("subscriptions/listen with taskIds")
            if TASKS_EXTENSION not in extensions:
                raise missing_tasks_capability("subscriptions/listen with taskIds")
            if isinstance(task_ids, list):
                tasks = await manager.visible_ids(ctx, task_ids)
        resolver = self.options.principal
        principal = resolver(request.transport_info) if resolver is not None else None
        return await self.subscriptions.listen(
            request.request_id,
            params,
            request.notify,
            frozenset(supported),
            tasks,
            holder(principal, request.transport_info),
        )


def _with_context(handler: ContextHandler) -> Handler:
    def run(request: Inbound) -> Awaitable[dict[str, Any]]:
        return handler(request.context())

    return run


__all__ = ["Handler", "ModernMethods"]
