"""The recorded instruction counts of our server and the guard that holds them.

`benchmarks/instructions.json` keeps what `python benchmarks/instructions.py --kinds ours
--record` counted: our server's instructions per plain `tools/call` and per two-round MRTR flow
(mean over the hash seeds), with the sizes of the run, the Python and package versions the
counts depend on, the date and the machine. `instructions.py --check` (a step of
`scripts/test.sh`) counts again with the record's sizes and fails when either figure grew more
than `TOLERANCE` over it. Counts move with the interpreter and with the packages a request runs
through, not with the machine's load, so the check compares only when the Python minor version
and every package in `PACKAGES` match the record; otherwise it says so and passes (or fails,
with `--strict`). `scripts/test.sh` counts in an environment of its own, installed with the
record's pins (`constraints`), so that a new release of a dependency cannot turn it off.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("instructions.json")
TOLERANCE = 0.05
"""Growth over the record that fails the check."""
WORKLOADS = ("plain", "flow")
GUARD_OPERATIONS = 100
"""Plain calls per count when recording (flows: half): enough to average a request's cost, few
enough that the check takes about a minute."""
GUARD_WARMUP = 30
PACKAGES = ("uvicorn", "uvloop", "httptools", "orjson", "pydantic", "pydantic-core", "cryptography")
"""The packages a request to our server runs through (with CPython itself)."""
UPDATE = "python benchmarks/instructions.py --kinds ours --record"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """What the counts depend on, for this interpreter: its version and the packages'."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {name: _version(name) for name in PACKAGES},
    }


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def mismatches(record: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
    """How `env` differs from the record's environment in what the counts depend on."""
    out = []
    recorded, current = record["environment"], env
    if recorded["implementation"] != current["implementation"]:
        out.append(f"{recorded['implementation']} recorded, {current['implementation']} here")
    if _minor(recorded["python"]) != _minor(current["python"]):
        out.append(f"Python {recorded['python']} recorded, {current['python']} here")
    for name in sorted({*recorded["packages"], *current["packages"]}):
        then, now = recorded["packages"].get(name), current["packages"].get(name)
        if then != now:
            out.append(f"{name} {then} recorded, {now} here")
    return out


def python_minor(record: Mapping[str, Any]) -> str:
    """The Python version (`3.11`) the record's counts were made with."""
    return _minor(record["environment"]["python"])


def constraints(record: Mapping[str, Any]) -> list[str]:
    """The record's packages as pins (`name==version`, a pip or uv constraints file): installed
    with them on the record's Python, an environment is one the record applies to."""
    packages = record["environment"]["packages"]
    return [f"{name}=={version}" for name, version in sorted(packages.items()) if version]


def _machine() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    valgrind = subprocess.run(
        ["valgrind", "--version"], capture_output=True, text=True, check=False
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "valgrind": valgrind.stdout.strip() or None,
    }


def write(
    per_seed: Mapping[str, Sequence[float]],
    *,
    operations: int,
    warmup: int,
    seeds: Sequence[int],
    path: Path = RECORD,
) -> dict[str, Any]:
    """Record our server's counts (`per_seed[workload]`: one per seed) at `path`."""
    record = {
        "about": (
            "Our server's instructions per plain tools/call and per two-round MRTR flow "
            "(callgrind, mean over PYTHONHASHSEEDs), held by `python benchmarks/instructions.py "
            f"--check` in scripts/test.sh (fails above +{TOLERANCE:.0%}). Update with `{UPDATE}` "
            "in the commit that changes the cost, and say why there."
        ),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        "machine": _machine(),
        "settings": {"operations": operations, "warmup": warmup, "seeds": list(seeds)},
        "instructions": {w: round(sum(v) / len(v)) for w, v in per_seed.items()},
        "per_seed": {w: [round(x) for x in v] for w, v in per_seed.items()},
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def load(path: Path = RECORD) -> dict[str, Any]:
    """The record at `path`; a clear error when there is none."""
    if not path.exists():
        raise SystemExit(f"no instruction record at {path}: make one with `{UPDATE}`")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def compare(record: Mapping[str, Any], counted: Mapping[str, float]) -> tuple[list[str], bool]:
    """Lines comparing `counted` (per workload) with the record, and whether any grew more
    than `TOLERANCE`."""
    lines, failed = [], False
    for workload in WORKLOADS:
        then, now = record["instructions"][workload], counted[workload]
        change = now / then - 1
        verdict = "ok"
        if change > TOLERANCE:
            verdict, failed = f"FAILED: more than +{TOLERANCE:.0%}", True
        elif change < -TOLERANCE:
            verdict = "ok, and fewer: worth recording"
        what = "plain call" if workload == "plain" else "flow"
        lines.append(
            f"  ours per {what}: {now:,.0f} instructions, record {then:,.0f} "
            f"({change:+.1%}): {verdict}"
        )
    if failed:
        lines.append(
            f"Our server's instructions grew more than {TOLERANCE:.0%} over the record "
            f"({record['date']}). Find what costs them (callgrind_annotate on a "
            "count's output, or `python benchmarks/run.py --profile xplain|xflow`); if the cost "
            f"is worth it, update the record in the same commit and say why: {UPDATE}"
        )
    return lines, failed
