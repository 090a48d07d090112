"""The input builders: one exported spelling each, the params written out, bare answers, and the
seed's names kept in `mrtr.inputs` as the same functions."""

from __future__ import annotations

import pytest

import mrtr
from mrtr import inputs
from mrtr.protocol.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    Root,
    SamplingMessage,
    TextContent,
)

SEED_NAMES = {
    "make_input_request_for_elicitation": inputs.elicit_request,
    "make_input_request_for_sampling": inputs.sample_request,
    "make_input_request_for_roots": inputs.roots_request,
    "make_input_response_from_elicit_result": inputs.input_response,
    "make_input_response_from_create_message_result": inputs.input_response,
    "make_input_response_from_list_roots_result": inputs.input_response,
}


def test_input_response_is_the_bare_result_of_each_kind() -> None:
    elicited = ElicitResult(action="accept", content={"name": "b.txt"})
    sampled = CreateMessageResult(
        role="assistant",
        content=TextContent(text="hi"),
        model="m",
        stop_reason="endTurn",
        meta={"k": 1},
    )
    roots = ListRootsResult(roots=[Root(uri="file:///a")], meta={"k": 1})
    assert inputs.input_response(elicited) == {"action": "accept", "content": {"name": "b.txt"}}
    assert inputs.input_response(sampled) == {
        "role": "assistant",
        "content": {"type": "text", "text": "hi"},
        "model": "m",
        "stopReason": "endTurn",
    }
    assert inputs.input_response(roots) == {"roots": [{"uri": "file:///a"}]}


def test_input_response_refuses_what_is_not_an_answer() -> None:
    with pytest.raises(TypeError, match="ElicitResult, CreateMessageResult or ListRootsResult"):
        inputs.input_response({"action": "accept"})  # type: ignore[arg-type]


def test_the_builders_take_the_params_written_out() -> None:
    elicit = ElicitRequestParams(
        message="Name?", requested_schema={"type": "object"}, meta={"k": 2}
    )
    asked = inputs.elicit_request(elicit)
    assert (asked.method, asked.params) == ("elicitation/create", elicit.to_wire())
    assert asked.params["_meta"] == {"k": 2}

    sample = CreateMessageRequestParams(
        messages=[SamplingMessage(role="user", content=TextContent(text="Hi"))],
        max_tokens=5,
        temperature=0.25,
    )
    asked = inputs.sample_request(sample)
    assert (asked.method, asked.params["temperature"]) == ("sampling/createMessage", 0.25)
    assert asked.params["maxTokens"] == 5

    asked = inputs.roots_request(ListRootsRequestParams(meta={"k": 1}))
    assert (asked.method, asked.params) == ("roots/list", {"_meta": {"k": 1}})
    assert inputs.roots_request().params == {}


def test_the_shorthands_build_the_same_requests_as_the_params() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "string"}}}
    assert inputs.elicit_request("Name?", schema) == inputs.elicit_request(
        ElicitRequestParams(message="Name?", requested_schema=schema)
    )
    assert inputs.elicit_request("Sign in", url="https://a.example/x").params == {
        "message": "Sign in",
        "mode": "url",
        "url": "https://a.example/x",
    }
    assert inputs.sample_request("Hi", max_tokens=7).params["maxTokens"] == 7


def test_params_with_a_schema_or_url_beside_them_is_an_error() -> None:
    params = ElicitRequestParams(message="Name?", requested_schema={"type": "object"})
    with pytest.raises(TypeError, match="no schema or url"):
        inputs.elicit_request(params, {"type": "object"})
    with pytest.raises(TypeError, match="no schema or url"):
        inputs.elicit_request(params, url="https://a.example/x")


@pytest.mark.parametrize("name", sorted(SEED_NAMES))
def test_a_seed_name_is_the_exported_function_under_its_old_name(name: str) -> None:
    assert getattr(inputs, name) is SEED_NAMES[name]
    assert name not in mrtr.__all__ and not hasattr(mrtr, name)


def test_mrtr_exports_one_builder_family() -> None:
    family = {"elicit_request", "sample_request", "roots_request", "input_response"}
    assert family <= set(mrtr.__all__)
    assert all(getattr(mrtr, name) is getattr(inputs, name) for name in family)
