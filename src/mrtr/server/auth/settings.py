"""`AuthSettings`: how a server over HTTP is protected (`ServerOptions(auth=...)`).

Checked when built, like the other options: a mistake shows at start-up with a message that
says how to fix it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .token import TokenVerifier

logger = logging.getLogger("mrtr.auth")

#: Where RFC 9728 puts Protected Resource Metadata (before the resource's path, if any).
WELL_KNOWN = "/.well-known/oauth-protected-resource"

_LOOPBACK = frozenset(("localhost", "127.0.0.1", "::1"))

#: The DPoP proof algorithms accepted by default: asymmetric only (RFC 9449 4.3).
DEFAULT_DPOP_ALGORITHMS = ("ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "RS256", "EdDSA")


def canonical_resource(url: str) -> str:
    """`url` in the form audiences are compared in (RFC 8707): scheme and host lowercased, no
    trailing slash, no fragment. Raises `ValueError` for what is not an absolute http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute http(s) URL")
    if parts.fragment or url.endswith("#"):
        raise ValueError(f"{url!r} has a fragment, which a resource identifier may not have")
    if parts.username is not None:
        raise ValueError(f"{url!r} has user information, which a resource identifier may not have")
    path = parts.path.rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}{query}"


def audience_matches(named: Iterable[str], accepted: frozenset[str]) -> bool:
    """Whether one of the audiences `named` is, in canonical form, one of `accepted`."""
    for name in named:
        try:
            if canonical_resource(name) in accepted:
                return True
        except ValueError:
            continue  # not a URL: it cannot name this server
    return False


def expand_scopes(
    scopes: frozenset[str], hierarchy: Mapping[str, Collection[str]]
) -> frozenset[str]:
    """`scopes` with every scope they imply under `hierarchy` (broader -> narrower, followed
    transitively)."""
    if not hierarchy:
        return scopes
    held = set(scopes)
    todo = [scope for scope in scopes if scope in hierarchy]
    while todo:
        for implied in hierarchy.get(todo.pop(), ()):
            if implied not in held:
                held.add(implied)
                todo.append(implied)
    return frozenset(held)


