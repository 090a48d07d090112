"""Where a verified token travels with its request, and the caller it names.

The HTTP guard puts the `AccessToken` into the request's ASGI scope under `SCOPE_KEY`; the
scope is the request's `transport_info`, so `ctx.auth` and the default
`ServerOptions.principal` both read it from there. Other transports carry none.
"""

from __future__ import annotations

from typing import Any

from .token import AccessToken

#: The ASGI scope key of the verified token (namespaced: frameworks use "auth" and "user").
SCOPE_KEY = "mrtr.access_token"


def access_token_of(transport_info: Any) -> AccessToken | None:
    """The verified token of a request, from its `transport_info`; None if there is none."""
    if isinstance(transport_info, dict):
        token = transport_info.get(SCOPE_KEY)
        if isinstance(token, AccessToken):
            return token
    return None


def token_principal(transport_info: Any) -> str | None:
    """The default `ServerOptions.principal` when `auth` is set: the verified token's issuer,
    subject and client id (`AccessToken.principal`), or None without a token."""
    token = access_token_of(transport_info)
    return None if token is None else token.principal


__all__ = ["SCOPE_KEY", "access_token_of", "token_principal"]
