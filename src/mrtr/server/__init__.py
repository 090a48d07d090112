"""The server side: `Server`, its options, the handler context and the MRTR engine."""

from .context import RequestContext
from .options import InputRequiredConfig, ServerOptions
from .server import Server

__all__ = ["InputRequiredConfig", "RequestContext", "Server", "ServerOptions"]
