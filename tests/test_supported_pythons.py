"""The supported Pythons are the ones tested: the package's metadata and the test command agree,
and `pytest -m unit` (what the test command runs on each Python besides the main one) collects
exactly the files tests/suites.py lists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from suites import UNIT

ROOT = Path(__file__).resolve().parent.parent
CLASSIFIER = re.compile(r"Programming Language :: Python :: (3\.\d+)$")


def supported() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    versions = [m[1] for c in project["classifiers"] if (m := CLASSIFIER.match(c))]
    assert project["requires-python"] == f">={versions[0]}", "requires-python names the oldest"
    return versions


def test_the_test_command_runs_every_supported_python() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    extra = re.search(r'EXTRA_VERSIONS="\$\{MRTR_TEST_PYTHONS-([\d. ]+)\}"', script)
    assert extra, "scripts/test.sh names the other Pythons in EXTRA_VERSIONS"
    versions = supported()
    # The full run is on this Python (CI's python3); the others run the unit tests.
    this = "{}.{}".format(*sys.version_info[:2])
    assert this in versions, f"Python {this} is not among the supported {versions}"
    assert {this, *extra[1].split()} == set(versions)


def test_the_unit_marker_selects_exactly_the_listed_files() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "unit", "-p", "no:xdist"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    files = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert files == {f"tests/{name}" for name in UNIT}
