"""The tasks extension (`io.modelcontextprotocol/tasks`) with every pinned peer that implements
it, both ways: the peer's client against our `servers/tasks_server.py`, and `mrtr.Client`
against a server written with the peer. One test per cell; see `cells.judge`.

Each cell creates a task, polls it with `tasks/get`, has a task ask a question and answers it
(`tasks/update`), takes a result, cancels a task, and follows two error paths (a tool error
inside a task, a `tasks/get` for a task nobody created) with a call that must still work.

Peers with tasks of an older draft (the 2025-11-25 revision's `tasks/result` and `params.task`:
the TypeScript SDKs, mcp 1.x, FastMCP 3) speak none of this extension; their cells are the
ones of the other files, where a task tool would answer in line.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from helpers.interop.cells import Cell, judge, parse_checks
from helpers.interop.peers import DRIVERS, HERE, ROOT, our_python, venv_python
from helpers.interop.tasks_cells import CELLS, OUR_CLIENT, PEER_CLIENT, TRANSPORTS
from helpers.loopback_process import free_port, listening
from mrtr import Client, ElicitRequestParams, ElicitResult, McpError, errors

MODERN = "2026-07-28"
CELL_GUARD = 240.0  # seconds for one cell: only reached when something hangs
STEP = 30.0  # seconds per check: only reached when something hangs
TASK_CHECKS = [
    "initialize",
    "task created",
    "tasks/get",
    "task result",
    "input request answered",
    "cancel",
    "tool error in a task",
    "unknown task",
    "call after unknown task",
]
TASKS_SERVER = HERE / "servers" / "tasks_server.py"
PEER_TASKS_SERVER = HERE / "peer_servers" / "fastmcp_tasks_server.py"


def run_peer_client(transport: str) -> tuple[str, str]:
    """The fastmcp-tasks client driver against our tasks server: its stdout and stderr."""
    driver = [str(venv_python("fastmcp-tasks")), str(DRIVERS / "fastmcp_tasks_client.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(DRIVERS)])}
    ours = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def run(argv: list[str]) -> tuple[str, str]:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=CELL_GUARD, env=env, cwd=DRIVERS
        )
        return done.stdout, done.stderr

    if transport == "stdio":
        return run([*driver, "stdio", our_python(), str(TASKS_SERVER)])
    port = free_port()
    with listening([our_python(), str(TASKS_SERVER), "http", str(port)], port, env=ours):
        return run([*driver, "http", f"http://127.0.0.1:{port}/mcp"])


@pytest.fixture(scope="module", autouse=True)
def peer_client_runs() -> Iterator[dict[str, Future[tuple[str, str]]]]:
    """The peer client's runs, started with the module: each mostly waits on process starts
    and imports, so they go on while our client's cells run."""
    pool = ThreadPoolExecutor(max_workers=len(TRANSPORTS), thread_name_prefix="tasks-cell")
    yield {transport: pool.submit(run_peer_client, transport) for transport in TRANSPORTS}
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(CELL_GUARD + 60)
@pytest.mark.parametrize(("peer", "transport"), CELLS)
async def test_peer_tasks_client_against_our_server(
    peer: str, transport: str, peer_client_runs: dict[str, Future[tuple[str, str]]]
) -> None:
    out, err = await asyncio.to_thread(peer_client_runs[transport].result, CELL_GUARD + 30)
    judge(Cell(peer, PEER_CLIENT, transport, MODERN), parse_checks(out), TASK_CHECKS, log=err)


def confirm(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def text(result: Any) -> str:
    said = " ".join(getattr(item, "text", "") or "" for item in result.content)
    return f"isError: {said}" if result.is_error else said


async def our_client_checks(client: Client) -> list[dict[str, Any]]:
    """The task checks, run by `mrtr.Client` against the peer's task server."""
    checks: list[dict[str, Any]] = []
    handles: dict[str, Any] = {}

    async def check(
        name: str, op: Callable[[], Awaitable[Any]], want: Callable[[Any], bool]
    ) -> None:
        try:
            got = await asyncio.wait_for(op(), STEP * 3 if not checks else STEP)
            checks.append({"check": name, "ok": bool(want(got)), "detail": repr(got)[:400]})
        except Exception as exc:  # a failing peer or client is the finding
            checks.append({"check": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})

    async def connect() -> str:
        await client.connect()
        await client.list_tools()  # settles the era
        return f"{client.era} {client.protocol_version}"

    async def create() -> str | None:
        handles["quick"] = await client.call_tool_as_task("crunch", {"seconds": 0.3})
        return str(handles["quick"].task_id)

    async def status() -> str:
        return str((await handles["quick"].status()).status)

    async def result() -> str:
        return text(await handles["quick"].result(timeout=STEP))

    async def cancel() -> str:
        endless = await client.call_tool_as_task("crunch", {"seconds": 3600})
        await endless.cancel()
        try:
            return f"finished: {text(await endless.result(timeout=STEP))}"
        except McpError as exc:
            return f"raised: {exc.code} {exc}"

    async def unknown() -> str:
        try:
            return f"answered: {await client.task('no-such-task').status()!r}"
        except McpError as exc:
            return f"raised: {exc.code} {exc}"

    await check("initialize", connect, f"modern {MODERN}".__eq__)
    await check("task created", create, lambda task_id: task_id not in ("", "None"))
    await check("tasks/get", status, lambda s: s in ("working", "completed"))
    await check("task result", result, "crunched 0.3".__eq__)
    await check(
        "input request answered",
        lambda: client.call_tool("confirm", {"item": "book"}),
        lambda r: text(r) == "shipped book",
    )
    await check("cancel", cancel, lambda t: t.startswith(f"raised: {errors.TASK_CANCELLED} "))
    await check(
        "tool error in a task",
        lambda: client.call_tool("explode", {}),
        lambda r: text(r) == "isError: the task broke",
    )
    await check("unknown task", unknown, lambda t: t.startswith("raised: -32602 "))
    await check(
        "call after unknown task",
        lambda: client.call_tool("crunch", {"seconds": 0.1}),
        lambda r: text(r) == "crunched 0.1",
    )
    return checks


@pytest.mark.timeout(CELL_GUARD + 60)
@pytest.mark.parametrize(("peer", "transport"), CELLS)
async def test_our_client_against_peer_tasks_server(peer: str, transport: str) -> None:
    command = [str(venv_python("fastmcp-tasks")), str(PEER_TASKS_SERVER)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the peer's own only
    if transport == "stdio":
        client = Client.stdio(
            command[0], [*command[1:], "stdio"], env=env, elicitation_handler=confirm
        )
        checks = await our_client_checks(client)
        await client.close()
    else:
        port = free_port()
        # Slow to start on a loaded machine: FastMCP, its tasks backend and their imports.
        with listening([*command, "http", str(port)], port, start_timeout=STEP * 3, env=env):
            client = Client.http(f"http://127.0.0.1:{port}/mcp", elicitation_handler=confirm)
            checks = await our_client_checks(client)
            await client.close()
    judge(Cell(peer, OUR_CLIENT, transport, MODERN), checks, TASK_CHECKS)
