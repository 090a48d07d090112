"""Handler docstrings as descriptions: the text, dedented, and per-parameter descriptions.

A tool's docstring is its description, and the parameters it documents in a Google-style
section (`Args:`, `Arguments:`, `Parameters:`) or a NumPy-style one (`Parameters` over a line
of dashes) become the descriptions of those arguments in the input schema, so what an author
wrote once reaches the model. The parameter section is left out of the description (it is in the
schema already); every other section (`Returns:`, `Examples:` ...) stays.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_HEADER = re.compile(r"(Args|Arguments|Parameters|Params|Keyword Args|Kwargs):\s*")
_GOOGLE_ITEM = re.compile(r"\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)")
_NUMPY_RULE = re.compile(r"-{3,}\s*")
_NUMPY_PARAMETER_HEADERS = frozenset(("Parameters", "Other Parameters", "Keyword Arguments"))
_NUMPY_ITEM = re.compile(r"\*{0,2}(\w+)\s*(:.*)?")


@dataclass(frozen=True, slots=True)
class Docstring:
    """A parsed docstring: the description and what it says of each parameter."""

    description: str | None
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Dedent `doc` (`inspect.cleandoc`) and take its parameter sections out."""
    text = inspect.cleandoc(doc or "")
    if not text:
        return Docstring(None)
    lines = text.splitlines()
    params: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not line.startswith((" ", "\t")) and _GOOGLE_HEADER.fullmatch(stripped):
            i = _google_section(lines, i + 1, params)
            continue
        if (
            stripped in _NUMPY_PARAMETER_HEADERS
            and i + 1 < len(lines)
            and _NUMPY_RULE.fullmatch(lines[i + 1].strip())
        ):
            i = _numpy_section(lines, i + 2, params)
            continue
        kept.append(line)
        i += 1
    description = "\n".join(kept).strip()
    description = re.sub(r"\n{3,}", "\n\n", description)
    return Docstring(description or None, params)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    """Read the indented items of a Google-style section; return the index after it."""
    name: str | None = None
    item_indent: int | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = _indent(line)
        if indent == 0:
            break  # the next section or paragraph
        match = _GOOGLE_ITEM.fullmatch(line.strip())
        if match is not None and (item_indent is None or indent <= item_indent):
            item_indent = indent
            name = match.group(1)
            params[name] = match.group(3).strip()
        elif name is not None:  # a continuation line of the current item
            params[name] = f"{params[name]} {line.strip()}".strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    """Read `name : type` items with indented descriptions; return the index after it."""
    name: str | None = None
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
            continue
        if i + 1 < len(lines) and _NUMPY_RULE.fullmatch(lines[i + 1].strip()):
            break  # the next section's header
        if _indent(line) == 0:
            match = _NUMPY_ITEM.fullmatch(stripped)
            if match is None:
                break
            name = match.group(1)
            params[name] = ""
        elif name is not None:
            params[name] = f"{params[name]} {stripped}".strip()
        i += 1
    return i
