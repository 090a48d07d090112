"""The wire layer: JSON-RPC framing, MCP types, error codes, versions and `_meta` keys. No I/O."""

from . import errors, jsonrpc, meta, types, versions
from .errors import McpError
from .versions import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS

__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "McpError",
    "errors",
    "jsonrpc",
    "meta",
    "types",
    "versions",
]
