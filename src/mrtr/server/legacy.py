"""Serving legacy (`initialize`-based) sessions: MCP 2025-11-25, 2025-06-18, 2025-03-26 and
2024-11-05, from the same registered tools, prompts, resources and handlers.

A request of a negotiated session that does not carry a modern `_meta` protocol version is
served here (`protocol/era.py` decides, at the entry). Rules:

1. `initialize` negotiates as the legacy lifecycle says: the client's version if this server
   speaks it, else the newest legacy version; it fills the session (version, capabilities,
   client info) and answers `InitializeResult`. A second `initialize` on a negotiated session
   is -32600. Before `initialize` only `ping` is served; anything else is -32600 saying to
   send `initialize` first.
2. The lists, `tools/call`, `prompts/get`, `resources/read` and `completion/complete` run the
   same registry and invocation pipeline as a modern request; results are rendered here, with
   the fields the negotiated revision has: none of what only 2026-07-28 adds (`resultType`,
   `ttlMs`, `cacheScope`, the serverInfo `_meta`: the modern dispatcher's), and without those
   it predates (`icons` before 2025-11-25; `title`, `outputSchema`, `structuredContent` before
   2025-06-18; tool `annotations` and the `completions` capability before 2025-03-26).
3. Questions a handler asks are sent to the client live (`live.py`); a manual-style handler
   is driven live too (`rounds.py`).
4. `logging/setLevel` sets the session's level, `resources/subscribe`/`unsubscribe` its
   subscriptions (for `notifications/resources/updated`); `ping` answers `{}`.
5. Client notifications: `notifications/initialized` marks the session ready (list changes
   reach it only then); `notifications/roots/list_changed` is accepted (roots are asked fresh
   each time, so there is nothing to forget). Cancellation and responses are the transport's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import meta as meta_keys
from ..protocol.era import check_progress_token
from ..protocol.errors import (
    INVALID_REQUEST,
    McpError,
    invalid_params,
    method_not_found,
)
from ..protocol.types import Implementation
from ..protocol.versions import LATEST_LEGACY_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSIONS
from .budgets import BUDGET_EXCEEDED, holder
from .inbound import Inbound

if TYPE_CHECKING:
    from .context import RequestContext
    from .invocation import Invocation
    from .options import ServerOptions
    from .registry import Registry
    from .session import LegacySession

logger = logging.getLogger("mrtr.server")

Handler = Callable[["Inbound"], Awaitable[dict[str, Any]]]

#: Resources one session may follow at once by default (a template can match endlessly many
#: URIs, and what a session keeps must stay bounded): `Budgets.subscriptions` sets it.
MAX_SUBSCRIPTIONS = 1024
_LISTS = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}


def _left_out(version: str) -> frozenset[str]:
    """Fields of listings, results and serverInfo that `version` does not have yet."""
    fields: set[str] = set()
    if version < "2025-11-25":
        fields.add("icons")
    if version < "2025-06-18":
        fields.update(("title", "outputSchema", "structuredContent"))
    if version < "2025-03-26":
        fields.add("annotations")
    return frozenset(fields)


_LEFT_OUT = {version: _left_out(version) for version in LEGACY_PROTOCOL_VERSIONS}
#: serverInfo's own later fields (`Implementation` gained them in 2025-11-25).
_INFO_LEFT_OUT = {
    version: left_out | ({"websiteUrl", "description"} if version < "2025-11-25" else set())
    for version, left_out in _LEFT_OUT.items()
}


def _without(item: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    # A copy only when something goes: listings are shared, rendered once at registration.
    if fields.isdisjoint(item):
        return item
    return {key: value for key, value in item.items() if key not in fields}


class LegacyMethods:
    """The legacy-era face of one server (see the module rules)."""

    def __init__(
        self,
        registry: Registry,
        invocation: Invocation,
        options: ServerOptions,
        capabilities: Callable[[], dict[str, Any]],
        info: Implementation,
        instructions: str | None,
    ) -> None:
        self.registry = registry
        self.options = options
        self.server_capabilities = capabilities
        self.info = info
        self.instructions = instructions
        self._methods: dict[str, Handler] = {
            "tools/list": self._list,
            "tools/call": invocation.call_tool,
            "prompts/list": self._list,
            "prompts/get": invocation.get_prompt,
            "resources/list": self._list,
            "resources/templates/list": self._list,
            "resources/read": invocation.read_resource,
            "completion/complete": invocation.complete,
        }
        self._own: dict[str, Callable[[dict[str, Any], LegacySession], dict[str, Any]]] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
        }

    async def dispatch(self, request: Inbound) -> dict[str, Any]:
        """Serve one request of its session; its result (errors are raised as `McpError`)."""
        method = request.method
        params = request.params
        session = request.session
        assert session is not None  # the entry sends only a session's requests here
        if method == "initialize":
            return await self._initialize(params, session, request.transport_info)
        version = session.protocol_version
        if version is None:
            if method == "ping":
                return {}
            raise McpError(
                INVALID_REQUEST,
                f"Invalid Request: {method} before initialize; send initialize first (this "
                f"server speaks {', '.join(LEGACY_PROTOCOL_VERSIONS)} that way)",
            )
        session.touch()
        own = self._own.get(method)
        if own is not None:
            return own(params, session)
        handler = self._methods.get(method)
        if handler is None:
            raise method_not_found(method)
        meta = params.get("_meta")
        if meta is not None:
            if not isinstance(meta, dict):
                raise invalid_params('"_meta" must be an object')
            check_progress_token(meta)
        return self._render(method, await handler(request), version)

    def dispatch_context(self, ctx: RequestContext) -> Awaitable[dict[str, Any]]:
        """`dispatch` of the request a middleware passed on as `ctx` (`call_next`'s end)."""
        return self.dispatch(Inbound.of(ctx))

    def notification(self, method: str, session: LegacySession) -> None:
        """Act on a client notification of `session` (rule 5)."""
        if method == "notifications/initialized":
            if session.negotiated:
                session.initialized = True
            else:
                logger.debug("notifications/initialized before initialize: ignored")

    def capabilities(self, version: str) -> dict[str, Any]:
        """The server's capabilities as `initialize` states them for `version`."""
        caps = self.server_capabilities()
        if version < "2025-03-26":
            caps.pop("completions", None)
        return caps

    # --- lifecycle and utilities -----------------------------------------------------------

    async def _initialize(
        self, params: dict[str, Any], session: LegacySession, transport_info: Any
    ) -> dict[str, Any]:
        if session.negotiated:
            raise McpError(
                INVALID_REQUEST,
                "Invalid Request: this session is already initialized; initialize is sent once "
                "per session (start a new session to negotiate again)",
            )
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise invalid_params('initialize needs "protocolVersion", a string')
        capabilities = params.get("capabilities")
        if capabilities is None:
            capabilities = {}
        if not isinstance(capabilities, dict):
            raise invalid_params('initialize: "capabilities" must be an object')
        client_info = params.get("clientInfo")
        if client_info is not None and not isinstance(client_info, dict):
            raise invalid_params('initialize: "clientInfo" must be an object')
        version = (
            requested if requested in LEGACY_PROTOCOL_VERSIONS else LATEST_LEGACY_PROTOCOL_VERSION
        )
        session.protocol_version = version
        session.client_capabilities = capabilities
        session.client_info = client_info
        session.touch()
        try:
            self._check_size(session, transport_info)
            admission = session.admission
            if admission is not None:
                await admission.admit(session, self.options.budgets.sessions_per_principal)
        except BaseException:
            session.protocol_version = None  # refused: the session was never negotiated
            raise
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.capabilities(version),
            "serverInfo": _without(self.info.to_wire(), frozenset(_INFO_LEFT_OUT[version])),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _check_size(self, session: LegacySession, transport_info: Any) -> None:
        """Name the session's holder, and keep what `initialize` leaves behind within
        `Budgets.session_bytes`, measured as the session's record (the same in memory and in a
        shared store)."""
        budgets = self.options.budgets
        session.holder = holder(session.principal, transport_info)
        size = len(orjson.dumps(session.to_record()))
        if size > budgets.session_bytes:
            raise invalid_params(
                "initialize: clientInfo and capabilities are too large to keep for a session "
                f"({size} bytes of JSON, at most {budgets.session_bytes}); send less",
                {"reason": BUDGET_EXCEEDED, "budget": "session bytes",
                 "limit": budgets.session_bytes},
            )  # fmt: skip

    def _ping(self, params: dict[str, Any], session: LegacySession) -> dict[str, Any]:
        return {}

    def _set_level(self, params: dict[str, Any], session: LegacySession) -> dict[str, Any]:
        level = params.get("level")
        if not isinstance(level, str) or level not in meta_keys.LOG_LEVEL_RANK:
            raise invalid_params(
                f'logging/setLevel needs "level", one of {", ".join(meta_keys.LOG_LEVELS)}'
            )
        session.log_level = level
        return {}

    def _subscribe(self, params: dict[str, Any], session: LegacySession) -> dict[str, Any]:
        uri = self._uri(params, "resources/subscribe")
        budgets = self.options.budgets
        size = len(uri.encode("utf-8", "surrogatepass"))
        if size > budgets.subscription_uri_bytes:
            raise invalid_params(
                f"resources/subscribe: the URI is {size} bytes long, longer than the "
                f"{budgets.subscription_uri_bytes} a session may follow",
                {"reason": BUDGET_EXCEEDED, "budget": "subscription URI bytes",
                 "limit": budgets.subscription_uri_bytes},
            )  # fmt: skip
        if not self.registry.has_resource(uri):
            raise invalid_params(f"Resource not found: {uri[:200]}", {"uri": uri})
        if uri in session.subscriptions:
            return {}
        if len(session.subscriptions) >= budgets.subscriptions:
            raise invalid_params(
                f"resources/subscribe: this session already follows {budgets.subscriptions} "
                "resources, the most one may; unsubscribe from one first",
                {"reason": BUDGET_EXCEEDED, "budget": "subscriptions",
                 "limit": budgets.subscriptions},
            )  # fmt: skip
        held = sum(len(u.encode("utf-8", "surrogatepass")) for u in session.subscriptions)
        if held + size > budgets.subscription_bytes:
            raise invalid_params(
                f"resources/subscribe: this session's subscriptions would take {held + size} "
                f"bytes of URIs, past the {budgets.subscription_bytes} one may; unsubscribe "
                "from one first",
                {"reason": BUDGET_EXCEEDED, "budget": "subscription bytes",
                 "limit": budgets.subscription_bytes},
            )  # fmt: skip
        session.subscriptions.add(uri)
        return {}

    def _unsubscribe(self, params: dict[str, Any], session: LegacySession) -> dict[str, Any]:
        session.subscriptions.discard(self._uri(params, "resources/unsubscribe"))
        return {}

    @staticmethod
    def _uri(params: dict[str, Any], method: str) -> str:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise invalid_params(f'{method} needs "uri", the URI of a resource (a string)')
        return uri

    # --- results (rule 2) --------------------------------------------------------------------

    async def _list(self, request: Inbound) -> dict[str, Any]:
        return self.registry.page(request.method, request.params)

    @staticmethod
    def _render(method: str, result: dict[str, Any], version: str) -> dict[str, Any]:
        """`result` with only the fields `version` has (rule 2)."""
        left_out = _LEFT_OUT[version]
        if not left_out:
            return result
        listed = _LISTS.get(method)
        if listed is not None:
            result[listed] = [_without(item, left_out) for item in result[listed]]
        elif method == "tools/call":
            result = _without(result, left_out)
        return result


__all__ = ["MAX_SUBSCRIPTIONS", "LegacyMethods"]
