"""Smoke test for the cross-process part of `benchmarks/run.py` (servers in their own processes,
MCP Inspector's `--load` as an external load generator), at a tiny size so it cannot rot; and
the CPU meter it reads server costs with. No timing is asserted (machines are noisy): only that
every server answered every request, that each figure was measured, and that nothing the run
started is left running."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import xproc  # noqa: E402

# The module's report takes about 30 s, and more than the 120 s of the suite's hang guard on a
# loaded machine; its own guard (the subprocess's timeout) is 240 s.
pytestmark = pytest.mark.timeout(300)

PREFIXES = {
    "xproc": ("flow_latency", "plain_latency", "plain_cpu", "flow_cpu", "concurrency"),
    "xlegacy": ("plain_latency", "live_latency", "plain_cpu", "live_cpu", "concurrency"),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("xbench") / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run.py"),
            "--quick",
            "--only",
            "xproc",
            "xlegacy",
            "inspector",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,  # a failure guard only; the quick run takes about 30 s
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


def _entries(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{side}/{variant}": value
        for side in ("official", "ours", "reference")
        for variant, value in workload[side].items()
    }


def test_every_cross_process_row_is_measured_for_every_server(
    report: tuple[dict[str, Any], str],
) -> None:
    workloads = report[0]["workloads"]
    for prefix, keys in PREFIXES.items():
        for key in keys:
            entries = _entries(workloads[f"{prefix}_{key}"])
            servers = {"ours/mrtr", "official/mcpserver", "official/lowlevel"}
            assert servers <= set(entries), f"{prefix}_{key}: {sorted(entries)}"
            for name, entry in entries.items():
                figure = entry.get("median_s", entry.get("ops_per_s"))
                assert figure is not None and math.isfinite(figure) and figure > 0, name
                cpu = entry["server_cpu_s"]
                assert math.isfinite(cpu) and cpu > 0, f"{prefix}_{key} {name}: cpu {cpu}"


def test_the_floor_is_measured_beside_the_servers(report: tuple[dict[str, Any], str]) -> None:
    workloads = report[0]["workloads"]
    flow = workloads["xproc_flow_latency"]["reference"]
    plain = workloads["xproc_plain_latency"]["reference"]
    assert {"floor_2posts_aiohttp", "floor_2posts_httpx2"} <= set(flow)
    assert {"floor_1post_aiohttp", "floor_1post_httpx2"} <= set(plain)
    assert "floor_1post" in workloads["xproc_plain_cpu"]["reference"]
    assert "floor_2post" in workloads["xproc_flow_cpu"]["reference"]


def test_loads_ran_without_a_failed_request(report: tuple[dict[str, Any], str]) -> None:
    workloads = report[0]["workloads"]
    for prefix in PREFIXES:
        for key in ("plain_cpu", "concurrency"):
            for name, entry in _entries(workloads[f"{prefix}_{key}"]).items():
                assert entry["errors"] == 0, f"{prefix}_{key} {name}: {entry['errors']} errors"
                assert entry["ops"] > 0


def test_inspector_load_reached_every_server_in_both_eras(
    report: tuple[dict[str, Any], str],
) -> None:
    data, stdout = report
    for era in ("modern", "legacy"):
        entries = _entries(data["workloads"][f"inspector_{era}"])
        assert set(entries) == {"ours/mrtr", "official/mcpserver", "reference/ts_v2"}
        for name, entry in entries.items():
            assert entry["requests"] > 0 and entry["ok"] == entry["requests"], (era, name)
            assert entry["errors"] == 0, (era, name)
            assert entry["server_cpu_s"] > 0, (era, name)
        assert f"Inspector --load, {era} era" in stdout


def test_targets_and_tables_are_printed(report: tuple[dict[str, Any], str]) -> None:
    data, stdout = report
    assert "cross-process HTTP, 2026-07-28 client" in stdout
    assert "cross-process HTTP, 2025-11-25 client" in stdout
    names = {t["target"] for t in data["targets"]}
    assert "server CPU per plain call <= 1.3x one floor POST" in names
    assert "Inspector modern: req/s >= TypeScript v2's" in names


def test_no_server_process_is_left_running(report: tuple[dict[str, Any], str]) -> None:
    pids = {
        entry["server_pid"]
        for workload in report[0]["workloads"].values()
        for entry in _entries(workload).values()
    }
    assert pids
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in pids if _is_server(pid)}
        time.sleep(0.05)
    assert not alive, f"server processes still running: {alive}"


def _is_server(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"xproc_server.py" in cmdline or b"ts_server.mjs" in cmdline


def test_cpu_meter_counts_a_child_s_own_cpu_time() -> None:
    # A child that burns about 0.3 s of CPU, then sleeps: the meter must see the burn (both
    # from schedstat and from /proc/PID/stat's ticks) and nothing while it sleeps.
    code = (
        "import sys, time\n"
        "sys.stdin.readline()\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        meter = xproc.CpuMeter(child.pid)
        meter.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        precise, ticks = meter.stop()
        assert 0.28 <= precise <= 0.6, precise
        assert abs(ticks - precise) <= 0.05, (ticks, precise)
        idle = xproc.CpuMeter(child.pid)
        idle.start()
        time.sleep(0.1)
        assert idle.stop()[0] < 0.01
    finally:
        child.kill()
        child.wait()
