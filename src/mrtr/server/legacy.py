"""Serving legacy (`initialize`-based) sessions: MCP 2025-11-25, 2025-06-18, 2025-03-26 and
2024-11-05, from the same registered tools, prompts, resources and handlers.

A request of a negotiated session that does not carry a modern `_meta` protocol version is
served here (`Server.handle_request` decides). Rules:

1. `initialize` negotiates as the legacy lifecycle says: the client's version if this server
   speaks it, else the newest legacy version; it fills the session (version, capabilities,
   client info) and answers `InitializeResult`. A second `initialize` on a negotiated session
   is -32600. Before `initialize` only `ping` is served; anything else is -32600 saying to
   send `initialize` first.
2. The lists, `tools/call`, `prompts/get`, `resources/read` and `completion/complete` run the
   same code as on a modern request; results lose what only 2026-07-28 has (`resultType`,
   `ttlMs`, `cacheScope`, the serverInfo `_meta`), and fields a negotiated revision predates
   (`icons` before 2025-11-25; `title`, `outputSchema`, `structuredContent` before 2025-06-18;
   tool `annotations` and the `completions` capability before 2025-03-26).
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
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    INVALID_REQUEST,
    McpError,
    invalid_params,
    method_not_found,
)
from ..protocol.versions import LATEST_LEGACY_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSIONS
from .budgets import BUDGET_EXCEEDED, holder
from .context import NotifySink, RequestContext

if TYPE_CHECKING:
    from .server import Server
    from .session import LegacySession

logger = logging.getLogger("mrtr.server")

Handler = Callable[[RequestContext], Awaitable[dict[str, Any]]]

#: Methods whose handlers are shared with the modern era.
SHARED_METHODS = (
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
)
#: Resources one session may follow at once by default (a template can match endlessly many
#: URIs, and what a session keeps must stay bounded): `Budgets.subscriptions` sets it.
MAX_SUBSCRIPTIONS = 1024
_MODERN_ONLY = ("resultType", "ttlMs", "cacheScope")
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
    """The legacy-era face of one `Server` (see the module rules)."""

    def __init__(self, server: Server, shared: Mapping[str, Handler]) -> None:
        self._server = server
        self._methods: dict[str, Handler] = {name: shared[name] for name in SHARED_METHODS}
        self._own: dict[str, Callable[[dict[str, Any], LegacySession], dict[str, Any]]] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
        }

    async def handle(
        self,
        request_id: jsonrpc.RequestId,
        method: str,
        params: dict[str, Any],
        notify: NotifySink | None,
        transport_info: Any,
        session: LegacySession,
        ctx: RequestContext | None = None,
    ) -> dict[str, Any]:
        """Serve one request of `session`; its result (errors are raised as `McpError`).

        `ctx` is the request's context when the server's middleware already made it.
        """
        if method == "initialize":
            return await self._initialize(params, session, transport_info)
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
            token = meta.get(meta_keys.PROGRESS_TOKEN)
            if token is not None and not jsonrpc.is_valid_id(token):
                raise invalid_params(
                    f"_meta[{meta_keys.PROGRESS_TOKEN!r}] must be a string or an integer"
                )
        if ctx is None:
            server = self._server
            if handler is server._tools_call:
                # A tool that takes no context runs without one (`Server._call_tool_direct`).
                result = await server._call_tool_direct(
                    request_id, params, notify, transport_info, session
                )
                return self._shape(method, result, version)
            ctx = RequestContext(
                server, request_id, method, params, notify, transport_info, session=session
            )
        return self._shape(method, await handler(ctx), version)

    def notification(self, method: str, session: LegacySession) -> None:
        """Act on a client notification of `session` (rule 5)."""
        if method == "notifications/initialized":
            if session.negotiated:
                session.initialized = True
            else:
                logger.debug("notifications/initialized before initialize: ignored")

    def capabilities(self, version: str) -> dict[str, Any]:
        """The server's capabilities as `initialize` states them for `version`."""
        caps = self._server.capabilities()
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
        server = self._server
        try:
            self._check_size(session, transport_info)
            admission = session.admission
            if admission is not None:
                await admission.admit(session, server.options.budgets.sessions_per_principal)
        except BaseException:
            session.protocol_version = None  # refused: the session was never negotiated
            raise
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.capabilities(version),
            "serverInfo": _without(server.info.to_wire(), frozenset(_INFO_LEFT_OUT[version])),
        }
        if server.instructions:
            result["instructions"] = server.instructions
        return result

    def _check_size(self, session: LegacySession, transport_info: Any) -> None:
        """Name the session's holder, and keep what `initialize` leaves behind within
        `Budgets.session_bytes`, measured as the session's record (the same in memory and in a
        shared store)."""
        budgets = self._server.options.budgets
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
        budgets = self._server.options.budgets
        size = len(uri.encode("utf-8", "surrogatepass"))
        if size > budgets.subscription_uri_bytes:
            raise invalid_params(
                f"resources/subscribe: the URI is {size} bytes long, longer than the "
                f"{budgets.subscription_uri_bytes} a session may follow",
                {"reason": BUDGET_EXCEEDED, "budget": "subscription URI bytes",
                 "limit": budgets.subscription_uri_bytes},
            )  # fmt: skip
        if not self._server.has_resource(uri):
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

    # --- result shapes (rule 2) ------------------------------------------------------------

    @staticmethod
    def _shape(method: str, result: dict[str, Any], version: str) -> dict[str, Any]:
        for modern in _MODERN_ONLY:
            result.pop(modern, None)
        meta = result.get("_meta")
        if isinstance(meta, dict) and meta_keys.SERVER_INFO in meta:
            meta = {k: v for k, v in meta.items() if k != meta_keys.SERVER_INFO}
            if meta:
                result["_meta"] = meta
            else:
                del result["_meta"]
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
