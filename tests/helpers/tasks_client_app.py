"""The server the client-side tasks tests call, and how to reach it over each transport.

Run as a script it serves the app: `python tests/helpers/tasks_client_app.py stdio`, or
`... http PORT`. Callers are told apart by the `x-test-user` HTTP header (a memory client is
the caller "memory", a stdio client the caller "stdio").
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Run as a script, only this file's own directory is on sys.path; the package lives one level up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.caller_header import caller
from helpers.loopback_process import free_port, listening
from mrtr import Client, ClientOptions, ElicitResult, RequestContext, Server, TaskSettings
from mrtr.protocol.types import ElicitRequestParams
from mrtr.settings import server_options

APP = str(Path(__file__).resolve())
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def build_server() -> Server:
    """Tools that become tasks: one asking before and during its task, one sleeping, one
    whose task outlives its TTL."""
    server = Server("tasks-client-test", options=server_options(principal=caller))
    fast = TaskSettings("optional", start_after=None, poll_interval=0.05)

    @server.tool(task=fast)
    async def ship(ctx: RequestContext, item: str) -> str:
        """Asks where to by MRTR, becomes a task, then asks for a confirmation in the task."""
        where = await ctx.elicit(f"Ship {item} where?", NAME, key="where")
        address = (where.content or {}).get("name", "?")
        await ctx.run_as_task()
        sure = await ctx.elicit(f"Ship {item} to {address}?", CONFIRM, key="sure")
        if sure.action != "accept":
            return f"{item} stays home"
        return f"{item} shipped to {address} (task {ctx.task_id is not None})"

    @server.tool(task=TaskSettings("optional", start_after=0.0, poll_interval=0.05))
    async def sleep(seconds: float) -> str:
        """Sleeps; a task as soon as it waits."""
        await asyncio.sleep(seconds)
        return f"slept {seconds:g} s"

    @server.tool(task=TaskSettings("required", ttl=0.5, poll_interval=0.05))
    async def short_lived(seconds: float) -> str:
        """A task kept for 0.5 s only."""
        await asyncio.sleep(seconds)
        return "done"

    return server


def answer(params: ElicitRequestParams) -> ElicitResult:
    """The elicitation handler: Ada, and yes."""
    if "where" in params.message:
        return ElicitResult(action="accept", content={"name": "Ada"})
    return ElicitResult(action="accept", content={"ok": True})


@contextlib.contextmanager
def http_app() -> Iterator[str]:
    """The app in a child process on a free loopback port; its endpoint URL."""
    port = free_port()
    with listening([sys.executable, APP, "http", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


def connect(
    transport: str, url: str | None = None, user: str | None = None, **kwargs: Any
) -> Client:
    """A client of the app over `transport` ("memory" needs `kwargs["server"]`)."""
    kwargs.setdefault("elicitation_handler", answer)
    kwargs.setdefault("options", ClientOptions(protocol="modern"))
    if transport == "memory":
        return Client.in_memory(kwargs.pop("server"), **kwargs)
    if transport == "stdio":
        return Client.stdio(sys.executable, [APP, "stdio"], **kwargs)
    assert url is not None
    headers = {"x-test-user": user} if user is not None else None
    return Client.http(url, headers=headers, **kwargs)


if __name__ == "__main__":
    app = build_server()
    if sys.argv[1] == "stdio":
        app.run("stdio")
    else:
        app.run("http", host="127.0.0.1", port=int(sys.argv[2]))
