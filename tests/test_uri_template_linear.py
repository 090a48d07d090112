"""Resource templates match in time linear in the URI, and give what the regular expressions
they replaced gave; a `resources/read` matches a URI once, and none longer than the cap."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtr import McpError, Server
from mrtr.server import uri_template
from mrtr.server.uri_template import MAX_URI_LENGTH, UriTemplate

SPANNING = "repo://{+owner}/{+path}"


def _hostile(size: int) -> str:
    """A URI of about `size` characters shaped like `SPANNING` but matching it nowhere: every
    `/` is a place `owner` could end, and the `#` at the end refuses each of them."""
    return "repo://" + "a/" * (size // 2) + "#"


# --- the oracle: the regular expressions templates compiled to before ----------------------

_PART = {"": r"[^/?#]+", "+": r"[^?#]+?", "#": r".+?", ".": r"[^/?#.]+", "/": r"[^/?#]+"}
_PREFIX = {"": "", "+": "", "#": "#", ".": r"\.", "/": "/"}


def _former_regex(template: str) -> tuple[re.Pattern[str], int, bool]:
    """The pattern the former matcher compiled `template` to, its variables, whether it has
    a query. Templates here are well formed (the strategy below writes them)."""
    pattern: list[str] = []
    count, query, pos = 0, False, 0
    for m in re.finditer(r"\{([^{}]*)\}", template):
        body = m.group(1)
        operator = body[:1] if body[:1] in "+#./?&" else ""
        pattern.append(re.escape(template[pos : m.start()]))
        pos = m.end()
        specs = body[len(operator) :].split(",")
        if operator in ("?", "&"):
            query = True
            continue
        groups = []
        for spec in specs:
            part = r"[^?#]+?" if spec.endswith("*") else _PART[operator]
            if len(specs) > 1:
                part = part.replace("]", ",]", 1) if part.startswith("[") else r"[^,]+?"
            groups.append(f"{_PREFIX[operator]}(?P<g{count}>{part})")
            count += 1
        pattern.append(("," if operator in ("", "+", "#") else "").join(groups))
    pattern.append(re.escape(template[pos:]))
    if query:
        pattern.append(r"(?:\?(?P<q>[^#]*))?")
    return re.compile("".join(pattern) + r"\Z"), count, query


def _former_raw(template: str, uri: str) -> tuple[list[str], str | None] | None:
    regex, count, _ = _former_regex(template)
    m = regex.match(uri)
    if m is None:
        return None
    return [m.group(f"g{i}") for i in range(count)], m.groupdict().get("q")


_LITERAL = st.text(alphabet="ab/.,?#:", max_size=3)
_CHARS = "ab/.,?#=&\n%2F"


@st.composite
def _templates(draw: st.DrawFn) -> str:
    parts = [draw(st.text(alphabet="ab:/", max_size=3))]
    names = iter(f"v{i}" for i in range(20))
    for _ in range(draw(st.integers(1, 3))):
        operator = draw(st.sampled_from(["", "+", "#", ".", "/"]))
        specs = [
            next(names) + ("*" if operator == "/" and draw(st.booleans()) else "")
            for _ in range(draw(st.integers(1, 2)))
        ]
        parts.append("{" + operator + ",".join(specs) + "}")
        parts.append(draw(_LITERAL))
    if draw(st.booleans()):
        parts.append("{?" + next(names) + "}")
        if draw(st.booleans()):
            parts.append("{&" + next(names) + "}")
    return "".join(parts)


@st.composite
def _uris(draw: st.DrawFn, template: str) -> str:
    """An expansion of `template` with any characters for values (so values may hold the
    characters that end them, and the URI may fit several ways or none), or plain text."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(alphabet=_CHARS, max_size=30))

    def value(m: re.Match[str]) -> str:
        body = m.group(1)
        operator = body[:1] if body[:1] in "+#./?&" else ""
        values = [
            draw(st.text(alphabet=_CHARS, min_size=0, max_size=4))
            for _ in body[len(operator) :].split(",")
        ]
        if operator in ("?", "&"):
            return (operator if draw(st.booleans()) else "?") + values[0]
        prefix = _PREFIX[operator].replace("\\", "")
        return ("" if operator in (".", "/") else ",").join(prefix + v for v in values)

    return re.sub(r"\{([^{}]*)\}", value, template)


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_each_variable_takes_the_extent_the_former_regular_expression_gave(
    data: st.DataObject,
) -> None:
    template = data.draw(_templates())
    uri = data.draw(_uris(template))
    compiled = UriTemplate(template)
    former = _former_raw(template, uri)
    assert compiled._raw_values(uri) == former, (template, uri)
    if former is not None:  # and what is decoded or refused from it is the same
        values, query = former
        expected: Any = {}
        for (name, spans), raw in zip(compiled._slots, values, strict=True):
            value = uri_template._decoded(raw, spans)
            if not isinstance(value, tuple):
                expected = f"the value of {name!r} {value}"
                break
            expected[name] = value[0]
        else:
            if compiled._query:
                given_ = uri_template._query_values(query, compiled._query)
                expected = given_ if not isinstance(given_, dict) else {**expected, **given_}
        assert compiled.resolve(uri) == expected, (template, uri)


