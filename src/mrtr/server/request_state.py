"""Sealed ``requestState`` tokens for multi round-trip requests.

A server that answers with an ``InputRequiredResult`` hands the client an opaque
``requestState`` string that the client echoes on its retry.  The string travels
through an untrusted party, so it is sealed with an AEAD (AES-256-GCM): the
client cannot alter it or read what it holds, and it is bound to the request it
was minted for (method, target, arguments, server, principal) and optionally to
an expiry.

What sealing cannot hide is the token's length, and a state mixes server secrets
(``ctx.once`` results, a handler's own plaintext) with answers the client chose.
So the payload is never compressed: compressed length would tell a client that
varies its answers how much they have in common with a secret.  The plaintext is
also padded to a multiple of 64 bytes, so one token shows the size of what it
holds only to within 64 bytes (a client varying the size of its answers can
still find the secrets' total size, never their content).  Nor does sealing
stop a client from presenting the same token again before it expires: every
token carries a random flow id, the same on every round of one flow, with which
a server can refuse repeats.

Token format (ASCII, URL-safe)::

    "2." + base64url_nopad(kid[4] | nonce[12] | AES-GCM(plaintext, aad) )

    aad       = b"mrtr/request-state/v2\\x00" + kid
    plaintext = flags:u8 | pad:u8 | round:u32 | expires_at:f64 | flow_id[16]
                | binding_tag[16] | data | zero[pad]     (a multiple of 64 bytes)
    flags     = 0x01 expiry present

Each secret is expanded once with HKDF-SHA256 into an AES key, a binding-tag
key and the 4-byte key id ``kid``. ``binding_tag`` is a BLAKE2b-128 keyed with
the binding-tag key over the length-prefixed binding fields, so a
token verifies only for the binding it was minted for, and a mismatch can be
told apart from tampering in the server log.  Version 1 tokens (whose payload
could be compressed) are refused as ``unknown_version``.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .input_bounds import MAX_DEPTH, nesting_exceeds

__all__ = [
    "MIN_SECRET_BYTES",
    "InvalidRequestState",
    "RequestStateKeyRing",
    "StateBinding",
    "VerifiedState",
    "check_secrets",
    "digest_arguments",
    "mint_request_state",
    "new_flow_id",
    "verify_request_state",
]

_VERSION_PREFIX: Final = "2."
# Key derivation did not change with the token layout: a configured secret keeps its key id.
_HKDF_INFO: Final = b"mrtr/request-state/v1 keys"
_AAD_LABEL: Final = b"mrtr/request-state/v2\x00"

#: The shortest secret accepted: HKDF does not strengthen a short or guessable secret.
MIN_SECRET_BYTES: Final = 32
_GENERATE_HINT: Final = (
    'generate one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'
)

_KID_LEN: Final = 4
_NONCE_LEN: Final = 12
_GCM_TAG_LEN: Final = 16
_FLOW_ID_LEN: Final = 16
_BIND_TAG_LEN: Final = 16
_AEAD_KEY_LEN: Final = 32
_BIND_KEY_LEN: Final = 32

# flags, pad, round, expires_at (0.0 when the expiry flag is clear)
_HEADER: Final = struct.Struct(">BBId")
_FLAG_EXPIRES: Final = 0x01
_KNOWN_FLAGS: Final = _FLAG_EXPIRES
_MAX_ROUND: Final = 0xFFFFFFFF
# Plaintexts are padded to a multiple of this, so a token's length shows the size of what
# it holds only to within a block (see the module docstring).
_BLOCK: Final = 64
_ZEROS: Final = bytes(_BLOCK)

_PT_FLOW_START: Final = _HEADER.size
_PT_BIND_START: Final = _PT_FLOW_START + _FLOW_ID_LEN
_PT_DATA_START: Final = _PT_BIND_START + _BIND_TAG_LEN
_CT_START: Final = _KID_LEN + _NONCE_LEN
_RAW_OVERHEAD: Final = _CT_START + _GCM_TAG_LEN
_MIN_RAW_LEN: Final = _RAW_OVERHEAD + _PT_DATA_START + (-_PT_DATA_START % _BLOCK)

# has_principal, len(method), len(target), len(digest), len(audience), len(principal)
_BINDING_LENGTHS: Final = struct.Struct(">BIIIII")

_URL_ALPHABET: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# Base64url to standard base64 for strict decoding: "-_" become "+/", and the characters of
# the standard alphabet that base64url lacks ("+/", and the padding "=") become "!", which
# strict decoding refuses like any other stray character.
_URL_TO_STD_STRICT: Final = bytes.maketrans(b"-_+/=", b"+/!!!")
_PADDING: Final = (b"", b"=", b"==")
# By padding needed: the last characters whose unused low bits (2 of them before one "=", 4
# before two) are zero. Any other last character spells the same bytes non-canonically.
_CLEAN_LAST: Final = (
    b"",
    bytes(c for i, c in enumerate(_URL_ALPHABET) if not i & 0b11),
    bytes(c for i, c in enumerate(_URL_ALPHABET) if not i & 0b1111),
)
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


# Frozen dataclasses whose `__init__` is written out: the generated one sets each field through
# `object.__setattr__`, looked up per field; one of each is made per round. The slots'
# descriptors (bound after the class is made, see below) set a field directly and are what
# freezing leaves open, exactly as the generated `__init__` uses it.


@dataclass(frozen=True, slots=True, init=False)
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

    def __init__(
        self,
        method: str,
        target: str,
        arguments_digest: bytes,
        audience: str,
        principal: str | None = None,
    ) -> None:
        _set_method(self, method)
        _set_target(self, target)
        _set_arguments_digest(self, arguments_digest)
        _set_audience(self, audience)
        _set_principal(self, principal)


@dataclass(frozen=True, slots=True, init=False)
class VerifiedState:
    """The contents of a token that passed verification."""

    round: int
    """The round number stored at mint time."""
    expires_at: float | None
    """Unix seconds after which the token is rejected; ``None`` means never."""
    data: bytes
    """The caller's opaque payload."""
    flow_id: str = ""
    """The flow the token belongs to: the same on every round of one flow, random across
    flows (32 hex digits, see :func:`new_flow_id`). Empty only when a custom verifier built
    this value without one."""

    def __init__(
        self, round: int, expires_at: float | None, data: bytes, flow_id: str = ""
    ) -> None:
        _set_round(self, round)
        _set_expires_at(self, expires_at)
        _set_data(self, data)
        _set_flow_id(self, flow_id)


