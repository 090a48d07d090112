"""`IntrospectionVerifier`: tokens checked by asking the authorization server (RFC 7662).

For opaque tokens, or when revocation must take effect at once. The server authenticates to
the introspection endpoint as an OAuth client (`client_secret_basic` or `client_secret_post`).
An active answer is cached for `cache_ttl` seconds (never past the token's `exp`), in a cache
of at most `cache_size` entries keyed by a digest of the token, so a busy client costs one
introspection call per token and interval; inactive answers are not cached (a token just
issued works at once). `aud` must name this server.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote_plus

from .json_fetch import fetch_json
from .settings import audience_matches, canonical_resource
from .token import AccessToken, audiences, split_scopes

logger = logging.getLogger("mrtr.auth")

#: Longer tokens are refused without asking.
MAX_TOKEN_LENGTH = 16 * 1024


class IntrospectionVerifier:
    """Verifies tokens at an RFC 7662 introspection endpoint (see the module).

    `endpoint`: the introspection URL. `client_id` / `client_secret`: this server's
    credentials there, sent as `auth_method` says. `audience`: this server's canonical URL (or
    several), one of which the answer's `aud` must name; `require_audience=False` also accepts
    an answer without `aud` (for authorization servers that never send it). `issuer`: when
    given, the answer's `iss`, if any, must be it (and it fills `AccessToken.issuer`).
    `cache_ttl` / `cache_size`: the positive cache. `timeout`: seconds for one call.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str,
        client_secret: str,
        audience: str | Sequence[str],
        issuer: str | None = None,
        auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic",
        require_audience: bool = True,
        cache_ttl: float = 60.0,
        cache_size: int = 1024,
        timeout: float = 5.0,
    ) -> None:
        names = [audience] if isinstance(audience, str) else list(audience)
        if not names:
            raise ValueError("IntrospectionVerifier.audience must name this server's URL")
        if auth_method not in ("client_secret_basic", "client_secret_post"):
            raise ValueError(
                "IntrospectionVerifier.auth_method must be 'client_secret_basic' or "
                f"'client_secret_post', not {auth_method!r}"
            )
        if cache_size < 0 or cache_ttl < 0:
            raise ValueError("IntrospectionVerifier cache_ttl and cache_size must be >= 0")
        self.endpoint = endpoint
        self.client_id = client_id
        self._secret = client_secret
        self.audience = frozenset(canonical_resource(name) for name in names)
        self.issuer = issuer
        self.auth_method = auth_method
        self.require_audience = require_audience
        self.cache_ttl = cache_ttl
        self.cache_size = cache_size
        self.timeout = timeout
        self._cache: OrderedDict[bytes, tuple[AccessToken, float]] = OrderedDict()

    async def verify(self, token: str) -> AccessToken | None:
        """The token's claims, or None when it is not active and for this server."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None:
            access, until = cached
            if now < until and not access.expired():
                self._cache.move_to_end(key)
                return access
            del self._cache[key]
        answer = await fetch_json(self.endpoint, **self._request(token), timeout=self.timeout)
        verified = self._accept(answer)
        if verified is not None and self.cache_ttl > 0 and self.cache_size > 0:
            self._cache[key] = (verified, now + self.cache_ttl)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return verified

    def _request(self, token: str) -> dict[str, Any]:
        form = {"token": token, "token_type_hint": "access_token"}
        if self.auth_method == "client_secret_post":
            form.update(client_id=self.client_id, client_secret=self._secret)
            return {"form": form}
        # RFC 6749 2.3.1: both parts form-encoded before they are joined.
        raw = f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}".encode()
        return {
            "form": form,
            "headers": {"Authorization": "Basic " + base64.b64encode(raw).decode()},
        }

    def _accept(self, answer: dict[str, Any]) -> AccessToken | None:
        if answer.get("active") is not True:
            return None
        issuer = answer.get("iss")
        if self.issuer is not None and issuer is not None and issuer != self.issuer:
            logger.debug("token refused: issuer %r", issuer)
            return None
        named = audiences(answer.get("aud"))
        if named:
            if not audience_matches(named, self.audience):
                logger.debug("token refused: audience %r is not this server", named)
                return None
        elif self.require_audience:
            logger.debug("token refused: the introspection answer names no audience")
            return None
        exp = answer.get("exp")
        expires_at = (
            float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
        )
        access = AccessToken(
            subject=answer.get("sub") if isinstance(answer.get("sub"), str) else None,
            issuer=issuer if isinstance(issuer, str) else self.issuer,
            client_id=answer.get("client_id") if isinstance(answer.get("client_id"), str) else None,
            scopes=split_scopes(answer.get("scope")),
            expires_at=expires_at,
            audience=named,
            claims=answer,
        )
        return None if access.expired() else access


__all__ = ["IntrospectionVerifier"]
