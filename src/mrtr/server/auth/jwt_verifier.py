"""`JWTVerifier`: access tokens that are JWTs signed by the authorization server (RFC 9068).

The signing keys come from the issuer's JWKS: its `jwks_uri`, found in the issuer's metadata
(RFC 8414, else OpenID Connect Discovery) unless given. They are cached; a token signed with a
key the cache does not hold makes it fetch them again, at most once every
`min_refresh_interval` seconds (so a key rotation is picked up at once, and a flood of made-up
key ids costs at most one fetch per interval). Checked: the signature, an algorithm of the
allow-list (never `none`, never a shared-secret HMAC), `iss`, `aud` naming this server, `exp`
(required) and `nbf` with `leeway` seconds of clock skew, and the header's `typ`: `at+jwt` (or
`application/at+jwt`), so an ID token, a logout token, a security event or an ID-JAG signed by
the same issuer is never taken for an access token.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from joserfc import jws, jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet, import_key

from .json_fetch import fetch_json
from .settings import audience_matches, canonical_resource
from .token import AccessToken, VerifierUnavailable, audiences, split_scopes

logger = logging.getLogger("mrtr.auth")
_UNTYPED = object()

#: Asymmetric algorithms only: the resource server holds no secret shared with the issuer.
DEFAULT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                      "ES512", "EdDSA")  # fmt: skip
#: The `typ` values of an access token (RFC 9068 section 2.1), compared case-insensitively.
ACCESS_TOKEN_TYPES = frozenset(("at+jwt", "application/at+jwt"))
#: Longer tokens are refused before any parsing.
MAX_TOKEN_LENGTH = 16 * 1024


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order MCP clients try them."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [
            origin + "/.well-known/oauth-authorization-server",
            origin + "/.well-known/openid-configuration",
        ]
    return [
        origin + "/.well-known/oauth-authorization-server" + path,
        origin + "/.well-known/openid-configuration" + path,
        origin + path + "/.well-known/openid-configuration",
    ]


class JWTVerifier:
    """Verifies JWT access tokens against the issuer's published keys (see the module).

    `issuer`: the `iss` every token must carry (and where the metadata is found).
    `audience`: this server's canonical URL (or several), one of which `aud` must name.
    `jwks_url`: the key set's URL, when the issuer publishes no metadata. `algorithms`: the
    allow-list. `leeway`: seconds of clock skew for `exp`/`nbf`. `min_refresh_interval`:
    seconds between two fetches of the key set prompted by an unknown key id. `max_key_age`:
    seconds a fetched key set is used before it is fetched again anyway. `timeout`: seconds
    for one fetch. `cache_ttl` / `cache_size`: tokens that verified are remembered (by a
    digest) for this long, never past their `exp`, in at most this many entries, so a client
    sending the same token on every request pays for one signature check (0 turns it off).
    `accept_untyped`: also accept a token whose header has no `typ`, for an issuer that omits
    it. Off by default: the same issuer signs ID tokens, logout tokens and security events with
    the same keys, and without `typ` nothing but luck in their claims tells them from an access
    token (RFC 9068 section 4, RFC 8725 section 3.11). A `typ` naming another kind of token is
    refused either way.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        *,
        jwks_url: str | None = None,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        min_refresh_interval: float = 10.0,
        max_key_age: float = 3600.0,
        timeout: float = 5.0,
        cache_ttl: float = 60.0,
        cache_size: int = 1024,
        accept_untyped: bool = False,
    ) -> None:
        names = [audience] if isinstance(audience, str) else list(audience)
        if not names:
            raise ValueError("JWTVerifier.audience must name this server's URL")
        self.audience = frozenset(canonical_resource(name) for name in names)
        bad = [a for a in algorithms if a == "none" or a.startswith("HS")]
        if bad or not algorithms:
            raise ValueError(
                f"JWTVerifier.algorithms must be asymmetric signature algorithms (RS256, "
                f"ES256, EdDSA...); not {bad or 'empty'}"
            )
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.algorithms = list(algorithms)
        self.leeway = leeway
        self.min_refresh_interval = min_refresh_interval
        self.max_key_age = max_key_age
        self.timeout = timeout
        if cache_ttl < 0 or cache_size < 0:
            raise ValueError("JWTVerifier cache_ttl and cache_size must be >= 0")
        self.cache_ttl = cache_ttl
        self.cache_size = cache_size
        self.accept_untyped = accept_untyped
        self._cache: OrderedDict[bytes, tuple[AccessToken, float]] = OrderedDict()
        self._keys: KeySet | None = None
        self._fetched_at = -float("inf")
        self._forced_at = -float("inf")
        self._lock = asyncio.Lock()

    async def verify(self, token: str) -> AccessToken | None:
        """The token's claims, or None when it is not a valid token for this server."""
        if len(token) > MAX_TOKEN_LENGTH:
            return None
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._cache.get(key)
        if cached is not None:
            access, until = cached
            if time.monotonic() < until and not access.expired(leeway=self.leeway):
                self._cache.move_to_end(key)
                return access
            del self._cache[key]
        verified = await self._verify(token)
        if verified is not None and self.cache_ttl > 0 and self.cache_size > 0:
            self._cache[key] = (verified, time.monotonic() + self.cache_ttl)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return verified

    async def _verify(self, token: str) -> AccessToken | None:
        try:
            header = jws.extract_compact(token.encode("ascii")).headers()
        except (JoseError, ValueError, UnicodeError, TypeError):
            return None
        if header.get("alg") not in self.algorithms:
            logger.debug("token refused: algorithm %r is not allowed", header.get("alg"))
            return None
        if not self._typed_as_access_token(header.get("typ", _UNTYPED)):
            return None
        keys = await self._key_set(unknown_kid=False)
        try:
            decoded = jwt.decode(token, keys, algorithms=self.algorithms)
        except InvalidKeyIdError:
            keys = await self._key_set(unknown_kid=True)
            try:
                decoded = jwt.decode(token, keys, algorithms=self.algorithms)
            except (JoseError, ValueError, TypeError) as exc:
                logger.debug("token refused: %s", type(exc).__name__)
                return None
        except (JoseError, ValueError, TypeError) as exc:
            logger.debug("token refused: %s", type(exc).__name__)
            return None
        return self._accept(decoded.claims)

    def _typed_as_access_token(self, typ: object) -> bool:
        """Whether the header's `typ` says access token (or is absent and that is allowed)."""
        if typ is _UNTYPED:
            if not self.accept_untyped:
                logger.debug("token refused: no typ (accept_untyped=True accepts it)")
            return self.accept_untyped
        if not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES:
            logger.debug("token refused: typ %r is not at+jwt", typ)
            return False
        return True

    def _accept(self, claims: dict[str, Any]) -> AccessToken | None:
        now = time.time()
        if claims.get("iss") != self.issuer:
            logger.debug("token refused: issuer %r", claims.get("iss"))
            return None
        named = audiences(claims.get("aud"))
        if not audience_matches(named, self.audience):
            logger.debug("token refused: audience %r is not this server", named)
            return None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool) or now >= exp + self.leeway:
            logger.debug("token refused: expired or without exp")
            return None
        nbf = claims.get("nbf")
        if nbf is not None and (not isinstance(nbf, int | float) or now + self.leeway < nbf):
            logger.debug("token refused: not valid yet")
            return None
        subject = claims.get("sub")
        client_id = claims.get("client_id", claims.get("azp", claims.get("cid")))
        return AccessToken(
            subject=subject if isinstance(subject, str) else None,
            issuer=self.issuer,
            client_id=client_id if isinstance(client_id, str) else None,
            scopes=split_scopes(claims.get("scope", claims.get("scp"))),
            expires_at=float(exp),
            audience=named,
            claims=claims,
        )

    async def _key_set(self, *, unknown_kid: bool) -> KeySet:
        """The cached key set; fetched when there is none or it is `max_key_age` old, and
        when a token names a key it does not hold (`unknown_kid`), unless such a fetch was
        made less than `min_refresh_interval` ago."""
        now = time.monotonic()
        keys = self._keys
        if keys is not None:
            if not unknown_kid and now - self._fetched_at < self.max_key_age:
                return keys
            if unknown_kid and now - self._forced_at < self.min_refresh_interval:
                return keys
        async with self._lock:
            if self._keys is not None and self._fetched_at > now:
                return self._keys  # fetched by another request while this one waited
            if unknown_kid:
                self._forced_at = now
            try:
                self._keys = await self._fetch()
            except VerifierUnavailable:
                if self._keys is None or unknown_kid:
                    raise
                # Keep verifying with the keys held; try again after a short while, not on
                # every request.
                logger.warning("could not refresh the JWKS of %s; using the keys held", self.issuer)
                self._fetched_at = now - self.max_key_age + self.min_refresh_interval
                return self._keys
            self._fetched_at = time.monotonic()
            return self._keys

    async def _fetch(self) -> KeySet:
        url = self.jwks_url or await self._discover()
        document = await fetch_json(url, timeout=self.timeout)
        found = document.get("keys")
        if not isinstance(found, list):
            raise VerifierUnavailable(f"{url} is not a JWK set (no 'keys' list)")
        keys = []
        for entry in found:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") == "oct":
                continue  # a shared secret has no place in a public key set
            try:
                keys.append(import_key(entry))
            except (JoseError, ValueError, TypeError, KeyError):
                logger.warning("skipped a key of %s that could not be read", url)
        logger.debug("fetched %d signing key(s) from %s", len(keys), url)
        return KeySet(keys)

    async def _discover(self) -> str:
        failures = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await fetch_json(url, timeout=self.timeout)
            except VerifierUnavailable as exc:
                failures.append(str(exc))
                continue
            if metadata.get("issuer") != self.issuer:
                failures.append(f"{url} names issuer {metadata.get('issuer')!r}")
                continue
            jwks_uri = metadata.get("jwks_uri")
            if isinstance(jwks_uri, str) and jwks_uri:
                self.jwks_url = jwks_uri
                return jwks_uri
            failures.append(f"{url} has no jwks_uri")
        raise VerifierUnavailable(
            f"no usable metadata for issuer {self.issuer}: {'; '.join(failures)}"
        )


__all__ = ["DEFAULT_ALGORITHMS", "JWTVerifier", "metadata_urls"]
