"""Protecting a server over HTTP with OAuth 2.1 bearer tokens (MCP authorization).

`ServerOptions(auth=AuthSettings(...))` makes the Streamable HTTP endpoint an OAuth resource
server: it publishes its Protected Resource Metadata, verifies the bearer token of every
request with `AuthSettings.verifier`, enforces scopes (server-wide and per tool), hands the
verified `AccessToken` to handlers as `ctx.auth`, and binds sealed MRTR state to the caller.
DPoP-bound tokens (RFC 9449) are accepted too, with their proofs checked (`DPoPSettings`).

The built-in verifiers, `JWTVerifier` and `IntrospectionVerifier`, are imported when first
named, so a server that uses neither never loads their dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .principal import SCOPE_KEY, access_token_of, token_principal
from .settings import DEFAULT_DPOP_ALGORITHMS, AuthSettings, DPoPSettings, canonical_resource
from .token import AccessToken, TokenVerifier, VerifierUnavailable

if TYPE_CHECKING:
    from .introspection import IntrospectionVerifier
    from .jwt_verifier import JWTVerifier

_LAZY = {
    "JWTVerifier": ".jwt_verifier",
    "IntrospectionVerifier": ".introspection",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_DPOP_ALGORITHMS",
    "SCOPE_KEY",
    "AccessToken",
    "AuthSettings",
    "DPoPSettings",
    "IntrospectionVerifier",
    "JWTVerifier",
    "TokenVerifier",
    "VerifierUnavailable",
    "access_token_of",
    "canonical_resource",
    "token_principal",
]
