"""Peer clients -> our matrix server: each pinned peer's own client runs the checks of
`cells.CLIENT_CHECKS` in a child process (its own interpreter or Node), over each transport
it has, against `servers/matrix_server.py`. One test per cell; see `cells.judge`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cells import Cell, judge, parse_checks
from cells_names import CLIENT_CHECKS
from peers import (
    DRIVERS,
    MATRIX_SERVER,
    NODE,
    NPM_PEERS,
    PYTHON_PEERS,
    ROOT,
    node_script,
    npm_package,
    our_python,
    venv_python,
)

from loopback_process import free_port, listening

CELL_GUARD = 240.0  # seconds for one driver run: only reached when something hangs


@dataclass(frozen=True)
class PeerClient:
    label: str
    era: str
    transports: tuple[str, ...]
    argv: Callable[[], list[str]]
    """The driver's command line, up to the transport arguments."""


def python_driver(venv: str, script: str) -> Callable[[], list[str]]:
    return lambda: [str(venv_python(venv)), str(DRIVERS / script)]


def node_driver(package: str, script: str) -> Callable[[], list[str]]:
    def argv() -> list[str]:
        npm_package(package)
        return [str(NODE), str(node_script(script))]

    return argv


PEER_CLIENTS = [
    PeerClient(
        f"mcp {PYTHON_PEERS['mcp1'].split('==')[1]}",
        "2025-11-25",
        ("stdio", "http", "sse"),
        python_driver("mcp1", "mcp1_client.py"),
    ),
    PeerClient(
        f"TypeScript SDK {NPM_PEERS['@modelcontextprotocol/sdk']}",
        "2025-11-25",
        ("stdio", "http", "sse"),
        node_driver("@modelcontextprotocol/sdk", "ts1_client.mjs"),
    ),
]
CELLS = [
    pytest.param(peer, transport, id=f"{peer.label}-{transport}")
    for peer in PEER_CLIENTS
    for transport in peer.transports
]


def run_driver(argv: list[str]) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(DRIVERS)])}
    # The peer's interpreter must not see our dependencies: only our source and the drivers.
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=CELL_GUARD, env=env, cwd=DRIVERS
    )
    return done.stdout, done.stderr


@pytest.mark.timeout(CELL_GUARD + 30)
@pytest.mark.parametrize(("peer", "transport"), CELLS)
def test_peer_client_against_our_server(peer: PeerClient, transport: str) -> None:
    cell = Cell(peer.label, "peer client -> mrtr server", transport, peer.era)
    if transport == "stdio":
        out, err = run_driver([*peer.argv(), "stdio", our_python(), str(MATRIX_SERVER)])
    else:
        port = free_port()
        server = [our_python(), str(MATRIX_SERVER), "http", str(port)]
        path = "mcp" if transport == "http" else "sse"
        with listening(server, port, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}):
            out, err = run_driver([*peer.argv(), transport, f"http://127.0.0.1:{port}/{path}"])
    judge(cell, parse_checks(out), CLIENT_CHECKS, log=err)
