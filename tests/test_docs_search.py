"""The site's search finds the identifiers the documentation uses.

The search index splits page text into words with the `separator` of mkdocs.yml, and splits a
query the same way; a query finds a page only when each of its words is a word of the page.
With the default separator (spaces and hyphens) `ctx.once` is not a word of a page that
writes `await ctx.once("key", fn)`, so searching for it finds nothing. For every dotted or
snake_case name in a code span of a page, the words it splits into must be words of the page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DEFAULT_SEPARATOR = r"[\s\-]+"
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_IDENTIFIER = re.compile(r"(?<!\w)(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|_*[A-Za-z]\w*_\w+)")


def _separator() -> str:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    found = re.search(r"^\s+separator: '(?P<pattern>[^']+)'$", config, re.M)
    assert found, "mkdocs.yml gives the search plugin no separator"
    return found["pattern"]


def _words(text: str, separator: str) -> set[str]:
    return {word.lower() for word in re.split(separator, text) if word}


def _unfindable(page: str, separator: str) -> list[str]:
    """The identifiers of `page`'s code spans whose words are not all words of the page."""
    words = _words(page, separator)
    return [
        name
        for span in _CODE_SPAN.findall(page)
        for name in _IDENTIFIER.findall(span)
        if not _words(name, separator) <= words
    ]


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_identifier_of_a_page_can_be_searched_for(page: Path) -> None:
    missed = _unfindable(page.read_text(encoding="utf-8"), _separator())
    assert not missed, f"searching for these finds nothing on {page.name}: {sorted(set(missed))}"


def test_the_search_check_can_fail() -> None:
    page = 'Record it with `await ctx.once("key", fn)`.'
    assert _unfindable(page, DEFAULT_SEPARATOR) == ["ctx.once"]
    assert _unfindable(page, _separator()) == []
