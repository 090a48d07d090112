"""Access tokens as the client keeps them, and the token endpoint's answer (RFC 6749 5.1)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

# A token is renewed ahead of its end by this share of its lifetime, at most `_MAX_MARGIN`
# seconds: a request must not leave with a token that ends on its way.
_MARGIN_SHARE = 0.25
_MAX_MARGIN = 30.0


@dataclass(frozen=True, slots=True)
class Tokens:
    """An access token for one MCP server, with what is needed to use and renew it.

    `token_type` is `Bearer` or `DPoP` (then every request carries a proof signed with the key
    in `dpop_key`, a private JWK). `issuer` is the authorization server that granted it: the
    refresh token is only ever sent back there. `scope` is what was asked for (space-separated),
    the base of a step-up's union. `resource`: the protected resource it was requested for.
    """

    access_token: str
    token_type: str = "Bearer"
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    issuer: str | None = None
    dpop_key: dict[str, Any] | None = None
    resource: str | None = None
    obtained_at: float | None = None

    def __repr__(self) -> str:  # the tokens and the key stay out of logs and tracebacks
        return (
            f"Tokens(token_type={self.token_type!r}, scope={self.scope!r}, "
            f"issuer={self.issuer!r}, expires_at={self.expires_at!r}, "
            f"refreshable={self.refresh_token is not None})"
        )

    @property
    def is_dpop(self) -> bool:
        """True when the token is bound to a DPoP key (RFC 9449)."""
        return self.token_type.lower() == "dpop"

    def expired(self, now: float | None = None) -> bool:
        """True when the token has ended."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at

    def stale(self, now: float | None = None) -> bool:
        """True when the token is near its end (the last quarter of its life, or 30 s): time
        to refresh it, if it can be."""
        if self.expires_at is None:
            return False
        lifetime = self.expires_at - (self.obtained_at or self.expires_at - 4 * _MAX_MARGIN)
        margin = min(_MAX_MARGIN, max(0.0, lifetime) * _MARGIN_SHARE)
        return (time.time() if now is None else now) >= self.expires_at - margin

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form, for a `TokenStore`."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tokens | None:
        """The tokens saved by `to_dict`, or None when the entry is not usable."""
        access = data.get("access_token")
        if not isinstance(access, str) or not access:
            return None
        expires = data.get("expires_at")
        key = data.get("dpop_key")
        return cls(
            access_token=access,
            token_type=_str(data.get("token_type")) or "Bearer",
            refresh_token=_str(data.get("refresh_token")),
            expires_at=_number(expires),
            scope=_str(data.get("scope")),
            issuer=_str(data.get("issuer")),
            dpop_key=key if isinstance(key, dict) else None,
            resource=_str(data.get("resource")),
            obtained_at=_number(data.get("obtained_at")),
        )

    def renewed(self, newer: Tokens) -> Tokens:
        """`newer` from a refresh, keeping the refresh token when the server sent no new one."""
        return replace(newer, refresh_token=newer.refresh_token or self.refresh_token)


def parse_token_response(
    body: Any, *, requested_scope: str | None, issuer: str, dpop_key: dict[str, Any] | None
) -> Tokens:
    """The tokens in a successful token response; `ValueError` naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the token response is not a JSON object")
    access = body.get("access_token")
    token_type = body.get("token_type")
    if not isinstance(access, str) or not access:
        raise ValueError("the token response has no access_token")
    if not isinstance(token_type, str) or token_type.lower() not in ("bearer", "dpop"):
        raise ValueError(f"the token response has an unusable token_type {token_type!r:.60}")
    now = time.time()
    expires_in = _number(body.get("expires_in"))
    expires_at = now + expires_in if expires_in is not None and expires_in > 0 else None
    is_dpop = token_type.lower() == "dpop"
    return Tokens(
        access_token=access,
        token_type="DPoP" if is_dpop else "Bearer",
        refresh_token=_str(body.get("refresh_token")),
        expires_at=expires_at,
        scope=requested_scope or _str(body.get("scope")),
        issuer=issuer,
        dpop_key=dpop_key if is_dpop else None,
        obtained_at=now,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


__all__ = ["Tokens", "parse_token_response"]
