"""The header checks of a Streamable HTTP request: `Origin` and `Host` against the
allowlists, `Content-Type`, `Content-Encoding` (none but `identity`: a compressed body is
refused with 415 naming the header, never decoded, so a small body cannot unpack into a large
one, nor fail later as a puzzling parse error), `Accept`, and the request metadata headers
against the body
(`Mcp-Method`, `MCP-Protocol-Version`, `Mcp-Name`, `Mcp-Param-*`; see `headers.py`).

A client sends the same few header values again and again, so each value is worked out once
per distinct raw value and remembered in a bounded cache (`remember`); `StreamableHTTPApp`
reads the caches of its common case inline and calls the checks only on a miss.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import urlsplit

import mrtr.transport.headers as mcp_headers

from ..protocol import meta as meta_keys
from ..protocol.errors import HEADER_MISMATCH, McpError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")

_T = TypeVar("_T")

_LOCAL_HOSTS = frozenset(("localhost", "127.0.0.1", "::1"))

_NAME_FIELDS = mcp_headers.NAME_FIELDS
_NAME_OPTIONAL = mcp_headers.NAME_OPTIONAL
_METHOD = b"mcp-method"
_VERSION = b"mcp-protocol-version"
_NAME = b"mcp-name"
_PROTOCOL_VERSION = meta_keys.PROTOCOL_VERSION
#: A header triple that passed: the method, protocol version and name they name, and the
#: params field the name is compared with (None for a method without one).
_Passed = tuple[str, str, "str | None", "str | None"]
_CACHE_LIMIT = 256  # distinct values of a header remembered
_CACHE_KEY_LIMIT = 512  # bytes of the longest header value remembered


def show(value: str) -> str:
    """A value quoted for an error message, cut short when long."""
    return repr(value if len(value) <= 80 else value[:77] + "...")


def encoding_refusal(value: bytes) -> str | None:
    """Why a body sent with `Content-Encoding: value` is refused (415), or None for
    `identity`: bodies are read as they are, never decompressed."""
    if value.strip().lower() in (b"", b"identity"):
        return None
    shown = show(value.decode("latin-1"))
    return (
        f"Unsupported Media Type: Content-Encoding {shown} is not accepted here; send the "
        "JSON-RPC message uncompressed"
    )


def mismatch(message: str) -> McpError:
    """The -32020 HeaderMismatch error saying `message`."""
    return McpError(HEADER_MISMATCH, f"Header mismatch: {message}")


def media_ranges(value: bytes) -> list[tuple[str, float]]:
    """The media ranges of an `Accept` value, each with its quality."""
    ranges = []
    for part in value.decode("latin-1").split(","):
        media, *params = part.split(";")
        quality = 1.0
        for param in params:
            key, _, number = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(number)
                except ValueError:
                    quality = 0.0
        ranges.append((media.strip().lower(), quality))
    return ranges


def acceptable(ranges: list[tuple[str, float]], media: str) -> bool:
    """Whether `ranges` (of an `Accept` value) allow `media`."""
    # The most specific range that names the type decides (RFC 9110 12.5.1).
    for candidate in (media, media.split("/")[0] + "/*", "*/*"):
        qualities = [quality for name, quality in ranges if name == candidate]
        if qualities:
            return max(qualities) > 0
    return False


def local_origin(origin: str) -> bool:
    """Whether `origin` is http(s) on localhost, 127.0.0.1 or [::1] (any port)."""
    try:
        parts = urlsplit(origin)
        return (
            parts.scheme in ("http", "https")
            and parts.hostname in _LOCAL_HOSTS
            and parts.username is None
            and not parts.path
            and (parts.port is None or parts.port > 0)  # `port` raises for a malformed one
        )
    except ValueError:
        return False


def remember(cache: dict[bytes, _T], key: bytes, value: _T) -> _T:
    """`value`, remembered for `key` unless `key` is long (values come from clients: never
    let a cache grow without bound, in entries or in bytes)."""
    if len(key) <= _CACHE_KEY_LIMIT:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value
    return value


class ParamHeader(NamedTuple):
    """One `Mcp-Param-*` header to check: its name, as a header key, the argument's path and
    that path as error messages name it (all worked out once per tool definition)."""

    header: str
    key: bytes
    path: tuple[str, ...]
    where: str


def check_param_headers(
    params: tuple[ParamHeader, ...], arguments: Any, headers: dict[bytes, bytes]
) -> McpError | None:
    """Compare the `Mcp-Param-*` headers `params` names with the tool call's `arguments`."""
    for param in params:
        header = param.header
        body_value = mcp_headers.argument_at(arguments, param.path)
        raw = headers.get(param.key)
        where = param.where
        if raw is None:
            if body_value is None:
                continue
            return mismatch(f"the {header} header is required: the body has {where}")
        try:
            value = mcp_headers.decode_value(raw)
        except ValueError as exc:
            return mismatch(f"the {header} header {exc}")
        if body_value is None:
            return mismatch(f"{header} header is set but the body has no {where}")
        if not mcp_headers.argument_matches(value, body_value):
            return mismatch(
                f"{header} header value {show(value)} does not match body {where} "
                f"{show(str(body_value))}"
            )
    return None


