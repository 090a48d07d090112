"""`examples/two_instances/run.py` for real: a redis-server and two `mrtr serve` instances,
a 2026-07-28 flow whose rounds go to different instances, and a legacy session opened on
one instance, served on the other, answered through the first and deleted there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "two_instances" / "run.py"


def test_the_two_instances_example_runs() -> None:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: scripts/test.sh installs it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    pids = {line.split()[3].rstrip(",") for line in lines if line.startswith("instance ")}
    assert len(pids) == 2
    b_pid = next(line for line in lines if line.startswith("instance B")).split()[3].rstrip(",")
    assert f"B finished: ordered tea (placed by process {b_pid})" in lines
    assert "B asked live: 'Order cup?'; answering on A" in lines
    assert f"B finished: ordered cup (placed by process {b_pid})" in lines
    assert "DELETE on A: 204" in lines
    assert "the session on B afterwards: 404" in lines
    assert lines[-1] == "both flows crossed instances: OK"
