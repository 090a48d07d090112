"""Which era a server speaks: 2026-07-28 ("modern") or `initialize`-based ("legacy").

The rules follow the spec's Backward Compatibility sections (versioning, stdio, Streamable
HTTP). Over stdio a `ping` in the modern shape goes first: 2026-07-28 has no ping, so only a
legacy server answers it (quietly, where an unknown request such as the probe makes an mcp 1.x
server log a long validation error), and then no probe follows. A `server/discover` probe
that succeeds, or fails with a *recognised modern error*, identifies a modern server; any
other answer (an error, garbage, silence past the probe timeout, a server that exits)
identifies a legacy one. The fallback is never keyed to one error code: legacy servers answer
unknown pre-`initialize` requests in many ways.

A recognised modern error is one only a 2026-07-28 server sends: `-32022` whose
`data.supported` names a modern version, `-32021` with `data.requiredCapabilities`, or the
header-mismatch `-32020`.

When the first request is not a probe but an ordinary one sent in the modern shape (HTTP),
an error in answer to it shows a legacy server only when it refuses the request before any
handler could run it: an HTTP 400, 404 or 405 without a JSON-RPC body, an error that does not
answer the request's id (legacy transports reject a request without a session before reading
it), or a `-32022` that names no modern version. An error that answers the request's id is the
server's answer to it, whatever its message says ("session expired" may be the application's
own): it goes to the caller as it is, the request is never sent again, and no verdict is drawn
from it.

The verdict belongs to the server: it is cached per origin and path for HTTP, and per command
(with its arguments, directory and environment) for stdio, for this process's lifetime, so a
legacy server is probed once, not on every connection. Only an unambiguous answer is cached:
a legacy verdict once `initialize` has confirmed what an error or a discover result showed,
never a silent probe (a slow server), a crash, or one error that answered the request itself.
A cached verdict is re-examined when it later proves wrong.
"""

from __future__ import annotations

from typing import Any, Literal

from ..protocol.errors import (
    HEADER_MISMATCH,
    HTTP_ERROR,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSIONS

Era = Literal["modern", "legacy"]
MODERN: Era = "modern"
LEGACY: Era = "legacy"

#: HTTP statuses that say nothing about the era: authorization and rate limiting.
_NOT_ERA_STATUSES = frozenset({401, 403, 407, 429})
#: HTTP statuses (without a JSON-RPC body) with which a legacy server refuses a modern request:
#: 400 (no session, an unknown `MCP-Protocol-Version`), 404 and 405 (an HTTP+SSE-era endpoint).
_LEGACY_REFUSALS = frozenset({400, 404, 405})


def is_modern_version(version: Any) -> bool:
    """True for a per-request-metadata revision (2026-07-28 or later, as dates sort)."""
    return (
        isinstance(version, str)
        and version not in LEGACY_PROTOCOL_VERSIONS
        and version >= LATEST_PROTOCOL_VERSION[:4]  # a year: "2026..." and later
    )


def supported_versions(error: McpError) -> list[str] | None:
    """`data.supported` of a -32022 error, when it is a list of strings."""
    if error.code != UNSUPPORTED_PROTOCOL_VERSION or not isinstance(error.data, dict):
        return None
    supported = error.data.get("supported")
    if not isinstance(supported, list) or not all(isinstance(v, str) for v in supported):
        return None
    return supported


def is_recognised_modern_error(error: McpError) -> bool:
    """True for an error only a 2026-07-28 server sends (see the module docstring)."""
    if error.code == UNSUPPORTED_PROTOCOL_VERSION:
        return any(is_modern_version(v) for v in supported_versions(error) or ())
    if error.code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        return isinstance(error.data, dict) and "requiredCapabilities" in error.data
    return error.code == HEADER_MISMATCH


def _http_status(error: McpError) -> int | None:
    if error.code != HTTP_ERROR or not isinstance(error.data, dict):
        return None
    status = error.data.get("status")
    return status if isinstance(status, int) else None


def probe_verdict(error: McpError) -> Era | None:
    """The era a failed `server/discover` probe shows; None when the failure says nothing
    about the server (an HTTP 5xx, an authorization challenge, a redirect: raise it)."""
    if is_recognised_modern_error(error):
        return MODERN
    status = _http_status(error)
    if status is not None and (status >= 500 or status < 400 or status in _NOT_ERA_STATUSES):
        return None  # an outage, a challenge, a redirect (never followed)
    return LEGACY


def inline_verdict(error: McpError, answered_id: bool) -> Era | None:
    """The era shown by an error in answer to an ordinary request sent in the modern shape
    (`answered_id`: the error response carried the request's id); None when it shows none
    (the server's own answer to the request, or an outage)."""
    if is_recognised_modern_error(error):
        return MODERN
    status = _http_status(error)
    if status is not None:
        return LEGACY if status in _LEGACY_REFUSALS else None
    if error.code == UNSUPPORTED_PROTOCOL_VERSION or not answered_id:
        return LEGACY
    return None


# --- the verdict cache: per origin and path (HTTP) ----------------------------------------------

_by_endpoint: dict[str, Era] = {}
_MAX_ENDPOINTS = 1024


def endpoint_key(transport: object) -> str | None:
    """What the verdict for `transport`'s server is cached under: its `era_key` when it has
    one (stdio: the command and its configuration), else its URL without query or fragment;
    None for a transport with neither (in memory: one server object, one client)."""
    key = getattr(transport, "era_key", None)
    if isinstance(key, str):
        return key
    url = getattr(transport, "url", None)
    if url is None:
        return None
    text = str(url)
    return text.split("#", 1)[0].split("?", 1)[0]


def cached(key: str | None) -> Era | None:
    """The verdict cached for `key`, if any."""
    return _by_endpoint.get(key) if key is not None else None


def remember(key: str | None, era: Era) -> None:
    """Cache `era` for `key` (a bounded cache: an application talking to thousands of
    servers starts over rather than grow without limit)."""
    if key is None:
        return
    if key not in _by_endpoint and len(_by_endpoint) >= _MAX_ENDPOINTS:
        _by_endpoint.clear()
    _by_endpoint[key] = era


def forget(key: str | None) -> None:
    """Drop the verdict cached for `key` (it proved wrong)."""
    if key is not None:
        _by_endpoint.pop(key, None)


__all__ = [
    "LEGACY",
    "MODERN",
    "Era",
    "cached",
    "endpoint_key",
    "forget",
    "inline_verdict",
    "is_modern_version",
    "is_recognised_modern_error",
    "probe_verdict",
    "remember",
    "supported_versions",
]
