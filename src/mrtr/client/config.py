"""The MCP host configuration format (`mcp.json`): which servers to start or reach, by name.

Read as the hosts write it:

* `{"mcpServers": {name: entry}}` (Claude Desktop, Claude Code, Cursor and most others) or
  `{"servers": {name: entry}}` (VS Code);
* a stdio entry: `{"command": ..., "args": [...], "env": {...}, "cwd": ...}`, with an optional
  `"type": "stdio"`;
* a Streamable HTTP entry: `{"url": ..., "headers": {...}}`, with an optional `"type"` of
  `"http"` or `"streamable-http"`. The older HTTP+SSE transport (`"type": "sse"`) is not
  spoken, and says so.

Strings may name environment variables: `${VAR}`, `${env:VAR}` (VS Code) and
`${VAR:-default}`; a variable that is not set (and has no default) makes its entry invalid.
A relative `cwd` is taken from the directory of the file the configuration was read from.
`"disabled": true` leaves an entry out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HTTP_TYPES = ("http", "streamable-http", "streamableHttp")


@dataclass(frozen=True, slots=True)
class StdioServerConfig:
    """A server started as a subprocess and spoken to over stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class HttpServerConfig:
    """A server reached over Streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


ServerConfig = StdioServerConfig | HttpServerConfig
ConfigSource = str | os.PathLike[str] | Mapping[str, Any]


def load_config(source: ConfigSource) -> dict[str, ServerConfig]:
    """Every enabled server of a configuration (a path to an `mcp.json`, or its content as a
    dict). Raises `ValueError` naming the first entry that is not valid."""
    servers, invalid = parse_config(source)
    if invalid:
        raise next(iter(invalid.values()))
    return servers


def parse_config(source: ConfigSource) -> tuple[dict[str, ServerConfig], dict[str, ValueError]]:
    """The valid servers of a configuration, and the reason each invalid one is not.

    Raises `ValueError` when the configuration as a whole is not readable (not a JSON
    object, no `mcpServers` or `servers` object), `OSError` when the file cannot be read.
    """
    data, base = _read(source)
    entries = data.get("mcpServers", data.get("servers"))
    if not isinstance(entries, dict):
        raise ValueError(
            'an MCP configuration needs an "mcpServers" (or VS Code\'s "servers") object '
            "mapping each server's name to how to start or reach it"
        )
    servers: dict[str, ServerConfig] = {}
    invalid: dict[str, ValueError] = {}
    for name, entry in entries.items():
        try:
            parsed = _entry(name, entry, base)
        except ValueError as exc:
            invalid[name] = exc
            continue
        if parsed is not None:
            servers[name] = parsed
    return servers, invalid


def _read(source: ConfigSource) -> tuple[Mapping[str, Any], Path | None]:
    if isinstance(source, Mapping):
        return source, None
    path = Path(source)
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data, path.resolve().parent


def _entry(name: Any, entry: Any, base: Path | None) -> ServerConfig | None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"server name {name!r} is not a non-empty string")
    if not isinstance(entry, dict):
        raise ValueError(f"server {name!r}: its entry is not an object")
    if entry.get("disabled") is True:
        return None
    kind = entry.get("type", entry.get("transport"))
    if kind == "sse":
        raise ValueError(
            f'server {name!r}: the HTTP+SSE transport (type "sse", protocol 2024-11-05) is '
            "not supported; point it at the server's Streamable HTTP endpoint instead"
        )
    if "command" in entry and kind in (None, "stdio"):
        return StdioServerConfig(
            name=name,
            command=_text(name, "command", entry["command"]),
            args=tuple(_strings(name, "args", entry.get("args", []))),
            env=_mapping(name, "env", entry.get("env", {})),
            cwd=_cwd(name, entry.get("cwd"), base),
        )
    if "url" in entry and (kind is None or kind in _HTTP_TYPES):
        url = _text(name, "url", entry["url"])
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"server {name!r}: url {url!r} is not an http(s) URL")
        return HttpServerConfig(
            name=name, url=url, headers=_mapping(name, "headers", entry.get("headers", {}))
        )
    if kind is not None and kind != "stdio" and kind not in _HTTP_TYPES:
        raise ValueError(f"server {name!r}: unknown transport type {kind!r}")
    raise ValueError(
        f'server {name!r}: needs "command" (a stdio server) or "url" (a Streamable HTTP server)'
    )


def _expand(name: str, what: str, value: str) -> str:
    def variable(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is not None:
            return found
        if match.group(2) is not None:
            return match.group(2)
        raise ValueError(
            f"server {name!r}: {what} names the environment variable {match.group(1)}, "
            "which is not set"
        )

    return _VARIABLE.sub(variable, value)


def _text(name: str, what: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"server {name!r}: {what} must be a non-empty string")
    return _expand(name, what, value)


def _strings(name: str, what: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"server {name!r}: {what} must be a list of strings")
    return [_expand(name, what, item) for item in value]


def _mapping(name: str, what: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        raise ValueError(f"server {name!r}: {what} must map names to strings")
    return {key: _expand(name, f"{what}[{key!r}]", item) for key, item in value.items()}


def _cwd(name: str, value: Any, base: Path | None) -> str | None:
    if value is None:
        return None
    path = Path(_text(name, "cwd", value)).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return str(path)
