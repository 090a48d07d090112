"""The client side: `Client`, its options and the MRTR loop."""

from .client import Client, InputHandlerError, InputRequiredError
from .options import ClientOptions, InputRequiredConfig, RoundInfo

__all__ = [
    "Client",
    "ClientOptions",
    "InputHandlerError",
    "InputRequiredConfig",
    "InputRequiredError",
    "RoundInfo",
]
