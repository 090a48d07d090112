"""The server side: `Server`, its options, the handler context and the MRTR engine."""

from .budgets import Budgets
from .context import RequestContext
from .options import InputRequiredConfig, ServerOptions
from .server import Server

__all__ = ["Budgets", "InputRequiredConfig", "RequestContext", "Server", "ServerOptions"]