@dataclass(slots=True)
class DPoPSettings:
    """How DPoP-bound tokens (`Authorization: DPoP <token>` with a `DPoP` proof, RFC 9449) are
    checked.

    `algorithms`: the proof signature algorithms accepted (asymmetric only), advertised in the
    challenge (`algs`) and the metadata. `proof_window`: seconds a proof's `iat` may lie from
    the server's clock, either way; its `jti` is remembered that long, twice over, to refuse a
    replay. `require_nonce`: proofs must carry a nonce the server issued (`DPoP-Nonce`; a
    proof without a valid one gets 401 `use_dpop_nonce` with a fresh one). `nonce_lifetime`:
    seconds one nonce is issued for (it is accepted for up to twice that). `nonce_key`: the
    secret nonces are derived from (32 bytes or more); None derives one from the server's
    `request_state_key`, or, without one, draws a random key per process. `required`: refuse
    plain bearer tokens (only DPoP-bound tokens are accepted).
    """

    algorithms: Sequence[str] = DEFAULT_DPOP_ALGORITHMS
    proof_window: float = 60.0
    require_nonce: bool = False
    nonce_lifetime: float = 300.0
    nonce_key: bytes | None = None
    required: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.algorithms, str):
            self.algorithms = [self.algorithms]
        bad = [a for a in self.algorithms if a == "none" or a.startswith("HS")]
        if bad or not self.algorithms:
            raise ValueError(
                "DPoPSettings.algorithms must be asymmetric signature algorithms (ES256, "
                f"RS256, EdDSA...); not {bad or 'empty'}"
            )
        self.algorithms = tuple(self.algorithms)
        for name in ("proof_window", "nonce_lifetime"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ValueError(f"DPoPSettings.{name} must be a number of seconds > 0")
        if self.nonce_key is not None and len(self.nonce_key) < 32:
            raise ValueError("DPoPSettings.nonce_key must be at least 32 bytes")


@dataclass(slots=True)
class AuthSettings:
    """How the Streamable HTTP endpoint is protected (OAuth 2.1 resource server).

    `resource`: the server's canonical URL, as clients connect to it and as tokens name it in
    their audience (`https://mcp.example.com/mcp`). `authorization_servers`: the issuer URL(s)
    of the authorization servers whose tokens are accepted, advertised in the Protected
    Resource Metadata. `verifier`: checks each bearer token (`JWTVerifier`,
    `IntrospectionVerifier`, or your own `TokenVerifier`). `scopes_supported`: the scopes
    advertised (the minimal set for basic use). `required_scopes`: scopes every request needs
    (403 `insufficient_scope` without them). `scope_hierarchy`: broader scopes and the
    narrower ones each implies (`{"admin": ["tools:write"]}`), applied when checking.
    `resource_name` / `resource_documentation`: shown to people by clients that display the
    metadata. Tools declare their own scopes with `@server.tool(scopes=[...])`.
    `dpop`: how DPoP-bound tokens are checked (`DPoPSettings`); None refuses the `DPoP`
    scheme, and a DPoP-bound token is then refused in any form.

    Only the HTTP transport checks tokens: on stdio the spec has the server take credentials
    from its environment instead, and `ctx.auth` is None.
    """

    resource: str
    authorization_servers: Sequence[str]
    verifier: TokenVerifier
    scopes_supported: Sequence[str] | None = None
    required_scopes: Collection[str] = ()
    scope_hierarchy: Mapping[str, Collection[str]] = field(default_factory=dict)
    resource_name: str | None = None  # a name for people, in the resource metadata
    resource_documentation: str | None = None  # a URL of its documentation, likewise
    dpop: DPoPSettings | None = field(default_factory=DPoPSettings)

    def __post_init__(self) -> None:
        try:
            canonical = canonical_resource(self.resource)
        except ValueError as exc:
            raise ValueError(
                f"AuthSettings.resource must be the server's absolute URL, like "
                f"'https://mcp.example.com/mcp': {exc}"
            ) from None
        if isinstance(self.authorization_servers, str):
            self.authorization_servers = [self.authorization_servers]
        if not self.authorization_servers:
            raise ValueError(
                "AuthSettings.authorization_servers must name at least one issuer URL (the "
                "metadata clients discover the authorization server from must list one)"
            )
        for issuer in self.authorization_servers:
            try:
                canonical_resource(issuer)
            except ValueError as exc:
                raise ValueError(f"AuthSettings.authorization_servers: {exc}") from None
        if not isinstance(self.verifier, TokenVerifier):
            raise ValueError(
                "AuthSettings.verifier must have `async def verify(token) -> AccessToken | None` "
                f"(JWTVerifier, IntrospectionVerifier...), not {type(self.verifier).__name__}"
            )
        for name in ("required_scopes", "scopes_supported"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"AuthSettings.{name} must be a list of scopes, not a string")
        self.scope_hierarchy = {
            broad: frozenset([narrow] if isinstance(narrow, str) else narrow)
            for broad, narrow in self.scope_hierarchy.items()
        }
        if self.dpop is not None and not isinstance(self.dpop, DPoPSettings):
            raise ValueError(
                f"AuthSettings.dpop must be a DPoPSettings or None, not {type(self.dpop).__name__}"
            )
        if urlsplit(canonical).scheme == "http" and urlsplit(canonical).hostname not in _LOOPBACK:
            logger.warning(
                "AuthSettings.resource %s is plain http: bearer tokens would cross the network "
                "in clear; serve the endpoint over https",
                canonical,
            )

    @property
    def canonical(self) -> str:
        """`resource` in canonical form (what token audiences are compared with)."""
        return canonical_resource(self.resource)

    @property
    def metadata_path(self) -> str:
        """The path of the Protected Resource Metadata for `resource` (RFC 9728 3.1)."""
        path = urlsplit(self.resource).path.rstrip("/")
        return WELL_KNOWN + path

    @property
    def metadata_url(self) -> str:
        """The absolute URL of the Protected Resource Metadata (`resource_metadata=`)."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}{self.metadata_path}"

    def metadata(self) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728)."""
        document: dict[str, Any] = {
            "resource": self.canonical,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        if self.scopes_supported is not None:
            document["scopes_supported"] = list(self.scopes_supported)
        if self.resource_name is not None:
            document["resource_name"] = self.resource_name
        if self.resource_documentation is not None:
            document["resource_documentation"] = self.resource_documentation
        if self.dpop is not None:
            document["dpop_signing_alg_values_supported"] = list(self.dpop.algorithms)
            if self.dpop.required:
                document["dpop_bound_access_tokens_required"] = True
        return document


__all__ = [
    "DEFAULT_DPOP_ALGORITHMS",
    "WELL_KNOWN",
    "AuthSettings",
    "DPoPSettings",
    "audience_matches",
    "canonical_resource",
    "expand_scopes",
]
