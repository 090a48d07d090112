"""stdio transport: newline-delimited JSON-RPC over a process's stdin and stdout.

The server side is `serve_stdio` (`stdio_server.py`), the client side `StdioTransport`
(`stdio_client.py`); both are importable from here.
"""

from __future__ import annotations

from .base import MAX_MESSAGE_SIZE
from .stdio_client import StdioTransport
from .stdio_server import serve_stdio

__all__ = ["MAX_MESSAGE_SIZE", "StdioTransport", "serve_stdio"]