class HeaderChecks:
    """The header checks of one endpoint, with their caches.

    `allowed_origins` and `allowed_hosts` as `StreamableHTTPApp` takes them.
    """

    def __init__(
        self,
        server: ServerEndpoint,
        allowed_origins: Iterable[str] | None,
        allowed_hosts: Iterable[str] | None,
    ) -> None:
        self.server = server
        self.origins = (
            None if allowed_origins is None else {o.rstrip("/").lower() for o in allowed_origins}
        )
        #: The hosts allowed, or None for any.
        self.hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        #: `Accept` value -> (allows JSON, allows SSE).
        self.accept_cache: dict[bytes, tuple[bool, bool]] = {}
        #: `Content-Type` value -> whether it is JSON.
        self.json_type_cache: dict[bytes, bool] = {}
        self.origin_cache: dict[bytes, bool] = {}
        self.text_cache: dict[bytes, str] = {}  # Mcp-Method, MCP-Protocol-Version
        self.name_cache: dict[bytes, str] = {}  # Mcp-Name, decoded
        self.host_cache: dict[bytes, bool] = {}
        self.tool_params: dict[str, tuple[dict[str, Any], tuple[ParamHeader, ...]]] = {}
        #: (`Mcp-Method`, `MCP-Protocol-Version`, `Mcp-Name`) raw values that passed.
        self.passed: dict[tuple[bytes | None, ...], _Passed] = {}

    def forbidden(self, headers: dict[bytes, bytes]) -> str | None:
        """Why a request is refused with 403 (its `Origin` or `Host`), or None."""
        origin = headers.get(b"origin")
        if origin is not None and not self.origin_allowed(origin):
            return "Forbidden: this Origin is not allowed"
        if self.hosts is not None and not self.host_allowed(headers.get(b"host")):
            return "Forbidden: this Host is not allowed"
        return None

    def check_headers(
        self, message: dict[str, Any], headers: dict[bytes, bytes]
    ) -> McpError | None:
        """Compare the request metadata headers with the body (see `headers.py`)."""
        method: str = message["method"]
        params = message.get("params")
        # A client sends the same headers again and again: a triple that passed before, with
        # a body that says the same, passes with one lookup (`_compare` remembers it).
        key = (headers.get(_METHOD), headers.get(_VERSION), headers.get(_NAME))
        passed = self.passed.get(key)
        if (
            passed is None
            or params is None
            or passed[0] != method
            or type(meta := params.get("_meta")) is not dict
            or meta.get(_PROTOCOL_VERSION) != passed[1]
            or (passed[3] is not None and params.get(passed[3]) != passed[2])
        ):
            problem = self._compare(method, params, headers, key)
            if problem is not None:
                return problem
        if method == "tools/call" and params is not None:
            name = params.get("name")
            if type(name) is str:
                definition = self.server.tool_definition(name)
                cached = self.tool_params.get(name)
                annotated = (
                    cached[1]
                    if cached is not None and cached[0] is definition
                    else self._header_params(name, definition)
                )
                if annotated:
                    return check_param_headers(annotated, params.get("arguments"), headers)
        return None

    def _compare(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: dict[bytes, bytes],
        key: tuple[bytes | None, bytes | None, bytes | None],
    ) -> McpError | None:
        """`check_headers` of `Mcp-Method`, `MCP-Protocol-Version` and `Mcp-Name`, each header
        on its own (`key` holds their raw values); a triple that passes is remembered."""
        raw = key[0]
        if raw is None:
            hint = (
                "; a client of MCP 2025-11-25 or earlier sends initialize first"
                if self.server.serves_legacy
                else ""
            )
            return mismatch(f"the Mcp-Method header is required (here {show(method)}){hint}")
        # Header values are decoded once per distinct raw value (a client sends the same few
        # again and again); each cache holds one transformation only.
        texts = self.text_cache
        value = texts.get(raw)
        if value is None:
            value = remember(texts, raw, raw.strip(b" \t").decode("latin-1"))
        if value != method:
            return mismatch(
                f"Mcp-Method header value {show(value)} does not match body method {show(method)}"
            )
        raw = key[1]
        if raw is None:
            return mismatch("the MCP-Protocol-Version header is required")
        meta = params.get("_meta") if params is not None else None
        body_version = meta.get(_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        # A body without a version is malformed, which the dispatcher reports (-32602).
        if isinstance(body_version, str):
            value = texts.get(raw)
            if value is None:
                value = remember(texts, raw, raw.strip(b" \t").decode("latin-1"))
            if value != body_version:
                return mismatch(
                    f"MCP-Protocol-Version header value {show(value)} does not match "
                    f"_meta[{_PROTOCOL_VERSION!r}] {show(body_version)}"
                )
        else:
            body_version = None  # not remembered: the next such request is checked again
        field = _NAME_FIELDS.get(method)
        if field is None or params is None:
            if body_version is not None:
                self._passed(key, (method, body_version, None, None))
            return None
        name = params.get(field)
        if not isinstance(name, str):
            return None  # the dispatcher says what is wrong with the body
        raw = key[2]
        if raw is None:
            if method in _NAME_OPTIONAL:
                return None  # tasks/*: lenient on a missing header (see `NAME_OPTIONAL`)
            return mismatch(f"the Mcp-Name header is required for {method} (params.{field})")
        names = self.name_cache
        value = names.get(raw)
        if value is None:
            try:
                value = mcp_headers.decode_value(raw)
            except ValueError as exc:
                return mismatch(f"the Mcp-Name header {exc}")
            remember(names, raw, value)
        if value != name:
            return mismatch(
                f"Mcp-Name header value {show(value)} does not match body params.{field} "
                f"{show(name)}"
            )
        if body_version is not None:
            self._passed(key, (method, body_version, name, field))
        return None

    def _passed(self, key: tuple[bytes | None, ...], texts: _Passed) -> None:
        # Bounded as the other caches: in entries, and in the bytes of a key.
        if sum(len(raw) for raw in key if raw is not None) <= _CACHE_KEY_LIMIT:
            if len(self.passed) >= _CACHE_LIMIT:
                self.passed.clear()
            self.passed[key] = texts

    def _header_params(
        self, tool: str, definition: dict[str, Any] | None
    ) -> tuple[ParamHeader, ...]:
        """The `x-mcp-header` annotations of tool `tool`, whose definition is `definition`
        (remembered with it: a tool registered again is read again)."""
        if definition is None:
            return ()
        try:
            params = mcp_headers.header_params(definition.get("inputSchema"))
        except mcp_headers.InvalidHeaderAnnotation as exc:
            logger.warning("tool %r: %s; its x-mcp-header annotations are not enforced", tool, exc)
            params = ()
        checks = tuple(
            ParamHeader(
                param.header,
                param.header.lower().encode("ascii"),
                param.path,
                "arguments." + ".".join(param.path),
            )
            for param in params
        )
        self.tool_params[tool] = (definition, checks)
        return checks

    def accepts(self, value: bytes) -> tuple[bool, bool]:
        known = self.accept_cache.get(value)
        if known is None:
            ranges = media_ranges(value)
            known = (
                acceptable(ranges, "application/json"),
                acceptable(ranges, "text/event-stream"),
            )
            remember(self.accept_cache, value, known)
        return known

    def is_json_type(self, value: bytes) -> bool:
        known = self.json_type_cache.get(value)
        if known is None:
            media = value.decode("latin-1").split(";")[0].strip().lower()
            known = media == "application/json"
            remember(self.json_type_cache, value, known)
        return known

    def origin_allowed(self, value: bytes) -> bool:
        known = self.origin_cache.get(value)
        if known is None:
            origin = value.decode("latin-1").strip().rstrip("/").lower()
            if self.origins is not None:
                known = "*" in self.origins or origin in self.origins
            else:
                known = local_origin(origin)
            remember(self.origin_cache, value, known)
        return known

    def host_allowed(self, value: bytes | None) -> bool:
        if value is None or self.hosts is None:
            return self.hosts is None
        known = self.host_cache.get(value)
        if known is None:
            try:
                host = urlsplit("//" + value.decode("latin-1").strip()).hostname
            except ValueError:
                host = None
            known = remember(
                self.host_cache,
                value,
                host is not None and (host in self.hosts or f"[{host}]" in self.hosts),
            )
        return known


__all__ = [
    "HeaderChecks",
    "ParamHeader",
    "acceptable",
    "check_param_headers",
    "local_origin",
    "media_ranges",
    "mismatch",
    "remember",
    "show",
]
