"""Which protocol era a request belongs to, and what its `_meta` must hold: pure functions of
the message, no I/O.

Rules:

1. The era of a request is decided once, by `classify`, called by the transport that decodes
   the message, which hands the answer on (`Server.handle_request`'s `era`). A request that
   comes on a legacy session (one an `initialize` opened) is of that session's era
   (`"legacy"`), unless its `_meta` names a served modern protocol version (`is_modern`):
   then it is `"modern"`, served statelessly beside the session. Outside a session, an
   `initialize` whose `_meta` names no protocol version at all is a legacy client's handshake
   (`"opens-session"`: it opens a session where legacy clients are served); every other
   request is `"modern"`, and its `_meta` is checked as such (rule 3). `declares_modern` is
   that test: a `_meta` that names a protocol version, served or not, is a modern client's,
   to be answered in the modern era's terms.
2. `initialize` outside a legacy session is refused (`initialize_refused`): -32601 when the
   request is itself modern (a removed method), else -32022 naming the versions served.
3. A modern request's `_meta` carries the protocol version (a served one: -32022 otherwise)
   and the client's capabilities (an object); a log level and a progress token are optional
   and must be valid. A missing or malformed required field is -32602 (`check_meta`, which
   passes the shape nearly every request has, a served version and capabilities with nothing
   optional, on its first test).
"""

from __future__ import annotations

from typing import Any, Literal

from . import jsonrpc
from . import meta as meta_keys
from .errors import METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION, McpError, invalid_params
from .errors import unsupported_protocol_version as _unsupported
from .versions import SUPPORTED_PROTOCOL_VERSIONS

_SUPPORTED = list(SUPPORTED_PROTOCOL_VERSIONS)
_PROTOCOL_VERSION = meta_keys.PROTOCOL_VERSION
_CLIENT_CAPABILITIES = meta_keys.CLIENT_CAPABILITIES
_LOG_LEVEL = meta_keys.LOG_LEVEL
_PROGRESS_TOKEN = meta_keys.PROGRESS_TOKEN

#: A request's era (rule 1): `"modern"` (2026-07-28, served statelessly), `"legacy"` (a
#: request of a legacy session), or `"opens-session"` (a legacy `initialize` outside a session).
Era = Literal["modern", "legacy", "opens-session"]


def classify(message: dict[str, Any], has_session: bool) -> Era:
    """The era of a request (rule 1); `has_session`: whether it came on a legacy session."""
    if has_session:
        params = message.get("params")
        return "modern" if isinstance(params, dict) and is_modern(params) else "legacy"
    if message.get("method") == "initialize" and not declares_modern(message):
        return "opens-session"
    return "modern"


def is_modern(params: dict[str, Any]) -> bool:
    """Whether a request's `_meta` names a served modern protocol version (rule 1)."""
    meta = params.get("_meta")
    return type(meta) is dict and meta.get(_PROTOCOL_VERSION) in SUPPORTED_PROTOCOL_VERSIONS


def declares_modern(message: dict[str, Any]) -> bool:
    """Whether a request's params carry a `_meta` protocol version of any value (rule 1)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and _PROTOCOL_VERSION in meta


def initialize_refused(params: dict[str, Any]) -> McpError:
    """The error for an `initialize` outside a legacy session (rule 2)."""
    text = (
        "initialize is not part of MCP 2026-07-28, which has no handshake; this "
        f"endpoint supports protocol versions {', '.join(_SUPPORTED)}"
    )
    if is_modern(params):
        # A modern request naming a removed method: unknown, like `ping`.
        return McpError(METHOD_NOT_FOUND, text, {"supported": _SUPPORTED})
    # A legacy-era client this endpoint cannot serve: it has no way forward, so name what this
    # server speaks (the HTTP transport answers this with 400).
    return McpError(
        UNSUPPORTED_PROTOCOL_VERSION,
        text,
        {"supported": _SUPPORTED, "requested": params.get("protocolVersion")},
    )


def check_meta(params: dict[str, Any]) -> None:
    """Refuse a modern request whose `_meta` is missing, malformed or of a version not
    served, with its precise error (rule 3)."""
    meta = params.get("_meta")
    if (
        type(meta) is dict
        and type(version := meta.get(_PROTOCOL_VERSION)) is str
        and version in SUPPORTED_PROTOCOL_VERSIONS
        and type(meta.get(_CLIENT_CAPABILITIES)) is dict
        and _LOG_LEVEL not in meta
        and _PROGRESS_TOKEN not in meta
    ):
        return  # the common `_meta`, which every test below passes: every request's path
    # A request without the required fields is malformed: -32602 (basic/index.md, and what
    # the conformance suite checks). -32022 is for a version that is given but not served.
    if not isinstance(meta, dict):
        raise invalid_params(
            f'"_meta" is required, with {_PROTOCOL_VERSION!r} (one of '
            f"{', '.join(_SUPPORTED)}) and {_CLIENT_CAPABILITIES!r}",
            {"supported": _SUPPORTED},
        )
    version = meta.get(_PROTOCOL_VERSION)
    if not isinstance(version, str):
        raise invalid_params(
            f"_meta[{_PROTOCOL_VERSION!r}] is required and must be a string: one "
            f"of {', '.join(_SUPPORTED)}",
            {"supported": _SUPPORTED},
        )
    if version not in SUPPORTED_PROTOCOL_VERSIONS:
        raise _unsupported(version, _SUPPORTED)
    if not isinstance(meta.get(_CLIENT_CAPABILITIES), dict):
        raise invalid_params(f"_meta[{_CLIENT_CAPABILITIES!r}] is required and must be an object")
    level = meta.get(_LOG_LEVEL)
    if level is not None and (not isinstance(level, str) or level not in meta_keys.LOG_LEVEL_RANK):
        raise invalid_params(
            f"_meta[{_LOG_LEVEL!r}] must be one of {', '.join(meta_keys.LOG_LEVELS)}"
        )
    check_progress_token(meta)


def check_progress_token(meta: dict[str, Any]) -> None:
    """Refuse a `_meta` progress token that is neither a string nor an integer (-32602)."""
    token = meta.get(_PROGRESS_TOKEN)
    if token is not None and not jsonrpc.is_valid_id(token):
        raise invalid_params(f"_meta[{_PROGRESS_TOKEN!r}] must be a string or an integer")


__all__ = [
    "Era",
    "check_meta",
    "check_progress_token",
    "classify",
    "declares_modern",
    "initialize_refused",
    "is_modern",
]
