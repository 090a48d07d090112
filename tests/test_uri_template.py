"""Resource templates (RFC 6570): a variable never escapes its place, and every expression a
template registers with can match (the others are refused at registration)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtr import McpError, Server
from mrtr.server.uri_template import UriTemplate


@pytest.mark.parametrize(
    "uri",
    [
        "file:///docs/..%2F..%2Fetc%2Fpasswd",  # %2F decodes to a separator
        "file:///docs/..",
        "file:///docs/%2E%2E",
        "file:///docs/.",
        "file:///docs/a%2Fb",
        "file:///docs/..%5C..%5Cwindows",  # a backslash separator, encoded
    ],
)
def test_a_simple_variable_never_holds_a_separator_or_a_dot_segment(uri: str) -> None:
    assert UriTemplate("file:///docs/{path}").match(uri) is None


@pytest.mark.parametrize(
    "uri",
    [
        "file:///root/a/../../etc/passwd",
        "file:///root/../x",
        "file:///root/a/%2E%2E/%2E%2E/x",
        "file:///root/a%2F..%2F..%2Fx",
        "file:///root/./a",
    ],
)
def test_a_reserved_variable_spans_segments_but_never_climbs_out(uri: str) -> None:
    assert UriTemplate("file:///root/{+path}").match(uri) is None


def test_safe_values_are_decoded() -> None:
    assert UriTemplate("file:///docs/{path}").match("file:///docs/my%20notes.txt") == {
        "path": "my notes.txt"
    }
    assert UriTemplate("file:///root/{+path}").match("file:///root/a/b%20c/d.txt") == {
        "path": "a/b c/d.txt"
    }
    assert UriTemplate("x://f{/segs*}").match("x://f/a/b/c") == {"segs": "a/b/c"}
    assert UriTemplate("x://f{/segs*}").match("x://f/a/../b") is None
    assert UriTemplate("x://f{.ext}").match("x://f.json") == {"ext": "json"}
    assert UriTemplate("x://p{#frag}").match("x://p#top") == {"frag": "top"}
    assert UriTemplate("x://{a,b}").match("x://1,2") == {"a": "1", "b": "2"}


def test_query_expressions_match_in_any_order_and_are_optional() -> None:
    template = UriTemplate("db://rows/{id}{?fields,limit}")
    assert template.match("db://rows/5?limit=3&fields=a%2Cb") == {
        "id": "5",
        "limit": "3",
        "fields": "a,b",
    }
    assert template.match("db://rows/5?fields=x") == {"id": "5", "fields": "x"}
    assert template.match("db://rows/5") == {"id": "5"}
    assert template.match("db://rows/5?evil=1") is None  # a key the template has not
    assert template.match("db://rows/5?limit=1&limit=2") is None  # the same key twice
    assert UriTemplate("db://q{?a}{&b}").match("db://q?b=2&a=1") == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("x://{;a}", "operator is not supported"),
        ("x://{?a}/more", "must come last"),
        ("x://{?a}{b}", "must come last"),
        ("x://{a:3}", "prefix modifiers"),
        ("x://{a*}", "only as {/a*}"),
        ("x://{?a*}", "exploded query"),
        ("x://{a}{a}", "repeated"),
        ("x://{1a}", "bad"),
    ],
)
def test_templates_that_could_not_match_are_refused_at_registration(
    template: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why.replace("{", r"\{").replace("*", r"\*")):
        UriTemplate(template)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab./%2EF5Cc\\", max_size=24))
def test_no_matched_value_ever_holds_a_dot_segment_or_a_stray_separator(tail: str) -> None:
    simple = UriTemplate("file:///d/{p}").match("file:///d/" + tail)
    if simple is not None:
        value = simple["p"]
        assert "/" not in value and "\\" not in value and value not in (".", "..")
    spanning = UriTemplate("file:///d/{+p}").match("file:///d/" + tail)
    if spanning is not None:
        segments = spanning["p"].split("/")
        assert all(s not in (".", "..") and "\\" not in s for s in segments)


async def test_reading_a_traversal_uri_is_resource_not_found(make_client: Any) -> None:
    server = Server("files")
    opened: list[str] = []

    @server.resource_template("file:///docs/{path}")
    def doc(path: str) -> str:
        opened.append(path)
        return f"contents of {path}"

    @server.resource_template("db://rows/{id}{?limit}")
    def rows(id: int, limit: int = 10) -> str:
        return f"rows {id} limit {limit}"

    async with make_client(server) as client:
        ok = await client.read_resource("file:///docs/readme.md")
        assert ok.contents[0].text == "contents of readme.md"  # type: ignore[union-attr]
        with pytest.raises(McpError) as refused:
            await client.read_resource("file:///docs/..%2F..%2Fetc%2Fpasswd")
        assert refused.value.code == -32602 and "not found" in refused.value.message.lower()
        limited = await client.read_resource("db://rows/7?limit=3")
        plain = await client.read_resource("db://rows/7")
    assert opened == ["readme.md"]
    assert limited.contents[0].text == "rows 7 limit 3"  # type: ignore[union-attr]
    assert plain.contents[0].text == "rows 7 limit 10"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("template", "uri"),
    [
        ("file:///docs/{+path}", "file:///docs//etc/passwd"),  # empty first segment: absolute
        ("file:///docs/{+path}", "file:///docs/%2Fetc/passwd"),
        ("file:///docs/{+path}", "file:///docs/a//b"),
        ("file:///docs/{+path}", "file:///docs/a%00.txt"),
        ("file:///docs/{+path}", "file:///docs/C:/Windows/win.ini"),
        ("file:///docs/{+path}", "file:///docs/c%3A%5Cboot.ini"),
        ("file:///docs/{path}", "file:///docs/a%00b"),
        ("file:///docs/{path}", "file:///docs/C:evil"),
        ("x://p{#frag}", "x://p#/etc/passwd"),
        ("x://p{#frag}", "x://p#a/../../b"),
        ("x://f{/segs*}", "x://f//etc"),
        ("x://f{.ext}", "x://f.%2E%2E"),
        ("db://q{?q}", "db://q?q=.."),
        ("db://q{?q}", "db://q?q=%2e%2e"),
        ("db://q{?q}", "db://q?q=..%2F..%2Fetc"),
        ("db://q{?q}", "db://q?q=%2Fetc%2Fpasswd"),
        ("db://q{?q}", "db://q?q=a%5Cb"),
        ("db://q{?q}", "db://q?q=a%00"),
        ("db://q{?a}{&x}", "db://q?a=1&x=.."),
        ("db://q{?a}{&x}", "db://q?a=1&x=%2E%2E%2Fx"),
    ],
)
def test_no_expression_kind_hands_over_an_escaping_value(template: str, uri: str) -> None:
    compiled = UriTemplate(template)
    assert compiled.match(uri) is None
    assert compiled.refusal(uri) is not None  # shaped like the template, refused for its value


def test_safe_query_values_and_empty_ones_still_match() -> None:
    template = UriTemplate("db://q{?q}{&page}")
    assert template.match("db://q?q=hello%20world&page=2") == {"q": "hello world", "page": "2"}
    assert template.match("db://q?q=") == {"q": ""}
    assert template.refusal("db://q?q=fine") is None


async def test_reading_an_absolute_path_through_a_reserved_variable_is_refused(
    make_client: Any,
) -> None:
    server = Server("files")
    opened: list[str] = []

    @server.resource_template("file:///docs/{+path}")
    def doc(path: str) -> str:
        opened.append(path)
        return f"contents of {path}"

    @server.resource_template("db://search{?q}")
    def search(q: str = "") -> str:
        opened.append(q)
        return f"found {q}"

    async with make_client(server) as client:
        ok = await client.read_resource("file:///docs/guides/readme.md")
        assert ok.contents[0].text == "contents of guides/readme.md"  # type: ignore[union-attr]
        for uri, why in [
            ("file:///docs//etc/passwd", "empty path segment"),
            ("db://search?q=..%2F..%2Fetc", "'/'"),
            ("db://search?q=%2e%2e", "'..'"),
        ]:
            with pytest.raises(McpError) as refused:
                await client.read_resource(uri)
            message = refused.value.message
            assert refused.value.code == -32602, message
            assert message.startswith(f"Resource not found: {uri}") and why in message, message
    assert opened == ["guides/readme.md"]
