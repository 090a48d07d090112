"""`benchmarks/saturation.py`: every server in its own process, driven by `wrk` posting real
requests whose every answer its Lua script checks. No timing is asserted (machines are noisy):
that every row ran with only good answers, that flows took two requests each, and that a
wrong answer or a refused request is counted and fails the run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks import saturation, xproc

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)  # six servers to start, 13 rows of two one-second runs
def test_every_row_runs_with_every_answer_good(tmp_path: Path) -> None:
    proc, rows = _run_briefly(tmp_path, timeout=220)
    assert set(rows) == {
        *(f"plain/{s}" for s in ("floor", "floor-mcp", "ours", "mcpserver", "lowlevel", "ts")),
        *(f"flow/{s}" for s in ("ours", "mcpserver", "lowlevel")),
        *(f"legacy/{s}" for s in ("floor-mcp", "ours", "mcpserver", "lowlevel", "ts")),
    }
    for name, row in rows.items():
        assert row["ops"] > 0 and row["server_cpu_s_per_op"] > 0, name
        assert row["non2xx"] == row["bad"] == row["socket_errors"] == 0, name
        # A flow is two requests (a few in flight or queued when the run stops).
        expected = 2 * row["ops"] if name.startswith("flow/") else row["ops"]
        assert expected <= row["requests"] <= expected + 2 * 4, name
    for title in ("plain tools/call, 2026-07-28", "two-round MRTR flow", "2025-11-25 session"):
        assert title in proc.stdout
    assert "/ floor-mcp" in proc.stdout and "MCPServer /" in proc.stdout
    assert "TS /" in proc.stdout


async def test_a_wrong_answer_or_a_refused_request_is_counted() -> None:
    row = saturation.Row("plain", "ours")
    good = saturation.requests_for(row, None)
    async with xproc.server_process("ours") as server:
        wrong = dataclasses.replace(good, expect='"text":"6"')
        run, _ = await saturation.run_wrk(
            server.url, saturation.lua_script(wrong, 0), seconds=1, connections=2, pid=server.pid
        )
        assert run["requests"] > 0 and run["bad"] == run["requests"] and run["ok"] == 0
        assert run["bad_sample"].startswith('HTTP 200: {"jsonrpc":"2.0"')
        assert '"text":"5"' in run["bad_sample"]
        refused = dataclasses.replace(
            good, headers={**good.headers, "MCP-Protocol-Version": "2025-11-25"}
        )
        run, _ = await saturation.run_wrk(
            server.url, saturation.lua_script(refused, 0), seconds=1, connections=2, pid=server.pid
        )
        assert run["requests"] > 0 and run["non2xx"] == run["requests"]
        assert run["bad_sample"].startswith("HTTP 400: ")
    tally = saturation.Tally()
    tally.add(run, (1.0, 1.0))
    assert tally.failed


@pytest.mark.timeout(120)
def test_the_lean_rows_run_with_every_answer_good(tmp_path: Path) -> None:
    """The `-lean` servers (`benchmarks/lean_http.py` instead of uvicorn) answer wrk's plain
    calls and MRTR flows as the uvicorn rows do, every answer checked."""
    _, rows = _run_briefly(
        tmp_path,
        *("--only", "floor-lean", "floor-mcp-lean", "ours-lean", "--workloads", "plain", "flow"),
        timeout=100,
    )
    lean = ("floor-lean", "floor-mcp-lean", "ours-lean")
    assert set(rows) == {*(f"plain/{s}" for s in lean), "flow/ours-lean"}
    for name, row in rows.items():
        assert row["ops"] > 0, name
        assert row["non2xx"] == row["bad"] == row["socket_errors"] == 0, name


async def test_the_lean_layer_runs_each_request_in_a_task_and_frames_what_it_streams() -> None:
    """`lean_http`: an app that waits runs in a task of its own; a body sent in parts without
    a length goes out chunked; the connection is kept for the next request; bytes that are not
    HTTP get a 400 and the connection closed."""
    from benchmarks import lean_http
    from benchmarks.harness import _loopback_socket

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await receive()
        in_task = asyncio.current_task() is not None
        await asyncio.sleep(0.01)
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ab", "more_body": True})
            await send({"type": "http.response.body", "body": b"cde", "more_body": False})
            return
        body = b"%s %s" % (request["body"], b"task" if in_task else b"none")
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = _loopback_socket()
    port = sock.getsockname()[1]
    async with await lean_http.serve(app, sock, lifespan=False):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"transfer-encoding: chunked\r\n" in head
        assert await reader.readuntil(b"0\r\n\r\n") == b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"content-length: 10\r\n" in head and b"transfer-encoding" not in head
        assert await reader.readexactly(10) == b"hello task"
        writer.write(b"\x00 not http\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        writer.close()


def _run_briefly(
    tmp_path: Path, *args: str, timeout: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`saturation.py ARGS` with one-second runs on four connections, which must succeed:
    the process and its JSON report's rows."""
    out = tmp_path / "saturation.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(ROOT / "benchmarks" / "saturation.py"), *args),
            *("--duration", "1", "--rounds", "1", "--connections", "4", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,  # a failure guard only
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return proc, json.loads(out.read_text())["rows"]
