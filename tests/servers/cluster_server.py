"""A server for several instances behind a load balancer (`tests/test_scale_out.py`).

`transfer` asks two questions (three rounds) and then performs its side effect: one line
appended to the file named by `MRTR_TEST_EFFECTS`, shared by every instance, naming the flow
and the process that ran the effect. Its result names the process that served each round, so
a test sees from the server side where the rounds of one flow landed. `announce` raises a
list change on the instance that serves it (the shared broker, when there is one, carries it
to the others); the `greeting` prompt is there so that prompt list changes are announced too.
Built without `options=`, so `mrtr serve` configures it from the `MRTR_*` variables (key, store).
"""

from __future__ import annotations

import asyncio
import os

from mrtr import RequestContext, Server

server = Server("cluster-test-server", version="1.0.0")

EFFECTS_VARIABLE = "MRTR_TEST_EFFECTS"
STEP_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}


def record_effect(flow: str) -> None:
    """Append one line for one performed effect; a single O_APPEND write, so the lines of
    concurrent processes never interleave."""
    line = f"{flow} {os.getpid()}\n".encode()
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
async def transfer(ctx: RequestContext, flow: str, pause_ms: int = 0) -> dict[str, object]:
    """Ask twice, then perform the effect once; each round pauses `pause_ms` first."""
    pause = max(0, min(pause_ms, 1000)) / 1000
    # Replay runs the body from the top each round: each `once` first runs in the round that
    # reaches it, so the three record the process of rounds 1, 2 and 3.
    first = await ctx.once("round-1", os.getpid)
    await asyncio.sleep(pause)
    await ctx.elicit(f"{flow}: step one?", STEP_SCHEMA, key="one")
    second = await ctx.once("round-2", os.getpid)
    await ctx.elicit(f"{flow}: step two?", STEP_SCHEMA, key="two")
    record_effect(flow)
    return {"flow": flow, "rounds": [first, second, os.getpid()]}


@server.tool()
async def announce(kind: str) -> int:
    """Announce that the `tools` or `prompts` list changed; the id of the announcing process."""
    if kind == "tools":
        server.notify_tools_changed()
    elif kind == "prompts":
        server.notify_prompts_changed()
    else:
        raise ValueError(f"kind must be 'tools' or 'prompts', not {kind!r}")
    return os.getpid()


@server.prompt()
async def greeting() -> str:
    """A prompt, so that the server announces prompt list changes."""
    return "Hello."
