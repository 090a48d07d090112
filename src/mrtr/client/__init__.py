"""The client side: `Client`, its options and the MRTR loop."""

from .client import Client, InputHandlerError, InputRequiredError
from .config import HttpServerConfig, StdioServerConfig, load_config
from .group import ClientGroup
from .options import ClientOptions, InputRequiredConfig, RoundInfo
from .subscription import Change, Subscription

__all__ = [
    "Change",
    "Client",
    "ClientGroup",
    "ClientOptions",
    "HttpServerConfig",
    "InputHandlerError",
    "InputRequiredConfig",
    "InputRequiredError",
    "RoundInfo",
    "StdioServerConfig",
    "Subscription",
    "load_config",
]
