"""Docstrings become descriptions: dedented, and their parameter sections describe the
arguments in the input schema (Google and NumPy styles)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from mrtr import Server
from mrtr.server.docstrings import parse_docstring


def _server() -> Server:
    server = Server("docs")

    @server.tool()
    def search(query: str, limit: int = 10, exact: bool = False) -> str:
        """Search the catalogue.

        Finds items whose title matches.

        Args:
            query: What to look for; words are
                matched in any order.
            limit (int): At most this many results.
            exact: Match the whole title only.

        Returns:
            The matching titles, one per line.
        """
        return query

    @server.tool()
    def convert(amount: float, currency: Annotated[str, Field(description="ISO 4217 code")]) -> str:
        """
        Convert money.

        Parameters
        ----------
        amount : float
            How much, in euros.
        currency : str
            Ignored: the annotation's description wins.

        Notes
        -----
        Rates are a day old.
        """
        return currency

    @server.prompt()
    def greet(name: str) -> str:
        """Greet someone.

        Args:
            name: Who to greet.
        """
        return f"Hello {name}"

    return server


async def test_google_style_args_describe_the_arguments(make_client: Any) -> None:
    async with make_client(_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        (prompt,) = (await client.list_prompts()).prompts
    search = tools["search"]
    assert search.description == (
        "Search the catalogue.\n\nFinds items whose title matches.\n\n"
        "Returns:\n    The matching titles, one per line."
    )
    props = search.input_schema["properties"]
    assert props["query"]["description"] == "What to look for; words are matched in any order."
    assert props["limit"]["description"] == "At most this many results."
    assert props["exact"]["description"] == "Match the whole title only."
    assert prompt.description == "Greet someone."
    assert prompt.arguments is not None and prompt.arguments[0].description == "Who to greet."


async def test_numpy_style_parameters_and_dedent(make_client: Any) -> None:
    async with make_client(_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    convert = tools["convert"]
    # No stray indentation: the first line was empty, the rest indented by the source.
    assert convert.description == "Convert money.\n\nNotes\n-----\nRates are a day old."
    props = convert.input_schema["properties"]
    assert props["amount"]["description"] == "How much, in euros."
    assert props["currency"]["description"] == "ISO 4217 code"


def test_a_docstring_without_sections_is_only_dedented() -> None:
    doc = parse_docstring("""First line.

        Second paragraph,
            indented more.
        """)
    assert doc.description == "First line.\n\nSecond paragraph,\n    indented more."
    assert doc.params == {}
    assert parse_docstring(None).description is None
    assert parse_docstring("   ").description is None
