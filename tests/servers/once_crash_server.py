"""A server whose final round pays inside `ctx.once`, for killing an instance mid-effect
(`tests/test_scale_out_once.py`).

`pay` asks once, then in its final round runs the payment in `ctx.once("payment", ...)`: one
line naming the payment's idempotency key (`ctx.once_key("payment")`) appended to the file
named by `MRTR_TEST_EFFECTS`, shared by every instance (the outside system). In a process
started with `MRTR_TEST_HOLD` (a directory), the round holds where `hold` says (inside the
`once` before or after the payment, or after the `once`): it writes a file named after the
hold into that directory and then waits until the process is killed. `policy` picks
`on_uncertain`: "fail", "retry", or "check" (the payment may have run if the effects file
names its key). Built without `options=`, so `mrtr serve` configures it from the `MRTR_*`
variables (key, store).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from mrtr import RequestContext, Server

server = Server("once-crash-test-server", version="1.0.0")

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def effects() -> Path:
    return Path(os.environ["MRTR_TEST_EFFECTS"])


def record_effect(reference: str) -> None:
    """One line per payment made; a single O_APPEND write, so processes never interleave."""
    fd = os.open(effects(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{reference}\n".encode())
    finally:
        os.close(fd)


def paid(reference: str) -> bool:
    """The outside system's answer: was a payment with this idempotency key made?"""
    path = effects()
    return path.exists() and reference in path.read_text().split()


async def held(where: str, hold: str) -> None:
    """In the process to be killed, stop here for good once `hold` names this place."""
    directory = os.environ.get("MRTR_TEST_HOLD")
    if directory is None or where != hold:
        return
    (Path(directory) / where).write_text(str(os.getpid()))
    await asyncio.Event().wait()


POLICIES: dict[str, Any] = {"fail": "fail", "retry": "retry", "check": paid}


@server.tool()
async def pay(
    ctx: RequestContext, amount: int, hold: str = "none", policy: str = "fail"
) -> dict[str, Any]:
    """Confirm, then pay once; the result names the payment and who answered."""
    await ctx.elicit(f"Pay {amount}?", SCHEMA, key="confirm")
    reference = ctx.once_key("payment")

    async def payment() -> str:
        await held("before-effect", hold)
        record_effect(reference)
        await held("inside", hold)
        return f"receipt for {amount} from {os.getpid()}"

    receipt: str = await ctx.once("payment", payment, on_uncertain=POLICIES[policy])
    await held("after", hold)
    return {"receipt": receipt, "reference": reference, "pid": os.getpid()}
