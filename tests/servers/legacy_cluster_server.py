"""A server for legacy (`initialize`) sessions spread over several instances
(`tests/test_scale_out_legacy.py`, `tests/test_scale_out_sessions.py`).

Every tool's result names the process (or, in one process, the `Server`) that ran it, so a
test sees from the server side where each request of one session landed (`whoami`: the
process id, which the cluster helpers wait for). `confirm` asks the client live and names
who asked; `levels` logs once at each of four levels; `stall` logs who serves it, then waits
until the process ends (so a test can kill it mid-call); `touch` announces that a resource
changed; `announce` that the tool list changed. Built without
`options=`, so `mrtr serve` configures it from the `MRTR_*` variables (key, store).
"""

from __future__ import annotations

import asyncio
import os

from mrtr import RequestContext, Server, ServerOptions

WATCHED = "file:///watched.txt"
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def build(name: str = "legacy-fleet", options: ServerOptions | None = None) -> Server:
    """The server; `options` for in-process use (`mrtr serve` reads the environment)."""
    fleet = Server(name, version="1.0.0", options=options)
    label = str(os.getpid()) if options is None else f"{os.getpid()}-{id(fleet)}"

    @fleet.tool()
    async def whoami() -> int:
        """The id of the process that served this request."""
        return os.getpid()

    @fleet.tool()
    async def confirm(ctx: RequestContext, item: str) -> dict[str, object]:
        """Ask the user to confirm `item`; who asked and what they said."""
        answer = await ctx.elicit(f"Confirm {item}?", CONFIRM)
        content = answer.content or {}
        return {"asked_by": label, "action": answer.action, "ok": content.get("ok")}

    @fleet.tool()
    async def levels(ctx: RequestContext) -> str:
        """Log one message at each of debug, info, warning and error."""
        for level in ("debug", "info", "warning", "error"):
            await ctx.log(level, f"{level} from {label}")
        return label

    @fleet.tool()
    async def stall(ctx: RequestContext) -> str:
        """Log the serving process's id (which streams the response), then never answer."""
        await ctx.log("info", f"stalling in {os.getpid()}")
        await asyncio.Event().wait()
        return label

    @fleet.tool()
    async def touch() -> str:
        """Announce that the watched resource changed."""
        fleet.notify_resource_updated(WATCHED)
        return label

    @fleet.tool()
    async def announce() -> str:
        """Announce that the tool list changed."""
        fleet.notify_tools_changed()
        return label

    @fleet.resource(WATCHED)
    def watched() -> str:
        """A resource clients subscribe to."""
        return "watched"

    return fleet


server = build()
