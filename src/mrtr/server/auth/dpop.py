"""`DPoPChecker`: the resource server's side of DPoP (RFC 9449), for one endpoint.

A request with `Authorization: DPoP <token>` carries one `DPoP` header: a JWT (the proof)
signed with the client's key. The proof is accepted when (RFC 9449 4.3):

* its header has `typ: dpop+jwt`, an allowed asymmetric `alg`, and the public `jwk` that
  verifies its signature (no private parts);
* `htm` is the request's method and `htu` its URL without query or fragment: the configured
  resource's origin (what the client sees, whatever proxy sits between) with the request's
  path, or the resource URL itself;
* `iat` is within `proof_window` seconds of now, `ath` is the hash of the token sent;
* with `require_nonce`, `nonce` is one this server issued lately (stateless: an HMAC of the
  time slot, so every instance sharing the key accepts every other's);
* its `jti` was not seen in the window (a replay).

The token's own binding (`cnf.jkt` equal to the proof key's RFC 7638 thumbprint) is the
guard's to check, once the token has been verified. The `jti` record goes to the server's
`Store` when it has one (then it holds across the instances that share it), or else to a
bounded memory of this process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import import_key
from joserfc.jws import JWSRegistry

from ..store import MemoryStore, Store
from .settings import DPoPSettings

#: A longer proof is refused unread (an RSA-4096 key in the header makes about 1.5 KiB).
MAX_PROOF_LENGTH = 8 * 1024
#: JWK members that only a private key has (RFC 7518 6.2.2, 6.3.2; `k` of a secret key).
_PRIVATE_MEMBERS = frozenset(("d", "p", "q", "dp", "dq", "qi", "oth", "k"))
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Proofs remembered when the server has no store (each entry is some 300 bytes).
_MEMORY_ENTRIES = 100_000


class DPoPError(Exception):
    """A refused proof: `error` is the OAuth error code (`invalid_dpop_proof`,
    `use_dpop_nonce`), the message says why."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


@dataclass(frozen=True, slots=True)
class Proof:
    """What a proof that passed `DPoPChecker.check` says: the key's thumbprint and its `jti`."""

    jkt: str
    jti: str
    nonce: str | None


def b64url(data: bytes) -> str:
    """Unpadded base64url (RFC 7515 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def token_hash(token: str) -> str:
    """The `ath` of an access token: base64url(SHA-256(token))."""
    return b64url(hashlib.sha256(token.encode("ascii", "replace")).digest())


def normal_url(url: str) -> str | None:
    """`url` without query or fragment, normalized as RFC 3986 6.2.2-6.2.3 compares URLs
    (scheme and host lowercased, a default port dropped, an empty path `/`); None if it is
    not an absolute http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}{parts.path or '/'}"


