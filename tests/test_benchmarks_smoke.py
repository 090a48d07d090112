"""Smoke test for `benchmarks/run.py`: with tiny counts it runs every workload for both SDKs
and writes the JSON report. No timing is asserted (machines are noisy); only that each
workload produced positive numbers for both sides and that every flow it ran succeeded. The
soak scripts (`benchmarks/soak.py --quick`, `benchmarks/memory_soak.py --quick`) likewise:
their reports' format, no failed flow, one side effect per completed flow, and nothing they
started left running."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The module fixture runs a subprocess whose own failure guard
# (180 s) fits inside this timeout, on a loaded machine too.
pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "inproc_mrtr_flow",
    "inproc_plain_call",
    "http_mrtr_flow",
    "stdio_mrtr_flow",
    "http_plain_call",
    "legacy_plain_call",
    "legacy_elicit_flow",
    "seal_verify",
    "state_round",
    "growth",
    "concurrency",
}


def _numbers(value: Any, key: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a nested JSON value, with the key it sits under."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield key, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v, key)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run.py"),
            "--quick",
            "--no-install",
            # The cross-process workloads have their own smoke test (test_benchmarks_xproc.py).
            "--only",
            "inproc",
            "http",
            "stdio",
            "plain",
            "legacy",
            "seal",
            "growth",
            "concurrency",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,  # a failure guard only; the quick run takes seconds
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


def test_every_workload_has_positive_numbers_for_both_sdks(
    report: tuple[dict[str, Any], str],
) -> None:
    data, _ = report
    assert set(data["workloads"]) == WORKLOADS
    for name, workload in data["workloads"].items():
        for side in ("official", "ours"):
            numbers = list(_numbers(workload[side]))
            assert numbers, f"{name}: nothing measured for {side}"
            bad = [
                (key, x)
                for key, x in numbers
                if key != "errors" and not (math.isfinite(x) and x > 0)
            ]
            assert not bad, f"{name}/{side}: non-positive numbers {bad}"


def test_the_http_floor_and_both_official_forms_are_measured(
    report: tuple[dict[str, Any], str],
) -> None:
    workloads = report[0]["workloads"]
    assert workloads["http_mrtr_flow"]["reference"]["aiohttp_two_posts"]["median_s"] > 0
    for name in (
        "inproc_mrtr_flow",
        "http_mrtr_flow",
        "stdio_mrtr_flow",
        "http_plain_call",
        "legacy_plain_call",
        "legacy_elicit_flow",
    ):
        assert set(workloads[name]["official"]) == {"mcpserver", "lowlevel"}, name


def test_growth_covers_the_same_ks_and_rounds_for_both_sdks(
    report: tuple[dict[str, Any], str],
) -> None:
    growth = report[0]["workloads"]["growth"]
    ks = set(growth["ours"]["mrtr"]["flows"])
    assert {"k=1", "k=10"} <= ks
    for form in ("mcpserver", "lowlevel"):
        assert set(growth["official"][form]["flows"]) == ks
        # One state per input-required round of the largest k, on each side.
        assert len(growth["official"][form]["state_chars"]) == 10
    assert len(growth["ours"]["mrtr"]["state_chars"]) == 10


def test_concurrent_flows_all_succeed(report: tuple[dict[str, Any], str]) -> None:
    concurrency = report[0]["workloads"]["concurrency"]
    for side in ("official", "ours"):
        for variant, result in concurrency[side].items():
            assert result["errors"] == 0, f"{side}/{variant}: {result['errors']} failed flows"
            assert result["flows"] > 0


def test_the_legacy_workloads_have_their_rows_in_the_table(
    report: tuple[dict[str, Any], str],
) -> None:
    data, stdout = report
    labels = {row["workload"] for row in data["rows"]}
    for label in ("legacy HTTP plain tools/call", "legacy HTTP elicitation flow"):
        for form in ("MCPServer", "low-level"):
            assert f"{label} vs {form}" in labels
            assert f"{label} vs {form}" in stdout


def test_the_sync_tool_rows_are_measured_for_both_sdks(
    report: tuple[dict[str, Any], str],
) -> None:
    data, stdout = report
    plain = data["workloads"]["inproc_plain_call"]
    assert set(plain["official"]) == {"mcpserver", "mcpserver_sync"}
    assert set(plain["ours"]) == {"mrtr", "mrtr_sync"}
    for label in ("async tool", "sync tool in a thread"):
        assert f"in-process plain call, {label} vs MCPServer" in stdout


async def test_the_sync_tool_runs_in_a_worker_thread_in_both_sdks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The row measures a `def` tool off the event loop: check that both fixtures put it there.
    import threading

    sys.path.insert(0, str(ROOT))
    from benchmarks import official, ours, tool_calls

    threads: list[str] = []

    def add_sync(a: int, b: int) -> str:
        threads.append(threading.current_thread().name)
        return str(a + b)

    for module in (ours, official):
        monkeypatch.setattr(module, "_add_sync", add_sync)
    async with ours.inproc_client() as client:
        await tool_calls.plain_sync_call_once(client)
    async with official.inproc_client("mcpserver") as client:
        await tool_calls.plain_sync_call_once(client)
    main = threading.main_thread().name
    assert len(threads) == 2 and main not in threads, threads


def test_the_table_and_targets_are_printed(report: tuple[dict[str, Any], str]) -> None:
    data, stdout = report
    assert "in-process MRTR flow vs MCPServer" in stdout
    assert "targets:" in stdout
    assert data["targets"] and all(isinstance(t["met"], bool) for t in data["targets"])


SOAK_LATENCY = re.compile(r"^flow latency ms: p50 ([\d.]+)  p90 ([\d.]+)  p99 ([\d.]+)$", re.M)
SOAK_RSS = re.compile(r"^  instance (\d+) \(pid (\d+)\): ([\d.]+) / ([\d.]+) / ([\d.]+)$", re.M)


def run_soak(*args: str) -> subprocess.CompletedProcess[str]:
    """`benchmarks/soak.py --quick` (8 clients, 2 s) with `args`."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=120,  # a failure guard only; the quick run takes seconds
        cwd=ROOT,
    )


