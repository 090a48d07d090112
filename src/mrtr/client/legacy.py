"""The client's side of a legacy (`initialize`-based) session.

A 2026-07-28 request carries the client's version, identity and capabilities in its own
`_meta`; a legacy session says them once, in `initialize`, and the server answers with the
version it chose and its capabilities. `ServerHandshake` holds that answer. The functions here
build the handshake, check the server's answer, and shape requests for the legacy wire (no
`io.modelcontextprotocol/` keys: only `progressToken` and the application's own `_meta`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol import meta as meta_keys
from ..protocol.errors import PROTOCOL_VIOLATION, McpError
from ..protocol.types import DiscoverResult, Implementation
from ..protocol.versions import LATEST_LEGACY_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSIONS
from .subscription import KINDS, Subscription


@dataclass(slots=True)
class ServerHandshake:
    """What the server said in answer to `initialize`."""

    protocol_version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any] | None = None
    instructions: str | None = None
    #: The level `logging/setLevel` last set; None: never set on this session.
    log_level: str | None = None

    def discover_result(self) -> DiscoverResult:
        """The session's answer as a `DiscoverResult`, so `client.discover()` tells the same
        things of a legacy server as of a modern one."""
        result: dict[str, Any] = {
            "supportedVersions": [self.protocol_version],
            "capabilities": self.capabilities,
        }
        if self.server_info is not None:
            result["_meta"] = {meta_keys.SERVER_INFO: self.server_info}
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return DiscoverResult.model_validate(result)

    def supports(self, capability: str, flag: str | None = None) -> bool:
        """Whether the server declared `capability` (and, with `flag`, `capability.flag`)."""
        declared = self.capabilities.get(capability)
        if not isinstance(declared, dict):
            return False
        return flag is None or declared.get(flag) is True


def initialize_params(client_info: Implementation, capabilities: dict[str, Any]) -> dict[str, Any]:
    """The `initialize` request's params, offering the newest legacy revision."""
    return {
        "protocolVersion": LATEST_LEGACY_PROTOCOL_VERSION,
        "capabilities": capabilities,
        "clientInfo": client_info.to_wire(),
    }


def accept_initialize(result: Any) -> ServerHandshake:
    """The session the server's `initialize` result opens; raises `McpError` when the result
    is malformed or names a version this client does not speak."""
    if not isinstance(result, dict):
        raise McpError(PROTOCOL_VIOLATION, "initialize: the server's result is not an object")
    version = result.get("protocolVersion")
    if version not in LEGACY_PROTOCOL_VERSIONS:
        raise McpError(
            PROTOCOL_VIOLATION,
            f"initialize: the server chose protocol version {str(version)[:40]!r}, which this "
            f"client does not speak (it offered {LATEST_LEGACY_PROTOCOL_VERSION}; it speaks "
            f"{', '.join(LEGACY_PROTOCOL_VERSIONS)} on legacy servers)",
            {"offered": LATEST_LEGACY_PROTOCOL_VERSION, "chosen": version},
        )
    capabilities = result.get("capabilities")
    server_info = result.get("serverInfo")
    instructions = result.get("instructions")
    return ServerHandshake(
        protocol_version=str(version),
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        server_info=server_info if isinstance(server_info, dict) else None,
        instructions=instructions if isinstance(instructions, str) else None,
    )


def legacy_meta(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`meta` without the 2026-07-28 reserved keys, which mean nothing to a legacy server."""
    if not meta:
        return None
    kept = {k: v for k, v in meta.items() if not k.startswith(meta_keys.PREFIX)}
    return kept or None


@dataclass(slots=True)
class LegacyListener:
    """One `client.listen(...)` block on a legacy session: what it wants, where it goes."""

    subscription: Subscription
    kinds: frozenset[str]
    uris: frozenset[str] = field(default_factory=frozenset)

    def offer(self, message: dict[str, Any]) -> None:
        """Deliver a session-wide change notification if this listener asked for it."""
        kind = KINDS.get(str(message.get("method")))
        if kind is None or kind not in self.kinds:
            return
        if kind == "resource":
            params = message.get("params")
            uri = params.get("uri") if isinstance(params, dict) else None
            if uri not in self.uris:
                return
        self.subscription.deliver(message)


def honoured(
    session: ServerHandshake, *, tools: bool, prompts: bool, resources: bool, uris: list[str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """What a legacy server will announce of what a listener asked for (as a listen stream's
    acknowledgement says it), and the change kinds that covers."""
    agreed: dict[str, Any] = {}
    kinds: set[str] = set()
    for wanted, capability, name, kind in (
        (tools, "tools", "toolsListChanged", "tools"),
        (prompts, "prompts", "promptsListChanged", "prompts"),
        (resources, "resources", "resourcesListChanged", "resources"),
    ):
        if wanted and session.supports(capability, "listChanged"):
            agreed[name] = True
            kinds.add(kind)
    if uris and session.supports("resources", "subscribe"):
        agreed["resourceSubscriptions"] = list(uris)
        kinds.add("resource")
    return agreed, frozenset(kinds)


__all__ = [
    "LegacyListener",
    "ServerHandshake",
    "accept_initialize",
    "honoured",
    "initialize_params",
    "legacy_meta",
]
