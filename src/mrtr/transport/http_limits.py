"""What one Streamable HTTP server holds for its clients, and for how long.

A server that waits for ever on a client that never finishes its request, or that accepts
connections until the process runs out of file descriptors, can be stopped by a handful of
idle sockets. `HTTPLimits` bounds each resource a client can hold: time to send the headers,
time to send the body, idle time between requests, open connections, header bytes, and the
request-body bytes buffered across all requests at once. `serve_http` enforces them (see
`http_guard.py` and `StreamableHTTPApp`); every default is meant for a server on the open
network, each can be turned off with 0.

This module imports nothing heavy: the command line reads its defaults.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger("mrtr.http")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE = 30.0
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024
DEFAULT_MAX_INFLIGHT_BODY_BYTES = 64 * 1024 * 1024
# On SIGTERM: seconds the health check fails while requests are still taken (longer than a
# load balancer takes to notice: haproxy's `inter 500ms fall 2` in deploy/haproxy.cfg), then
# seconds the requests in flight get to finish before they are cancelled.
DEFAULT_DRAIN_GRACE = 2.0
DEFAULT_DRAIN_TIMEOUT = 30.0

# The soft limit on open files is raised toward the hard one up to this many (or to what
# `max_connections` needs, if more): enough for any default, without asking for millions.
_WANTED_OPEN_FILES = 65536


@dataclass(frozen=True, slots=True)
class HTTPLimits:
    """Limits on the clients of one HTTP server; 0 turns a limit off (except `keep_alive`).

    `header_timeout`: seconds from a connection's opening (or a request's first byte) to the
    end of the request's headers; a connection that sends nothing is closed, one part-way
    through its headers gets 408. `body_timeout`: seconds from the end of the headers to the
    end of the body (a total, so a body sent a byte at a time cannot hold the connection);
    past it the request gets 408. `keep_alive`: seconds an idle connection stays open between
    requests. `max_connections`: connections open at once; one more gets 503 with
    `Retry-After` and is closed (lingering: its request is read and dropped first, see
    `http_guard.py`). `max_header_size`: bytes of a request's start line and headers; past it, 431.
    `max_inflight_body_bytes`: bytes of request bodies being received or handled at once,
    across all connections; a request that would go past it gets 503 with `Retry-After`
    before its body is read.
    """

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    keep_alive: float = DEFAULT_KEEP_ALIVE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_inflight_body_bytes: int = DEFAULT_MAX_INFLIGHT_BODY_BYTES

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "keep_alive"):
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 <= value < math.inf
            ):
                raise ValueError(f"{name} must be a number of seconds >= 0, not {value!r}")
        if not self.keep_alive > 0:
            raise ValueError("keep_alive must be > 0: an idle connection is always closed")
        for name in ("max_connections", "max_header_size", "max_inflight_body_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0 (0: no limit), not {value!r}")


def check_body_sizes(max_body_size: int, max_inflight_body_bytes: int) -> None:
    """Raise ValueError unless one body of `max_body_size` fits in the in-flight budget."""
    if max_inflight_body_bytes and max_body_size > max_inflight_body_bytes:
        raise ValueError(
            f"max_body_size ({max_body_size}) is larger than max_inflight_body_bytes "
            f"({max_inflight_body_bytes}): no body that size could ever be received"
        )


def raise_open_files_limit(wanted: int = _WANTED_OPEN_FILES) -> int | None:
    """Raise this process's soft limit on open files toward its hard limit; return the soft
    limit now in force (None where the platform has no such limit, as on Windows).

    Every connection is a file descriptor: the usual soft limit of 1,024 would otherwise let
    about a thousand idle sockets stop the server accepting anything.
    """
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    target = wanted if hard == infinite else min(wanted, hard)
    if soft != infinite and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:  # macOS refuses more than its OPEN_MAX
            logger.debug("could not raise the open-files limit to %d: %s", target, exc)
    return None if soft == infinite else soft


def connection_cap(max_connections: int, open_files: int | None) -> int:
    """`max_connections` lowered, if need be, so that connections alone can never use up the
    `open_files` descriptors a process may hold: a share stays free for the listening socket,
    the event loop, logs, and whatever the handlers open. 0 (no limit) becomes the cap."""
    if open_files is None:
        return max_connections
    cap = max(1, open_files - max(64, open_files // 8))
    if max_connections == 0 or max_connections > cap:
        if max_connections:
            logger.warning(
                "max_connections lowered from %d to %d: this process may open %d files "
                "(RLIMIT_NOFILE; raise it with `ulimit -n`)",
                max_connections,
                cap,
                open_files,
            )
        return cap
    return max_connections


__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_GRACE",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEADER_SIZE",
    "DEFAULT_MAX_INFLIGHT_BODY_BYTES",
    "HTTPLimits",
    "check_body_sizes",
    "connection_cap",
    "raise_open_files_limit",
]
