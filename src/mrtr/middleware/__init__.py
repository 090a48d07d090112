"""Built-in middleware for `Server`: one log line per request, a rate limit, and OpenTelemetry
spans. Register with `server.middleware(TimingMiddleware())`, or `Server(middleware=[...])`;
see `mrtr.server.middleware` for how middleware runs.
"""

from ..server.middleware import CallNext, Middleware, request_target
from .otel import OpenTelemetryMiddleware
from .rate_limit import RATE_LIMITED, RateLimitMiddleware
from .timing import TimingMiddleware

__all__ = [
    "RATE_LIMITED",
    "CallNext",
    "Middleware",
    "OpenTelemetryMiddleware",
    "RateLimitMiddleware",
    "TimingMiddleware",
    "request_target",
]
