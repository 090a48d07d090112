"""`Server(lifespan=...)`: run once per process under every way of serving, its state reached
from handlers (`ctx.state`, `State[T]`), a failure at startup stopping the server with a clear
message, and shutdown running it out (end of stdin, SIGTERM, ASGI shutdown, client close).

Real components: the in-memory client, the ASGI app driven with the ASGI lifespan protocol, and
`mrtr serve` in a child process over stdio (our client and the official SDK's legacy client)
and over loopback HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

from helpers.loopback_process import free_port
from mrtr import Client, LifespanError, RequestContext, Server, State
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

SCRIPT = Path(__file__).resolve().parent / "servers" / "lifespan_server.py"
GUARD = 20.0  # seconds: reached only when something is broken


class Pool:
    """Stands for a database pool: counts how often it was opened and closed."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0


def counting_lifespan(pool: Pool) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[Pool]:
        pool.opened += 1
        try:
            yield pool
        finally:
            pool.closed += 1

    return lifespan


def pool_server(pool: Pool) -> Server:
    server = Server("pooled", lifespan=counting_lifespan(pool))

    @server.tool()
    async def use(ctx: RequestContext, db: State[Pool], n: int) -> str:
        """Use the pool."""
        assert ctx.state is db
        return f"opened={db.opened} closed={db.closed} n={n}"

    return server


# --- in process ---------------------------------------------------------------------------------


async def test_in_memory_client_runs_the_lifespan_and_handlers_get_its_state() -> None:
    pool = Pool()
    server = pool_server(pool)
    async with Client.in_memory(server) as client:
        assert (pool.opened, pool.closed) == (1, 0)
        tools = await client.list_tools()
        # The injected parameter is not an argument: only `n` is.
        assert tools.tools[0].input_schema["properties"].keys() == {"n"}
        assert tools.tools[0].input_schema["required"] == ["n"]
        result = await client.call_tool("use", {"n": 2})
        assert result.content[0].text == "opened=1 closed=0 n=2"  # type: ignore[union-attr]
    assert (pool.opened, pool.closed) == (1, 1)


async def test_entries_are_counted_so_the_lifespan_runs_once_at_a_time() -> None:
    pool = Pool()
    server = pool_server(pool)
    async with server.running():
        async with Client.in_memory(server) as first, Client.in_memory(server) as second:
            await first.call_tool("use", {"n": 1})
            await second.call_tool("use", {"n": 2})
            assert (pool.opened, pool.closed) == (1, 0)
        assert pool.closed == 0  # `running()` still holds it
        assert server.lifespan_state is pool
    assert (pool.opened, pool.closed) == (1, 1)
    # Served again later: a new run.
    async with Client.in_memory(server) as client:
        await client.call_tool("use", {"n": 3})
    assert (pool.opened, pool.closed) == (2, 2)


async def test_the_lifespan_is_entered_and_exited_in_one_task() -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[None]:
        tasks.append(asyncio.current_task())
        async with asyncio.TaskGroup():  # would break if exited from another task
            yield
        tasks.append(asyncio.current_task())

    server = Server("grouped", lifespan=lifespan)
    client = Client.in_memory(server)
    await asyncio.create_task(client.__aenter__())  # entered in one task...
    await client.__aexit__(None, None, None)  # ...left from another
    assert len(tasks) == 2 and tasks[0] is tasks[1]


async def test_a_failing_lifespan_stops_the_server_with_a_clear_error() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[None]:
        raise ConnectionRefusedError("db.invalid:5432 refused")
        yield

    server = Server("broken", lifespan=lifespan)

    @server.tool()
    async def anything() -> str:
        return "never"

    with pytest.raises(LifespanError) as failed:
        async with Client.in_memory(server):
            pass
    message = str(failed.value)
    assert "'broken' did not start" in message
    assert "ConnectionRefusedError: db.invalid:5432 refused" in message
    assert isinstance(failed.value.__cause__, ConnectionRefusedError)
    # Nothing is left half-started: a later attempt runs the lifespan again and fails again.
    with pytest.raises(LifespanError):
        async with server.running():
            pass


