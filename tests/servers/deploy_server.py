"""A server for the deployment tests (`tests/test_deploy_haproxy.py`, `tests/test_drain.py`).

`caller` names the address the server sees the request come from. `stamped` asks the client
live, its question carrying the server's `time.monotonic()` at the moment it asks (the clock
is the machine's, shared by processes), so a client can tell how long the question took to
reach it. `hold` and `wait_for` coordinate through files in
the directory `MRTR_TEST_DIR` names: `hold` marks that it started, then waits until it is
cancelled and marks that; `wait_for` marks that it started and returns once a given file
exists. Built without `options=`, so `mrtr serve` configures it from the `MRTR_*` variables.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from mrtr import RequestContext, Server

server = Server("deploy-test-server", version="1.0.0")

DIR_VARIABLE = "MRTR_TEST_DIR"
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
POLL = 0.01  # seconds between looks at a file
LIMIT = 60.0  # seconds a tool waits at most: only ever reached when something is broken


def _path(name: str) -> Path:
    return Path(os.environ[DIR_VARIABLE]) / name


def _exists(name: str) -> bool:
    # A stat of a local file: quick enough not to be worth a thread.
    return _path(name).exists()


@server.tool()
async def whoami() -> int:
    """The id of the process that served this request."""
    return os.getpid()


@server.tool()
async def caller(ctx: RequestContext) -> str:
    """The address this request came from, as the server counts its caller."""
    return str(ctx.transport_info["client"][0])


@server.tool()
async def stamped(ctx: RequestContext) -> bool:
    """Ask a question whose message is the monotonic time at which it was asked."""
    answer = await ctx.elicit(f"{time.monotonic():.6f}", CONFIRM)
    return bool((answer.content or {}).get("ok"))


@server.tool()
async def hold(name: str) -> str:
    """Write `<name>.started`, wait until cancelled, then write `<name>.cancelled`."""
    _path(f"{name}.started").touch()
    try:
        await asyncio.sleep(LIMIT)
    except asyncio.CancelledError:
        _path(f"{name}.cancelled").touch()
        raise
    return "not cancelled"


@server.tool()
async def wait_for(name: str) -> int:
    """Write `<name>.started`, return this process's id once `<name>.go` exists."""
    _path(f"{name}.started").touch()
    for _ in range(int(LIMIT / POLL)):
        if _exists(f"{name}.go"):
            break
        await asyncio.sleep(POLL)
    return os.getpid()
