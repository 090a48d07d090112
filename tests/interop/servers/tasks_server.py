"""Our side of the matrix's tasks cells: a server whose tools run as tasks of the tasks
extension (`io.modelcontextprotocol/tasks`).

Run as `python tasks_server.py stdio` or `python tasks_server.py http PORT` (Streamable HTTP at
http://127.0.0.1:PORT/mcp). Every tool becomes a task as soon as it starts, so a client that
declared the extension always gets a task handle back.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

# A peer client may start this with a bare environment (no PYTHONPATH): serve this checkout's mrtr.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from mrtr import RequestContext, Server, TaskSettings, ToolError

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
# Polled often: the cells wait on short tasks, and the run's time is what they cost.
AS_TASK = TaskSettings("required", start_after=None, ttl=300, poll_interval=0.05)


def build_tasks_server() -> Server:
    """The tasks server: a task that works a while, one that asks, and one that fails."""
    server = Server("mrtr-tasks", version="1.0.0")

    @server.tool(task=AS_TASK)
    async def crunch(ctx: RequestContext, seconds: float) -> str:
        """Work for `seconds`, as a task."""
        await ctx.run_as_task()
        await asyncio.sleep(seconds)
        return f"crunched {seconds:g}"

    @server.tool(task=AS_TASK)
    async def confirm(ctx: RequestContext, item: str) -> str:
        """Ask, while running as a task, whether to go on."""
        await ctx.run_as_task()
        answer = await ctx.elicit(f"Ship {item}?", CONFIRM)
        return f"shipped {item}" if answer.action == "accept" else f"kept {item} ({answer.action})"

    @server.tool(task=AS_TASK)
    async def explode(ctx: RequestContext) -> str:
        """Fail, as a task."""
        await ctx.run_as_task()
        raise ToolError("the task broke")

    return server


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "http":
        build_tasks_server().run("http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        build_tasks_server().run("stdio")
