"""One cell of the interoperability matrix: its checks judged against the known failures,
printed one line each, and recorded for `scripts/interop_matrix.py` to publish."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from helpers.interop.known_failures import KNOWN_FAILURES, WHOLE_CELL
from helpers.interop.peers import RESULTS


@dataclass(frozen=True)
class Cell:
    """peer x direction x transport x era."""

    peer: str
    """The peer and its version, as the published table shows it (`mcp 1.30.0`)."""
    direction: str
    """`peer client -> mrtr server`, or `mrtr client -> peer server`, or `mrtr call -> ...`."""
    transport: str
    era: str

    @property
    def id(self) -> str:
        return f"{self.peer} | {self.direction} | {self.transport} | {self.era}"


def parse_checks(output: str) -> list[dict[str, Any]]:
    """The JSON lines a driver printed (anything else it printed is ignored)."""
    checks = []
    for line in output.splitlines():
        if line.startswith('{"check"'):
            checks.append(json.loads(line))
    return checks


def judge(cell: Cell, checks: list[dict[str, Any]], expected: list[str], log: str = "") -> None:
    """Record the cell, print it, and fail unless every check in `expected` ran and passed,
    but for the known failures, which must still fail (a fixed one is reported, so that its
    entry is removed); a cell with known failures ends as an xfail naming them."""
    known = KNOWN_FAILURES.get(cell.id, {})
    by_name = {c["check"]: c for c in checks}
    missing = [name for name in expected if name not in by_name]
    failed = {c["check"] for c in checks if not c["ok"]} | set(missing)
    if WHOLE_CELL in known:  # the cell as a whole: some check fails, which ones may vary
        unexpected, fixed = [], ([] if failed else [WHOLE_CELL])
        known = {name: known[WHOLE_CELL] for name in failed}
    else:
        unexpected = sorted(failed - set(known))
        fixed = sorted(n for n in set(known) - failed if not known[n].startswith("peer race"))
    status = "PASS" if not failed else "FAIL"
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {
        **asdict(cell),
        "status": status,
        "checks": [
            {
                **by_name.get(n, {"check": n, "ok": False, "detail": "did not run"}),
                "known": known.get(n),
            }
            for n in expected
        ],
    }
    slug = re.sub(r"[^A-Za-z0-9]+", "-", cell.id).strip("-").lower()
    (RESULTS / f"{slug}.json").write_text(json.dumps(record, indent=1))
    print(f"\n{status} {cell.id}")
    for c in record["checks"]:
        mark = "ok  " if c["ok"] else ("KNOWN" if c["known"] else "FAIL")
        print(f"  {mark} {c['check']}: {c['detail']}")
    assert not unexpected, f"{cell.id}: unexpected failures {unexpected}\n{log[-3000:]}"
    assert not fixed, f"{cell.id}: now passes {fixed}: remove them from known_failures.py"
    known = {n: r for n, r in known.items() if n in failed}
    if known:
        pytest.xfail("; ".join(sorted(set(known.values()))))
