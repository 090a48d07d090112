"""`mrtr install` writes an entry that starts however mrtr was installed: editable, a wheel in a
venv, `git+` from a repository, and with extra packages layered on by `uv`.

Each entry is written by that install's own `mrtr install json`, then started exactly as a host
would: its command and arguments under `env -i` (its own `env` only), from `/`, and asked to
initialize, list its tools and call one over stdio.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent

# The module fixtures run subprocesses whose own failure guard (300 s, a wheel build) fits
# inside this timeout, on a loaded machine too.
pytestmark = pytest.mark.timeout(360)

# A tool that tells which mrtr serves it and which extra package it could import.
WHERE = """\
import sys

import mrtr
from mrtr import Server

server = Server("where")


@server.tool()
def where() -> str:
    try:
        import hello_dep
    except ImportError:
        extra = "-"
    else:
        extra = hello_dep.GREETING
    return f"{mrtr.__file__}|{sys.prefix}|{extra}"
"""


def run(*words: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(w) for w in words], capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert done.returncode == 0, f"{words}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project to build from (a build writes into the tree it builds)."""
    copy = tmp_path_factory.mktemp("source") / "mrtr"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, copy / name)
    shutil.copytree(
        ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mrtr built once as a wheel."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, source)
    (built,) = out.glob("mrtr-*.whl")
    return built


def venv(where: Path) -> Path:
    """A venv that sees this interpreter's packages (mrtr's dependencies) but not its mrtr,
    which the caller installs in it; returns its python."""
    run(sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", where)
    return where / "bin" / "python"


def pip_install(python: Path, *words: str | Path) -> None:
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", *words)


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    file = tmp_path / "where_server.py"
    file.write_text(WHERE)
    return file


def install_entry(python: Path | str, server_file: Path, *words: str, path: str) -> Any:
    """`mrtr install json` run by `python`, with PATH set to `path`, from a directory of its own."""
    env = dict(os.environ)
    if str(python) != sys.executable:  # another install's mrtr, not the one under test here
        env.pop("PYTHONPATH", None)
    env["PATH"] = path
    done = subprocess.run(
        [str(python), "-m", "mrtr", "install", "json", f"{server_file}:server", *words],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=server_file.parent,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["where"]


async def start_as_a_host(entry: dict[str, Any]) -> str:
    """Start the entry with `env -i` from `/`; initialize, list the tools, call `where`."""
    pairs = [f"{name}={value}" for name, value in entry.get("env", {}).items()]
    server = StdioServerParameters(
        command="env", args=["-i", *pairs, entry["command"], *entry["args"]], cwd="/"
    )
    async with mcp.Client(server, mode="legacy") as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["where"]
        result = await client.call_tool("where", {})
    assert not result.is_error, result
    return str(result.content[0].text)  # type: ignore[union-attr]


@pytest.fixture
def path_with_uv(tmp_path: Path) -> str:
    """A PATH holding uv only: an entry through uv must not need mrtr from an index."""
    bin_dir = tmp_path / "uv-bin"
    bin_dir.mkdir()
    (bin_dir / "uv").symlink_to(uv_binary())
    return str(bin_dir)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_an_editable_install_writes_an_entry_that_starts(
    server_file: Path, path_with_uv: str
) -> None:
    # This interpreter has mrtr installed editable (scripts/test.sh: pip install -e).
    entry = install_entry(sys.executable, server_file, path=path_with_uv)
    assert entry["command"] == sys.executable
    mrtr_file, prefix, extra = (await start_as_a_host(entry)).split("|")
    assert prefix == sys.prefix and extra == "-"
    assert "site-packages" not in mrtr_file  # the checkout's own source


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_wheel_in_a_venv_writes_an_entry_that_starts(
    wheel: Path, tmp_path: Path, server_file: Path, path_with_uv: str
) -> None:
    python = venv(tmp_path / "venv")
    pip_install(python, wheel)
    entry = install_entry(python, server_file, path=path_with_uv)
    assert entry == {
        "command": str(python),
        "args": ["-m", "mrtr", "serve", f"{server_file}:server"],
    }
    mrtr_file, prefix, _ = (await start_as_a_host(entry)).split("|")
    assert prefix == str(tmp_path / "venv")
    assert mrtr_file.startswith(str(tmp_path / "venv"))


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_git_install_writes_an_entry_that_starts(
    source: Path, tmp_path: Path, server_file: Path, path_with_uv: str
) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(source, repository)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    run(*git, "init", "--quiet", cwd=repository)
    run(*git, "add", ".", cwd=repository)
    run(*git, "commit", "--quiet", "-m", "mrtr", cwd=repository)
    python = venv(tmp_path / "venv")
    pip_install(python, f"git+{repository.as_uri()}")
    entry = install_entry(python, server_file, path=path_with_uv)
    assert entry["command"] == str(python)
    mrtr_file, prefix, _ = (await start_as_a_host(entry)).split("|")
    assert prefix == str(tmp_path / "venv")
    assert mrtr_file.startswith(str(tmp_path / "venv"))


def uv_binary() -> str:
    from uv import find_uv_bin  # the `uv` package of the dev extra

    return str(find_uv_bin())


def hello_wheel(where: Path) -> Path:
    """A one-module wheel, to add with --with without an index."""
    path = where / "hello_dep-1.0-py3-none-any.whl"
    info = "hello_dep-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello_dep/__init__.py", "GREETING = 'hello'\n")
        archive.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: hello-dep\nVersion: 1.0\n"
        )
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_with_packages_uv_layers_them_over_the_wheel_install(
    wheel: Path, tmp_path: Path, server_file: Path, path_with_uv: str
) -> None:
    python = venv(tmp_path / "venv")
    pip_install(python, wheel)
    extra = hello_wheel(tmp_path)
    entry = install_entry(python, server_file, "--with", str(extra), path=path_with_uv)
    assert entry["command"] == str(Path(path_with_uv) / "uv")
    assert entry["args"][:4] == ["run", "--no-project", "--python", str(python)]
    mrtr_file, _, greeting = (await start_as_a_host(entry)).split("|")
    assert greeting == "hello"
    assert mrtr_file.startswith(str(tmp_path / "venv"))