_Setter = Any  # a slot's `member_descriptor.__set__`
_set_method: _Setter = StateBinding.__dict__["method"].__set__
_set_target: _Setter = StateBinding.__dict__["target"].__set__
_set_arguments_digest: _Setter = StateBinding.__dict__["arguments_digest"].__set__
_set_audience: _Setter = StateBinding.__dict__["audience"].__set__
_set_principal: _Setter = StateBinding.__dict__["principal"].__set__
_set_round: _Setter = VerifiedState.__dict__["round"].__set__
_set_expires_at: _Setter = VerifiedState.__dict__["expires_at"].__set__
_set_data: _Setter = VerifiedState.__dict__["data"].__set__
_set_flow_id: _Setter = VerifiedState.__dict__["flow_id"].__set__


class _Key:
    """One derived key: AEAD, binding-tag key and public key id."""

    __slots__ = ("aad", "aead", "bind_hash", "bind_key", "kid")

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
        # Keyed once: a copy of it hashes a binding without taking in the key again.
        self.bind_hash = hashlib.blake2b(key=self.bind_key, digest_size=_BIND_TAG_LEN)


def _secret_bytes(secret: object) -> bytes:
    if isinstance(secret, str):
        raw = secret.encode("utf-8")
    elif isinstance(secret, bytes | bytearray | memoryview):
        raw = bytes(secret)
    else:
        raise TypeError("request-state secrets must be str or bytes")
    if not raw:
        raise ValueError(f"request-state secrets must not be empty; {_GENERATE_HINT}")
    if len(raw) < MIN_SECRET_BYTES:
        raise ValueError(
            f"a request-state secret must be at least {MIN_SECRET_BYTES} bytes "
            f"(this one has {len(raw)}); {_GENERATE_HINT}"
        )
    return raw


def _secret_list(secrets: str | bytes | Sequence[str | bytes]) -> list[bytes]:
    if isinstance(secrets, str | bytes | bytearray | memoryview):
        return [_secret_bytes(secrets)]
    if not isinstance(secrets, Iterable):
        raise TypeError("request-state secrets must be str or bytes, or a list of them")
    raw = [_secret_bytes(s) for s in secrets]
    if not raw:
        raise ValueError(f"a RequestStateKeyRing needs at least one secret; {_GENERATE_HINT}")
    return raw


