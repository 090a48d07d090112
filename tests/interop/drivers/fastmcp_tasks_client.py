"""The FastMCP client with `fastmcp-tasks` (the tasks extension's client half) running the
matrix's tasks checks against `servers/tasks_server.py`.

Run with the peer's interpreter: `python fastmcp_tasks_client.py stdio COMMAND...` or
`python fastmcp_tasks_client.py http URL`. Tasks exist only on 2026-07-28 connections.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fastmcp
from checks import check, target
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client_models import (
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
)

TASK_WAIT = 20.0  # seconds a task may take to end: only reached when something hangs


def text(result: Any) -> str:
    """The text of a tool result, "isError: ..." for a tool error."""
    said = " ".join(getattr(c, "text", "") for c in result.content)
    return f"isError: {said}" if result.is_error else said


def error_text(exc: Exception) -> str:
    error = getattr(exc, "error", None)
    if error is None:
        return f"{type(exc).__name__}: {exc}"
    return f"raised: {error.code} {error.message}"


async def main() -> None:
    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        return {"ok": True}

    transport, where = target()
    if transport == "stdio":
        command, *args = where.split("\0")
        chosen: Any = StdioTransport(command, args)
    else:
        chosen = StreamableHttpTransport(where)
    client = fastmcp.Client(chosen, elicitation_handler=elicit, mode="auto")
    async with client:
        await check("initialize", lambda: _version(client), lambda v: v == "2026-07-28")
        tasks: dict[str, Any] = {}

        async def create() -> str:
            tasks["quick"] = await call_tool_task(client, "crunch", {"seconds": 0.3})
            return tasks["quick"].task_id

        await check("task created", create, lambda task_id: bool(task_id))

        async def status() -> str:
            return str((await tasks["quick"].status()).status)

        await check("tasks/get", status, lambda s: s in ("working", "completed"))

        async def result() -> str:
            await tasks["quick"].wait(timeout=TASK_WAIT)
            return text(await tasks["quick"].result())

        await check("task result", result, "crunched 0.3".__eq__)

        async def asked() -> str:
            # Driven to its end by the client: tasks/get, the question answered by the
            # elicitation handler through tasks/update, then tasks/get again.
            return text(await client.call_tool("confirm", {"item": "book"}))

        await check("input request answered", asked, "shipped book".__eq__)

        async def cancel() -> str:
            endless = await call_tool_task(client, "crunch", {"seconds": 3600})
            await endless.cancel()
            return str((await endless.wait(timeout=TASK_WAIT)).status)

        await check("cancel", cancel, "cancelled".__eq__)

        async def failing() -> str:
            task = await call_tool_task(client, "explode", {}, raise_on_error=False)
            return text(await task.result())

        await check("tool error in a task", failing, lambda t: "the task broke" in t)

        async def unknown() -> str:
            request = GetTaskRequest(params=GetTaskRequestParams(task_id="no-such-task"))
            try:
                got = await client.session.send_request(request, ClientGetTaskResult)
            except Exception as exc:  # the SDK's MCPError
                return error_text(exc)
            return f"answered: {got!r}"

        await check("unknown task", unknown, lambda t: t.startswith("raised: -32602"))
        await check(
            "call after unknown task",
            lambda: client.call_tool("crunch", {"seconds": 0.1}),
            lambda r: text(r) == "crunched 0.1",
        )


async def _version(client: fastmcp.Client[Any]) -> str:
    return str(client.protocol_version)  # type: ignore[attr-defined]


if __name__ == "__main__":
    asyncio.run(main())
