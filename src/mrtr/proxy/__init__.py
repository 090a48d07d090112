"""`mrtr proxy`: serve a backend MCP server (a stdio command or a URL) from an mrtr `Server`,
to clients of both eras, with the backend's questions mid-call relayed to them."""

from .backend import BackendTarget
from .gateway import proxy_server
from .proxy import ProxyBackend

__all__ = ["BackendTarget", "ProxyBackend", "proxy_server"]
