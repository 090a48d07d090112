"""requestState hardening: no length oracle, bounded input, flow identity, checked options.

Flows go to `server.handle_message` as raw JSON-RPC (see `mrtr_flows`), except where a real
transport matters (deep input over loopback HTTP). A few tests read the server's internals
(`server._rounds`) to shorten a log throttle's window; they say so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.mrtr_flows import accept, call_tool, error_of, request_meta, result_of, sampled
from helpers.transport_flow import serve
from mrtr import (
    Client,
    ElicitRequestParams,
    ElicitResult,
    InputRequiredResult,
    RequestContext,
    Server,
    ServerOptions,
    elicit_request,
)
from mrtr.protocol.errors import INVALID_PARAMS
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server import InputRequiredConfig
from mrtr.server.input_bounds import MAX_DEPTH
from mrtr.server.request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    VerifiedState,
    digest_arguments,
    mint_request_state,
    new_flow_id,
    verify_request_state,
)

KEY = b"hardening-test-key-of-32-bytes!!"
OTHER_KEY = b"another-test-key-also-32-bytes!!"
OK_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
INVALID_STATE = {"reason": "invalid_request_state"}


def nested(depth: int, leaf: Any = None) -> Any:
    """`depth` levels of arrays around `leaf` (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def first_state(response: dict[str, Any]) -> str:
    result = result_of(response)
    assert result["resultType"] == "input_required", result
    token = result["requestState"]
    assert isinstance(token, str)
    return token


def server_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mrtr.server"]


class Asking:
    """A server whose tool `two` asks twice, with a `ctx.once` secret and a side effect."""

    def __init__(self, secret: str = "s3cr3t-0123456789", **options: Any) -> None:
        options.setdefault("request_state_key", KEY)
        self.server = Server("asking", options=ServerOptions(**options))
        self.runs = 0
        self.effects: list[str] = []
        self.flow_ids: list[str] = []

        @self.server.tool()
        async def two(ctx: RequestContext, note: Any = None) -> str:
            self.runs += 1
            self.flow_ids.append(ctx.flow_id)
            token = await ctx.once("secret", lambda: secret)
            first = await ctx.elicit("First?", OK_SCHEMA, key="first")
            await ctx.elicit("Second?", OK_SCHEMA, key="second")
            self.effects.append(token)  # after the last question: runs again on a replay
            return f"done {first.action}"

    async def start(self, **arguments: Any) -> str:
        return first_state(await call_tool(self.server, "two", arguments))

    async def answer_first(self, token: str, answer: Any, **arguments: Any) -> dict[str, Any]:
        return await call_tool(
            self.server, "two", arguments, responses={"first": answer}, state=token
        )

    async def finish(self, token: str, **arguments: Any) -> dict[str, Any]:
        return await call_tool(
            self.server, "two", arguments, responses={"second": accept(ok=True)}, state=token
        )


# --- item 10: no length oracle ---------------------------------------------------------------


async def test_sealed_length_does_not_reveal_a_once_secret() -> None:
    # Two servers whose `once` secrets have the same length; the client replays the round-1
    # state with guesses of its choosing. Compressed states would come out shorter for the
    # guess that matches the secret; sealed states must not depend on the secret at all.
    secrets = ("tok-4f9c2a7e1b6d", "tok-zq8wx3vy5ut0")
    filler = "n" * 300  # large enough for compression to have kicked in before
    guesses = [*secrets, secrets[0][:10] + "xxxxxx", "tok-0000000000", "unrelated-guess!"]
    lengths: list[list[int]] = []
    for secret in secrets:
        app = Asking(secret)
        token = await app.start()
        lengths.append(
            [
                len(first_state(await app.answer_first(token, accept(ok=True, g=g, f=filler))))
                for g in guesses
            ]
        )
    assert lengths[0] == lengths[1]


async def test_state_length_moves_in_64_byte_blocks() -> None:
    app = Asking()
    token = await app.start()
    sizes = {
        len(first_state(await app.answer_first(token, accept(ok=True, pad="p" * n))))
        for n in range(40)
    }
    # 40 consecutive answer sizes fall in at most two blocks of 64 bytes (86 characters).
    assert len(sizes) <= 2
    if len(sizes) == 2:
        low, high = sorted(sizes)
        assert high - low in (85, 86)


def test_old_format_tokens_are_refused_as_unknown_version() -> None:
    binding = StateBinding("tools/call", "two", digest_arguments(None), "asking")
    token = mint_request_state(RequestStateKeyRing(KEY), binding, b"{}", round=1)
    with pytest.raises(InvalidRequestState) as info:
        verify_request_state(RequestStateKeyRing(KEY), binding, "1." + token[2:])
    assert info.value.cause == "unknown_version"


# --- item 11: bounded ------------------------------------------------------------------------


async def test_oversized_state_is_refused_before_it_is_decoded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Asking(max_state_bytes=2000)
    oversized = "2." + "A" * 4000  # would be "malformed" if it were decoded
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        error = error_of(await app.finish(oversized))
    assert (error["code"], error["data"]) == (INVALID_PARAMS, INVALID_STATE)
    assert app.runs == 0
    assert any("too_large" in line and "max_state_bytes" in line for line in server_log(caplog))


async def test_24_mib_of_extra_answer_fields_is_refused_cheaply() -> None:
    app = Asking()
    token = await app.start()
    runs = app.runs
    huge = {"action": "accept", "content": {"ok": True}, "junk": "x" * (24 << 20)}
    started = time.perf_counter()
    error = error_of(await app.answer_first(token, huge))
    elapsed = time.perf_counter() - started
    assert error["code"] == INVALID_PARAMS
    assert "max_response_bytes" in error["message"]
    assert app.runs == runs  # refused before the handler ran
    assert elapsed < 0.5


async def test_too_many_input_responses_are_refused() -> None:
    app = Asking(input_required=InputRequiredConfig(max_responses=8))
    token = await app.start()
    many = {f"k{i}": accept() for i in range(9)}
    error = error_of(await call_tool(app.server, "two", {}, responses=many, state=token))
    assert error["code"] == INVALID_PARAMS
    assert "9 entries" in error["message"] and "max_responses" in error["message"]


async def test_answers_are_stored_with_only_the_fields_their_type_defines() -> None:
    server = Server("pruning", options=ServerOptions(request_state_key=KEY))

    @server.tool()
    async def chain(ctx: RequestContext) -> str:
        await ctx.elicit("Name?", OK_SCHEMA, key="a")
        await ctx.sample("Idea?", key="b")
        await ctx.elicit("Last?", OK_SCHEMA, key="c")
        return "done"

    async def state_after(a: Any, b: Any) -> str:
        token = first_state(await call_tool(server, "chain"))
        token = first_state(await call_tool(server, "chain", responses={"a": a}, state=token))
        return first_state(await call_tool(server, "chain", responses={"b": b}, state=token))

    junk = "j" * 50_000
    lean = await state_after(accept(ok=True), sampled("idea"))
    bloated_answer = {**accept(ok=True), "junk": junk}
    bloated_sample = sampled("idea")
    bloated_sample["content"] = {**bloated_sample["content"], "extra": junk}
    bloated_sample["vendor"] = junk
    bloated = await state_after(bloated_answer, bloated_sample)
    assert len(bloated) == len(lean)
    # What the type defines is kept, in every later round (the `_meta` of a result included).
    with_meta = {**sampled("idea"), "_meta": {"trace": "t" * 200}}
    assert len(await state_after(accept(ok=True), with_meta)) > len(lean)


async def test_a_state_that_would_outgrow_max_state_bytes_is_refused_with_a_clear_error() -> None:
    app = Asking(max_state_bytes=3000)
    token = await app.start()
    error = error_of(await app.answer_first(token, accept(ok=True, text="t" * 2500)))
    assert error["code"] == INVALID_PARAMS
    assert "max_state_bytes (3000)" in error["message"]


def test_input_bounds_are_validated() -> None:
    for bad in ({"max_responses": 0}, {"max_response_bytes": -1}, {"max_rounds": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            InputRequiredConfig(**bad)
    with pytest.raises(ValueError, match="round_timeout"):
        InputRequiredConfig(round_timeout=-1)
    with pytest.raises(ValueError, match="max_state_bytes"):
        ServerOptions(max_state_bytes=0)


# --- item 12: flow identity and replay -------------------------------------------------------

FLOW_ID = re.compile(r"[0-9a-f]{32}")


async def test_flow_id_is_stable_across_rounds_and_new_for_each_flow() -> None:
    app = Asking()
    flows: list[list[str]] = []
    for _ in range(2):
        app.flow_ids.clear()
        token = await app.start()
        token = first_state(await app.answer_first(token, accept(ok=True)))
        result_of(await app.finish(token))
        flows.append(list(app.flow_ids))
    for ids in flows:
        assert len(ids) == 3 and len(set(ids)) == 1
        assert FLOW_ID.fullmatch(ids[0])
    assert flows[0][0] != flows[1][0]


def test_minted_flow_id_comes_back_and_must_be_well_formed() -> None:
    ring = RequestStateKeyRing(KEY)
    binding = StateBinding("tools/call", "two", digest_arguments(None), "asking")
    flow = new_flow_id()
    token = mint_request_state(ring, binding, b"", round=1, flow_id=flow)
    assert verify_request_state(ring, binding, token).flow_id == flow
    fresh = verify_request_state(ring, binding, mint_request_state(ring, binding, b"", round=1))
    assert FLOW_ID.fullmatch(fresh.flow_id) and fresh.flow_id != flow
    for bad in ("", flow.upper(), flow[:-2], flow + "00", " " + flow[1:]):
        with pytest.raises(ValueError, match="flow_id"):
            mint_request_state(ring, binding, b"", round=1, flow_id=bad)


async def test_manual_style_flow_has_a_flow_id_too() -> None:
    server = Server("manual", options=ServerOptions(request_state_key=KEY))
    ids: list[str] = []

    @server.tool()
    async def rename(ctx: RequestContext) -> str | InputRequiredResult:
        ids.append(ctx.flow_id)
        if ctx.request_state != "asked":
            return InputRequiredResult(
                input_requests={"name": elicit_request("New name?", OK_SCHEMA)},
                request_state="asked",
            )
        return "renamed"

    def agree(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"ok": True})

    async with Client.in_memory(server, elicitation_handler=agree) as client:
        await client.call_tool("rename")
        await client.call_tool("rename")
    assert len(ids) == 4
    assert ids[0] == ids[1] != ids[2] == ids[3]


async def test_guard_sees_flow_id_round_and_binding_and_can_make_states_single_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[tuple[str, int, StateBinding]] = []
    used: set[tuple[str, int]] = set()

    def single_use(state: VerifiedState, binding: StateBinding) -> None:
        calls.append((state.flow_id, state.round, binding))
        if (state.flow_id, state.round) in used:
            raise InvalidRequestState("replayed")
        used.add((state.flow_id, state.round))

    app = Asking(request_state_guard=single_use)
    token = await app.start()
    token = first_state(await app.answer_first(token, accept(ok=True)))
    final = token
    assert result_of(await app.finish(final))["resultType"] == "complete"
    assert [(flow, rnd) for flow, rnd, _ in calls] == [(app.flow_ids[0], 1), (app.flow_ids[0], 2)]
    assert (calls[0][2].method, calls[0][2].target, calls[0][2].audience) == (
        "tools/call",
        "two",
        "asking",
    )
    runs, effects = app.runs, list(app.effects)
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        error = error_of(await app.finish(final))
    assert (error["code"], error["data"]) == (INVALID_PARAMS, INVALID_STATE)
    assert (app.runs, app.effects) == (runs, effects)  # the replay ran nothing
    assert any("replayed" in line for line in server_log(caplog))


async def test_async_guard_and_a_guard_that_fails_refuse_the_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def slow_yes(state: VerifiedState, binding: StateBinding) -> None:
        await asyncio.sleep(0)

    app = Asking(request_state_guard=slow_yes)
    token = first_state(await app.answer_first(await app.start(), accept(ok=True)))
    assert result_of(await app.finish(token))["resultType"] == "complete"

    def broken(state: VerifiedState, binding: StateBinding) -> None:
        raise RuntimeError("store unreachable")

    failing = Asking(request_state_guard=broken)
    token = await failing.start()
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        error = error_of(await failing.answer_first(token, accept(ok=True)))
    assert error["data"] == INVALID_STATE
    assert "store unreachable" not in error["message"]
    assert any("request_state_guard raised RuntimeError" in line for line in server_log(caplog))


async def test_replaying_the_final_round_reruns_the_handler_and_reuses_once_results() -> None:
    # What the README says happens without a store (`store=None`) or guard: everything after
    # the last question runs again with the recorded answers; `once` results recorded in the
    # state are reused, and `ctx.flow_id` is the same, so it can serve as an idempotency key.
    app = Asking(secret="first-secret", store=None)
    token = first_state(await app.answer_first(await app.start(), accept(ok=True)))
    for _ in range(2):
        assert result_of(await app.finish(token))["resultType"] == "complete"
    assert app.effects == ["first-secret", "first-secret"]
    assert len(set(app.flow_ids)) == 1


# --- item 13: options checked at construction ------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["short", b"x" * 31, "é" * 15, [KEY, b"tiny"]],
)
def test_short_secrets_are_refused_with_how_to_make_one(key: Any) -> None:
    with pytest.raises(ValueError) as info:
        ServerOptions(request_state_key=key)
    message = str(info.value)
    assert "at least 32 bytes" in message
    assert "secrets.token_urlsafe(32)" in message


def test_32_byte_secrets_are_accepted() -> None:
    ServerOptions(request_state_key="k" * 32)
    ServerOptions(request_state_key=["é" * 16, KEY])


@pytest.mark.parametrize("ttl", [-1, -0.5, math.nan, "300", True])
def test_a_negative_or_non_numeric_ttl_is_refused(ttl: Any) -> None:
    with pytest.raises(ValueError, match="request_state_ttl"):
        ServerOptions(request_state_ttl=ttl)


def test_ttl_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        ServerOptions()
        ServerOptions(request_state_key=KEY, request_state_ttl=math.inf)
        ServerOptions(request_state_ttl=60, input_required=InputRequiredConfig(round_timeout=0))
        assert server_log(caplog) == []  # the defaults and deliberate choices are quiet
        ServerOptions(request_state_ttl=0)
        ServerOptions(request_state_ttl=30, input_required=InputRequiredConfig(round_timeout=90))
    never, short = server_log(caplog)
    assert "never expire" in never and "math.inf" in never
    assert "request_state_ttl (30 s)" in short and "round_timeout (90 s)" in short


async def test_infinite_ttl_states_never_expire() -> None:
    app = Asking(request_state_ttl=math.inf)
    token = first_state(await app.answer_first(await app.start(), accept(ok=True)))
    binding = StateBinding("tools/call", "two", digest_arguments({}), "asking")
    later = time.time() + 1e9
    assert verify_request_state(RequestStateKeyRing(KEY), binding, token, now=later).data


def test_documented_secret_is_read_from_the_environment() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "request-state-security.md"
    code = "\n".join(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))
    assert not re.search(r"request_state_key=\s*\[?\s*b?[\"']", code)
    assert "os.environ" in code


