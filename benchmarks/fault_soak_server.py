"""The server `benchmarks/fault_soak.py` runs on each instance.

`transfer` asks twice, then performs its side effect: one line appended to the file
`MRTR_SOAK_EFFECTS` names (outside any store, shared by every instance), giving the flow, the
process and the machine's monotonic time, so that the soak counts effects run twice and
effects run after the client gave up. `whoami` answers the cluster helpers' readiness
probes. Built without `options=`: `mrtr serve` configures it from the `MRTR_*` variables.
"""

from __future__ import annotations

import os
import time

from mrtr import RequestContext, Server

server = Server("fault-soak", version="1.0.0")

EFFECTS_VARIABLE = "MRTR_SOAK_EFFECTS"
STEP = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def record_effect(flow: str) -> None:
    """Append one line for one performed effect; a single O_APPEND write, so the lines of
    concurrent processes never interleave."""
    line = f"{flow} {os.getpid()} {time.monotonic():.6f}\n".encode()
    fd = os.open(os.environ[EFFECTS_VARIABLE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@server.tool()
async def whoami() -> int:
    """The id of the process that served this request."""
    return os.getpid()


@server.tool()
async def transfer(ctx: RequestContext, flow: str) -> dict[str, object]:
    """Ask twice, then perform the effect."""
    await ctx.elicit(f"{flow}: step one?", STEP, key="one")
    await ctx.elicit(f"{flow}: step two?", STEP, key="two")
    record_effect(flow)
    return {"flow": flow, "pid": os.getpid()}
