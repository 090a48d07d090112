"""The server `benchmarks/fault_soak.py` runs on each instance.

`transfer` asks twice, then performs its side effect in `ctx.once("effect", ...)`: it tells
the ledger (the outside system, a TCP service the soak runs at `MRTR_SOAK_LEDGER`,
`host:port`) the flow, the effect's idempotency key (`ctx.once_key("effect")`), the process
and the era (`legacy` on a legacy session, where nothing is journaled), and waits for the
ledger's acknowledgement, which comes a moment later. The ledger records the effect when the
line arrives, so a process killed while it waits has performed the effect and not recorded
its outcome: the `once` stays "started" in the store, and the round's retry meets it as
uncertain. `MRTR_SOAK_ON_UNCERTAIN` picks `on_uncertain`: "fail" (the default), "retry", or
"check" (the effect may have run if the ledger knows its key). `whoami` answers the cluster
helpers' readiness probes. Built without `options=`: `mrtr serve` configures it from the
`MRTR_*` variables.

Rules:

* One ledger exchange is one connection: a line out, a line back (`ok` for an effect, `yes`
  or `no` for a lookup); a connection that closes without its line back is an error.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from mrtr import RequestContext, Server

server = Server("fault-soak", version="1.0.0")

LEDGER_VARIABLE = "MRTR_SOAK_LEDGER"
ON_UNCERTAIN_VARIABLE = "MRTR_SOAK_ON_UNCERTAIN"
STEP = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


async def ledger(line: str) -> str:
    """Send one line to the ledger and give back its answer (one line, stripped)."""
    host, _, port = os.environ[LEDGER_VARIABLE].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(line.encode() + b"\n")
        await writer.drain()
        answer = await reader.readline()
    finally:
        writer.close()
    if not answer.endswith(b"\n"):
        raise ConnectionError(f"the ledger closed the connection without answering {line!r}")
    return answer.decode().strip()


async def perform(flow: str, key: str, era: str) -> str:
    """The effect: the ledger records it as the line arrives; its acknowledgement follows."""
    answer = await ledger(f"effect {flow} {key} {os.getpid()} {era}")
    if answer != "ok":
        raise RuntimeError(f"the ledger refused the effect of {flow}: {answer}")
    return key


async def ledger_has(key: str) -> bool:
    """`on_uncertain="check"`: the effect may have run if the ledger knows its key."""
    return await ledger(f"seen {key}") == "yes"


def on_uncertain() -> Any:
    """The `on_uncertain` this process was started with (`MRTR_SOAK_ON_UNCERTAIN`)."""
    policy = os.environ.get(ON_UNCERTAIN_VARIABLE, "fail")
    if policy == "check":
        return ledger_has
    if policy not in ("fail", "retry"):
        raise ValueError(f"{ON_UNCERTAIN_VARIABLE}={policy!r}: use fail, retry or check")
    return policy


ON_UNCERTAIN = on_uncertain()


@server.tool()
async def whoami() -> int:
    """The id of the process that served this request."""
    return os.getpid()


@server.tool()
async def transfer(ctx: RequestContext, flow: str) -> dict[str, object]:
    """Ask twice, then perform the effect once."""
    await ctx.elicit(f"{flow}: step one?", STEP, key="one")
    await ctx.elicit(f"{flow}: step two?", STEP, key="two")
    key = ctx.once_key("effect")
    era = "modern" if ctx.session is None else "legacy"
    await ctx.once("effect", lambda: perform(flow, key, era), type=str, on_uncertain=ON_UNCERTAIN)
    return {"flow": flow, "pid": os.getpid()}
