"""`benchmarks/proxy_soak.py --short`: two `mrtr proxy` instances behind the shipped haproxy
config, relaying rounds through a real Redis, under each fault (kill -9 of an instance, Redis
paused, the broker's subscriptions killed): no call hangs, no effect runs twice, and no call
whose client was told it did not run (`data.mayHaveRun` false) has its effect recorded.
Needs redis-server and haproxy (not a unit test)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# The run's own bounds (start, warm-up, 20 s of load lengthened by the faults, each call
# bounded by 10 s, 2 s of tail) put it near 40 s; this is a guard against a hang only.
pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "proxy_soak.py"
COLUMNS = ("calls", "completed", "failed", "hung", "doubled", "ran-failed", "told-not-run")
WINDOWS = [
    "baseline (no fault)",
    "kill -9 proxy instance",
    "Redis paused 3 s",
    "broker reconnect",
    "total",
]


def table(stdout: str) -> dict[str, dict[str, int]]:
    """The soak's table: window -> column -> figure."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("fault "))
    assert lines[head].split()[1:] == [*COLUMNS, "completed/s", "took", "s"], stdout
    rows: dict[str, dict[str, int]] = {}
    for line in lines[head + 2 :]:
        found = re.match(r"^(.+?)\s+((?:\d+\s+){6}\d+)(?:\s+[\d.]+)*$", line.rstrip())
        if found is None:
            break
        numbers = [int(n) for n in found.group(2).split()]
        rows[found.group(1).strip()] = dict(zip(COLUMNS, numbers, strict=True))
    return rows


@pytest.fixture(scope="module")
def soak() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--short"],
        capture_output=True,
        text=True,
        timeout=120,  # a failure guard only
        cwd=ROOT,
    )


def test_every_window_ran_calls_of_both_eras(soak: subprocess.CompletedProcess[str]) -> None:
    assert soak.returncode in (0, 1), soak.stdout + soak.stderr[-4000:]
    assert soak.stdout.startswith("proxy soak: 16 clients (8 legacy)"), soak.stdout
    rows = table(soak.stdout)
    assert list(rows) == WINDOWS, soak.stdout
    assert rows["baseline (no fault)"]["completed"] > 0, soak.stdout
    assert all(rows[w]["calls"] > 0 for w in WINDOWS), soak.stdout
    total = rows["total"]
    assert total["calls"] == total["completed"] + total["failed"] + total["hung"]


def test_no_call_hung_no_effect_doubled_none_run_when_told_not(
    soak: subprocess.CompletedProcess[str],
) -> None:
    rows = table(soak.stdout)
    for window in WINDOWS:
        figures = rows[window]
        assert (figures["hung"], figures["doubled"], figures["told-not-run"]) == (0, 0, 0), (
            f"{window}:\n{soak.stdout}"
        )
    assert soak.returncode == 0, soak.stdout + soak.stderr[-4000:]
