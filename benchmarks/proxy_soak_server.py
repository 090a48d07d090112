"""The backend `benchmarks/proxy_soak.py` puts behind `mrtr proxy`: a stdio MCP server.

`transfer` asks twice (two `ctx.elicit`: two rounds of questions before the one with its
result), then performs its side effect: one line appended to the file `PROXY_SOAK_EFFECTS`
names (outside any store, shared by every backend process of every proxy instance), giving
the call's id, the process and the machine's monotonic time, so that the soak counts effects
independently of what the clients were told. Built with its own `ServerOptions`, so the
`MRTR_*` variables the proxy is given (its Redis store among them) are not this server's: a
fault of the proxies' Redis never reaches it.

Usage (what each proxy runs): python benchmarks/proxy_soak_server.py
"""

from __future__ import annotations

import os
import time

from mrtr import RequestContext, Server, ServerOptions

EFFECTS_VARIABLE = "PROXY_SOAK_EFFECTS"
STEP = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

server = Server("proxy-soak-backend", version="1.0.0", options=ServerOptions())


def record_effect(call: str) -> None:
    """Append one line for one performed effect; a single O_APPEND write, so the lines of
    concurrent processes never interleave."""
    line = f"{call} {os.getpid()} {time.monotonic():.6f}\n".encode()
    fd = os.open(os.environ[EFFECTS_VARIABLE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@server.tool()
async def transfer(ctx: RequestContext, call: str) -> dict[str, object]:
    """Ask twice, then perform the effect once, keyed by `call`."""
    await ctx.elicit(f"{call}: step one?", STEP, key="one")
    await ctx.elicit(f"{call}: step two?", STEP, key="two")
    record_effect(call)
    return {"call": call, "pid": os.getpid()}


if __name__ == "__main__":
    if EFFECTS_VARIABLE not in os.environ:
        raise SystemExit(f"{EFFECTS_VARIABLE} must name the file effects are appended to")
    server.run("stdio")