def soak_figure(stdout: str, label: str) -> int:
    found = re.search(rf"^{label}: (\d+)$", stdout, re.M)
    assert found, f"no '{label}:' line in:\n{stdout}"
    return int(found.group(1))


@pytest.fixture(scope="module")
def soak() -> subprocess.CompletedProcess[str]:
    return run_soak()


def test_soak_quick_completes_flows_with_none_failed_and_one_effect_each(
    soak: subprocess.CompletedProcess[str],
) -> None:
    assert soak.returncode == 0, soak.stdout + soak.stderr[-4000:]
    out = soak.stdout
    assert out.startswith("soak: 8 clients, 2 s, 3 instances, store memory")
    completed = soak_figure(out, "completed flows")
    assert completed >= 8  # each of the 8 clients runs at least one flow
    assert soak_figure(out, "failed flows") == 0
    assert re.search(r"^flows/s: [\d.]+$", out, re.M)
    assert re.search(r"^errors: \d+$", out, re.M)
    assert f"side effects: {completed} for {completed} completed flows (match)" in out


def test_soak_prints_latency_percentiles_and_rss_of_each_instance(
    soak: subprocess.CompletedProcess[str],
) -> None:
    out = soak.stdout
    latency = SOAK_LATENCY.search(out)
    assert latency, out
    p50, p90, p99 = (float(x) for x in latency.groups())
    assert 0 < p50 <= p90 <= p99
    rows = SOAK_RSS.findall(out)
    assert [row[0] for row in rows] == ["1", "2", "3"], out
    assert len({row[1] for row in rows}) == 3  # three distinct processes
    assert all(float(mib) > 0 for row in rows for mib in row[2:])


def test_soak_stops_every_instance_it_started(soak: subprocess.CompletedProcess[str]) -> None:
    pids = [int(row[1]) for row in SOAK_RSS.findall(soak.stdout)]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_soak_with_a_shared_redis_store_and_two_instances() -> None:
    proc = run_soak("--store", "redis", "--instances", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.startswith("soak: 8 clients, 2 s, 2 instances, store redis")
    assert [row[0] for row in SOAK_RSS.findall(proc.stdout)] == ["1", "2"]
    completed = soak_figure(proc.stdout, "completed flows")
    assert completed >= 8 and soak_figure(proc.stdout, "failed flows") == 0
    assert f"side effects: {completed} for {completed} completed flows (match)" in proc.stdout


def test_memory_soak_quick_runs_flows_and_reports_the_rss_slope() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "memory_soak.py"), "--quick", "--ttl", "1"],
        capture_output=True,
        text=True,
        timeout=120,  # a failure guard only; the quick run takes seconds
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("memory soak: 2 clients, 3 s, 1 instance over HTTP, store memory")
    assert re.search(r"^completed flows: [1-9]\d* \([\d.]+/s\)$", out, re.M), out
    assert soak_figure(out, "failed flows") == 0
    assert re.search(
        r"^flow latency ms: p50 [\d.]+  p99 [\d.]+  p99.9 [\d.]+  max [\d.]+$", out, re.M
    )
    assert re.search(r"slope after warm-up [+-][\d.]+ MB/h$", out, re.M), out
    with pytest.raises(ProcessLookupError):
        os.kill(soak_figure(out, "server pid"), 0)  # the server it started is gone


@pytest.mark.timeout(400)  # three servers under valgrind, each ~40 s to start
def test_instruction_counts_cover_the_requests_only() -> None:
    """`instructions.py` counts what the requests cost, not the server's start (importing a
    server is hundreds of millions of instructions; a request is well under a million), and
    the least JSON-RPC answer (`floor-mcp`) costs more than the floor and less than ours."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "instructions.py"),
            "--kinds",
            "floor",
            "floor-mcp",
            "ours",
            "--workloads",
            "plain",
            "--operations",
            "20",
            "--warmup",
            "10",
            "--parallel",
            "3",
            "--seeds",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=360,  # a failure guard only
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    row = re.search(r"^\s*plain\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)x$", proc.stdout, re.M)
    assert row, proc.stdout
    floor, least, ours = (int(x.replace(",", "")) for x in row.groups()[:3])
    assert 10_000 < floor < 1_000_000
    # Decoding, answering and encoding a call costs something; ours checks and does more.
    assert floor < least < ours < 1_000_000
