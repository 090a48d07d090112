"""Each guide leads with its smallest working example, then gives the details.

A reader who opens a guide sees a complete program (or the commands) within its first screen:
the first code block of every page under docs/guides/ starts within its first
`LEAD_WITHIN` lines and is at most `LEAD_LINES` lines long. (Every block also runs:
tests/test_docs_code.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"
LEAD_WITHIN = 30
LEAD_LINES = 30
_FENCE = re.compile(r"^(?P<indent>[ ]*)```[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S)
_INCLUDE = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')


def _lead(page: str) -> tuple[int, int] | None:
    """Where the first code block of `page` starts (1-based line) and how many lines it has."""
    block = _FENCE.search(page)
    if block is None:
        return None
    body = block["body"]
    include = _INCLUDE.match(body.strip())
    if include is not None:  # a whole file of examples/ shown in its place
        body = (ROOT / include["path"]).read_text(encoding="utf-8")
    return page[: block.start()].count("\n") + 1, body.count("\n")


@pytest.mark.parametrize("guide", sorted(GUIDES.glob("*.md")), ids=lambda path: path.name)
def test_a_guide_leads_with_a_small_example(guide: Path) -> None:
    lead = _lead(guide.read_text(encoding="utf-8"))
    assert lead is not None, f"{guide.name} has no example"
    line, length = lead
    assert line <= LEAD_WITHIN, (
        f"{guide.name}: the first example starts on line {line}; put the smallest working "
        f"example within the first {LEAD_WITHIN} lines, the details after it"
    )
    assert length <= LEAD_LINES, (
        f"{guide.name}: the first example has {length} lines; lead with one of at most "
        f"{LEAD_LINES} and move the fuller one below"
    )


def test_the_guide_check_can_fail() -> None:
    page = "# A guide\n\n" + "Text.\n" * 40 + "```python\n" + "x = 1\n" * 80 + "```\n"
    assert _lead(page) == (43, 80)
    included = '# A guide\n\n```python\n--8<-- "examples/shop.py"\n```\n'
    assert _lead(included) == (3, (ROOT / "examples" / "shop.py").read_text().count("\n"))
