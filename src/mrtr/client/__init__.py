"""The client side: `Client`, its options and the MRTR loop."""

from .client import Client, InputHandlerError, InputRequiredError
from .options import ClientOptions, InputRequiredConfig, RoundInfo
from .subscription import Change, Subscription

__all__ = [
    "Change",
    "Client",
    "ClientOptions",
    "InputHandlerError",
    "InputRequiredConfig",
    "InputRequiredError",
    "RoundInfo",
    "Subscription",
]
