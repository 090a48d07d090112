"""Signed JWTs the client makes: `private_key_jwt` client assertions (RFC 7523 2.2) and DPoP
proofs (RFC 9449). Both on `joserfc`, imported only when a JWT is first needed, so a client
that never signs anything never loads it."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_ASSERTION_LIFETIME = 300  # seconds


def client_assertion(client_id: str, audience: str, private_key_pem: str, algorithm: str) -> str:
    """A JWT authenticating `client_id` at the authorization server `audience` (its issuer),
    signed with the client's private key (PEM)."""
    from joserfc import jwk, jwt  # on first use: a client that signs nothing never loads it

    key = jwk.import_key(private_key_pem.encode(), _key_type(algorithm))
    now = int(time.time())
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": now,
        "exp": now + _ASSERTION_LIFETIME,
        "jti": secrets.token_urlsafe(16),
    }
    return str(jwt.encode({"alg": algorithm, "typ": "JWT"}, claims, key))


def _key_type(algorithm: str) -> Literal["EC", "OKP", "RSA"]:
    if algorithm.startswith("ES"):
        return "EC"
    if algorithm == "EdDSA":
        return "OKP"
    return "RSA"


class DPoPKey:
    """A DPoP key pair (P-256, ES256) and the proofs it signs."""

    algorithm = "ES256"

    def __init__(self, private_jwk: dict[str, Any] | None = None) -> None:
        from joserfc import jwt  # on first use: a client that signs nothing never loads it
        from joserfc.jwk import ECKey

        if private_jwk is None:
            self._key = ECKey.generate_key("P-256")
        else:
            self._key = ECKey.import_key(private_jwk)
        self._jwt = jwt

    @property
    def private_jwk(self) -> dict[str, Any]:
        """The key pair as a JWK, to keep with the tokens bound to it."""
        return dict(self._key.as_dict(private=True))

    def proof(
        self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None
    ) -> str:
        """A fresh proof for one HTTP request: its method, its URL without query or fragment,
        and, when presenting a token, the token's hash (`ath`)."""
        parts = urlsplit(url)
        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(16),
            "htm": method.upper(),
            "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
            "iat": int(time.time()),
        }
        if access_token is not None:
            digest = hashlib.sha256(access_token.encode("ascii")).digest()
            claims["ath"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        if nonce is not None:
            claims["nonce"] = nonce
        header = {
            "typ": "dpop+jwt",
            "alg": self.algorithm,
            "jwk": self._key.as_dict(private=False),
        }
        return str(self._jwt.encode(header, claims, self._key))


__all__ = ["ASSERTION_TYPE", "DPoPKey", "client_assertion"]
