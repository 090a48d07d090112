"""The package as a user gets it: `python -m build`, then the wheel in a fresh virtual environment.

mrtr is on no package index yet, so the documented install is from a checkout or from a wheel
built from it. This builds both distributions from the checkout, checks what they carry (the
`py.typed` marker that makes the types visible to a user's type checker, and no tests or
benchmarks), installs the wheel with the `redis` extra in a new virtual environment, and runs
the `mrtr demo` the README starts with, from the installed console script alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Building and installing fetch setuptools and mrtr's dependencies from the package index
# (the pip cache makes it seconds after the first time): a guard against a hang only.
STEP_TIMEOUT = 240
# Paths no distribution may carry: the test suite, the benchmarks, the docs' sources.
LEFT_OUT = ("tests/", "benchmarks/", "conformance/", "examples/", "docs/")


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command outside the checkout's import path; fail with its output if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel `python -m build` makes (the wheel is built from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out)
    return out


def only(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {folder}, found {found}"
    return found[0]


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_the_wheel_carries_the_package_and_its_type_marker_only(dist: Path) -> None:
    with zipfile.ZipFile(only(dist, "mrtr-*-py3-none-any.whl")) as wheel:
        names = wheel.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = wheel.read(entry_points).decode()
    assert "mrtr/py.typed" in names
    assert "mrtr/__init__.py" in names
    stray = [n for n in names if not n.startswith(("mrtr/", "mrtr-"))]
    assert stray == [], f"the wheel carries files outside the package: {stray}"
    assert "mrtr = mrtr.cli:main" in scripts


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_the_sdist_carries_the_sources_and_no_tests_or_benchmarks(dist: Path) -> None:
    sdist = only(dist, "mrtr-*.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = [n.removeprefix(f"{top}/") for n in archive.getnames()]
    assert "src/mrtr/py.typed" in names
    assert "pyproject.toml" in names
    assert "README.md" in names
    stray = [n for n in names if n.startswith(LEFT_OUT)]
    assert stray == [], f"the sdist carries files that are not the package's: {stray}"


@pytest.mark.timeout(3 * STEP_TIMEOUT)
def test_the_wheel_installs_with_the_redis_extra_and_runs_the_demo(
    dist: Path, tmp_path: Path
) -> None:
    wheel = only(dist, "mrtr-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # This interpreter's pip installs into the new environment (`--python`): no pip of its own
    # is bootstrapped there, which saves the seconds ensurepip takes.
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", f"{wheel}[redis]",
        cwd=tmp_path)  # fmt: skip

    where = run(python, "-c", "import mrtr, redis; print(mrtr.__file__)", cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(venv), f"mrtr imported from {where.strip()}"

    demo = run(venv / "bin" / "mrtr", "demo", cwd=tmp_path).stdout
    assert '"status": "placed"' in demo
    assert "negotiated: 2025-11-25 (legacy era)" in demo
    assert demo.rstrip().endswith(
        "done: one set of handlers; 5 MRTR rounds on 2026-07-28, 4 live requests on 2025-11-25."
    ), demo
