"""`@server.resource(uri)` with `{...}` in the URI registers a resource template, as the
official SDK and FastMCP do; a function whose parameters do not match the URI's variables is
refused at registration, with the fix in the message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from mrtr import Client, Server, TextResourceContents
from mrtr.client.options import ClientOptions


def make_server() -> Server:
    server = Server("files")

    @server.resource("file://{path}")
    def read(path: str) -> str:
        return f"the text of {path}"

    @server.resource("notes://{book}/{page}", mime_type="text/plain")
    async def note(book: str, page: int) -> str:
        return f"{book} p.{page + 1}"

    @server.resource_template("docs:///{+path}")
    def doc(path: str) -> str:
        return f"doc {path}"

    @server.resource("file:///static")
    def static() -> str:
        return "static"

    return server


@asynccontextmanager
async def client_of(server: Server, era: str) -> AsyncIterator[Client]:
    async with Client.in_memory(server, options=ClientOptions(protocol=era)) as client:
        yield client


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_uri_with_variables_is_a_template_a_client_reads(era: str) -> None:
    async with client_of(make_server(), era) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        assert [r.uri for r in resources.resources] == ["file:///static"]
        assert [t.uri_template for t in templates.resource_templates] == [
            "file://{path}",
            "notes://{book}/{page}",
            "docs:///{+path}",
        ]
        read = await client.read_resource("file://readme.txt")
        [contents] = read.contents
        assert isinstance(contents, TextResourceContents)
        assert (contents.uri, contents.text) == ("file://readme.txt", "the text of readme.txt")
        [note] = (await client.read_resource("notes://dune/41")).contents
        assert isinstance(note, TextResourceContents) and note.text == "dune p.42"
        [doc] = (await client.read_resource("docs:///a/b.md")).contents
        assert isinstance(doc, TextResourceContents) and doc.text == "doc a/b.md"


def test_a_parameter_missing_from_the_uri_is_refused_with_the_fix() -> None:
    server = Server("s")
    with pytest.raises(TypeError, match=r"\['name'\] are not template variables: add \{name\}"):

        @server.resource("file://{path}")
        def read(path: str, name: str) -> str:
            return path + name


def test_a_uri_variable_the_function_lacks_is_refused_with_the_fix() -> None:
    server = Server("s")
    with pytest.raises(TypeError, match=r"variables \['path'\] are not parameters.*named path"):

        @server.resource("file://{path}")
        def read(name: str = "x") -> str:
            return name

    with pytest.raises(TypeError, match=r"variables \['page'\] are not parameters"):
        server.add_resource_template(lambda book: book, "notes://{book}/{page}")


def test_a_static_uri_with_a_required_parameter_is_refused_with_the_fix() -> None:
    server = Server("s")
    with pytest.raises(TypeError, match=r"no template variables: .*'file:///\{path\}'"):

        @server.resource("file:///readme")
        def read(path: str) -> str:
            return path


def test_context_and_defaults_need_no_variable() -> None:
    server = Server("s")

    @server.resource("file://{path}{?encoding}")
    def read(ctx, path: str, encoding: str = "utf-8") -> str:  # type: ignore[no-untyped-def]
        return path

    @server.resource("file:///plain")
    def plain(ctx, limit: int = 3) -> str:  # type: ignore[no-untyped-def]
        return "plain"

    assert server.has_resource("file://a.txt") and server.has_resource("file:///plain")