def check_secrets(secrets: str | bytes | Sequence[str | bytes]) -> None:
    """Raise ``ValueError``/``TypeError`` unless ``secrets`` would make a key ring.

    Each secret must be str or bytes of at least :data:`MIN_SECRET_BYTES` bytes (UTF-8);
    the message says how to generate one.
    """
    _secret_list(secrets)


class RequestStateKeyRing:
    """Secrets for sealing ``requestState``; the first seals, all verify.

    ``verify_only`` secrets are accepted and never seal. Rotating a deployment goes in two
    phases, so that no instance ever seals with a key another cannot read: first every
    instance gets ``RequestStateKeyRing(old, verify_only=[new])``, then (once all run that)
    ``RequestStateKeyRing(new, verify_only=[old])``; ``old`` is dropped when the states it
    sealed have expired. A plain ``[new, old]`` ring also verifies both, but while a rolling
    restart is under way it seals with ``new``, which the instances not yet restarted refuse.
    Secrets should be
    high-entropy (e.g. ``secrets.token_bytes(32)``); they are expanded with
    HKDF-SHA256, which does not strengthen weak passwords. Each key uses random
    96-bit nonces, so rotate well before sealing ~2**32 tokens with one secret.

    With ``secrets=None`` a random per-process secret is generated: tokens then
    verify only in this process and not after a restart, so deployments with
    several server instances (or any load balancing) must configure a shared key.
    """

    __slots__ = ("_by_kid", "_random", "_sealer")

    def __init__(
        self,
        secrets: str | bytes | Sequence[str | bytes] | None = None,
        *,
        verify_only: str | bytes | Sequence[str | bytes] = (),
    ) -> None:
        raw = [os.urandom(32)] if secrets is None else _secret_list(secrets)
        if isinstance(verify_only, str | bytes | bytearray | memoryview) or verify_only:
            raw += _secret_list(verify_only)
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

    def sealing_key(self) -> _Key:
        """The key new tokens are sealed with (the first secret's)."""
        return self._sealer

    def keys_for(self, kid: bytes) -> tuple[_Key, ...] | None:
        """The keys whose id is `kid` (a token's first bytes), or None: not one of ours."""
        return self._by_kid.get(kid)

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
    tag = key.bind_hash.copy()
    tag.update(encoded)
    return tag.digest()


def _b64encode(raw: bytes) -> bytes:
    return binascii.b2a_base64(raw, newline=False).translate(_STD_TO_URL).rstrip(b"=")


def mint_request_state(
    ring: RequestStateKeyRing,
    binding: StateBinding,
    data: bytes,
    *,
    round: int,
    flow_id: str | None = None,
    ttl: float = 0,
    now: float | None = None,
) -> str:
    """Seal ``data`` into a ``requestState`` token bound to ``binding``.

    ``round`` (0..2**32-1) and ``flow_id`` (from :func:`new_flow_id`; default: a
    new one) are returned on verification; ``ttl`` is the lifetime in seconds
    from ``now`` (default: the current time), 0 meaning the token never
    expires. ``data`` is stored as it is, never compressed, so it may mix
    secrets with client-chosen content (see the module docstring).

    Returns an ASCII token made only of ``[A-Za-z0-9_.-]``.
    """
    flow = None if flow_id is None else _flow_bytes(flow_id)
    return _mint(ring, binding, data, round, flow, ttl, now)[0]


def mint_for_flow(
    ring: RequestStateKeyRing,
    binding: StateBinding,
    data: bytes,
    round: int,
    flow_id: str,
    ttl: float,
) -> tuple[str, str]:
    """:func:`mint_request_state` for the server's rounds: ``(token, flow_id)``.

    An empty ``flow_id`` starts a new flow, whose id is returned: its random bytes come from
    the same ``os.urandom`` call as the token's nonce.
    """
    if not flow_id:
        token, flow = _mint(ring, binding, data, round, None, ttl, None)
        return token, flow.hex()
    return _mint(ring, binding, data, round, _flow_bytes(flow_id), ttl, None)[0], flow_id


