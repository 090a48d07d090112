"""Sealed ``requestState`` tokens for multi round-trip requests.

A server that answers with an ``InputRequiredResult`` hands the client an opaque
``requestState`` string that the client echoes on its retry.  The string travels
through an untrusted party, so it is sealed with an AEAD (AES-256-GCM): the
client can neither read nor alter it, and it is bound to the request it was
minted for (method, target, arguments, server, principal) and optionally to an
expiry.

Token format (ASCII, URL-safe)::

    "1." + base64url_nopad(kid[4] | nonce[12] | AES-GCM(plaintext, aad) )

    aad       = b"mrtr/request-state/v1\\x00" + kid
    plaintext = flags:u8 | round:u32 | expires_at:f64 | binding_tag[16] | data
    flags     = 0x01 expiry present, 0x02 data is zlib-compressed

Each secret is expanded once with HKDF-SHA256 into an AES key, a binding-tag
key and the 4-byte key id ``kid``. ``binding_tag`` is a BLAKE2b-128 keyed with
the binding-tag key over the length-prefixed binding fields, so a
token verifies only for the binding it was minted for, and a mismatch can be
told apart from tampering in the server log.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import math
import os
import struct
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "InvalidRequestState",
    "RequestStateKeyRing",
    "StateBinding",
    "VerifiedState",
    "digest_arguments",
    "mint_request_state",
    "verify_request_state",
]

_VERSION_PREFIX: Final = "1."
_HKDF_INFO: Final = b"mrtr/request-state/v1 keys"
_AAD_LABEL: Final = b"mrtr/request-state/v1\x00"

_KID_LEN: Final = 4
_NONCE_LEN: Final = 12
_GCM_TAG_LEN: Final = 16
_BIND_TAG_LEN: Final = 16
_AEAD_KEY_LEN: Final = 32
_BIND_KEY_LEN: Final = 32

# flags, round, expires_at (0.0 when the expiry flag is clear)
_HEADER: Final = struct.Struct(">BId")
_FLAG_EXPIRES: Final = 0x01
_FLAG_ZLIB: Final = 0x02
_KNOWN_FLAGS: Final = _FLAG_EXPIRES | _FLAG_ZLIB
_MAX_ROUND: Final = 0xFFFFFFFF

_PT_BIND_START: Final = _HEADER.size
_PT_DATA_START: Final = _HEADER.size + _BIND_TAG_LEN
_CT_START: Final = _KID_LEN + _NONCE_LEN
_MIN_RAW_LEN: Final = _CT_START + _PT_DATA_START + _GCM_TAG_LEN

# Below this size zlib rarely pays for its own framing; small states stay small.
_COMPRESS_MIN: Final = 256
_COMPRESS_LEVEL: Final = 6

# has_principal, len(method), len(target), len(digest), len(audience), len(principal)
_BINDING_LENGTHS: Final = struct.Struct(">BIIIII")

_URL_TO_STD: Final = bytes.maketrans(b"-_", b"+/")
_STD_TO_URL: Final = bytes.maketrans(b"+/", b"-_")


class InvalidRequestState(Exception):
    """A ``requestState`` token failed verification.

    ``cause`` is a short machine-readable reason meant for the server log only
    (``malformed``, ``unknown_version``, ``unknown_key``, ``decrypt_failed``,
    ``binding_mismatch``, ``expired``); it never contains secret material, and
    clients should only ever be told that the state was invalid.
    """

    cause: str

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause

    def __str__(self) -> str:
        return f"invalid requestState ({self.cause})"


@dataclass(frozen=True, slots=True)
class StateBinding:
    """What a state is bound to: a state minted for one binding never verifies for another."""

    method: str
    """``tools/call``, ``prompts/get`` or ``resources/read``."""
    target: str
    """Tool or prompt name, or resource URI."""
    arguments_digest: bytes
    """Digest of the request's arguments, e.g. from :func:`digest_arguments`."""
    audience: str
    """The server's name, so a state cannot be replayed against another server."""
    principal: str | None = None
    """The authenticated caller when known."""


