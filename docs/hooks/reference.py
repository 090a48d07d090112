"""Build-time pieces of the reference pages, made from the code so that they cannot drift.

MkDocs calls `on_page_markdown` for every page (`hooks:` in mkdocs.yml); it replaces

* `<!-- mrtr:fields MODULE:CLASS -->` with a table of the dataclass's fields (name, type,
  default) and the description its docstring gives each (`name`: ... paragraphs);
* `<!-- mrtr:help COMMAND -->` with the `--help` text of `mrtr COMMAND` (`mrtr` alone: `-`).

`tests/test_docs_reference.py` uses the same functions to check that no field is undescribed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import re
from typing import Any

_FIELDS = re.compile(r"<!-- mrtr:fields (?P<target>[a-z_][\w.]*:[A-Z]\w*) -->")
_HELP = re.compile(r"<!-- mrtr:help (?P<command>[a-z]+|-) -->")
# `name`: ... (or `a`/`b`: ...) at the start of a line or of a sentence.
_DESCRIBED = re.compile(r"(?:^|(?<=\. ))(?P<names>(?:`\w+`/?)+): ", re.M)
MISSING = "(not described)"


def load(target: str) -> Any:
    """The object `MODULE:NAME` names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def field_descriptions(cls: type) -> dict[str, str]:
    """Each field's description from the class docstring: the text after `name`: up to the next
    such opening, or else the sentence that names the field."""
    doc = " ".join(inspect.cleandoc(cls.__doc__ or "").split())
    found: dict[str, str] = {}
    matches = list(_DESCRIBED.finditer(doc))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(doc)
        for name in re.findall(r"`(\w+)`", match["names"]):
            found[name] = doc[match.end() : end].strip()
    for field in dataclasses.fields(cls):
        if field.name not in found:
            for sentence in re.split(r"(?<=\.) ", doc):
                if f"`{field.name}`" in sentence:
                    found[field.name] = sentence
                    break
    return found


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    factory = field.default_factory
    if factory is dataclasses.MISSING:
        return "required"
    if inspect.isclass(factory):
        return f"a new `{factory.__name__}`"
    name = getattr(factory, "__name__", "<lambda>")
    if name != "<lambda>":  # computed where it runs (the CPU count, say)
        return f"`{name}()`"
    return f"a new `{type(factory()).__name__}`"


def _type(field: dataclasses.Field[Any]) -> str:
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if text.startswith("_") and field.default_factory is not dataclasses.MISSING:
        text = type(field.default_factory()).__name__  # a private alias: say what it is
    # Plain text, not a code span: a table cell's `|` must be escaped, and a code span would
    # show the backslash.
    return text.replace("|", "\\|").replace("[", "\\[").replace("_", "\\_")


def _cell(text: str) -> str:
    """Markdown text safe in a table cell: pipes escaped, `<`/`>` outside code spans as entities
    (so that "<id>" is not taken for an HTML tag)."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def fields_table(cls: type) -> str:
    """A Markdown table of a dataclass's fields."""
    described = field_descriptions(cls)
    rows = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for field in dataclasses.fields(cls):
        if field.name.startswith("_"):
            continue
        meaning = _cell(described.get(field.name, MISSING))
        rows.append(f"| `{field.name}` | {_type(field)} | {_default(field)} | {meaning} |")
    return "\n".join(rows)


def command_help(command: str) -> str:
    """What `mrtr COMMAND --help` prints."""
    from mrtr.cli import _build

    parser, subparsers = _build()
    chosen = parser if command == "-" else subparsers[command]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        chosen.print_help()
    return out.getvalue().replace("usage: __main__.py", "usage: mrtr").rstrip()


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Fill in the generated pieces of a page."""
    markdown = _FIELDS.sub(lambda match: fields_table(load(match["target"])), markdown)
    return _HELP.sub(lambda match: f"```text\n{command_help(match['command'])}\n```", markdown)