def _mint(
    ring: RequestStateKeyRing,
    binding: StateBinding,
    data: bytes,
    round: int,
    flow: bytes | None,
    ttl: float,
    now: float | None,
) -> tuple[str, bytes]:
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
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
    # Fresh bytes from the OS on every call (nothing buffered that a fork could repeat); a new
    # flow's id and the nonce share one call, as independent slices of it.
    if flow is None:
        fresh = os.urandom(_FLOW_ID_LEN + _NONCE_LEN)
        flow = fresh[:_FLOW_ID_LEN]
        nonce = fresh[_FLOW_ID_LEN:]
    else:
        nonce = os.urandom(_NONCE_LEN)
    pad = -(_PT_DATA_START + len(data)) % _BLOCK
    key = ring.sealing_key()
    plaintext = b"".join(
        (
            _HEADER.pack(flags, pad, round, expires_at),
            flow,
            _binding_tag(key, binding),
            data,
            _ZEROS[:pad],
        )
    )
    sealed = key.aead.encrypt(nonce, plaintext, key.aad)
    return _VERSION_PREFIX + _b64encode(key.kid + nonce + sealed).decode("ascii"), flow


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
    # Exactly one spelling of every token is admitted, without re-encoding to compare: the
    # table maps "-_" to "+/" and every character outside the base64url alphabet ("+/="
    # included) to one outside the standard alphabet, which strict decoding refuses. Strict
    # decoding does not look at the unused low bits of the last character, which are checked
    # after it; with those two, decoding is one-to-one.
    try:
        raw = binascii.a2b_base64(
            encoded.translate(_URL_TO_STD_STRICT) + _PADDING[pad], strict_mode=True
        )
    except binascii.Error:
        raise InvalidRequestState("malformed") from None
    # Every genuine token holds whole blocks: anything else was cut or padded in transit.
    size = len(raw)
    if (
        size < _MIN_RAW_LEN
        or (size - _RAW_OVERHEAD) % _BLOCK
        or (pad and encoded[-1] not in _CLEAN_LAST[pad])
    ):
        raise InvalidRequestState("malformed")

    candidates = ring.keys_for(raw[:_KID_LEN])
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
    flags, pad, round_, expires_at = _HEADER.unpack_from(plaintext)
    end = len(plaintext) - pad
    if flags & ~_KNOWN_FLAGS or end < _PT_DATA_START:
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
    flow_id = plaintext[_PT_FLOW_START:_PT_BIND_START].hex()
    return VerifiedState(round_, expires_at, plaintext[_PT_DATA_START:end], flow_id)


def new_flow_id() -> str:
    """A fresh random flow id: 16 random bytes as 32 lowercase hex digits (URL-safe)."""
    return os.urandom(_FLOW_ID_LEN).hex()


def _flow_bytes(flow_id: str) -> bytes:
    # Hex rather than base64: both ways are single fast calls, and it is URL-safe as it is.
    if not isinstance(flow_id, str):
        raise TypeError("flow_id must be a str from new_flow_id()")
    try:
        raw = bytes.fromhex(flow_id)
    except ValueError:
        raw = b""
    if len(raw) != _FLOW_ID_LEN or raw.hex() != flow_id:
        raise ValueError("flow_id must be 32 lowercase hex digits, from new_flow_id()")
    return raw


_EMPTY_ARGUMENTS_DIGEST: Final = hashlib.sha256(b"\x00{}").digest()


def digest_arguments(arguments: Mapping[str, Any] | None) -> bytes:
    """Return a stable 32-byte SHA-256 digest of JSON-compatible request arguments.

    Key order does not matter; ``None`` and ``{}`` digest the same. Values that
    differ as JSON (``1`` vs ``1.0`` vs ``true``, ``null`` vs ``NaN``) digest
    differently. Raises ``TypeError``/``ValueError`` for values that cannot be
    serialised as JSON, and ``ValueError`` for values nested more than
    ``MAX_DEPTH`` levels deep (checked without recursion).
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
    # orjson refuses more than 254 levels, and the stdlib encoder recurses: bound the depth
    # first, so deep client input is a clear ValueError and never a RecursionError.
    if encoded is None and nesting_exceeds(arguments, MAX_DEPTH):
        raise ValueError(f"arguments are nested more than {MAX_DEPTH} levels deep")
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(b"\x01" + text.encode("ascii")).digest()