@pytest.mark.parametrize(
    ("template", "uri", "values"),
    [
        # The shortest extent for `{+var}`: the owner ends at the first `/`.
        (SPANNING, "repo://me/a/b", {"owner": "me", "path": "a/b"}),
        # The longest for `{var}`: the name runs to the last `.` the suffix leaves.
        ("x://{name}.json", "x://a.b.json", {"name": "a.b"}),
        # The shortest that lets the rest match: `a` cannot end at the first `-`.
        ("x://{+a}-{b}/z", "x://p-q/r-s/z", {"a": "p-q/r", "b": "s"}),
        ("x://{a,b}", "x://1,2", {"a": "1", "b": "2"}),
        ("x://{/a,b}{.e}", "x:///g/h.i", {"a": "g", "b": "h", "e": "i"}),
        ("x://p{#a,b}", "x://p#1,#2", {"a": "1", "b": "2"}),
        ("db://q{?a}", "db://q", {}),
        ("db://q{?a}", "db://q?", {}),
    ],
)
def test_the_extent_rule_on_examples(template: str, uri: str, values: dict[str, str]) -> None:
    assert UriTemplate(template).match(uri) == values
    assert _former_raw(template, uri) is not None  # and the former matcher agreed it fits


def _python_lines(run: Any) -> int:
    """Lines of `uri_template` Python executes during `run()`: the matcher's steps (its
    searches run in C, each over a part of the URI no other search of its pass covers)."""
    count = 0
    code_file = uri_template.__file__

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if frame.f_code.co_filename != code_file:
            return None
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return count


def test_a_40kb_uri_against_two_spanning_variables_takes_steps_linear_in_its_length() -> None:
    template = UriTemplate(SPANNING)
    small, large = _hostile(10_000), _hostile(40_000)
    assert template.resolve(large) is None
    steps_small = _python_lines(lambda: template.resolve(small))
    steps_large = _python_lines(lambda: template.resolve(large))
    # Four times the URI, four times the steps (quadratic work would be sixteen), and a few
    # per `/`, the one character that could end a variable (1.5 per character measured).
    assert steps_large <= 4.5 * steps_small, (steps_small, steps_large)
    assert steps_large <= 2 * len(large), steps_large
    # A URI that fits costs steps linear in its length too, its 20,000 segments decoded and
    # checked one by one included (6 per character measured).
    fitting = "repo://" + "a/" * 20_000 + "b"
    assert template.match(fitting) == {"owner": "a", "path": "a/" * 19_999 + "b"}
    assert _python_lines(lambda: template.resolve(fitting)) <= 8 * len(fitting)


def test_a_40kb_uri_is_matched_in_well_under_a_second_of_cpu() -> None:
    # The former lazy patterns backtracked quadratically: 5-6 s of CPU for this one URI.
    template = UriTemplate(SPANNING)
    uri = _hostile(40_000)
    started = time.thread_time()
    for _ in range(3):
        assert template.match(uri) is None
    assert time.thread_time() - started < 1.0


def _spanning_server(opened: list[str]) -> Server:
    server = Server("repos")

    @server.resource_template(SPANNING)
    def blob(owner: str, path: str) -> str:
        opened.append(f"{owner}:{path}")
        return f"{owner} {path}"

    @server.resource("repo://" + "long/" * 2000)
    def long_static() -> str:
        return "static"

    return server


async def test_a_uri_past_the_cap_is_refused_before_any_template(make_client: Any) -> None:
    opened: list[str] = []
    async with make_client(_spanning_server(opened)) as client:
        for uri in (_hostile(MAX_URI_LENGTH), _hostile(4 * 1024 * 1024)):
            with pytest.raises(McpError) as refused:
                await client.read_resource(uri)
            message = refused.value.message
            assert refused.value.code == -32602, message
            assert f"at most {MAX_URI_LENGTH} characters" in message, message
            assert len(message) < 500  # the URI is not echoed back whole
        at_cap = "repo://me/" + "p" * (MAX_URI_LENGTH - len("repo://me/"))
        read = await client.read_resource(at_cap)
        assert read.contents[0].text == "me " + at_cap[len("repo://me/") :]  # type: ignore[union-attr]
        # A static resource is found by its URI, whatever its length.
        static = await client.read_resource("repo://" + "long/" * 2000)
        assert static.contents[0].text == "static"  # type: ignore[union-attr]
    assert len(opened) == 1


async def test_a_read_of_a_hostile_uri_never_holds_a_ping_on_another_connection(
    make_client: Any,
) -> None:
    opened: list[str] = []
    server = _spanning_server(opened)
    async with make_client(server) as reader, make_client(server) as other:
        await other.ping()
        started = time.monotonic()
        # Both sent at once: the read reaches the server first, the ping right after it.
        read = asyncio.ensure_future(reader.read_resource(_hostile(40_000)))
        ping = asyncio.ensure_future(other.ping())
        await ping
        # Generous for a loaded machine; the former matcher held the ping 10 s or more.
        assert time.monotonic() - started < 2.0
        with pytest.raises(McpError) as refused:
            await read
        assert refused.value.code == -32602
    assert opened == []


def test_resolve_matches_once_and_gives_the_refusal_from_that_match() -> None:
    template = UriTemplate("file:///docs/{+path}")
    assert template.resolve("file:///docs/a/b") == {"path": "a/b"}
    assert template.resolve("file:///docs//etc") == (
        "the value of 'path' has an empty path segment (a leading or doubled '/')"
    )
    assert template.resolve("other:///x") is None


async def test_a_read_matches_each_template_once(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every value a match looks at is decoded: one decoding per read of a refused URI means
    # one match, the refusal's reason taken from it rather than from a second pass.
    decoded: list[str] = []
    unquote = uri_template.unquote

    def counting(text: str) -> str:
        decoded.append(text)
        return unquote(text)

    server = Server("files")

    @server.resource_template("file:///docs/{+path}")
    def doc(path: str) -> str:
        return path

    monkeypatch.setattr(uri_template, "unquote", counting)
    async with make_client(server) as client:
        with pytest.raises(McpError) as refused:
            await client.read_resource("file:///docs//etc/passwd")
    assert "empty path segment" in refused.value.message
    assert decoded == [""]  # the empty first segment, once
