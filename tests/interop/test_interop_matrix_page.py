"""The published matrix (docs/interoperability-matrix.md) covers exactly the matrix's cells, and
its generator renders a cell's outcome as the cell judged it."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

from helpers.interop.peer_clients import CELLS as CLIENT_CELLS
from helpers.interop.peer_clients import INSPECTOR_CELLS
from helpers.interop.peer_servers import CELLS as SERVER_CELLS
from helpers.interop.peer_servers import runs_cli
from helpers.interop.peers import INSPECTOR_VERSION, ROOT
from helpers.interop.tasks_cells import CELLS as TASK_CELLS
from helpers.interop.tasks_cells import OUR_CLIENT as TASKS_OUR_CLIENT
from helpers.interop.tasks_cells import PEER_CLIENT as TASKS_PEER_CLIENT

PAGE = ROOT / "docs" / "interoperability-matrix.md"
INSPECTOR = f"MCP Inspector {INSPECTOR_VERSION}"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "interop_matrix", ROOT / "scripts" / "interop_matrix.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def expected_rows() -> set[tuple[str, str, str, str]]:
    rows = set()
    for param in CLIENT_CELLS:
        peer, era, transport = param.values
        rows.add(("peer client -> mrtr server", peer.label, transport, era))
    for param in INSPECTOR_CELLS:
        rows.add(("peer client -> mrtr server", INSPECTOR, param.values[0], "2025-11-25"))
    for param in SERVER_CELLS:
        peer, era, transport = param.values
        rows.add(("mrtr client -> peer server", peer.label, transport, era))
        if runs_cli(peer, era, transport):
            rows.add(("mrtr call -> peer server", peer.label, transport, era))
    for param in TASK_CELLS:
        label, transport = param.values
        for direction in (TASKS_PEER_CLIENT, TASKS_OUR_CLIENT):
            rows.add((direction, label, transport, "2026-07-28"))
    return rows


def test_the_published_table_has_every_cell_and_no_other() -> None:
    rows = set()
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and "->" in cells[0]:
            rows.add((cells[0], cells[1], cells[2], cells[3]))
    missing = expected_rows() - rows
    stale = rows - expected_rows()
    hint = "run the matrix, then python3 scripts/interop_matrix.py"
    assert not missing, f"cells missing from {PAGE.name} ({hint}): {sorted(missing)}"
    assert not stale, f"cells no longer in the matrix in {PAGE.name} ({hint}): {sorted(stale)}"


def test_a_cell_reads_as_it_was_judged() -> None:
    render = generator().render
    cell = {
        "peer": "peer 1.0",
        "direction": "peer client -> mrtr server",
        "transport": "http",
        "era": "2025-11-25",
        "status": "FAIL",
        "checks": [
            {"check": "a", "ok": True, "detail": "", "known": None},
            {"check": "b", "ok": False, "detail": "x", "known": "ours, issue 1: broken"},
        ],
    }
    page = render([cell])
    row = "| peer client -> mrtr server | peer 1.0 | http | 2025-11-25 |"
    assert f"{row} known failure (1/2): ours, issue 1, see below |" in page
    assert "    * b: ours, issue 1: broken" in page
    cell["checks"][1]["known"] = None
    assert "**FAIL** (1/2): b" in render([cell])
    cell["checks"][1]["ok"] = True
    assert re.search(r"\| PASS \(2/2\) \|", render([cell]))
