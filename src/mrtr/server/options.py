"""Server configuration (seed: `ServerOptions`, `ServerOptions::InputRequiredConfig`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .request_state import StateBinding, VerifiedState

Secret = str | bytes

#: Replaces built-in verification: `(token, binding) -> VerifiedState`, raising on any failure.
RequestStateVerifier = Callable[[str, "StateBinding"], "VerifiedState | Awaitable[VerifiedState]"]

#: Derives the authenticated caller of a request from what the transport knows about it
#: (`RequestContext.transport_info`: the ASGI scope over Streamable HTTP, with its headers;
#: `"stdio"` or `"memory"` otherwise); `None` when there is none.
PrincipalResolver = Callable[[Any], "str | None"]


@dataclass(frozen=True, slots=True)
class InputRequiredConfig:
    """Server-side MRTR limits.

    `max_rounds`: the most `InputRequiredResult`s one request may go through before the server
    refuses to ask again. `round_timeout`: seconds one round of handler execution may take
    (0 = no limit). `legacy_shim`: reserved for serving MRTR handlers to legacy-era clients.
    """

    max_rounds: int = 10
    round_timeout: float = 600.0
    legacy_shim: bool = True


_Config = InputRequiredConfig  # the options class re-exports it under the seed's nested name


@dataclass(slots=True)
class ServerOptions:
    """Server options.

    `request_state_key`: the secret that seals `requestState` (AEAD), or a list of secrets of
    which the first seals and all verify, for rotation. Without one the server makes a random
    key per process: fine for one process, but **every instance of a multi-instance deployment
    must be given the same key**, or a retry that lands on another instance is refused.
    `request_state_ttl`: seconds a sealed state stays valid (0 = never expires).
    `request_state_verifier`: replaces the built-in verification (e.g. with a KMS, or to make
    a state single-use); states are still sealed with `request_state_key`.
    `principal`: derives the authenticated caller, which the state is then bound to.
    `page_size`: items per page of list results. `list_ttl_ms`/`list_cache_scope`: caching hints
    on list results.
    """

    InputRequiredConfig: ClassVar[type[_Config]] = InputRequiredConfig

    request_state_key: Secret | Sequence[Secret] | None = None
    request_state_ttl: float = 300.0
    request_state_verifier: RequestStateVerifier | None = None
    input_required: _Config = field(default_factory=lambda: _Config())
    principal: PrincipalResolver | None = None
    page_size: int = 100
    list_ttl_ms: int = 0
    list_cache_scope: str = "public"
    instructions: str | None = None
