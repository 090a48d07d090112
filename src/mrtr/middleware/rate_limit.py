"""`RateLimitMiddleware`: a token bucket per caller, refusing with -32000 and `retryAfter`."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ..protocol.errors import McpError
from ..server.middleware import CallNext

if TYPE_CHECKING:
    from ..server.context import RequestContext

#: The JSON-RPC error code of a refused request (the spec defines none for rate limits; this
#: is the first of JSON-RPC's implementation-defined server errors).
RATE_LIMITED = -32000


def default_key(ctx: RequestContext) -> str:
    """Who is calling: the principal `ServerOptions.principal` names, else the client's
    address (HTTP), else one key for the process's single peer (stdio, in-memory)."""
    resolver = ctx.server.options.principal
    info = ctx.transport_info
    if resolver is not None:
        principal = resolver(info)
        if principal is not None:
            return f"principal:{principal}"
    if isinstance(info, dict):
        client = info.get("client")
        if isinstance(client, (tuple, list)) and client:
            return f"address:{client[0]}"
    return "local"


class RateLimitMiddleware:
    """Allows each caller `rate` requests per second on average, in bursts of up to `burst`.

    A token bucket per key (`key(ctx)`, by default `default_key`: the principal, else the
    client address). A request finding its bucket empty is refused before it runs with
    `McpError(-32000, "Rate limit exceeded ...", {"retryAfter": seconds})`, seconds being when
    a token is next available (a client may wait that long and retry). Each MRTR round is a
    request and takes a token. `methods`, when given, limits only those methods (say
    `{"tools/call"}`). At most `max_keys` buckets are kept; past that the least recently used
    goes (it would be full again by then, for any caller slower than the limit), so memory
    stays bounded whatever the number of callers.
    """

    def __init__(
        self,
        rate: float,
        burst: int | None = None,
        *,
        key: Callable[[RequestContext], str] = default_key,
        methods: Collection[str] | None = None,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not rate > 0 or math.isinf(rate):
            raise ValueError(f"rate must be a positive number of requests per second, not {rate}")
        capacity = float(burst) if burst is not None else max(1.0, rate)
        if capacity < 1:
            raise ValueError(f"burst must be at least 1 request, not {burst}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, not {max_keys}")
        self.rate = float(rate)
        self.burst = capacity
        self.key = key
        self.methods = frozenset(methods) if methods is not None else None
        self.max_keys = max_keys
        self._clock = clock
        # key -> (tokens, time of the last refill); ordered by last use, oldest first.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        """How many callers' buckets are kept."""
        return len(self._buckets)

    async def __call__(self, ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        if self.methods is None or ctx.method in self.methods:
            self.take(self.key(ctx))
        return await call_next(ctx)

    def take(self, key: str) -> None:
        """Take one token from `key`'s bucket, or raise the -32000 `McpError`."""
        now = self._clock()
        buckets = self._buckets
        found = buckets.get(key)
        if found is None:
            tokens = self.burst
            if len(buckets) >= self.max_keys:
                buckets.popitem(last=False)
        else:
            tokens = min(self.burst, found[0] + (now - found[1]) * self.rate)
            buckets.move_to_end(key)
        if tokens < 1:
            buckets[key] = (tokens, now)
            wait = math.ceil((1 - tokens) / self.rate * 1000) / 1000
            raise McpError(
                RATE_LIMITED,
                f"Rate limit exceeded: at most {self.rate:g} requests per second (bursts of "
                f"{self.burst:g}); retry after {wait:g} s",
                {"retryAfter": wait},
            )
        buckets[key] = (tokens - 1, now)
