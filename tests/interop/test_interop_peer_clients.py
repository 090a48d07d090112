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
    ROOT,
    node_script,
    npm_package,
    our_python,
    pinned,
    venv_python,
)

from loopback_process import free_port, listening

CELL_GUARD = 240.0  # seconds for one driver run: only reached when something hangs


LEGACY = "2025-11-25"
MODERN = "2026-07-28"
MODES = {LEGACY: "legacy", MODERN: "auto"}
"""How a dual-era peer is told which era to speak (MATRIX_MODE, read by its driver)."""


@dataclass(frozen=True)
class PeerClient:
    label: str
    eras: dict[str, tuple[str, ...]]
    """The transports the peer's client has, by the era it speaks over them."""
    argv: Callable[[], list[str]]
    """The driver's command line, up to the transport arguments."""
    reports_version: bool = True
    """Whether the driver's `initialize` check shows the negotiated protocol version."""


def python_driver(venv: str, script: str) -> Callable[[], list[str]]:
    return lambda: [str(venv_python(venv)), str(DRIVERS / script)]


def node_driver(package: str, script: str) -> Callable[[], list[str]]:
    def argv() -> list[str]:
        npm_package(package)
        return [str(NODE), str(node_script(script))]

    return argv


EVERY_LEGACY = ("stdio", "http", "sse")
PEER_CLIENTS = [
    PeerClient(
        f"mcp {pinned('mcp1')}",
        {LEGACY: EVERY_LEGACY},
        python_driver("mcp1", "mcp1_client.py"),
    ),
    PeerClient(
        f"mcp {pinned('mcp2')}",
        {MODERN: ("stdio", "http"), LEGACY: ("stdio", "http")},
        python_driver("mcp2", "mcp2_client.py"),
    ),
    PeerClient(
        f"fastmcp {pinned('fastmcp3')}",
        {LEGACY: EVERY_LEGACY},
        python_driver("fastmcp3", "fastmcp_client.py"),
    ),
    PeerClient(
        f"fastmcp {pinned('fastmcp4')}",
        {MODERN: ("stdio", "http"), LEGACY: EVERY_LEGACY},
        python_driver("fastmcp4", "fastmcp_client.py"),
    ),
    PeerClient(
        f"TypeScript SDK {NPM_PEERS['@modelcontextprotocol/sdk']}",
        {LEGACY: EVERY_LEGACY},
        node_driver("@modelcontextprotocol/sdk", "ts1_client.mjs"),
        reports_version=False,  # its stdio transport keeps the negotiated version to itself
    ),
    PeerClient(
        f"TypeScript client {NPM_PEERS['@modelcontextprotocol/client']}",
        {MODERN: ("stdio", "http"), LEGACY: EVERY_LEGACY},
        node_driver("@modelcontextprotocol/client", "ts2_client.mjs"),
    ),
]
CELLS = [
    pytest.param(peer, era, transport, id=f"{peer.label}-{transport}-{era}")
    for peer in PEER_CLIENTS
    for era, transports in peer.eras.items()
    for transport in transports
]


def run_driver(argv: list[str], era: str) -> tuple[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(DRIVERS)]),
        "MATRIX_MODE": MODES[era],
    }
    # The peer's interpreter must not see our dependencies: only our source and the drivers.
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=CELL_GUARD, env=env, cwd=DRIVERS
    )
    return done.stdout, done.stderr


@pytest.mark.timeout(CELL_GUARD + 30)
@pytest.mark.parametrize(("peer", "era", "transport"), CELLS)
def test_peer_client_against_our_server(peer: PeerClient, era: str, transport: str) -> None:
    cell = Cell(peer.label, "peer client -> mrtr server", transport, era)
    if transport == "stdio":
        out, err = run_driver([*peer.argv(), "stdio", our_python(), str(MATRIX_SERVER)], era)
    else:
        port = free_port()
        server = [our_python(), str(MATRIX_SERVER), "http", str(port)]
        path = "mcp" if transport == "http" else "sse"
        with listening(server, port, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}):
            url = f"http://127.0.0.1:{port}/{path}"
            out, err = run_driver([*peer.argv(), transport, url], era)
    checks = parse_checks(out)
    for check in checks:
        if check["check"] == "initialize" and peer.reports_version and era not in check["detail"]:
            check.update(ok=False, detail=f"expected {era}, negotiated {check['detail']}")
    judge(cell, checks, CLIENT_CHECKS, log=err)
