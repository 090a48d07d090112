"""The one warning about an unshared request-state key, where it can matter.

A server without a configured key seals `requestState` with a random key of its own process.
Over stdio, or over HTTP in one process, every round comes back to that process, so the key
never needs sharing. It matters when several processes take turns at one client's rounds: a
server given a store or broker other than the in-process ones (Redis, `MRTR_STORE_URL`) is one of
several instances, and each would refuse the others' states. (`mrtr serve --workers N` refuses
N > 1 without a key outright.)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..server.store import MemoryBroker, MemoryStore

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint

logger = logging.getLogger("mrtr.http")


def warn_if_key_is_not_shared(server: ServerEndpoint) -> bool:
    """Log one warning when `server` shares a store but seals with a random per-process key;
    returns whether it did."""
    options = server.options
    shared = not isinstance(options.store, MemoryStore | None) or not isinstance(
        options.broker, MemoryBroker | None
    )
    if not shared or not server.seals_with_random_key:
        return False
    logger.warning(
        "server %r shares a store but has no request-state key: other instances will refuse "
        "its rounds. Set MRTR_REQUEST_STATE_KEY to one secret on every instance.",
        server.name,
    )
    return True


__all__ = ["warn_if_key_is_not_shared"]