async def test_state_outside_a_running_lifespan_is_a_clear_error(
    make_request: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool = Pool()
    server = pool_server(pool)
    with pytest.raises(LifespanError, match="not running"):
        server.lifespan_state  # noqa: B018 - the read is what is tested
    # A handler reached without serving the server: its tool fails (the cause is logged, not
    # shown to the client), and the server goes on.
    request = make_request("tools/call", {"name": "use", "arguments": {"n": 1}})
    response = await server.handle_request(request)
    assert response["result"]["isError"] is True
    assert "lifespan state is read while the lifespan is not running" in caplog.text
    assert Server("plain").lifespan_state is None  # no lifespan: no state


async def test_a_lifespan_failing_at_shutdown_is_reported() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[None]:
        yield
        raise OSError("could not flush the pool")

    server = Server("flaky", lifespan=lifespan)
    with pytest.raises(LifespanError, match="raised at shutdown: OSError: could not flush"):
        async with server.running():
            pass


# --- the ASGI lifespan protocol ---------------------------------------------------------------


async def _asgi_lifespan(app: Any, events: list[str]) -> list[dict[str, Any]]:
    """Run the app's `lifespan` scope, sending `events`; what it answered."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for event in events:
        incoming.put_nowait({"type": event})
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app({"type": "lifespan"}, incoming.get, send), GUARD)
    return sent


async def test_the_asgi_app_runs_the_lifespan_between_startup_and_shutdown() -> None:
    pool = Pool()
    server = pool_server(pool)
    app = server.asgi_app()
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        answered.set()

    running = asyncio.create_task(app({"type": "lifespan"}, incoming.get, send))
    await incoming.put({"type": "lifespan.startup"})
    await asyncio.wait_for(answered.wait(), GUARD)
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert (pool.opened, pool.closed) == (1, 0) and server.lifespan_state is pool
    # A second app of the same server (mounted twice, or served beside): shared, not re-run.
    second = await _asgi_lifespan(server.asgi_app(), ["lifespan.startup", "lifespan.shutdown"])
    assert [m["type"] for m in second] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    assert (pool.opened, pool.closed) == (1, 0)
    await incoming.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(running, GUARD)
    assert sent[-1] == {"type": "lifespan.shutdown.complete"}
    assert (pool.opened, pool.closed) == (1, 1)


async def test_the_asgi_app_reports_a_failed_startup() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[None]:
        raise RuntimeError("missing DATABASE_URL")
        yield

    sent = await _asgi_lifespan(
        Server("asgi-broken", lifespan=lifespan).asgi_app(), ["lifespan.startup"]
    )
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert "'asgi-broken' did not start" in sent[0]["message"]
    assert "RuntimeError: missing DATABASE_URL" in sent[0]["message"]


# --- child processes: `mrtr serve` ------------------------------------------------------------


def _env(marker: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "LIFESPAN_MARKER": str(marker), **extra}


def _marks(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


async def test_stdio_server_runs_the_lifespan_until_end_of_input(tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    async with Client.stdio(
        sys.executable, ["-m", "mrtr", "serve", f"{SCRIPT}:server"], env=_env(marker)
    ) as client:
        first = await client.call_tool("whoami", {"caller": "a"})
        second = await client.call_tool("whoami", {"caller": "b"})
        assert first.content[0].text == "pool of lifespan-demo served a (1 calls)"  # type: ignore[union-attr]
        assert second.content[0].text == "pool of lifespan-demo served b (2 calls)"  # type: ignore[union-attr]
        assert _marks(marker) == ["start"]
    assert _marks(marker) == ["start", "stop"]  # stdin closed: run out before the exit


async def test_the_official_legacy_client_reaches_the_lifespan_state(tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mrtr", "serve", f"{SCRIPT}:server"],
        env=_env(marker),
    )
    async with mcp.Client(params, mode="legacy") as client:
        assert client.session.protocol_version == "2025-11-25"
        result = await client.call_tool("whoami", {"caller": "official"})
        assert result.content[0].text == "pool of lifespan-demo served official (1 calls)"  # type: ignore[union-attr]
    assert _marks(marker) == ["start", "stop"]


async def _child(marker: Path, *args: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mrtr",
        "serve",
        f"{SCRIPT}:server",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(marker, **env),
    )


async def _reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
        await process.wait()


async def test_sigterm_runs_the_stdio_lifespan_out(tmp_path: Path) -> None:
    marker = tmp_path / "marks"
    process = await _child(marker)
    try:
        assert process.stdin is not None and process.stdout is not None
        meta = {
            meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
            meta_keys.CLIENT_CAPABILITIES: {},
        }
        process.stdin.write(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":'
            + __import__("orjson").dumps(meta)
            + b"}}\n"
        )
        await process.stdin.drain()
        assert b'"whoami"' in await asyncio.wait_for(process.stdout.readline(), GUARD)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), GUARD) == 0
        assert _marks(marker) == ["start", "stop"]
    finally:
        await _reap(process)


async def test_mrtr_serve_stops_with_a_clear_message_when_the_lifespan_fails(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marks"
    for transport in (
        ["--transport", "stdio"],
        ["--transport", "http", "--port", str(free_port())],
    ):
        process = await _child(marker, *transport, LIFESPAN_FAIL="1")
        try:
            _, stderr = await asyncio.wait_for(process.communicate(b""), GUARD)
            assert process.returncode == 1, stderr
            text = stderr.decode()
            assert "mrtr serve: server 'lifespan-demo' did not start: its lifespan raised" in text
            assert "ConnectionRefusedError: database at db.invalid:5432 refused" in text
            assert "Traceback" not in text
        finally:
            await _reap(process)
    assert _marks(marker) == []


async def test_http_server_runs_the_lifespan_once_and_runs_it_out_on_sigterm(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marks"
    port = free_port()
    process = await _child(marker, "--transport", "http", "--port", str(port))
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(200):  # until it listens
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            await asyncio.sleep(0.05)
        async with Client.http(url) as client:
            result = await client.call_tool("whoami", {"caller": "http"})
            assert result.content[0].text == "pool of lifespan-demo served http (1 calls)"  # type: ignore[union-attr]
        # serve_http and the app's ASGI lifespan both entered it: it started once.
        assert _marks(marker) == ["start"]
        process.send_signal(signal.SIGTERM)
        # SIGTERM drains, then the process exits normally.
        assert await asyncio.wait_for(process.wait(), GUARD) == 0
        assert _marks(marker) == ["start", "stop"]
    finally:
        await _reap(process)
