"""The instruction guard (`benchmarks/instructions.py --check`, a step of `scripts/test.sh`):
it compares our server's counts with the record only where the record's Python and packages
are this environment's (or fails, `--strict`, where they are not), fails above +5% with both
figures and how to update the record, `--constraints` pins the record's packages, and
`--server-path` counts a server importing `mrtr` from another tree. No figure of our code is
asserted here: the records below are made up, far from any real count."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks import instruction_record as rec

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "instructions.py"


def record(plain: float, flow: float, env: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "date": "2026-01-01T00:00:00+00:00",
        "environment": env or rec.environment(),
        "settings": {"operations": 10, "warmup": 5, "seeds": [0]},
        "instructions": {"plain": plain, "flow": flow},
    }


def test_growth_within_the_tolerance_passes_and_beyond_it_fails() -> None:
    lines, failed = rec.compare(record(100_000, 500_000), {"plain": 104_900, "flow": 400_000})
    assert not failed
    assert "ours per plain call: 104,900 instructions, record 100,000 (+4.9%): ok" in lines[0]
    assert "(-20.0%): ok, and fewer: worth recording" in lines[1]
    lines, failed = rec.compare(record(100_000, 500_000), {"plain": 100_000, "flow": 525_100})
    assert failed
    assert "ours per flow: 525,100 instructions, record 500,000 (+5.0%): FAILED" in lines[1]
    assert rec.UPDATE in lines[-1]


def test_the_record_applies_only_to_its_python_minor_version_and_packages() -> None:
    env = rec.environment()
    same_minor = {**env, "python": ".".join(env["python"].split(".")[:2]) + ".999"}
    assert rec.mismatches(record(1, 1, env), same_minor) == []
    other = {
        **env,
        "python": "2.7.18",
        "packages": {**env["packages"], "uvicorn": "0.0.1"},
    }
    differs = rec.mismatches(record(1, 1, env), other)
    assert any(d.startswith(f"Python {env['python']} recorded, 2.7.18 here") for d in differs)
    assert f"uvicorn {env['packages']['uvicorn']} recorded, 0.0.1 here" in differs


def run_check(record_file: Path, *extra: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--record-file", str(record_file), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,  # a failure guard only
        cwd=ROOT,
    )


def test_a_record_of_another_environment_is_not_compared(tmp_path: Path) -> None:
    env = rec.environment()
    stale = record(1, 1, {**env, "python": "2.7.18"})
    (tmp_path / "record.json").write_text(json.dumps(stale))
    proc = run_check(tmp_path / "record.json", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the record does not apply here (Python 2.7.18 recorded" in proc.stdout
    assert rec.UPDATE in proc.stdout


def test_strict_fails_on_a_record_of_another_environment(tmp_path: Path) -> None:
    env = rec.environment()
    stale = record(1, 1, {**env, "packages": {**env["packages"], "orjson": "0.0.1"}})
    (tmp_path / "record.json").write_text(json.dumps(stale))
    proc = run_check(tmp_path / "record.json", "--strict", timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the record does not apply here (orjson 0.0.1 recorded" in proc.stdout
    assert "python benchmarks/instructions.py --constraints` as constraints" in proc.stdout


def test_constraints_pin_the_records_packages_and_name_its_python(tmp_path: Path) -> None:
    env = {
        "python": "3.11.7",
        "implementation": "CPython",
        "packages": {"uvicorn": "0.54.0", "orjson": "3.13.0", "uvloop": None},
    }
    (tmp_path / "record.json").write_text(json.dumps(record(1, 1, env)))
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--constraints",
            "--record-file",
            str(tmp_path / "record.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,  # a failure guard only
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    # A package the record found absent is left unpinned; the rest sorted, one pin a line.
    assert proc.stdout.splitlines() == [
        "# the packages of record.json, counted on Python 3.11 (CPython)",
        "orjson==3.13.0",
        "uvicorn==0.54.0",
    ]
    assert rec.python_minor(record(1, 1, env)) == "3.11"


def test_no_record_is_an_error_naming_the_command_that_makes_one(tmp_path: Path) -> None:
    proc = run_check(tmp_path / "absent.json", timeout=60)
    assert proc.returncode == 1
    assert f"no instruction record at {tmp_path / 'absent.json'}" in proc.stderr
    assert rec.UPDATE in proc.stderr


@pytest.mark.timeout(300)  # one server under valgrind: ~30 s to start on a loaded machine
def test_the_check_fails_above_the_record_counting_the_server_path_tree(tmp_path: Path) -> None:
    # Another tree: a copy of this one whose `mrtr` leaves a file per process importing it.
    shutil.copytree(ROOT / "src" / "mrtr", tmp_path / "src" / "mrtr")
    marker = (
        "\nimport os as _os, pathlib as _pathlib\n"
        "_pathlib.Path(__file__).with_name(f'imported.{_os.getpid()}').touch()\n"
    )
    with (tmp_path / "src" / "mrtr" / "__init__.py").open("a") as f:
        f.write(marker)
    # A plain call far above a made-up record of 1,000, a flow far below 10^9.
    (tmp_path / "record.json").write_text(json.dumps(record(1_000, 1e9)))
    proc = run_check(tmp_path / "record.json", "--server-path", str(tmp_path), timeout=280)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-4000:]
    assert "record 1,000 (+" in proc.stdout and "FAILED: more than +5%" in proc.stdout
    assert "record 1,000,000,000 (-" in proc.stdout
    assert "ok, and fewer: worth recording" in proc.stdout
    assert rec.UPDATE in proc.stdout
    # The probe that checks where `mrtr` comes from, and the server under valgrind.
    assert len(list((tmp_path / "src" / "mrtr").glob("imported.*"))) >= 2


def test_a_server_path_without_mrtr_is_refused(tmp_path: Path) -> None:
    proc = run_check(tmp_path / "absent.json", "--server-path", str(tmp_path), timeout=60)
    assert proc.returncode == 1
    assert f"--server-path {tmp_path}: no {tmp_path / 'src' / 'mrtr'}" in proc.stderr
