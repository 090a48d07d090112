"""`WWW-Authenticate` challenges (RFC 9110 11.6.1), as a client reads them on a 401 or 403.

A header may hold several challenges (`Bearer realm="x", DPoP algs="ES256"`), and a response may
carry several headers. Parsing never raises: what cannot be read is skipped, so a hostile or
sloppy server can at worst leave out a parameter, never break the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_SCHEME = re.compile(rf"[\s,]*({_TOKEN})")
# auth-param = token BWS "=" BWS ( token / quoted-string )
_PARAM = re.compile(rf"\s*({_TOKEN})\s*=\s*(\"(?:[^\"\\]|\\.)*\"|{_TOKEN})?\s*")
_TOKEN68 = re.compile(r"\s+([A-Za-z0-9._~+/-]+=*)\s*(?=,|$)")
_QUOTED_PAIR = re.compile(r"\\(.)")
_MAX_HEADER = 16 * 1024  # a longer header is cut: nothing a client needs is that long


@dataclass(frozen=True, slots=True)
class Challenge:
    """One challenge: its scheme (lower-cased) and parameters (names lower-cased; for a name
    given twice, the first value)."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=dict)
    token68: str | None = None

    @property
    def resource_metadata(self) -> str | None:
        """The Protected Resource Metadata URL (RFC 9728 5.1), when given."""
        return self.params.get("resource_metadata")

    @property
    def scope(self) -> str | None:
        """The scopes the server asks for, space-separated, when given."""
        return self.params.get("scope")

    @property
    def error(self) -> str | None:
        """The error code (`invalid_token`, `insufficient_scope`, `use_dpop_nonce`...)."""
        return self.params.get("error")

    @property
    def error_description(self) -> str | None:
        """The server's human-readable explanation, when given."""
        return self.params.get("error_description")


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge in one `WWW-Authenticate` header value, in order."""
    text = header[:_MAX_HEADER]
    found: list[Challenge] = []
    pos = 0
    while pos < len(text):
        scheme = _SCHEME.match(text, pos)
        if scheme is None:
            break
        pos = scheme.end()
        params: dict[str, str] = {}
        token68 = None
        t68 = _TOKEN68.match(text, pos)
        if t68 is not None:
            token68 = t68.group(1)
            pos, clean = t68.end(), True
        else:
            pos, clean = _read_params(text, pos, params)
        found.append(Challenge(scheme.group(1).lower(), params, token68))
        if not clean:
            # Skip what could not be read up to the next comma: a malformed parameter costs
            # only itself.
            comma = text.find(",", pos)
            pos = len(text) if comma < 0 else comma
    return found


def _read_params(text: str, pos: int, params: dict[str, str]) -> tuple[int, bool]:
    """Read `name=value` pairs from `pos`; the position after them, and whether they ended
    cleanly (at the end, or at a comma before the next challenge)."""
    while True:
        rest = text[pos:]
        if not rest.strip():
            return len(text), True
        param = _PARAM.match(text, pos)
        if param is None:
            # A challenge with no parameters is followed by a comma or the next scheme.
            return pos, rest.lstrip().startswith(",")
        name, raw = param.group(1).lower(), param.group(2) or ""
        value = _QUOTED_PAIR.sub(r"\1", raw[1:-1]) if raw.startswith('"') else raw
        params.setdefault(name, value)
        pos = param.end()
        if pos >= len(text):
            return pos, True
        if text[pos] != ",":
            return pos, False
        # After a comma: another parameter of this challenge, or the next challenge's scheme.
        if _PARAM.match(text, pos + 1) is None:
            return pos + 1, True
        pos += 1


def auth_challenge(headers: Iterable[str]) -> Challenge | None:
    """The challenge a token-using client acts on: the first `Bearer` or `DPoP` one among all
    the `WWW-Authenticate` headers (DPoP first when both are offered by one server makes no
    difference to discovery: both carry the same parameters)."""
    for header in headers:
        for challenge in parse_challenges(header):
            if challenge.scheme in ("bearer", "dpop"):
                return challenge
    return None


__all__ = ["Challenge", "auth_challenge", "parse_challenges"]