@dataclass(frozen=True, slots=True)
class VerifiedState:
    """The contents of a token that passed verification."""

    round: int
    """The round number stored at mint time."""
    expires_at: float | None
    """Unix seconds after which the token is rejected; ``None`` means never."""
    data: bytes
    """The caller's opaque payload."""


class _Key:
    """One derived key: AEAD, binding-tag key and public key id."""

    __slots__ = ("aad", "aead", "bind_key", "kid")

    def __init__(self, secret: bytes) -> None:
        okm = HKDF(
            algorithm=hashes.SHA256(),
            length=_AEAD_KEY_LEN + _BIND_KEY_LEN + _KID_LEN,
            salt=None,
            info=_HKDF_INFO,
        ).derive(secret)
        self.aead = AESGCM(okm[:_AEAD_KEY_LEN])
        self.bind_key = okm[_AEAD_KEY_LEN : _AEAD_KEY_LEN + _BIND_KEY_LEN]
        # The key id is a separate slice of the HKDF output: it names the key
        # without revealing anything about the secret or the other slices.
        self.kid = okm[_AEAD_KEY_LEN + _BIND_KEY_LEN :]
        self.aad = _AAD_LABEL + self.kid


def _secret_bytes(secret: object) -> bytes:
    if isinstance(secret, str):
        raw = secret.encode("utf-8")
    elif isinstance(secret, bytes | bytearray | memoryview):
        raw = bytes(secret)
    else:
        raise TypeError("request-state secrets must be str or bytes")
    if not raw:
        raise ValueError("request-state secrets must not be empty")
    return raw


class RequestStateKeyRing:
    """Secrets for sealing ``requestState``; the first seals, all verify.

    Rotate by constructing a new ring as ``[new, old]``: tokens sealed under
    ``old`` keep verifying until it is dropped from the ring. Secrets should be
    high-entropy (e.g. ``secrets.token_bytes(32)``); they are expanded with
    HKDF-SHA256, which does not strengthen weak passwords. Each key uses random
    96-bit nonces, so rotate well before sealing ~2**32 tokens with one secret.

    With ``secrets=None`` a random per-process secret is generated: tokens then
    verify only in this process and not after a restart, so deployments with
    several server instances (or any load balancing) must configure a shared key.
    """

    __slots__ = ("_by_kid", "_random", "_sealer")

    def __init__(self, secrets: str | bytes | Sequence[str | bytes] | None = None) -> None:
        raw: list[bytes]
        if secrets is None:
            raw = [os.urandom(32)]
        elif isinstance(secrets, str | bytes | bytearray | memoryview):
            raw = [_secret_bytes(secrets)]
        else:
            raw = [_secret_bytes(s) for s in secrets]
            if not raw:
                raise ValueError("a RequestStateKeyRing needs at least one secret")
        self._random = secrets is None
        # Key derivation happens once here; the hot path only looks keys up.
        keys: list[_Key] = []
        seen: set[bytes] = set()
        for secret in raw:
            if secret not in seen:
                seen.add(secret)
                keys.append(_Key(secret))
        self._sealer = keys[0]
        by_kid: dict[bytes, tuple[_Key, ...]] = {}
        for key in keys:
            # Distinct secrets sharing a 32-bit id is improbable but harmless:
            # verification tries each candidate key.
            by_kid[key.kid] = (*by_kid.get(key.kid, ()), key)
        self._by_kid = by_kid

    @property
    def random(self) -> bool:
        """True when the ring holds a generated per-process secret."""
        return self._random

    def __repr__(self) -> str:
        count = sum(map(len, self._by_kid.values()))
        return f"RequestStateKeyRing(keys={count}, random={self._random})"


