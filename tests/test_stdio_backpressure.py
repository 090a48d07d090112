"""stdio backpressure: a client writing requests faster than it reads them holds the server to
`Budgets.connection_requests` requests in flight; the rest wait in the pipe, unread, and are
all answered once the client reads. A request counts until its answer is written, so a client
that reads no answers at all blocks on the pipe instead of the server holding them. A request
waiting for the client's own answer never deadlocks the connection. Against a real subprocess
(`servers/backpressure_server.py`, and `mrtr serve servers/eof_server.py:server`).
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import os
import signal
import sys
import termios
from pathlib import Path
from typing import Any

import orjson

from helpers.eventually import eventually
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import INVALID_PARAMS
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server import Budgets
from mrtr.transport.base import MAX_MESSAGE_SIZE

SERVERS = Path(__file__).resolve().parent / "servers"
SERVER = str(SERVERS / "backpressure_server.py")
QUICK_SERVER = str(SERVERS / "eof_server.py") + ":server"  # `quick` answers at once
MIB = 1024 * 1024
GUARD = 30.0  # seconds: only ever reached when something is broken
F_GETPIPE_SZ = 1032  # Linux


def call(request_id: int, name: str, arguments: dict[str, Any]) -> bytes:
    meta = {meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION, meta_keys.CLIENT_CAPABILITIES: {}}
    params = {"name": name, "arguments": arguments, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return orjson.dumps(message) + b"\n"


def rss(pid: int) -> int:
    """The resident memory of process `pid`, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def unread(fd: int) -> int:
    """Bytes written to the pipe `fd` and not yet read by the other end."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


async def spawn(limit: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        SERVER,
        str(limit),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=1024 * 1024,
    )


async def test_a_client_that_does_not_read_holds_the_server_to_the_bound() -> None:
    limit, count = 8, 3000
    process = await spawn(limit)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    started = 0

    async def count_started() -> None:
        nonlocal started
        assert process.stderr is not None
        async for line in process.stderr:
            started += line.strip() == b"started"

    counter = asyncio.create_task(count_started())
    requests = b"".join(call(i, "gate", {}) for i in range(count))
    assert len(requests) > 4 * 65536  # far more than the pipe and the server's buffer hold

    async def write_all() -> None:
        assert process.stdin is not None
        process.stdin.write(requests)
        await process.stdin.drain()

    writer = asyncio.create_task(write_all())
    try:
        fd = process.stdin.get_extra_info("pipe").fileno()
        capacity = fcntl.fcntl(fd, F_GETPIPE_SZ)
        # The server started `limit` handlers, then stopped reading: the pipe fills up and stays
        # full while none of them can end, and the client cannot write everything.
        await eventually(
            lambda: started > limit or (started == limit and unread(fd) >= capacity - 256),
            "a full pipe",
            timeout=GUARD,
        )
        assert started == limit
        assert not writer.done()
        # The client reads now: the handlers end, the server reads on, every request is answered.
        process.send_signal(signal.SIGUSR1)
        answered: set[int] = set()
        async with asyncio.timeout(GUARD):
            while len(answered) < count:
                reply = orjson.loads(await process.stdout.readline())
                assert reply["result"]["content"][0]["text"] == "passed", reply
                answered.add(reply["id"])
            await writer
        assert answered == set(range(count))
        await eventually(lambda: started == count, "every start reported on stderr", timeout=GUARD)
        process.stdin.write(call(count, "peak", {}))
        await process.stdin.drain()
        async with asyncio.timeout(GUARD):
            reply = orjson.loads(await process.stdout.readline())
        assert reply["result"]["structuredContent"]["result"] <= limit
    finally:
        writer.cancel()
        process.stdin.close()
        async with asyncio.timeout(GUARD):
            await process.wait()
        await counter


async def test_requests_waiting_for_the_client_do_not_deadlock_the_bound() -> None:
    limit = 2
    process = await spawn(limit)
    assert process.stdin is not None and process.stdout is not None

    async def write(message: dict[str, Any] | bytes) -> None:
        assert process.stdin is not None
        process.stdin.write(
            message if isinstance(message, bytes) else orjson.dumps(message) + b"\n"
        )
        await process.stdin.drain()

    async def read() -> dict[str, Any]:
        assert process.stdout is not None
        async with asyncio.timeout(GUARD):
            message = orjson.loads(await process.stdout.readline())
        assert isinstance(message, dict)
        return message

    try:
        initialize = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        await write({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
        assert (await read())["id"] == 0
        await write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i in (1, 2):  # two requests in flight: the bound, each waiting for the client
            await write(
                {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "ask"}}
            )
        questions = [await read(), await read()]
        assert [q["method"] for q in questions] == ["elicitation/create"] * 2
        # The server reads on (the answers are in the input), and refuses a request past the bound.
        await write({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ask"}})
        refused = await read()
        assert refused["id"] == 3 and refused["error"]["code"] == INVALID_PARAMS
        assert refused["error"]["data"]["reason"] == "budget_exceeded"
        assert "requests in flight" in refused["error"]["message"]
        for question in questions:
            answer = {"action": "accept", "content": {"name": "Ada"}}
            await write({"jsonrpc": "2.0", "id": question["id"], "result": answer})
        results = {(m := await read())["id"]: m for _ in (1, 2)}
        assert {i: r["result"]["content"][0]["text"] for i, r in results.items()} == {
            1: "hello Ada",
            2: "hello Ada",
        }
    finally:
        process.stdin.close()
        async with asyncio.timeout(GUARD):
            await process.communicate()


async def test_a_client_that_reads_no_answers_blocks_on_the_pipe() -> None:
    # Padded requests, so that the input outgrows what the server buffers unread (twice the
    # message-size limit) well before all of them are written.
    count, pad = 6000, 10_000
    env = {**os.environ, "MRTR_REQUEST_STATE_KEY": "backpressure-test-key-" + "k" * 32}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mrtr",
        "serve",
        QUICK_SERVER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    logs = asyncio.create_task(process.stderr.read())
    writer: asyncio.Task[None] | None = None
    try:
        process.stdin.write(call(0, "quick", {}))
        async with asyncio.timeout(GUARD):
            first = orjson.loads(await process.stdout.readline())
        assert first["id"] == 0
        idle = rss(process.pid)

        line = call(1, "quick", {"pad": "x" * pad})
        requests = b"".join(call(i, "quick", {"pad": "x" * pad}) for i in range(1, count + 1))
        assert len(requests) > 2 * MAX_MESSAGE_SIZE + 16 * MIB

        async def write_all() -> None:
            assert process.stdin is not None
            process.stdin.write(requests)
            await process.stdin.drain()

        writer = asyncio.create_task(write_all())
        transport = process.stdin.transport
        # Wait (bounded) until the writing stops making progress, or ends.
        left, still = transport.get_write_buffer_size(), 0.0
        async with asyncio.timeout(GUARD):
            while not writer.done() and still < 1.5:
                await asyncio.sleep(0.1)
                now = transport.get_write_buffer_size()
                still = still + 0.1 if now == left else 0.0
                left = now
        grown = rss(process.pid) - idle
        written = len(requests) - transport.get_write_buffer_size()
        # What the server may hold: the input buffered unread, the requests in flight (each
        # parsed, its handler's task) and a little more for the allocator.
        budget = 2 * MAX_MESSAGE_SIZE + Budgets().connection_requests * 3 * len(line) + 8 * MIB
        assert grown < budget, f"server grew {grown / MIB:.0f} MiB holding unwritten answers"
        assert not writer.done(), "the server read every request while no answer was read"
        assert written < len(requests) - 4 * MIB

        # The client reads now: the server reads on, and every request is answered once.
        answered: list[int] = []
        async with asyncio.timeout(GUARD):
            while len(answered) < count:
                reply = orjson.loads(await process.stdout.readline())
                assert reply["result"]["content"][0]["text"] == "quick answer", reply
                answered.append(reply["id"])
            await writer
        assert sorted(answered) == list(range(1, count + 1))
    finally:
        if writer is not None:
            writer.cancel()
        process.stdin.close()
        async with asyncio.timeout(GUARD):
            rest = await process.stdout.read()
            await process.wait()
        assert rest == b""  # no answer twice, nothing more
        assert b"Traceback" not in await logs