# --- item 20: deep client input --------------------------------------------------------------


async def test_deeply_nested_answer_gets_invalid_params_not_internal_error() -> None:
    app = Asking()
    token = await app.start()
    runs = app.runs
    error = error_of(await app.answer_first(token, accept(ok=True, deep=nested(255))))
    assert error["code"] == INVALID_PARAMS
    assert f"nested more than {MAX_DEPTH} levels" in error["message"]
    assert app.runs == runs


async def test_deeply_nested_arguments_with_null_get_invalid_params_before_the_handler() -> None:
    app = Asking()
    error = error_of(await call_tool(app.server, "two", {"note": nested(1000)}))
    assert error["code"] == INVALID_PARAMS
    assert "arguments are nested more than" in error["message"]
    assert app.runs == 0


async def test_answer_that_cannot_be_sealed_gets_invalid_params() -> None:
    app = Asking()
    token = await app.start()
    error = error_of(await app.answer_first(token, accept(ok=True, n=2**70)))
    assert error["code"] == INVALID_PARAMS
    assert "cannot be recorded" in error["message"]


def test_digest_of_deep_arguments_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nested more than"):
        digest_arguments({"v": nested(2000)})
    assert len(digest_arguments({"v": nested(MAX_DEPTH - 1)})) == 32