class DPoPChecker:
    """Checks the DPoP proofs of one endpoint (see the module). `resource`: the endpoint's
    public URL (`AuthSettings.resource`); `store`: where seen proofs are recorded (None: a
    memory of this process); `state_key`: the server's sealing secret, which nonces are
    derived from when `settings.nonce_key` is not given."""

    def __init__(
        self,
        settings: DPoPSettings,
        resource: str,
        store: Store | None,
        state_key: bytes | None = None,
    ) -> None:
        self.settings = settings
        self.algorithms = list(settings.algorithms)
        self._registry = JWSRegistry(algorithms=self.algorithms)
        # joserfc's default bound (512 bytes) is too short for a header carrying an RSA key.
        self._registry.max_header_length = MAX_PROOF_LENGTH
        self._resource = normal_url(resource) or ""
        parts = urlsplit(self._resource)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self.store: Store = store if store is not None else MemoryStore(_MEMORY_ENTRIES)
        if settings.nonce_key is not None:
            key = settings.nonce_key
        elif state_key is not None:
            key = hmac.digest(state_key, b"mrtr dpop nonce", "sha256")
        else:
            key = secrets.token_bytes(32)
        self._nonce_key = key

    # --- the proof ---------------------------------------------------------------------------

    def check(self, proof: str, method: str, path: str, token: str) -> Proof:
        """The proof of a request (`method`, the full `path` it was sent to) presenting
        `token`, checked; raises `DPoPError` (`invalid_dpop_proof`) saying what is wrong."""
        if len(proof) > MAX_PROOF_LENGTH:
            raise _invalid("the DPoP proof is too long")
        try:
            header = _header(proof)
        except (ValueError, TypeError, UnicodeError):
            raise _invalid("the DPoP header is not a JWT") from None
        if header.get("typ") != "dpop+jwt":
            raise _invalid("the DPoP proof's typ must be dpop+jwt")
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise _invalid(f"the DPoP proof's alg must be one of {' '.join(self.algorithms)}")
        jwk = header.get("jwk")
        if not isinstance(jwk, dict):
            raise _invalid("the DPoP proof's header has no public key (jwk)")
        if _PRIVATE_MEMBERS.intersection(jwk) or jwk.get("kty") == "oct":
            raise _invalid("the DPoP proof's jwk must be a public key, with no private parts")
        try:
            key = import_key(jwk)
            claims = jwt.decode(proof, key, algorithms=[alg], registry=self._registry).claims
            jkt = key.thumbprint()
        except (JoseError, ValueError, TypeError, KeyError, UnicodeError):
            raise _invalid("the DPoP proof's signature does not verify with its jwk") from None
        if claims.get("htm") != method:
            raise _invalid(f"the DPoP proof is for another HTTP method (htm must be {method})")
        htu = claims.get("htu")
        sent = normal_url(htu) if isinstance(htu, str) else None
        if sent is None or sent not in (self._resource, normal_url(self._origin + path)):
            raise _invalid(f"the DPoP proof is for another URL (htu must be {self._resource})")
        iat = claims.get("iat")
        window = self.settings.proof_window
        if not isinstance(iat, int | float) or isinstance(iat, bool):
            raise _invalid("the DPoP proof has no iat")
        if abs(time.time() - iat) > window:
            raise _invalid(
                f"the DPoP proof's iat is more than {window:g} seconds from the server's "
                "clock; make a fresh proof for each request"
            )
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti or len(jti) > 256:
            raise _invalid("the DPoP proof has no jti")
        ath = claims.get("ath")
        if not isinstance(ath, str) or not hmac.compare_digest(ath, token_hash(token)):
            raise _invalid("the DPoP proof's ath is not the hash of the access token sent")
        nonce = claims.get("nonce")
        return Proof(jkt, jti, nonce if isinstance(nonce, str) else None)

    async def first_use(self, proof: Proof) -> bool:
        """Record the proof's `jti` (per key); False when it was seen within the window."""
        digest = hashlib.sha256(f"{proof.jkt}\0{proof.jti}".encode()).digest()
        ttl = 2 * self.settings.proof_window + 1
        return await self.store.add("dpop-jti:" + b64url(digest), b"1", ttl)

    # --- server nonces --------------------------------------------------------------------------

    def nonce(self) -> str:
        """A nonce for the current time slot, for a `DPoP-Nonce` header."""
        return self._nonce_for(self._slot())

    def nonce_ok(self, nonce: str | None) -> bool:
        """Whether `nonce` was issued in this time slot or the one before."""
        if nonce is None:
            return False
        slot = self._slot()
        return any(hmac.compare_digest(nonce, self._nonce_for(s)) for s in (slot, slot - 1))

    def _slot(self) -> int:
        return int(time.time() // self.settings.nonce_lifetime)

    def _nonce_for(self, slot: int) -> str:
        mac = hmac.digest(self._nonce_key, b"%d" % slot, "sha256")
        return b64url(mac[:18])


def _header(proof: str) -> dict[str, Any]:
    head, dot, _ = proof.partition(".")
    if not dot:
        raise ValueError("not a compact JWS")
    value = orjson.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    if not isinstance(value, dict):
        raise ValueError("the JOSE header is not an object")
    return value


def _invalid(description: str) -> DPoPError:
    return DPoPError("invalid_dpop_proof", description)


__all__ = [
    "MAX_PROOF_LENGTH",
    "DPoPChecker",
    "DPoPError",
    "Proof",
    "b64url",
    "normal_url",
    "token_hash",
]