def _binding_tag(key: _Key, binding: StateBinding) -> bytes:
    # Length-prefixed fields make the encoding injective ("a|b" + "c" never
    # equals "a" + "b|c"); surrogatepass keeps any str (JSON allows lone
    # surrogates) encodable without merging distinct strings.
    try:
        method = binding.method.encode("utf-8", "surrogatepass")
        target = binding.target.encode("utf-8", "surrogatepass")
        audience = binding.audience.encode("utf-8", "surrogatepass")
        digest = binding.arguments_digest
        principal = binding.principal
        if principal is None:
            has_principal = 0
            who = b""
        else:
            has_principal = 1
            who = principal.encode("utf-8", "surrogatepass")
        encoded = b"".join(
            (
                _BINDING_LENGTHS.pack(
                    has_principal, len(method), len(target), len(digest), len(audience), len(who)
                ),
                method,
                target,
                digest,
                audience,
                who,
            )
        )
    except (AttributeError, TypeError):
        raise TypeError(
            "StateBinding fields must be str (principal str or None) and arguments_digest bytes"
        ) from None
    # Keyed, so truncating to 128 bits leaves no offline collision search.
    return hashlib.blake2b(encoded, key=key.bind_key, digest_size=_BIND_TAG_LEN).digest()


def _b64encode(raw: bytes) -> bytes:
    return binascii.b2a_base64(raw, newline=False).translate(_STD_TO_URL).rstrip(b"=")


def mint_request_state(
    ring: RequestStateKeyRing,
    binding: StateBinding,
    data: bytes,
    *,
    round: int,
    ttl: float = 0,
    now: float | None = None,
    compress: bool = True,
) -> str:
    """Seal ``data`` into a ``requestState`` token bound to ``binding``.

    ``round`` (0..2**32-1) is returned on verification; ``ttl`` is the lifetime
    in seconds from ``now`` (default: the current time), 0 meaning the token
    never expires. Payloads of 256 bytes or more are zlib-compressed when that
    makes them smaller; pass ``compress=False`` if ``data`` mixes secrets with
    client-supplied content, since compressed length can leak the former.

    Returns an ASCII token made only of ``[A-Za-z0-9_.-]``.
    """
    if not isinstance(data, bytes):
        if not isinstance(data, bytearray | memoryview):
            raise TypeError("request-state data must be bytes")
        data = bytes(data)
    if not isinstance(round, int) or not 0 <= round <= _MAX_ROUND:
        raise ValueError("round must be an int in 0..2**32-1")
    flags = 0
    expires_at = 0.0
    if ttl:  # also taken for NaN, which the check below rejects
        if not (ttl > 0 and math.isfinite(ttl)):
            raise ValueError("ttl must be a finite number of seconds >= 0")
        expires_at = (time.time() if now is None else now) + ttl
        if not math.isfinite(expires_at):
            raise ValueError("now + ttl must be finite")
        flags = _FLAG_EXPIRES
    payload = data
    if compress and len(data) >= _COMPRESS_MIN:
        packed = zlib.compress(data, _COMPRESS_LEVEL)
        if len(packed) < len(data):
            payload = packed
            flags |= _FLAG_ZLIB
    key = ring._sealer
    nonce = os.urandom(_NONCE_LEN)
    plaintext = b"".join(
        (_HEADER.pack(flags, round, expires_at), _binding_tag(key, binding), payload)
    )
    sealed = key.aead.encrypt(nonce, plaintext, key.aad)
    return _VERSION_PREFIX + _b64encode(key.kid + nonce + sealed).decode("ascii")