@settings(max_examples=60, deadline=None)
@given(
    arg_depth=st.integers(0, 400),
    answer_depth=st.integers(0, 400),
    leaf=st.sampled_from([None, 1, "x", 2**70, math.nan]),
)
def test_nesting_near_the_limits_never_causes_internal_errors(
    arg_depth: int, answer_depth: int, leaf: Any
) -> None:
    async def scenario() -> None:
        app = Asking()
        started = await call_tool(app.server, "two", {"note": nested(arg_depth, leaf)})
        too_deep = arg_depth + 1 > MAX_DEPTH  # the arguments object is one more level
        if too_deep:
            assert error_of(started)["code"] == INVALID_PARAMS
            return
        token = first_state(started)
        answer = accept(ok=True, deep=nested(answer_depth, leaf))
        second = await app.answer_first(token, answer, note=nested(arg_depth, leaf))
        # inputResponses, the answer and its content are three more levels; orjson (which
        # seals answers) has no 70-bit integers.
        if answer_depth + 3 > MAX_DEPTH or leaf == 2**70:
            assert error_of(second)["code"] == INVALID_PARAMS
        else:
            assert result_of(second)["resultType"] == "input_required"

    asyncio.run(scenario())


def _tools_call_body(request_id: int, extra: str) -> bytes:
    """A `tools/call` of `two` as raw JSON, with `extra` members spliced into its params.

    Written by hand: deep nesting is what the test sends, and encoders refuse it.
    """
    meta = orjson.dumps(request_meta()).decode()
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"two","_meta":{meta},{extra}}}}}'
    ).encode()


