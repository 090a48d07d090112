"""The headers of each 2026-07-28 request: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
and `Mcp-Param-*` for tools whose input schema annotates arguments with `x-mcp-header`.

The annotations are read from `tools/list` results on their way through, and a tool whose
annotations break the rules is dropped from the list (with a warning), as the spec requires
of HTTP clients. A request's headers depend on its method, name and version alone unless the
tool mirrors arguments into headers, so those blocks are built once and reused.
"""

from __future__ import annotations

import logging
from typing import Any

from multidict import CIMultiDict

import mrtr.transport.headers as mcp_headers

from ..protocol import meta as meta_keys
from ..protocol.versions import LATEST_PROTOCOL_VERSION

logger = logging.getLogger("mrtr.http")

_HEADER_CACHE_SIZE = 1024  # distinct (method, name, version) header blocks kept


class RequestHeaders:
    """The headers of modern requests, over `base` (the caller's headers and the content
    negotiation ones, shared with legacy sessions)."""

    def __init__(self, base: CIMultiDict[str]) -> None:
        self._base = base
        #: `x-mcp-header` annotations of the tools seen in `tools/list` results, by tool name.
        self._tools: dict[str, tuple[mcp_headers.HeaderParam, ...]] = {}
        self._cache: dict[tuple[Any, Any, Any], CIMultiDict[str]] = {}

    def for_message(self, message: dict[str, Any]) -> CIMultiDict[str]:
        """The headers of `message`, from the cache when they depend on nothing else."""
        params = message.get("params")
        method = message.get("method")
        if type(params) is not dict or type(method) is not str:
            return self.build(message)  # nothing the cache could be keyed on
        field = mcp_headers.NAME_FIELDS.get(method)
        name = params.get(field) if field is not None else None
        meta = params.get("_meta")
        version = meta.get(meta_keys.PROTOCOL_VERSION) if type(meta) is dict else None
        # A request's headers depend on its method, name and version alone unless the tool
        # mirrors arguments into Mcp-Param-* headers; those blocks are built once and reused
        # (aiohttp copies what it is given). Exact `str` types only (or None): anything else
        # is built afresh, as is a call of a tool with Mcp-Param-* headers.
        if (
            (name is None or type(name) is str)
            and (version is None or type(version) is str)
            and not (method == "tools/call" and self._tools.get(name))  # type: ignore[arg-type]
        ):
            key = (method, name, version)
            cached = self._cache.get(key)
            if cached is None:
                cached = self.build(message)
                if len(self._cache) >= _HEADER_CACHE_SIZE:
                    self._cache.clear()
                self._cache[key] = cached
            return cached
        return self.build(message)

    def build(self, message: dict[str, Any]) -> CIMultiDict[str]:
        """The headers of `message`, built afresh."""
        headers = self._base.copy()
        method = message.get("method")
        if isinstance(method, str):
            headers[mcp_headers.METHOD] = method
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        meta = params.get("_meta")
        version = meta.get(meta_keys.PROTOCOL_VERSION) if isinstance(meta, dict) else None
        headers[mcp_headers.PROTOCOL_VERSION] = (
            version if isinstance(version, str) else LATEST_PROTOCOL_VERSION
        )
        field = mcp_headers.NAME_FIELDS.get(method) if isinstance(method, str) else None
        if field is not None:
            name = params.get(field)
            if isinstance(name, str):
                headers[mcp_headers.NAME] = mcp_headers.encode_value(name)
                if method == "tools/call":
                    headers.update(self.param_headers(name, params.get("arguments")))
        return headers

    def param_headers(self, tool: str, arguments: Any) -> dict[str, str]:
        """The `Mcp-Param-*` headers a call of `tool` with `arguments` carries."""
        found = {}
        for param in self._tools.get(tool, ()):
            text = mcp_headers.format_argument(mcp_headers.argument_at(arguments, param.path))
            if text is not None:
                found[param.header] = mcp_headers.encode_value(text)
        return found

    def screen_tools(self, response: dict[str, Any]) -> None:
        """Remember the tools' header annotations; drop tools whose annotations are invalid."""
        result = response.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        kept = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                kept.append(tool)
                continue
            name = tool["name"]
            try:
                self._tools[name] = mcp_headers.header_params(tool.get("inputSchema"))
            except mcp_headers.InvalidHeaderAnnotation as exc:
                self._tools.pop(name, None)
                logger.warning("leaving out tool %r from tools/list: %s", name, exc)
                continue
            kept.append(tool)
        if len(kept) != len(tools):
            result["tools"] = kept  # type: ignore[index]
