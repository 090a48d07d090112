"""Peer clients -> our matrix server: each pinned peer's own client runs the checks of
`cells.CLIENT_CHECKS` in a child process (its own interpreter or Node), over each transport
it has, against `servers/matrix_server.py`. One test per cell; see `cells.judge`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.interop.cells import Cell, judge, parse_checks
from helpers.interop.cells_names import CLIENT_CHECKS
from helpers.interop.peer_clients import CELLS, INSPECTOR_CELLS, LEGACY, MODERN, PeerClient
from helpers.interop.peers import (
    DRIVERS,
    INSPECTOR_VERSION,
    INSTALL_HINT,
    MATRIX_SERVER,
    NODE,
    ROOT,
    our_python,
)
from helpers.loopback_process import free_port, listening

CELL_GUARD = 240.0  # seconds for one driver run: only reached when something hangs


MODES = {LEGACY: "legacy", MODERN: "auto"}
"""How a dual-era peer is told which era to speak (MATRIX_MODE, read by its driver)."""


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


def run_cell(peer: PeerClient, era: str, transport: str) -> tuple[str, str]:
    """The peer's driver against our server over `transport`: what it printed, and its stderr."""
    if transport == "stdio":
        return run_driver([*peer.argv(), "stdio", our_python(), str(MATRIX_SERVER)], era)
    port = free_port()
    server = [our_python(), str(MATRIX_SERVER), "http", str(port)]
    path = "mcp" if transport == "http" else "sse"
    with listening(server, port, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}):
        return run_driver([*peer.argv(), transport, f"http://127.0.0.1:{port}/{path}"], era)


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[tuple[str, str]]]]:
    """Every selected cell, started a few at a time as soon as the first is wanted: a cell
    mostly waits on process starts and imports, so a few at once shorten the run."""
    workers = int(os.environ.get("MATRIX_CONCURRENCY", "2"))
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cell")
    futures = {}
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if spec is not None and getattr(item, "originalname", "") == CELL_TEST:
            futures[spec.id] = pool.submit(run_cell, *(spec.params[k] for k in ARGS))
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


ARGS = ("peer", "era", "transport")
CELL_TEST = "test_peer_client_against_our_server"


@pytest.mark.timeout(CELL_GUARD + 60)
@pytest.mark.parametrize(ARGS, CELLS)
def test_peer_client_against_our_server(
    peer: PeerClient,
    era: str,
    transport: str,
    started: dict[str, Future[tuple[str, str]]],
    request: pytest.FixtureRequest,
) -> None:
    cell = Cell(peer.label, "peer client -> mrtr server", transport, era)
    out, err = started[request.node.callspec.id].result(timeout=CELL_GUARD + 30)
    checks = parse_checks(out)
    for check in checks:
        if check["check"] == "initialize" and peer.reports_version and era not in check["detail"]:
            check.update(ok=False, detail=f"expected {era}, negotiated {check['detail']}")
    judge(cell, checks, CLIENT_CHECKS, log=err)


# --- MCP Inspector's command line: one connection per check -------------------------------------

# Resolved: the CLI runs only when started by its real path (it compares the two).
INSPECTOR_CLI = (
    ROOT
    / ".cache/bench-node/node_modules/@modelcontextprotocol/inspector/clients/cli/build/index.js"
).resolve()
INSPECTOR_CHECKS = {
    "tools/list": (["--method", "tools/list"], '"name": "trip"'),
    "tools/call": (
        ["--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=2", "b=3"],
        '"text": "5"',
    ),
    "prompt": (
        ["--method", "prompts/get", "--prompt-name", "haiku", "--prompt-args", "topic=tea"],
        "haiku about tea",
    ),
    "resource": (["--method", "resources/read", "--uri", "matrix://readme"], "matrix readme"),
    "template": (["--method", "resources/read", "--uri", "matrix://items/7"], "item 7"),
    "unknown tool": (["--method", "tools/call", "--tool-name", "nope"], "'nope' not found"),
    "unknown resource": (
        ["--method", "resources/read", "--uri", "matrix://missing"],
        "Resource not found: matrix://missing",
    ),
}
"""Each check: the Inspector's arguments and text its output must contain. Every run is a new
connection, so an error path cannot be followed by a call on the same session here."""


def inspector(target: list[str], args: list[str], catalog: str) -> dict[str, object]:
    """One Inspector CLI run; what it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MCP_CATALOG_PATH": catalog}
    done = subprocess.run(
        [str(NODE), str(INSPECTOR_CLI), *target, *args],
        capture_output=True,
        text=True,
        timeout=CELL_GUARD,
        env=env,
    )
    return {"rc": done.returncode, "out": done.stdout + done.stderr}


@pytest.mark.timeout(CELL_GUARD + 60)
@pytest.mark.parametrize("transport", INSPECTOR_CELLS)
def test_inspector_against_our_server(transport: str, tmp_path: Path) -> None:
    assert INSPECTOR_CLI.exists(), f"MCP Inspector is missing at {INSPECTOR_CLI}: {INSTALL_HINT}"
    cell = Cell(
        f"MCP Inspector {INSPECTOR_VERSION}", "peer client -> mrtr server", transport, LEGACY
    )
    catalog = str(tmp_path / "catalog.json")  # not the user's ~/.mcp-inspector
    checks = []

    def run_all(target: list[str]) -> None:
        for name, (args, wanted) in INSPECTOR_CHECKS.items():
            said = inspector(target, args, catalog)
            out = str(said["out"])
            if name.startswith("unknown"):
                # The server's JSON-RPC error, reaching the user as such (not as a failed POST).
                ok = wanted in out and "Error POSTing" not in out
            else:
                ok = said["rc"] == 0 and wanted in out
            checks.append({"check": name, "ok": ok, "detail": " ".join(out.split())[:400]})

    if transport == "stdio":
        run_all([our_python(), str(MATRIX_SERVER)])
    else:
        port = free_port()
        server = [our_python(), str(MATRIX_SERVER), "http", str(port)]
        with listening(server, port, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}):
            run_all([f"http://127.0.0.1:{port}/mcp"])
    judge(cell, checks, list(INSPECTOR_CHECKS))