def verify_request_state(
    ring: RequestStateKeyRing,
    binding: StateBinding,
    token: str,
    *,
    now: float | None = None,
) -> VerifiedState:
    """Open a token minted by :func:`mint_request_state` and check its binding and expiry.

    Raises :class:`InvalidRequestState` for any problem with ``token``: wrong
    type, non-canonical or invalid base64url, wrong length, unknown version or
    key, failed authentication, a different binding, or expiry at ``now``
    (default: the current time). Only the exact string that was minted verifies.
    """
    if not isinstance(token, str):
        raise InvalidRequestState("malformed")
    if not token.startswith(_VERSION_PREFIX):
        head, dot, _ = token.partition(".")
        versioned = bool(dot) and head.isascii() and head.isdigit()
        raise InvalidRequestState("unknown_version" if versioned else "malformed")
    body = token[len(_VERSION_PREFIX) :]
    if not body.isascii():
        raise InvalidRequestState("malformed")
    encoded = body.encode("ascii")
    pad = -len(encoded) % 4
    if pad == 3:
        raise InvalidRequestState("malformed")
    try:
        raw = binascii.a2b_base64(encoded.translate(_URL_TO_STD) + b"=" * pad)
    except binascii.Error:
        raise InvalidRequestState("malformed") from None
    # a2b_base64 is lenient (skips stray characters, ignores non-zero trailing
    # bits, and accepts "+/" alongside our "-_"); re-encoding and comparing
    # admits exactly one spelling of every token.
    if _b64encode(raw) != encoded or len(raw) < _MIN_RAW_LEN:
        raise InvalidRequestState("malformed")

    candidates = ring._by_kid.get(raw[:_KID_LEN])
    if candidates is None:
        raise InvalidRequestState("unknown_key")
    nonce = raw[_KID_LEN:_CT_START]
    sealed = raw[_CT_START:]
    for key in candidates:
        try:
            plaintext = key.aead.decrypt(nonce, sealed, key.aad)
        except InvalidTag:
            continue
        break
    else:
        raise InvalidRequestState("decrypt_failed")

    # Everything below was written by this server under a key it holds.
    flags, round_, expires_at = _HEADER.unpack_from(plaintext)
    if flags & ~_KNOWN_FLAGS:
        raise InvalidRequestState("malformed")
    if not hmac.compare_digest(
        plaintext[_PT_BIND_START:_PT_DATA_START], _binding_tag(key, binding)
    ):
        raise InvalidRequestState("binding_mismatch")
    if flags & _FLAG_EXPIRES:
        # "not <" so that a NaN clock fails closed.
        if not (time.time() if now is None else now) < expires_at:
            raise InvalidRequestState("expired")
    else:
        expires_at = None
    data = plaintext[_PT_DATA_START:]
    if flags & _FLAG_ZLIB:
        try:
            data = zlib.decompress(data)
        except zlib.error:
            raise InvalidRequestState("malformed") from None
    return VerifiedState(round_, expires_at, data)


_EMPTY_ARGUMENTS_DIGEST: Final = hashlib.sha256(b"\x00{}").digest()


def digest_arguments(arguments: Mapping[str, Any] | None) -> bytes:
    """Return a stable 32-byte SHA-256 digest of JSON-compatible request arguments.

    Key order does not matter; ``None`` and ``{}`` digest the same. Values that
    differ as JSON (``1`` vs ``1.0`` vs ``true``, ``null`` vs ``NaN``) digest
    differently. Raises ``TypeError``/``ValueError`` for values that cannot be
    serialised as JSON.
    """
    if not arguments:
        return _EMPTY_ARGUMENTS_DIGEST
    if type(arguments) is not dict:
        arguments = dict(arguments)
    try:
        encoded: bytes | None = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # includes orjson.JSONEncodeError: >64-bit ints, lone surrogates
        encoded = None
    # orjson writes NaN and infinities as null; any output containing "null"
    # therefore goes through the stdlib encoder, which keeps them distinct.
    # The leading byte separates the two encodings so they never collide.
    if encoded is not None and b"null" not in encoded:
        return hashlib.sha256(b"\x00" + encoded).digest()
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(b"\x01" + text.encode("ascii")).digest()
