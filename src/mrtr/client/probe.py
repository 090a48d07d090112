"""Waiting for the answer to an era probe (`ping` or `server/discover`) before `initialize`.

A server silent past the probe timeout is taken for a legacy one that ignores unknown
requests, but its probe stays open: a late answer may still show a modern server that was
only slow to start. A server that writes what is not JSON-RPC in answer fails the probe at
once. An authorization flow (which may wait for a person to sign in) runs inside the probe's
exchange on a protected server, so there the probe waits without a bound.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..protocol.errors import PROTOCOL_VIOLATION, McpError

if TYPE_CHECKING:
    from ..transport.base import ClientTransport


class ProbeTimeout(Exception):
    """The server did not answer the `server/discover` probe within `probe_timeout`; `probe`
    is the probe's exchange, still waiting for a late answer."""

    def __init__(self, probe: asyncio.Future[dict[str, Any]]) -> None:
        super().__init__("no answer to server/discover")
        self.probe = probe


async def await_probe(
    transport: ClientTransport, message: dict[str, Any], wait: float
) -> dict[str, Any]:
    """The probe's response; `ProbeTimeout` past `wait` seconds, and
    `McpError(PROTOCOL_VIOLATION)` as soon as the server writes what is not JSON-RPC."""
    noise: asyncio.Event | None = getattr(transport, "noise", None)
    if noise is not None:
        noise.clear()  # only what the server writes in answer to the probe counts
    request = asyncio.ensure_future(transport.request(message))
    waiters: set[asyncio.Future[Any]] = {request}
    garbage = asyncio.ensure_future(noise.wait()) if noise is not None else None
    if garbage is not None:
        waiters.add(garbage)
    # An authorization flow (which may wait for a person to sign in) runs inside the
    # probe's exchange on a protected server: its silence says nothing about the era.
    authorizing = getattr(transport, "auth", None) is not None
    done: set[asyncio.Future[Any]] = set()
    stopped = True  # until the wait returns: the caller was cancelled (its own deadline)
    try:
        done, _ = await asyncio.wait(
            waiters,
            timeout=None if authorizing else wait,
            return_when=asyncio.FIRST_COMPLETED,
        )
        stopped = False
    finally:
        # A probe whose caller stopped waiting is cancelled with it: nobody would read it.
        silent = not done and not stopped
        for waiter in waiters:
            # A silent server's probe stays open: a late answer may still show a modern
            # server that was slow to start (see `Connection`).
            if not waiter.done() and not (silent and waiter is request):
                waiter.cancel()
        ended = [w for w in waiters if not (silent and w is request)]
        await asyncio.gather(*ended, return_exceptions=True)
    if request in done and not request.cancelled():
        return request.result()
    if garbage is not None and garbage in done:
        raise McpError(PROTOCOL_VIOLATION, "the server wrote garbage in answer to the probe")
    raise ProbeTimeout(request)
