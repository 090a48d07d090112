"""A FastMCP server whose tools run as tasks, with `fastmcp-tasks` (the tasks extension's server
half) on its in-memory backend.

Run with the peer's interpreter: `python fastmcp_tasks_server.py stdio | http PORT`. The tool
that asks does it the way `fastmcp-tasks` documents for tasks: it returns an
`InputRequiredResult`, and is run again with the answer once the client sent it.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Any

import mcp_types as types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
# Polled often: the cells wait on short tasks (the default asks clients to poll every 5 s).
AS_TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=50))
server = FastMCP("fastmcp-tasks-peer")
server.add_extension(TasksExtension(url="memory://"))


@server.tool(task=AS_TASK)
async def crunch(seconds: float) -> str:
    """Work for `seconds`, as a task."""
    await asyncio.sleep(seconds)
    return f"crunched {seconds:g}"


@server.tool(task=AS_TASK)
async def confirm(ctx: Context, item: str) -> Any:
    """Ask, while running as a task, whether to go on."""
    answer: Any = (ctx.input_responses or {}).get("ok")
    if answer is None:
        params = types.ElicitRequestFormParams(message=f"Ship {item}?", requested_schema=CONFIRM)
        return types.InputRequiredResult(input_requests={"ok": types.ElicitRequest(params=params)})
    action = answer.get("action") if isinstance(answer, dict) else answer.action
    return f"shipped {item}" if action == "accept" else f"kept {item} ({action})"


@server.tool(task=AS_TASK)
async def explode() -> str:
    """Fail, as a task."""
    raise ToolError("the task broke")


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    else:
        server.run("stdio", show_banner=False)