async def test_deep_input_over_http_gets_invalid_params() -> None:
    app = Asking()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "two",
    }

    async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> dict[str, Any]:
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status in (200, 400)  # errors in params are a 400 over HTTP
            answer: dict[str, Any] = orjson.loads(await response.read())
            return answer

    deep = "[" * 900 + "null" + "]" * 900
    async with serve(app.server.asgi_app()) as base, aiohttp.ClientSession() as http:
        url = base + "/mcp"
        error = error_of(await post(http, url, _tools_call_body(1, f'"arguments":{{"n":{deep}}}')))
        assert error["code"] == INVALID_PARAMS
        assert "arguments are nested more than" in error["message"]
        token = first_state(await post(http, url, _tools_call_body(2, '"arguments":{}')))
        answer = f'{{"action":"accept","content":{{"deep":{deep}}}}}'
        extra = f'"requestState":"{token}","inputResponses":{{"first":{answer}}}'
        error = error_of(await post(http, url, _tools_call_body(3, extra)))
        assert error["code"] == INVALID_PARAMS
        assert "inputResponses is nested more than" in error["message"]
        # ...and the server goes on serving.
        assert first_state(await post(http, url, _tools_call_body(4, '"arguments":{}')))


# --- item 22: refused states are logged with a hint, throttled -------------------------------


