"""`benchmarks/proxy.py --quick` for real: every row (direct, `mrtr proxy` in both eras and
with `--sessions 8`, supergateway, mcp-proxy) started its own processes and answered its calls,
for both backends. No timing is asserted (machines are noisy): only that each figure was
measured from answered calls, and that nothing the run started is left running."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mrtr

ROOT = Path(__file__).resolve().parent.parent

# A quick run takes about a minute (most of it starting processes); it installs the pinned
# gateways first when they are missing.
pytestmark = pytest.mark.timeout(400)

ROWS = ("direct", "mrtr-modern", "mrtr-legacy", "mrtr-modern-8", "supergateway", "mcp-proxy")
ERAS = {
    "mrtr-modern": "modern",
    "mrtr-legacy": "legacy",
    "mrtr-modern-8": "modern",
    "supergateway": "legacy",
    "mcp-proxy": "legacy",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("proxybench") / "proxy.json"
    src = str(Path(mrtr.__file__).resolve().parent.parent)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "proxy.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=360,  # a failure guard only
        cwd=out.parent,
        env={**os.environ, "PYTHONPATH": src},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


def test_every_row_answered_its_calls_for_both_backends(
    report: tuple[dict[str, Any], str],
) -> None:
    results = report[0]["results"]
    assert set(results) == {"server-everything", "ours"}
    for backend, rows in results.items():
        assert tuple(rows) == ROWS
        for name, row in rows.items():
            assert "error" not in row, f"{backend} {name}: {row['error']}"
            assert row["calls"] > 0 and row["concurrent_calls"] > 0, (backend, name)
            for key in ("median_s", "calls_per_s", "backend_cpu_s"):
                assert math.isfinite(row[key]) and row[key] > 0, (backend, name, key)
            if name == "direct":
                assert row["proxy_cpu_s"] is None and row["latency_x_direct"] == 1.0
                # Its backend alone: not the other rows' gateways, started beside it.
                assert len(row["backend_pids"]) == 1, row["backend_pids"]
            else:
                assert row["proxy_cpu_s"] > 0, (backend, name)
                assert math.isfinite(row["latency_x_direct"]), (backend, name)
            if name in ERAS:
                assert row["era"] == ERAS[name], (backend, name, row["era"])


def test_the_asking_tool_went_through_our_proxy_in_both_eras(
    report: tuple[dict[str, Any], str],
) -> None:
    rows = report[0]["results"]["ours"]
    for name in ("direct", "mrtr-modern", "mrtr-legacy", "mrtr-modern-8"):
        assert rows[name]["flow_calls"] > 0, (name, rows[name].get("flow_error"))
    # Another gateway either relayed the question or says why not.
    for name in ("supergateway", "mcp-proxy"):
        assert rows[name].get("flow_calls", 0) > 0 or rows[name]["flow_error"], name


def test_the_table_names_every_row_and_the_run_left_nothing_running(
    report: tuple[dict[str, Any], str],
) -> None:
    data, stdout = report
    for name in ROWS:
        assert f"| ours | {name} |" in stdout and f"| server-everything | {name} |" in stdout
    pids = [
        pid
        for rows in data["results"].values()
        for row in rows.values()
        for pid in [row["proxy_pid"], *row["backend_pids"]]
        if pid
    ]
    assert pids
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not alive, f"left running: {alive}"
