"""Arguments nested past the depth bound are refused (-32602, naming the bound) before they are
validated, so no validation message ever quotes them; and a message quotes any value within a
few levels and characters, however deep or long it is."""

from __future__ import annotations

import logging
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.mrtr_flows import request_meta
from mrtr import Server
from mrtr.protocol.errors import INVALID_PARAMS
from mrtr.server._engine.validation import describe_validation_error, quoted
from mrtr.server.input_bounds import MAX_DEPTH


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _server() -> Server:
    server = Server("deep")

    @server.tool()
    async def count(n: int) -> int:  # a direct tool: run without a context
        return n

    @server.tool()
    async def count_with(n: int, ctx: Any) -> int:  # one run under a full round
        return n

    @server.prompt()
    def greet(name: str) -> str:
        return f"hello {name}"

    return server


def _request(method: str, name: str, arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": request_meta()}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


@pytest.mark.parametrize(
    ("method", "name", "argument"),
    [
        ("tools/call", "count", "n"),
        ("tools/call", "count_with", "n"),
        ("prompts/get", "greet", "name"),
    ],
)
async def test_arguments_nested_1000_deep_are_refused_before_validation(
    method: str, name: str, argument: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _server()
    caplog.set_level(logging.DEBUG)
    response = await server.handle_request(_request(method, name, {argument: nested(1000)}))
    error = response["error"]
    assert error["code"] == INVALID_PARAMS, error
    assert f"arguments are nested more than {MAX_DEPTH} levels deep" in error["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    # Within the bound, a value of the wrong type is still told apart by validation.
    shallow = await server.handle_request(_request(method, name, {argument: nested(5)}))
    text = str(shallow)
    assert "[[[[[...]]]]]" in text or "[[[[[1]]]]]" in text, text


def test_a_validation_message_quotes_a_deep_value_without_recursing() -> None:
    with pytest.raises(pydantic.ValidationError) as failed:
        pydantic.TypeAdapter(int).validate_python(nested(100_000))
    assert describe_validation_error(failed.value) == (
        "arguments: Input should be a valid integer (got [[[[[...]]]]])"
    )


def test_a_long_value_is_quoted_without_being_written_whole() -> None:
    long = list(range(1_000_000))
    assert quoted(long) == repr(long)[:60]
    assert quoted({"k": ("v",), "deep": nested(10)}) == "{'k': ('v',), 'deep': [[[[...]]]]}"

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert quoted([Broken()]) == "[<Broken object>]"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_a_value_within_four_levels_is_quoted_as_repr_quotes_it(value: Any) -> None:
    if _depth(value) <= 4:
        assert quoted(value) == repr(value)[:60]
    else:
        assert len(quoted(value)) <= 60
