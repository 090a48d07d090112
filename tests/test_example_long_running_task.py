"""`examples/long_running_task/` runs as its README says: the server on a loopback port and
the client against it, as two real processes; the client sees both questions (one by MRTR,
one through the task), the task's states, and the tool's result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.loopback_process import free_port, listening

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "long_running_task"
GUARD = 30.0  # seconds: only ever reached when something is broken


def test_the_client_drives_the_report_task_to_its_result() -> None:
    port = free_port()
    command = [sys.executable, str(EXAMPLE / "server.py"), "--port", str(port)]
    with listening(command, port, cwd=ROOT):
        done = subprocess.run(
            [sys.executable, str(EXAMPLE / "client.py"), f"http://127.0.0.1:{port}/mcp"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=GUARD,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "asked: Report on platform for which month?"
    assert "asked: Include the draft figures?" in lines
    assert any(line.startswith("task input_required") for line in lines)
    assert lines[-2] == "task completed"
    assert lines[-1] == "result: Report for platform, March: 42 items (final figures only)"
    assert lines.index("asked: Include the draft figures?") > lines.index(
        next(line for line in lines if line.startswith("task working"))
    )  # the second question came through the task, after it was created
