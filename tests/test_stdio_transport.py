"""The stdio transport over real subprocesses: `serve_stdio` in a child, `StdioTransport` here.

The server under test is `tests/servers/mrtr_flow_server.py`; raw-byte tests drive its stdin
and stdout directly. Waits for an event the child reports (a progress notification, a marker
file, a log line) are bounded by generous guards, never asserted on as timings. The full MRTR
flow over stdio runs in `test_flow_every_transport.py`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from helpers.eventually import eventually
from mrtr import Client, McpError, TextContent
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import CONNECTION_CLOSED, INVALID_REQUEST, PARSE_ERROR
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.transport.stdio_client import StdioTransport

SERVERS = Path(__file__).resolve().parent / "servers"
FLOW_SERVER = str(SERVERS / "mrtr_flow_server.py")
STUBBORN_SERVER = str(SERVERS / "stubborn_server.py")
GUARD = 20.0  # seconds: only ever reached when something is broken


# --- helpers ---------------------------------------------------------------------------------


def flow_client(**kwargs: Any) -> Client:
    return Client.stdio(sys.executable, [FLOW_SERVER], **kwargs)


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def raw_request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    body = dict(params or {})
    body["_meta"] = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_CAPABILITIES: {},
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}
    return orjson.dumps(message) + b"\n"


Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    """Start the flow server as a bare subprocess (with extra args); reaped after the test."""
    processes: list[asyncio.subprocess.Process] = []

    async def start(*args: str) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            FLOW_SERVER,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.returncode is None:
            process.kill()
        await process.communicate()


async def read_message(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    async with asyncio.timeout(GUARD):
        line = await process.stdout.readline()
    assert line.endswith(b"\n"), f"expected one message line, got {line!r}"
    message = orjson.loads(line)
    assert isinstance(message, dict)
    return message


async def write(process: asyncio.subprocess.Process, data: bytes) -> None:
    assert process.stdin is not None
    process.stdin.write(data)
    await process.stdin.drain()


# --- serving over stdio ----------------------------------------------------------------------


async def test_slow_request_does_not_hold_up_a_fast_one() -> None:
    started = asyncio.Event()
    async with flow_client() as client:
        slow = asyncio.create_task(
            client.call_tool("slow", progress_callback=lambda *_: started.set())
        )
        async with asyncio.timeout(GUARD):
            await started.wait()  # the slow handler is running on the server
            fast = await client.call_tool("fast")
        assert text_of(fast) == "fast"
        assert not slow.done(), "the fast call returned while the slow one is still running"
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow


async def test_notifications_are_delivered_in_order_before_the_response() -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        for _ in range(3):
            await asyncio.sleep(0)  # a slow async callback: later messages queue behind it
        seen.append(progress)

    async with flow_client() as client:
        result = await client.call_tool("steps", {"count": 50}, progress_callback=on_progress)
        assert seen == [float(step) for step in range(1, 51)]  # all handled, in order, already
    assert text_of(result) == "50 steps"


async def test_response_over_the_client_limit_fails_that_call_only() -> None:
    transport = StdioTransport(sys.executable, [FLOW_SERVER], max_message_size=4096)
    async with Client(transport) as client:
        with pytest.raises(McpError) as too_big:
            await client.call_tool("big", {"size": 100_000})
        assert "max_message_size" in too_big.value.message
        assert text_of(await client.call_tool("big", {"size": 10})) == "x" * 10


# --- cancellation ----------------------------------------------------------------------------


async def test_cancelling_a_call_cancels_the_handler_on_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mrtr.stdio.server")
    marker = tmp_path / "block.marker"
    started = asyncio.Event()
    async with flow_client() as client:
        call = asyncio.create_task(
            client.call_tool(
                "block", {"marker": str(marker)}, progress_callback=lambda *_: started.set()
            )
        )
        async with asyncio.timeout(GUARD):
            await started.wait()
        call.cancel()  # stdio's cancellation signal: notifications/cancelled for that id
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(marker.exists, "the server's handler saw CancelledError", timeout=GUARD)
        assert marker.read_text(encoding="utf-8") == "cancelled"
        # The connection is still usable after the cancellation.
        assert text_of(await client.call_tool("fast")) == "fast"
        await eventually(
            lambda: any("block cancelled" in r.getMessage() for r in caplog.records),
            "the handler's stderr line was forwarded",
            timeout=GUARD,
        )


async def test_a_timeout_around_call_tool_cancels_the_server_handler(tmp_path: Path) -> None:
    marker = tmp_path / "block.marker"
    loop = asyncio.get_running_loop()
    async with flow_client() as client:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(GUARD) as deadline:
                # Expire the timeout as soon as the handler reports that it is running.
                await client.call_tool(
                    "block",
                    {"marker": str(marker)},
                    progress_callback=lambda *_: deadline.reschedule(loop.time()),
                )
        await eventually(marker.exists, "the server's handler saw CancelledError", timeout=GUARD)
        assert marker.read_text(encoding="utf-8") == "cancelled"


# --- server: framing, bad input, EOF ----------------------------------------------------------


async def test_garbage_line_gets_parse_error_then_next_request_is_served(spawn: Spawn) -> None:
    raw_server = await spawn()
    await write(raw_server, b"this is not json\n")
    error = await read_message(raw_server)
    assert error["error"]["code"] == PARSE_ERROR
    assert "Parse error" in error["error"]["message"]
    assert error.get("id") is None

    await write(raw_server, raw_request(1, "server/discover"))
    reply = await read_message(raw_server)
    assert reply["id"] == 1
    assert LATEST_PROTOCOL_VERSION in reply["result"]["supportedVersions"]


async def test_blank_lines_are_skipped_and_invalid_messages_answered(spawn: Spawn) -> None:
    raw_server = await spawn()
    await write(raw_server, b"\n\r\n   \n" + b"[1, 2]\n")
    error = await read_message(raw_server)
    assert error["error"]["code"] == INVALID_REQUEST
    await write(raw_server, raw_request(2, "tools/call", {"name": "fast"}))
    reply = await read_message(raw_server)
    assert reply["id"] == 2
    assert reply["result"]["content"][0]["text"] == "fast"


async def test_over_long_line_is_refused_with_its_id_and_serving_continues(spawn: Spawn) -> None:
    raw_server = await spawn("--max-message-size", "1024")
    huge = raw_request(7, "tools/call", {"name": "shout", "arguments": {"text": "x" * 5000}})
    await write(raw_server, huge)
    error = await read_message(raw_server)
    assert error["id"] == 7  # read from the start of the line, so the client's call fails fast
    assert error["error"]["code"] == INVALID_REQUEST
    assert "too large" in error["error"]["message"]
    assert "1024 bytes" in error["error"]["message"]

    await write(raw_server, b'{"no id here": "' + b"y" * 3000 + b'"}\n')
    error = await read_message(raw_server)
    assert error["error"]["code"] == INVALID_REQUEST
    assert error.get("id") is None

    await write(raw_server, raw_request(8, "tools/call", {"name": "fast"}))
    reply = await read_message(raw_server)
    assert reply["id"] == 8
    assert reply["result"]["content"][0]["text"] == "fast"


async def test_stray_print_goes_to_stderr_not_into_the_message_stream(spawn: Spawn) -> None:
    raw_server = await spawn()
    call = {"name": "stray_print", "arguments": {"text": "STRAY"}}
    await write(raw_server, raw_request(1, "tools/call", call))
    reply = await read_message(raw_server)  # the next stdout line is the response, not "STRAY"
    assert reply["id"] == 1
    assert reply["result"]["content"][0]["text"] == "printed"
    assert raw_server.stdin is not None
    raw_server.stdin.close()
    async with asyncio.timeout(GUARD):
        stdout, stderr = await raw_server.communicate()
    assert stdout == b""
    assert b"STRAY" in stderr


async def test_stdin_eof_makes_the_server_exit_0_and_cancel_requests_past_the_grace(
    spawn: Spawn, tmp_path: Path
) -> None:
    raw_server = await spawn("--eof-grace", "0.2")
    marker = tmp_path / "block.marker"
    request = raw_request(1, "tools/call", {"name": "block", "arguments": {"marker": str(marker)}})
    request = request.replace(b'"_meta":{', b'"_meta":{"progressToken":"p",', 1)
    await write(raw_server, request)
    progress = await read_message(raw_server)
    assert progress["method"] == "notifications/progress"  # the handler is running

    assert raw_server.stdin is not None
    raw_server.stdin.close()
    async with asyncio.timeout(GUARD):
        stdout, _ = await raw_server.communicate()
    assert raw_server.returncode == 0
    assert stdout == b"", "a cancelled request gets no response"
    assert marker.read_text(encoding="utf-8") == "cancelled"


async def test_last_message_without_newline_is_read_at_eof(spawn: Spawn) -> None:
    raw_server = await spawn()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
    await write(raw_server, raw_request(1, "server/discover"))
    reply = await read_message(raw_server)
    assert reply["id"] == 1
    await write(raw_server, orjson.dumps(cancel) + b"\n" + b"this is not json")
    assert raw_server.stdin is not None
    raw_server.stdin.close()
    async with asyncio.timeout(GUARD):
        stdout, _ = await raw_server.communicate()
    assert raw_server.returncode == 0
    (line,) = stdout.splitlines()
    assert orjson.loads(line)["error"]["code"] == PARSE_ERROR


# --- client: process lifecycle ----------------------------------------------------------------


async def test_close_reaps_a_server_that_exits_on_stdin_eof() -> None:
    transport = StdioTransport(sys.executable, [FLOW_SERVER])
    async with Client(transport) as client:
        assert text_of(await client.call_tool("fast")) == "fast"
    assert transport.returncode == 0  # it exited by itself on EOF: no signal needed


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_close_terminates_a_server_that_ignores_stdin_eof(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mrtr.stdio.server")
    transport = StdioTransport(sys.executable, [STUBBORN_SERVER], shutdown_timeout=0.2)
    await transport.connect(lambda message: None)
    await eventually(lambda: "ready" in caplog.messages, "the child started", timeout=GUARD)
    await transport.close()
    assert transport.returncode == -signal.SIGTERM


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_close_kills_a_server_that_ignores_sigterm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mrtr.stdio.server")
    transport = StdioTransport(
        sys.executable, [STUBBORN_SERVER, "--ignore-sigterm"], shutdown_timeout=0.2
    )
    await transport.connect(lambda message: None)
    await eventually(
        lambda: "ready" in caplog.messages, "SIGTERM is ignored from now on", timeout=GUARD
    )
    await transport.close()
    assert transport.returncode == -signal.SIGKILL
    with pytest.raises(McpError) as closed:
        await transport.request({"jsonrpc": "2.0", "id": 1, "method": "server/discover"})
    assert closed.value.code == CONNECTION_CLOSED


async def test_child_dying_mid_request_fails_pending_and_later_requests() -> None:
    started = asyncio.Event()
    async with flow_client() as client:
        slow = asyncio.create_task(
            client.call_tool("slow", progress_callback=lambda *_: started.set())
        )
        async with asyncio.timeout(GUARD):
            await started.wait()
        with pytest.raises(McpError) as died:
            await client.call_tool("die", {"code": 3})
        assert died.value.code == CONNECTION_CLOSED
        assert "exited with code 3" in died.value.message
        assert "dying with code 3" in died.value.message  # its last stderr line, for context

        with pytest.raises(McpError) as pending:
            await slow
        assert pending.value.code == CONNECTION_CLOSED
        assert "exited with code 3" in pending.value.message

        with pytest.raises(McpError) as later:
            await client.call_tool("fast")
        assert later.value.code == CONNECTION_CLOSED
        assert "exited with code 3" in later.value.message
        assert isinstance(client.transport, StdioTransport)
        assert client.transport.returncode == 3


async def test_server_stderr_is_forwarded_to_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mrtr.stdio.server")
    async with flow_client() as client:
        assert text_of(await client.call_tool("shout", {"text": "hello from stderr"})) == "shouted"
    # close() waits for the child's pipes to drain, so the line has arrived by now.
    records = [r for r in caplog.records if r.name == "mrtr.stdio.server"]
    assert "hello from stderr" in [r.getMessage() for r in records]
    assert all(r.levelno == logging.INFO for r in records)


async def test_command_that_cannot_start_raises_connection_closed(tmp_path: Path) -> None:
    client = Client.stdio(str(tmp_path / "no-such-server"))
    with pytest.raises(McpError) as failed:
        await client.connect()
    assert failed.value.code == CONNECTION_CLOSED
    assert "could not start" in failed.value.message


async def test_env_overlays_the_parent_environment_and_cwd_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRTR_PARENT_ONLY", "from-parent")
    async with flow_client(env={"MRTR_GIVEN": "given"}, cwd=str(tmp_path)) as client:
        given = await client.call_tool("environment", {"name": "MRTR_GIVEN"})
        inherited = await client.call_tool("environment", {"name": "MRTR_PARENT_ONLY"})
        cwd = await client.call_tool("working_directory")
    assert text_of(given) == "given"
    assert text_of(inherited) == "from-parent"
    assert text_of(cwd) == str(tmp_path)


async def test_inherit_env_false_passes_only_a_minimal_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_PARENT_ONLY", "from-parent")
    transport = StdioTransport(
        sys.executable, [FLOW_SERVER], env={"MRTR_GIVEN": "given"}, inherit_env=False
    )
    async with Client(transport) as client:
        given = await client.call_tool("environment", {"name": "MRTR_GIVEN"})
        inherited = await client.call_tool("environment", {"name": "MRTR_PARENT_ONLY"})
        path = await client.call_tool("environment", {"name": "PATH"})
    assert text_of(given) == "given"
    assert text_of(inherited) == "<unset>"
    assert text_of(path) == os.environ["PATH"]
