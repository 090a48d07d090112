"""Every example directory explains itself and is run by a test.

Each `examples/<name>/` has a README.md, and some test file (other than this one) names it,
as `examples/<name>` or as the string "<name>" in a file that mentions examples.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TESTS = Path(__file__).resolve().parent


def _example_dirs() -> list[Path]:
    return sorted(
        path
        for path in EXAMPLES.iterdir()
        if path.is_dir() and not path.name.startswith(("_", "."))
    )


def _names_it(text: str, name: str) -> bool:
    return f"examples/{name}" in text or ("examples" in text and f'"{name}"' in text)


def test_there_are_examples() -> None:
    assert len(_example_dirs()) >= 4


@pytest.mark.parametrize("example", _example_dirs(), ids=lambda path: path.name)
def test_example_has_a_readme(example: Path) -> None:
    readme = example / "README.md"
    assert readme.is_file(), f"examples/{example.name} has no README.md"
    assert len(readme.read_text(encoding="utf-8").strip().splitlines()) >= 3


@pytest.mark.parametrize("example", _example_dirs(), ids=lambda path: path.name)
def test_example_is_run_by_a_test(example: Path) -> None:
    here = Path(__file__).resolve()
    runners = [
        path.name
        for path in sorted(TESTS.glob("test_*.py"))
        if path != here and _names_it(path.read_text(encoding="utf-8"), example.name)
    ]
    assert runners, f"no test under tests/ runs examples/{example.name}"


def test_the_check_can_fail() -> None:
    assert not _names_it("nothing here", "file_organiser")
    assert _names_it('EXAMPLES = ROOT / "examples"; ROOT / "file_organiser"', "file_organiser")
