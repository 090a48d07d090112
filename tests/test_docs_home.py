"""The home page's quick start is for someone who wants to use mrtr, not to work on it.

Two commands: a virtual environment (Debian's and Ubuntu's system Python refuse `pip install`
outside one), then the install and `mrtr demo`. The contributor's test script and what it
installs belong to docs/contributing.md.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTOR_ONLY = ("scripts/", "test.sh", "conformance", "npm", "[dev", "[docs")


def _quick_start(page: str) -> str:
    found = re.search(r"^## Quick start\n(?P<section>.*?)(?=^## )", page, re.M | re.S)
    assert found, "the page has no `## Quick start` section"
    return found["section"]


def _problems(section: str) -> list[str]:
    problems = [f"mentions {word!r}" for word in CONTRIBUTOR_ONLY if word in section]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    if len(blocks) != 1:
        return [*problems, f"has {len(blocks)} command blocks, not one"]
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines()]
    commands = [command for command in commands if command]
    if len(commands) > 2:
        problems.append(f"takes {len(commands)} commands, not two")
    text = "\n".join(commands)
    venv, install = text.find("venv"), text.find("pip install")
    if install == -1 or not 0 <= venv < install:
        problems.append("does not make a virtual environment before it installs")
    if "mrtr demo" not in text:
        problems.append("does not run `mrtr demo`")
    return problems


def test_the_home_quick_start_is_for_users() -> None:
    section = _quick_start((ROOT / "docs" / "index.md").read_text(encoding="utf-8"))
    assert _problems(section) == []


def test_the_test_command_is_on_the_contributing_page() -> None:
    assert "bash scripts/test.sh" in (ROOT / "docs" / "contributing.md").read_text()


def test_the_quick_start_check_can_fail() -> None:
    contributor = (
        "## Quick start\n\n```bash\npython3 -m pip install -q -e . && python3 -m mrtr demo\n"
        "bash scripts/test.sh   # installs dev tools, runs every test\n```\n\n## Next\n"
    )
    assert _problems(_quick_start(contributor)) == [
        "mentions 'scripts/'",
        "mentions 'test.sh'",
        "does not make a virtual environment before it installs",
    ]