async def test_unknown_key_refusals_log_one_hinted_line_per_cause_per_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    minting, refusing = Asking(), Asking(request_state_key=OTHER_KEY)
    token = await minting.start()
    # Internal: the throttle's window, shortened so the test need not wait a minute.
    refusing.server._rounds.rejections.interval = 0.3
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        for _ in range(20):
            assert error_of(await refusing.finish(token))["data"] == INVALID_STATE
        other_tool = await call_tool(
            refusing.server, "two", {"note": 1}, responses={"second": accept()}, state=token
        )
        assert error_of(other_tool)["data"] == INVALID_STATE
        lines = server_log(caplog)
        assert len(lines) == 1, lines
        assert "unknown_key" in lines[0]
        assert "instances not sharing request_state_key" in lines[0]
        assert "default random key" in lines[0]
        await asyncio.sleep(0.35)
        error_of(await refusing.finish(token))
    lines = server_log(caplog)
    assert len(lines) == 2
    assert "20 more refused" in lines[1]  # 19 repeats + the one for other arguments


async def test_each_cause_is_logged_on_its_own(caplog: pytest.LogCaptureFixture) -> None:
    app = Asking()
    token = await app.start()
    with caplog.at_level(logging.WARNING, logger="mrtr.server"):
        for _ in range(5):
            error_of(await app.finish(token, note="other"))  # binding_mismatch
            error_of(await app.finish(token[:-4] + "AAAA"))  # decrypt_failed
    lines = server_log(caplog)
    assert len(lines) == 2
    assert any("binding_mismatch" in line and "other arguments" in line for line in lines)
    assert any("decrypt_failed" in line for line in lines)
