"""`benchmarks/fault_soak.py`, run briefly with its kill -9 fault: three instances behind
haproxy, Redis, and the ledger the soak counts effects in.

The kill is aimed between an effect and the record of its outcome: the flow it cuts is
uncertain on its retry (default `on_uncertain`) and its effect ran once, and with
`--on-uncertain retry` the soak sees that effect doubled and exits 1. The table's counts
agree with the flows it lists, and each row's outcomes add up to its flows.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cluster import haproxy_binary

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
KILL_ROW = "kill -9 instance"
ACKNOWLEDGE_AFTER = 0.5  # wide, so that the aimed kill lands in it on a loaded machine too
AIMED = re.compile(
    rf"^{KILL_ROW}: killed [\d.]+ s after the effect of (flow-\d+) reached the ledger, "
    r"before its acknowledgement went out$",
    re.M,
)
LISTED = re.compile(
    r"^(ok|failed|hung|uncertain): (flow-\d+), its effect ran (\d+) time\(s\)$", re.M
)


def fault_soak(on_uncertain: str) -> subprocess.CompletedProcess[str]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    return subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "fault_soak.py"),
            "--clients", "6", "--legacy-every", "3", "--duration", "4", "--faults", "kill",
            "--flow-timeout", "25", "--tail", "1",
            "--acknowledge-after", str(ACKNOWLEDGE_AFTER), "--on-uncertain", on_uncertain,
        ],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip


def rows(stdout: str) -> dict[str, dict[str, int]]:
    """The table: fault -> column -> count (the counting columns only)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"fault\s+flows\s", line))
    head = re.split(r"\s{2,}", lines[start].strip())
    table: dict[str, dict[str, int]] = {}
    for line in lines[start + 2 :]:
        cells = re.split(r"\s{2,}", line.strip())
        table[cells[0]] = {
            name: int(cell) for name, cell in zip(head[1:9], cells[1:9], strict=True)
        }
        if cells[0] == "total":
            return table
    raise AssertionError(f"no total row in:\n{stdout}")


def check_counts(stdout: str) -> dict[str, dict[str, int]]:
    """The table's rows add up, and its uncertain and doubled counts are the flows listed."""
    table = rows(stdout)
    assert list(table) == ["baseline (no fault)", KILL_ROW, "total"], stdout
    columns = table["total"].keys()
    for name, row in table.items():
        outcomes = row["ok"] + row["failed"] + row["hung"] + row["uncertain"]
        assert outcomes == row["flows"], (name, stdout)
        assert row["of which ran"] <= row["uncertain"], (name, stdout)
    for column in columns:
        assert table["total"][column] == sum(
            row[column] for name, row in table.items() if name != "total"
        ), (column, stdout)
    listed = LISTED.findall(stdout)
    uncertain = [int(ran) for outcome, _flow, ran in listed if outcome == "uncertain"]
    assert len(uncertain) == table["total"]["uncertain"], stdout
    assert sum(1 for ran in uncertain if ran) == table["total"]["of which ran"], stdout
    assert sum(1 for *_, ran in listed if int(ran) > 1) == table["total"]["doubled"], stdout
    return table


def aimed_flow(stdout: str) -> str:
    """The flow whose effect the kill cut; the kill landed before its acknowledgement."""
    found = AIMED.search(stdout)
    assert found, stdout
    return found.group(1)


def test_a_kill_between_effect_and_outcome_leaves_it_uncertain_and_ran_once() -> None:
    proc = fault_soak("fail")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "effect in ctx.once, on_uncertain fail" in proc.stdout.splitlines()[0]
    table = check_counts(proc.stdout)
    assert table[KILL_ROW]["uncertain"] >= 1 and table[KILL_ROW]["of which ran"] >= 1
    assert table["total"]["doubled"] == 0
    flow = aimed_flow(proc.stdout)
    assert f"uncertain: {flow}, its effect ran 1 time(s)" in proc.stdout


def test_with_on_uncertain_retry_the_soak_sees_the_effect_doubled() -> None:
    proc = fault_soak("retry")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-4000:]
    table = check_counts(proc.stdout)
    assert table[KILL_ROW]["doubled"] >= 1
    assert table["total"]["uncertain"] == 0  # run again, never refused as uncertain
    flow = aimed_flow(proc.stdout)
    assert f"ok: {flow}, its effect ran 2 time(s)" in proc.stdout
