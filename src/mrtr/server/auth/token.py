"""What a verified bearer token says (`AccessToken`), and the verifier contract.

A token is verified once per HTTP request, before the JSON-RPC message is read; the handler
sees the result as `ctx.auth`. The token string itself is never kept in an `AccessToken`: a
handler has no reason to hold it (forwarding it elsewhere is token passthrough, which MCP
forbids), and what is never kept cannot be logged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class AccessToken:
    """A verified access token's claims.

    `issuer`: the authorization server that issued it. `subject`: the resource owner (a user,
    or the client itself for a client-credentials grant). `client_id`: the OAuth client it was
    issued to. `scopes`: what it grants. `expires_at`: Unix time it stops being valid (None:
    not stated). `audience`: the resources it was issued for. `claims`: everything the token
    (or the introspection response) said, for what the fields above do not cover.
    """

    subject: str | None = None
    issuer: str | None = None
    client_id: str | None = None
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None
    audience: tuple[str, ...] = ()
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def principal(self) -> str:
        """Who is calling, as one string: issuer, subject and client id together.

        Sealed MRTR state is bound to it by default, so a state minted for one caller is
        refused for another, and a refreshed token of the same caller keeps working."""
        return json.dumps([self.issuer, self.subject, self.client_id], separators=(",", ":"))

    def expired(self, now: float | None = None, leeway: float = 0.0) -> bool:
        """Whether `expires_at` has passed (`leeway` seconds of clock skew allowed)."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at + leeway

    def has_scopes(self, needed: frozenset[str] | set[str]) -> bool:
        """Whether the token grants every scope of `needed` (as granted, no hierarchy)."""
        return needed <= self.scopes


@runtime_checkable
class TokenVerifier(Protocol):
    """Turns a bearer token into an `AccessToken`, or None when it is not valid here.

    A verifier checks everything that makes a token acceptable to this server: signature or
    introspection, issuer, expiry and, above all, that the audience is this server (RFC 8707:
    a token issued for another resource must be refused). It returns None for a bad token and
    raises `VerifierUnavailable` when it cannot decide now (its authorization server is down):
    that is answered 503, not 401, so a client does not throw away a good token. Any other
    exception counts as a bad token (and is logged, never with the token).
    """

    async def verify(self, token: str) -> AccessToken | None:
        """Verify `token` (see the class docstring)."""
        ...


class VerifierUnavailable(Exception):
    """A verifier could not reach what it needs (JWKS, introspection endpoint) to decide."""


def split_scopes(value: Any) -> frozenset[str]:
    """Scopes from a claim: a space-separated string (`scope`) or a list (`scp`)."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def audiences(value: Any) -> tuple[str, ...]:
    """The `aud` claim as a tuple of strings (one string or a list of them)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(item for item in value if isinstance(item, str))
    return ()


def bound_key(token: AccessToken) -> str | None:
    """The thumbprint of the DPoP key `token` is bound to (its `cnf.jkt`, RFC 9449 6), or
    None for a token bound to no key."""
    cnf = token.claims.get("cnf")
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    return jkt if isinstance(jkt, str) else None


__all__ = [
    "AccessToken",
    "TokenVerifier",
    "VerifierUnavailable",
    "audiences",
    "bound_key",
    "split_scopes",
]
