"""A client that lies: whatever JSON arrives, the server answers with a well-formed JSON-RPC
message (or, for a notification, nothing), never raises, never leaks a traceback, and goes on
serving. Property-based: hypothesis builds the messages."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrtr import RequestContext, Server, ServerOptions
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

server = Server("hostile", options=ServerOptions(request_state_key=b"k" * 32))


@server.tool()
async def ask(ctx: RequestContext, n: int = 1) -> str:
    """Asks n questions."""
    for i in range(n % 4):
        await ctx.elicit(f"Question {i}?", {"type": "object", "properties": {}}, key=f"q{i}")
    reply = await ctx.sample("hi", key="s")
    return str(getattr(reply.content, "text", ""))


@server.prompt()
async def greet(ctx: RequestContext, name: str) -> str:
    """Greets after asking."""
    await ctx.list_roots(key="roots")
    return f"hello {name}"


@server.resource_template("db://rows/{id}")
def row(id: int) -> dict[str, int]:
    """One row."""
    return {"id": id}


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
GOOD_META = {
    meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
    meta_keys.CLIENT_CAPABILITIES: {"elicitation": {}, "sampling": {}, "roots": {}},
}
metas = st.one_of(st.just(GOOD_META), json_values)
methods = st.sampled_from(
    [
        "tools/call",
        "prompts/get",
        "resources/read",
        "tools/list",
        "server/discover",
        "completion/complete",
        "subscriptions/listen",
        "initialize",
        "nope",
    ]
)
params = st.fixed_dictionaries(
    {"_meta": metas},
    optional={
        "name": st.one_of(st.sampled_from(["ask", "greet", "missing"]), json_values),
        "uri": st.one_of(st.sampled_from(["db://rows/1", "db://rows/x"]), json_values),
        "arguments": json_values,
        "inputResponses": json_values,
        "requestState": st.one_of(st.text(max_size=60), json_values),
        "cursor": json_values,
        "ref": json_values,
        "argument": json_values,
        "notifications": st.just({}),  # a valid listen would stay open: the test never waits
    },
)
messages = st.one_of(
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": st.integers(), "method": methods, "params": params}
    ),
    st.fixed_dictionaries(
        {"jsonrpc": json_values, "method": json_values},
        optional={"id": json_values, "params": json_values},
    ),
    json_values,
)


def _is_well_formed(response: Any) -> bool:
    if not isinstance(response, dict) or response.get("jsonrpc") != "2.0":
        return False
    if "result" in response:
        return isinstance(response["result"], dict) and "resultType" in response["result"]
    error = response.get("error")
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
        and "Traceback" not in error["message"]
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
async def test_any_message_gets_a_well_formed_answer_and_the_server_goes_on(message: Any) -> None:
    if isinstance(message, dict) and message.get("method") == "subscriptions/listen":
        message = {**message, "method": "tools/list"}  # a valid listen never answers
    response = await server.handle_message(message)
    is_notification = (
        isinstance(message, dict) and "id" not in message and isinstance(message.get("method"), str)
    )
    if response is None:
        assert is_notification or (isinstance(message, dict) and "result" in message)
    else:
        assert _is_well_formed(response), response
    follow_up = await server.handle_message(
        {
            "jsonrpc": "2.0",
            "id": "next",
            "method": "tools/call",
            "params": {"_meta": GOOD_META, "name": "ask", "arguments": {"n": 0}},
        }
    )
    assert follow_up is not None and follow_up["result"]["resultType"] == "input_required"
