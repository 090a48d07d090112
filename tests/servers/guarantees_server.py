"""A server whose tools leave a countable trace of every side effect
(`tests/test_guarantees_property.py`).

Each effect is one line `<flow> <kind> <pid>` appended to the file named by `MRTR_TEST_EFFECTS`
(one O_APPEND write, so concurrent processes never interleave lines), so a test counts how many
times each flow's effects ran, whatever the server answered. The caller is the `x-test-user`
header; the key and the store come from the `MRTR_*` variables (`MRTR_STORE_URL` for Redis).
`job` becomes a task when its request declares the tasks extension. With
`MRTR_TEST_PROCESS_IDS` (a directory) the process writes there the id its rounds carry.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mrtr import RequestContext, Server, TaskSettings
from mrtr.server import redemption
from mrtr.settings import server_options

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.caller_header import caller

EFFECTS_VARIABLE = "MRTR_TEST_EFFECTS"
PROCESS_IDS_VARIABLE = "MRTR_TEST_PROCESS_IDS"
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

# The name this process's rounds carry in the store, in a file named after the process id, so
# that a test that kills the process can end its liveness as the key's expiry would.
if PROCESS_IDS_VARIABLE in os.environ:
    (Path(os.environ[PROCESS_IDS_VARIABLE]) / str(os.getpid())).write_text(redemption.PROCESS_ID)

server = Server("guarantees", version="1.0.0", options=server_options(principal=caller))


def record(flow: str, kind: str) -> str:
    """Append one line for one performed effect and return it."""
    line = f"{flow} {kind} {os.getpid()}\n"
    fd = os.open(os.environ[EFFECTS_VARIABLE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return line.strip()


@server.tool()
async def transfer(
    ctx: RequestContext, flow: str, pause_ms: int = 0, guarded: bool = False
) -> dict[str, str]:
    """Reserve (a `once` before the first question), ask twice, pause, then commit: three
    rounds, two effects that must each run exactly once per completed flow. `guarded` commits
    inside a `once` that pauses after the effect (done, not yet reported: where a crash leaves
    "may have run"), which is what keeps a commit from running twice across a crash."""
    reserved = await ctx.once("reserve", lambda: record(flow, "reserve"), type=str)
    await ctx.elicit(f"{flow}: first?", CONFIRM, key="first")
    await ctx.elicit(f"{flow}: second?", CONFIRM, key="second")
    pause = max(0, min(pause_ms, 2000)) / 1000
    if guarded:

        async def commit() -> str:
            line = record(flow, "commit")
            await asyncio.sleep(pause)
            return line

        committed = await ctx.once("commit", commit, type=str)
    else:
        # The pause sits between the last answer and the effect, where a dropped connection or
        # a stalled store hurts most: the round is running, its outcome not yet kept.
        await asyncio.sleep(pause)
        committed = record(flow, "commit")
    return {"reserved": reserved, "committed": committed}


@server.tool(task=TaskSettings("optional", start_after=None, lease=3.0))
async def job(ctx: RequestContext, flow: str, pause_ms: int = 0) -> str:
    """A task (with the tasks extension) that asks one question through the task, pauses,
    then takes one effect: it must run at most once, and exactly once if the task completed."""
    await ctx.run_as_task()
    answer = await ctx.elicit(f"{flow}: go?", CONFIRM, key="go")
    if answer.action != "accept":
        return "declined"
    await asyncio.sleep(max(0, min(pause_ms, 2000)) / 1000)
    return record(flow, "task")


@server.tool()
async def note(flow: str) -> str:
    """One effect, no question: what a legacy session's caller runs."""
    return record(flow, "note")
