"""No test file imports another test file: what tests share lives in `tests/helpers/`.

The imports are read from the source with `ast` (nothing is imported), at module level and inside
functions alike, in every Python file under `tests/` (helpers and servers included).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


#: Packages whose members are test files: `from tests import test_x` imports one.
TEST_PACKAGES = ("tests", "interop", "tests.interop")


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`test_*`, or `tests.test_*` and the like) that `source` imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] if base else []
            if node.level or base in TEST_PACKAGES:
                names += [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        found += [name for name in names if any(p.startswith("test_") for p in name.split("."))]
    return found


def test_the_scanner_sees_every_form_of_import() -> None:
    source = """
import test_a
import os, test_b as b
from test_c import x
from tests.test_d import y
from interop import test_e
from . import test_f
def later():
    from test_g import z
from helpers.shop import Shop
from mrtr.testing import contest
"""
    assert imported_test_modules(source) == [
        "test_a",
        "test_b",
        "test_c",
        "tests.test_d",
        "interop.test_e",
        "test_f",
        "test_g",
    ]


def test_no_test_file_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): modules
        for path in sorted(TESTS.rglob("*.py"))
        if (modules := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, (
        f"move what these share into tests/helpers/ and import it from there: {offenders}"
    )
