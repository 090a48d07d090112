"""A griffe extension that gives the API reference's attributes the documentation the code has.

Griffe reads an attribute's docstring only from a string literal after its assignment, so
without this every attribute documented another way would be an empty box. It takes, for an
attribute without one:

* the `#:` comment lines just above its assignment (the Sphinx convention the code uses), or
  the comment closing a one-line assignment (`NAME = value  # what it is`);
* the description its class's docstring gives it (`name`: ..., as the option classes do);
* for an MCP wire model (an `McpModel`), its name on the wire.

mkdocs.yml loads it for mkdocstrings; `tests/test_docs_reference.py` loads it too, and fails
on any attribute of the reference still left without documentation.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import griffe

# `name`: ... (or `a`/`b`: ...) at the start of a line or of a sentence.
_DESCRIBED = re.compile(r"(?:^|(?<=\. ))(?P<names>(?:`\w+`/?)+): ", re.M)
# Comments meant for tools, not readers.
_TOOL_COMMENTS = ("noqa", "type:", "pragma", "fmt:")


def described_in(doc: str) -> dict[str, str]:
    """Each `name`: description a class docstring gives, by name."""
    text = " ".join(doc.split())
    found: dict[str, str] = {}
    matches = list(_DESCRIBED.finditer(text))
    for match, following in zip(matches, [*matches[1:], None], strict=False):
        end = following.start() if following is not None else len(text)
        for name in re.findall(r"`(\w+)`", match["names"]):
            found[name] = text[match.end() : end].strip()
    return found


def _wire_name(cls: griffe.Class, name: str) -> str | None:
    """The JSON name of field `name` when `cls` is an MCP wire model (`McpModel`)."""
    from mrtr.protocol.model import McpModel

    try:
        model = getattr(importlib.import_module(cls.module.path), cls.name)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(model, type) and issubclass(model, McpModel)):
        return None
    fields = model.model_fields
    if name not in fields:
        return None
    alias = fields[name].alias or fields[name].serialization_alias
    return alias if isinstance(alias, str) else name


class AttributeDocs(griffe.Extension):
    """Fill in the documentation of attributes (see the module docstring)."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or not isinstance(node, ast.AST) or attr.lineno is None:
            return
        path = attr.filepath
        collection = attr.lines_collection
        if not isinstance(path, Path) or path not in collection:
            return
        lines = collection[path]
        comment: list[str] = []
        index = attr.lineno - 2  # the line above the assignment (lines are 1-based)
        while index >= 0 and lines[index].lstrip().startswith("#:"):
            comment.insert(0, lines[index].lstrip()[2:].strip())
            index -= 1
        if not comment and attr.endlineno == attr.lineno:
            # `NAME = value  # what it is`: a one-line assignment's own comment.
            _, hash_, trailing = lines[attr.lineno - 1].partition("  # ")
            if hash_ and not trailing.startswith(_TOOL_COMMENTS):
                comment = [trailing.strip()]
        if comment:
            attr.docstring = griffe.Docstring("\n".join(comment), lineno=attr.lineno, parent=attr)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        # The class's docstring, and its `__init__`'s (the reference merges the two).
        docs = [cls.docstring, getattr(cls.members.get("__init__"), "docstring", None)]
        described = {}
        for doc in docs:
            if isinstance(doc, griffe.Docstring):
                described.update(described_in(doc.value))
        for name, member in cls.members.items():
            if member.is_alias or not isinstance(member, griffe.Attribute):
                continue
            if member.docstring is not None and member.docstring.value.strip():
                continue
            text = described.get(name)
            if text is None:
                wire = _wire_name(cls, name)
                if wire is not None:
                    text = f"The `{wire}` member of the {cls.name} object on the wire."
            if text is not None:
                member.docstring = griffe.Docstring(text, parent=member)
