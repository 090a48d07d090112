"""Transports: in-memory, stdio and Streamable HTTP. Each only moves JSON-RPC messages."""

from .base import ClientTransport, NotificationHandler
from .memory import MemoryTransport

__all__ = ["ClientTransport", "MemoryTransport", "NotificationHandler"]
