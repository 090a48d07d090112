"""A client that a hostile or failing server cannot break.

What a server sends is input like any other: a result that does not validate, a malformed
error, an HTTP body that is not JSON-RPC, a round with thousands of questions all end in a
clear `McpError` with a local code. Over HTTP nothing the server may have run is sent twice,
a refused connection is tried again, and a flow that still ends carries what resuming it
needs. Scripted exchanges run on `FakeServer`; transport behaviour runs on real loopback
servers (uvicorn, or a bare socket server where uvicorn cannot misbehave as needed).
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from helpers.fake_server import (
    NEVER,
    Error,
    FakeServer,
    Raw,
    elicitation,
    input_required,
    tool_text,
)
from helpers.transport_flow import LoopbackUvicorn, serve
from mrtr import (
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
    InputHandlerError,
    McpError,
    RequestContext,
    Server,
    ServerOptions,
)
from mrtr.cli.call import CallCommand
from mrtr.client import InputRequiredConfig
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INPUT_HANDLER_FAILED,
    JSONRPC_RESERVED,
    LOCAL_CODES,
    MAX_INPUT_REQUESTS_EXCEEDED,
    MAX_ROUNDS_EXCEEDED,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    RESPONSE_TOO_LARGE,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.transport.http_client import HTTPTransport
from mrtr.transport.sse import encode_event
from mrtr.transport.stdio_client import StdioTransport

GUARD = 10.0  # seconds: only ever reached when something is broken
FLOW_SERVER = str(Path(__file__).resolve().parent / "servers" / "mrtr_flow_server.py")


def options(**config: Any) -> ClientOptions:
    return ClientOptions(input_required=InputRequiredConfig(**config))


def accept(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


# --- servers that misbehave on purpose ----------------------------------------------------------

Play = Callable[[dict[str, Any], Any], Awaitable[None]]


class Scripted:
    """A raw ASGI app: `play(message, send)` answers each POST; `methods` counts what arrived
    (an arrival is an execution: a real server would have run the request)."""

    def __init__(self, play: Play) -> None:
        self.play = play
        self.methods: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        message = orjson.loads(body)
        self.methods.append(message["method"])
        await self.play(message, send)


def answer(
    payload: Any, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
) -> Play:
    """Answer with `payload` (JSON, or bytes as they are) and `status`."""

    async def play(message: dict[str, Any], send: Any) -> None:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        extra = headers if headers is not None else [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": raw})

    return play


def result_of(result: dict[str, Any]) -> Play:
    """Answer every request with a JSON-RPC response carrying `result`."""

    async def play(message: dict[str, Any], send: Any) -> None:
        response = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        await answer(response)(message, send)

    return play


def breaking(abrupt: bool, then: Play | None = None) -> Play:
    """Start an SSE answer with one log notification, then end the stream without the response
    (or, `abrupt`, crash so the connection drops); later POSTs get `then`."""
    first = True

    async def play(message: dict[str, Any], send: Any) -> None:
        nonlocal first
        if not first and then is not None:
            await then(message, send)
            return
        first = False
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
        event = encode_event(orjson.dumps(note))
        await send({"type": "http.response.body", "body": event, "more_body": True})
        if abrupt:
            raise RuntimeError("simulated crash mid-response")  # uvicorn drops the connection
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return play


class SilentCloser:
    """A bare TCP server that reads one whole HTTP request, counts it, and closes the
    connection without sending a byte (what a server that crashes while running it does)."""

    def __init__(self) -> None:
        self.received = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/mcp"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        self.received += 1
        writer.close()


class Instance:
    """A real server instance on a loopback port that can go away and come back on the same
    port (as a restarted process would), run on this loop."""

    def __init__(self, make_server: Callable[[], Server]) -> None:
        self.make_server = make_server
        self.port = 0
        self._server: LoopbackUvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        config = uvicorn.Config(
            self.make_server().asgi_app(),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = LoopbackUvicorn(config)
        task = asyncio.create_task(server.serve())
        async with asyncio.timeout(GUARD):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._task = server, task
        return f"http://127.0.0.1:{self.port}/mcp"

    async def stop(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            await asyncio.wait_for(task, GUARD)
            # Let the client's loop see the FIN on its idle keep-alive connection, so its next
            # request opens a new connection (refused) instead of writing into a closed one.
            await asyncio.sleep(0.05)


# --- 14: a malformed result or list is an McpError, never a ValidationError --------------------

Call = Callable[[Client], Awaitable[Any]]
#: Every typed call: its method, the call, and a result of the right shape for it.
TYPED_CALLS: list[tuple[str, Call, dict[str, Any]]] = [
    (
        "server/discover",
        lambda c: c.discover(),
        {"supportedVersions": [LATEST_PROTOCOL_VERSION], "capabilities": {}},
    ),
    ("tools/list", lambda c: c.list_tools(), {"tools": []}),
    ("prompts/list", lambda c: c.list_prompts(), {"prompts": []}),
    ("resources/list", lambda c: c.list_resources(), {"resources": []}),
    ("resources/templates/list", lambda c: c.list_resource_templates(), {"resourceTemplates": []}),
    (
        "completion/complete",
        lambda c: c.complete({"type": "ref/prompt", "name": "p"}, {"name": "a", "value": ""}),
        {"completion": {"values": []}},
    ),
    ("tools/call", lambda c: c.call_tool("t"), {"content": []}),
    ("prompts/get", lambda c: c.get_prompt("p"), {"messages": []}),
    ("resources/read", lambda c: c.read_resource("file:///x"), {"contents": []}),
]
#: For each, a result that does not validate, and the model it fails.
MALFORMED = {
    "server/discover": ({"supportedVersions": "all", "capabilities": {}}, "DiscoverResult"),
    "tools/list": ({"tools": [{"name": 7}]}, "ListToolsResult"),
    "prompts/list": ({"prompts": None}, "ListPromptsResult"),
    "resources/list": ({"resources": "none"}, "ListResourcesResult"),
    "resources/templates/list": ({}, "ListResourceTemplatesResult"),
    "completion/complete": ({"completion": {"values": "a"}}, "CompleteResult"),
    "tools/call": ({"content": "text"}, "CallToolResult"),
    "prompts/get": ({"messages": [{"role": "robot"}]}, "GetPromptResult"),
    "resources/read": ({"contents": {}}, "ReadResourceResult"),
}


@pytest.mark.parametrize(("method", "call", "valid"), TYPED_CALLS, ids=[c[0] for c in TYPED_CALLS])
async def test_a_malformed_result_is_a_protocol_violation(
    method: str, call: Call, valid: dict[str, Any]
) -> None:
    result, model = MALFORMED[method]
    async with Client(FakeServer([valid, result])) as client:
        await call(client)  # the well-formed one is taken
        with pytest.raises(McpError) as raised:
            await call(client)
    error = raised.value
    assert error.code == PROTOCOL_VIOLATION
    assert error.message.startswith(f"{method}: the server's result is not a valid {model}: ")
    assert error.__cause__ is None  # no pydantic internals chained to it


async def test_a_malformed_input_required_result_is_a_protocol_violation() -> None:
    asked = input_required({"a": {"method": 5, "params": {}}}, "s")
    async with Client(FakeServer([asked]), options=options(auto_fulfill=False)) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
    assert raised.value.code == PROTOCOL_VIOLATION
    assert "not a valid InputRequiredResult: inputRequests.a.method" in raised.value.message


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from(["", "x", "complete", "input_required", "text", "user"])
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "text", "name", "uri", "role", "content", "method", "values"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)
_FIELDS = [
    "resultType",
    "tools",
    "prompts",
    "resources",
    "resourceTemplates",
    "completion",
    "content",
    "messages",
    "contents",
    "supportedVersions",
    "capabilities",
    "inputRequests",
    "requestState",
    "nextCursor",
    "_meta",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result=st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=4))
def test_any_result_gives_a_model_or_an_mcp_error(result: dict[str, Any]) -> None:
    async def every_call() -> None:
        quick = options(max_rounds=1, round_timeout=GUARD)
        async with Client(FakeServer(then=result), options=quick) as client:
            for method, call, _ in TYPED_CALLS:
                try:
                    await call(client)
                except ValidationError as exc:  # pragma: no cover - the failure this catches
                    raise AssertionError(f"{method} let a ValidationError out: {exc}") from exc
                except McpError:
                    pass

    asyncio.run(every_call())


async def test_a_notification_with_malformed_params_is_ignored() -> None:
    seen: list[Any] = []
    logs: list[Any] = []
    notes = [
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": ["not", "an", "object"]},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": "text"},
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "progress-1", "progress": "half", "total": {}},
        },
    ]

    async def noisy(message: dict[str, Any]) -> dict[str, Any]:
        fake = client.transport
        assert isinstance(fake, FakeServer) and fake.on_notification is not None
        for note in notes:  # sent while the request is in flight, as a stream would
            outcome = fake.on_notification(note)
            if outcome is not None:
                await outcome
        return tool_text("done")

    async with Client(FakeServer([noisy]), log_handler=logs.append) as client:
        result = await client.call_tool(
            "t", progress_callback=lambda done, total, text: seen.append(done)
        )
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    assert seen == [] and logs == []


# --- 15: a cap on the questions of one round ---------------------------------------------------


async def test_a_round_over_max_input_requests_fails_before_any_handler_runs() -> None:
    calls: list[str] = []

    def counting(params: ElicitRequestParams) -> ElicitResult:
        calls.append(params.message)
        return ElicitResult(action="accept", content={"ok": True})

    asked = {f"q{i}": elicitation(f"Question {i}?") for i in range(5000)}
    fake = FakeServer([input_required(asked, "s1")])
    async with Client(fake, elicitation_handler=counting) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
    error = raised.value
    assert error.code == MAX_INPUT_REQUESTS_EXCEEDED
    assert "5000 questions" in error.message and "at most 16" in error.message
    assert "max_input_requests" in error.message
    assert error.data == {"count": 5000, "max": 16}
    assert calls == []  # not one handler ran
    assert len(fake.requests) == 1  # and nothing was sent back


async def test_max_input_requests_is_inclusive_and_configurable() -> None:
    three = input_required({k: elicitation(f"{k}?") for k in "abc"}, "s1")
    fake = FakeServer([three], then=tool_text("done"))
    async with Client(fake, elicitation_handler=accept, options=options(max_input_requests=3)) as c:
        assert (await c.call_tool("t")).content[0].text == "done"  # type: ignore[union-attr]
    fake = FakeServer([three])
    async with Client(fake, elicitation_handler=accept, options=options(max_input_requests=2)) as c:
        with pytest.raises(McpError) as raised:
            await c.call_tool("t")
    assert raised.value.code == MAX_INPUT_REQUESTS_EXCEEDED
    with pytest.raises(ValueError, match="max_input_requests"):
        InputRequiredConfig(max_input_requests=0)


class NobodyThere:
    """A terminal with nobody at it: records what is shown, never answers."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def say(self, text: str = "") -> None:
        self.shown.append(text)

    def read_line(self, prompt: str) -> str | None:
        self.shown.append(prompt)
        return None

    def read_secret(self, prompt: str) -> str | None:
        return self.read_line(prompt)


async def test_mrtr_call_does_not_prompt_for_a_round_over_the_cap() -> None:
    asked = {f"q{i}": elicitation(f"Question {i}?") for i in range(5000)}
    app = Scripted(result_of(input_required(asked, "s1")))
    console = NobodyThere()
    out, err = io.StringIO(), io.StringIO()
    async with serve(app) as base:
        status = await CallCommand(tool="survey", arguments={}, url=base + "/mcp").run(
            console, out, err
        )
    assert status == 1
    assert console.shown == []  # the person was never asked anything
    assert "5000 questions" in err.getvalue() and "at most 16" in err.getvalue()
    assert app.methods == ["tools/call"]


# --- 16: never re-send what the server may have executed ---------------------------------------


@pytest.mark.parametrize("abrupt", [False, True], ids=["stream-ends", "connection-drops"])
async def test_tools_call_broken_mid_response_runs_exactly_once(abrupt: bool) -> None:
    app = Scripted(breaking(abrupt, then=result_of(tool_text("again"))))
    async with serve(app) as base, Client.http(base + "/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("pay", {"amount": 10})
    error = raised.value
    assert error.code == CONNECTION_CLOSED
    assert "may have run" in error.message and "not sent again" in error.message
    assert error.data == {"mayHaveRun": True}
    assert app.methods == ["tools/call"]  # executed once, never re-sent


async def test_tools_call_whose_connection_closes_before_any_answer_runs_once() -> None:
    closer = SilentCloser()
    async with closer as url, Client.http(url) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("pay", {"amount": 10})
        assert raised.value.code == CONNECTION_CLOSED
        assert "may have run" in raised.value.message
        assert closer.received == 1
        with pytest.raises(McpError):
            await client.list_tools()  # a read is re-sent: once plus max_reissues (2)
        assert closer.received == 1 + 3


@pytest.mark.parametrize(("method", "call", "valid"), TYPED_CALLS, ids=[c[0] for c in TYPED_CALLS])
async def test_only_reads_are_reissued_after_a_broken_stream(
    method: str, call: Call, valid: dict[str, Any]
) -> None:
    app = Scripted(breaking(False, then=result_of(valid)))
    async with serve(app) as base, Client.http(base + "/mcp") as client:
        if method == "tools/call":
            with pytest.raises(McpError):
                await call(client)
            assert app.methods == [method]
        else:
            await call(client)
            assert app.methods == [method, method]


# --- 17: local errors use local codes ----------------------------------------------------------


def test_local_codes_are_outside_the_jsonrpc_range_and_distinct() -> None:
    assert len(LOCAL_CODES) == 14
    assert not any(code in JSONRPC_RESERVED for code in LOCAL_CODES)
    assert -32768 in JSONRPC_RESERVED and -32000 in JSONRPC_RESERVED


@pytest.mark.parametrize(
    "error",
    ["boom", None, 42, ["a"], {"message": "no code"}, {"code": "-32602"}, {"code": True}],
)
def test_a_malformed_peer_error_is_a_protocol_violation(error: Any) -> None:
    built = McpError.from_error(error)
    assert built.code == PROTOCOL_VIOLATION
    assert "malformed JSON-RPC error" in built.message


async def test_a_malformed_error_response_is_a_protocol_violation_end_to_end() -> None:
    async with Client(FakeServer([Raw({"error": "invalid_token"})])) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == PROTOCOL_VIOLATION
    assert "'invalid_token'" in raised.value.message


async def test_a_401_with_an_oauth_error_body_reports_the_status_and_challenge() -> None:
    challenge = 'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'
    app = Scripted(
        answer(
            {"error": "invalid_token"},
            401,
            [(b"content-type", b"application/json"), (b"www-authenticate", challenge.encode())],
        )
    )
    async with serve(app) as base, Client.http(base + "/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
    error = raised.value
    assert error.code == HTTP_ERROR
    assert "HTTP 401 Unauthorized" in error.message
    assert "invalid_token" in error.message
    assert f"WWW-Authenticate: {challenge}" in error.message
    body = '{"error":"invalid_token"}'
    assert error.data == {"status": 401, "wwwAuthenticate": challenge, "body": body}
    assert "malformed" not in error.message


async def test_an_error_status_with_a_jsonrpc_error_is_still_that_error() -> None:
    async def play(message: dict[str, Any], send: Any) -> None:
        error = {"code": -32602, "message": "bad"}
        await answer({"jsonrpc": "2.0", "id": message["id"], "error": error}, 400)(message, send)

    async with serve(Scripted(play)) as base, Client.http(base + "/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert (raised.value.code, raised.value.message) == (-32602, "bad")


@pytest.mark.parametrize(
    "body",
    [{"result": {}}, {"jsonrpc": "2.0", "id": 1}, {"hello": "world"}, b"<html>ok</html>"],
    ids=["no-jsonrpc-member", "neither-result-nor-error", "other-json", "html"],
)
async def test_a_success_status_without_a_jsonrpc_response_is_a_protocol_violation(
    body: Any,
) -> None:
    app = Scripted(answer(body))
    async with serve(app) as base, Client.http(base + "/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == PROTOCOL_VIOLATION
    assert "HTTP 200" in raised.value.message and "not a JSON-RPC response" in raised.value.message


async def test_a_handler_raising_a_jsonrpc_code_is_reported_with_a_local_one() -> None:
    def failing(params: ElicitRequestParams) -> ElicitResult:
        raise McpError(-32602, "the form service refused the schema")

    fake = FakeServer([input_required({"a": elicitation("A?")}, "s1")])
    async with Client(fake, elicitation_handler=failing) as client:
        with pytest.raises(InputHandlerError) as raised:
            await client.call_tool("t")
    assert raised.value.code == INPUT_HANDLER_FAILED
    assert "the form service refused the schema" in raised.value.message
    assert isinstance(raised.value.__cause__, McpError)


async def test_a_stdio_response_over_the_limit_has_a_local_code() -> None:
    transport = StdioTransport(sys.executable, [FLOW_SERVER], max_message_size=4096)
    async with Client(transport) as client:
        with pytest.raises(McpError) as raised:
            await asyncio.wait_for(client.call_tool("big", {"size": 100_000}), GUARD)
    assert raised.value.code == RESPONSE_TOO_LARGE


def endless(kind: str) -> Play:
    """Answer with a body far over the client's limit: declared up front (`sized`), chunked
    with no length (`chunked`), or as one endless SSE event (`sse`)."""

    async def play(message: dict[str, Any], send: Any) -> None:
        chunk = b" " * 65536
        total = 64  # 4 MiB, sent only as far as the client reads
        if kind == "sse":
            headers = [(b"content-type", b"text/event-stream")]
            first = b"event: message\ndata: "
        else:
            headers = [(b"content-type", b"application/json")]
            first = b'{"jsonrpc": "2.0", "id": 1, "result": {"pad": "'
        if kind == "sized":
            headers.append((b"content-length", str(len(first) + total * len(chunk)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": first, "more_body": True})
        for _ in range(total):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return play


@pytest.mark.parametrize("kind", ["sized", "chunked", "sse"])
async def test_an_http_response_over_the_limit_is_refused_unread(kind: str) -> None:
    async with serve(Scripted(endless(kind))) as base:
        transport = HTTPTransport(base + "/mcp", max_message_size=100_000)
        async with Client(transport) as client:
            with pytest.raises(McpError) as raised:
                await asyncio.wait_for(client.list_tools(), GUARD)
            # The client is still usable after refusing the answer.
            with pytest.raises(McpError) as again:
                await asyncio.wait_for(client.list_tools(), GUARD)
    assert raised.value.code == RESPONSE_TOO_LARGE
    assert "max_message_size (100000 bytes)" in raised.value.message
    assert again.value.code == RESPONSE_TOO_LARGE


# --- 18: a version switch stays in the flow that needed it -------------------------------------

NEWER = "2099-01-01"  # a revision newer than this SDK's, spoken by one tool's server only


async def test_a_version_retry_in_one_flow_leaves_a_concurrent_flow_alone() -> None:
    b_done = asyncio.Event()

    def server(message: dict[str, Any]) -> Any:
        params = message["params"]
        version = params["_meta"][meta_keys.PROTOCOL_VERSION]
        if params["name"] == "b" and version != LATEST_PROTOCOL_VERSION:
            supported = {"supported": [LATEST_PROTOCOL_VERSION], "requested": version}
            return Error(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", supported)
        if params["name"] == "a" and "requestState" not in params:
            return input_required({"q": elicitation("Go on?")}, f"state-bound-to-{version}")
        return tool_text(f"{params['name']} at {version}")

    async def after_b(params: ElicitRequestParams) -> ElicitResult:
        await b_done.wait()  # flow a answers only once flow b has switched its version
        return ElicitResult(action="accept", content={"ok": True})

    fake = FakeServer(then=server)
    async with Client(fake, elicitation_handler=after_b, protocol_version=NEWER) as client:

        async def flow_b() -> Any:
            try:
                return await client.call_tool("b")
            finally:
                b_done.set()

        a, b = await asyncio.wait_for(asyncio.gather(client.call_tool("a"), flow_b()), GUARD)
        assert b.content[0].text == f"b at {LATEST_PROTOCOL_VERSION}"
        assert a.content[0].text == f"a at {NEWER}"  # its second round kept its version
        assert client.protocol_version == LATEST_PROTOCOL_VERSION  # later requests switch
        await client.call_tool("c")
    versions = [
        (r.params["name"], r.params["_meta"][meta_keys.PROTOCOL_VERSION]) for r in fake.requests
    ]
    assert versions == [
        ("a", NEWER),
        ("b", NEWER),
        ("b", LATEST_PROTOCOL_VERSION),
        ("a", NEWER),
        ("c", LATEST_PROTOCOL_VERSION),
    ]


async def test_a_refusal_naming_the_version_sent_is_retried_once_and_no_more() -> None:
    # A server may refuse a version it lists (a rolling deploy, a proxy in between): one retry
    # with it is what the spec's conformance suite expects, and a second refusal is final.
    refusal = Error(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": [LATEST_PROTOCOL_VERSION]},
    )
    fake = FakeServer([refusal, refusal])
    async with Client(fake) as client:
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == UNSUPPORTED_PROTOCOL_VERSION
    assert len(fake.requests) == 2
    recovering = FakeServer([refusal], then={"tools": []})
    async with Client(recovering) as client:
        assert (await client.list_tools()).tools == []
    versions = [r.params["_meta"][meta_keys.PROTOCOL_VERSION] for r in recovering.requests]
    assert versions == [LATEST_PROTOCOL_VERSION, LATEST_PROTOCOL_VERSION]


# --- 23: a flow survives what it safely can ----------------------------------------------------

KEY = b"a key shared by every instance.."
SIZE = {"type": "object", "properties": {"size": {"type": "string"}}}
COLOUR = {"type": "object", "properties": {"colour": {"type": "string"}}}


def shop(runs: list[str]) -> Callable[[], Server]:
    """A fresh instance of the same server (same key), as a restarted process would be."""

    def make() -> Server:
        server = Server("shop", options=ServerOptions(request_state_key=KEY))

        @server.tool()
        async def order(ctx: RequestContext, item: str) -> str:
            size = await ctx.elicit("Size?", SIZE)
            colour = await ctx.elicit("Colour?", COLOUR)
            runs.append(item)  # the effect, after the questions
            return f"{item}: {(size.content or {})['size']}, {(colour.content or {})['colour']}"

        return server

    return make


class Person:
    """Answers the shop's questions, recording each time it is asked; `on_size` runs first."""

    def __init__(self, on_size: Callable[[], Awaitable[None]] | None = None) -> None:
        self.asked: list[str] = []
        self.on_size = on_size

    async def __call__(self, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        if params.message == "Size?":
            if self.on_size is not None:
                await self.on_size()
            return ElicitResult(action="accept", content={"size": "M"})
        return ElicitResult(action="accept", content={"colour": "red"})


async def test_a_refused_connection_is_retried_and_the_flow_goes_on() -> None:
    runs: list[str] = []
    instance = Instance(shop(runs))
    url = await instance.start()

    async def go_away_and_come_back() -> None:
        await instance.stop()  # the next round's connection is refused...

        async def restart() -> None:
            await asyncio.sleep(0.1)
            await instance.start()  # ...until the server is back on its port

        background.append(asyncio.create_task(restart()))

    background: list[asyncio.Task[None]] = []
    person = Person(go_away_and_come_back)
    transport = HTTPTransport(url, connect_attempts=6, connect_backoff=0.1)
    try:
        async with Client(transport, elicitation_handler=person) as client:
            result = await asyncio.wait_for(client.call_tool("order", {"item": "shirt"}), GUARD)
    finally:
        await asyncio.gather(*background)
        await instance.stop()
    assert result.content[0].text == "shirt: M, red"  # type: ignore[union-attr]
    assert person.asked == ["Size?", "Colour?"]
    assert runs == ["shirt"]


async def test_a_flow_ended_by_a_lost_server_resumes_without_asking_again() -> None:
    runs: list[str] = []
    instance = Instance(shop(runs))
    url = await instance.start()
    person = Person(instance.stop)  # the server goes away once the first question is answered
    transport = HTTPTransport(url, connect_attempts=2, connect_backoff=0.01)
    try:
        async with Client(transport, elicitation_handler=person) as client:
            with pytest.raises(McpError) as raised:
                await asyncio.wait_for(client.call_tool("order", {"item": "shirt"}), GUARD)
            error = raised.value
            assert error.code == CONNECTION_CLOSED
            assert "cannot connect" in error.message and "after 2 attempts" in error.message
            assert error.data == {"mayHaveRun": False}
            assert isinstance(error.request_state, str)
            assert isinstance(error.input_responses, dict)
            assert list(error.input_responses.values()) == [
                {"action": "accept", "content": {"size": "M"}}
            ]
            person.on_size = None
            await instance.start()  # the server is back
            result = await asyncio.wait_for(
                client.call_tool(
                    "order",
                    {"item": "shirt"},
                    request_state=error.request_state,
                    input_responses=error.input_responses,
                ),
                GUARD,
            )
    finally:
        await instance.stop()
    assert result.content[0].text == "shirt: M, red"  # type: ignore[union-attr]
    assert person.asked == ["Size?", "Colour?"]  # the size was not asked again
    assert runs == ["shirt"]


async def test_a_failed_handler_leaves_the_answers_already_given_on_the_error() -> None:
    asked = input_required({"a": elicitation("A?"), "b": elicitation("B?")}, "s1")
    fake = FakeServer([asked, input_required({"b": elicitation("B?")}, "s2")], then=tool_text("ok"))
    fail_b = True
    answered: list[str] = []

    async def person(params: ElicitRequestParams) -> ElicitResult:
        answered.append(params.message)
        if params.message == "B?" and fail_b:
            await asyncio.sleep(0.01)  # "A?" is answered first
            raise RuntimeError("the dialog was closed")
        return ElicitResult(action="accept", content={"ok": True})

    async with Client(fake, elicitation_handler=person) as client:
        with pytest.raises(InputHandlerError) as raised:
            await client.call_tool("t")
        error = raised.value
        assert (error.request_state, error.input_responses) == (
            "s1",
            {"a": {"action": "accept", "content": {"ok": True}}},
        )
        fail_b = False
        result = await client.call_tool(
            "t", request_state=error.request_state, input_responses=error.input_responses
        )
    assert result.content[0].text == "ok"  # type: ignore[union-attr]
    assert answered == ["A?", "B?", "B?"]  # A was not asked again
    resumed = fake.requests[1].params
    assert resumed["requestState"] == "s1" and set(resumed["inputResponses"]) == {"a"}


async def test_timeouts_and_max_rounds_carry_where_the_flow_stood() -> None:
    first = input_required({"a": elicitation("A?")}, "s1")
    fake = FakeServer([first, NEVER])
    async with Client(fake, elicitation_handler=accept, options=options(round_timeout=0.05)) as c:
        with pytest.raises(McpError) as raised:
            await c.call_tool("t")
    assert raised.value.code == REQUEST_TIMEOUT
    assert raised.value.request_state == "s1"
    assert raised.value.input_responses == {"a": {"action": "accept", "content": {"ok": True}}}

    fake = FakeServer(then=input_required({"a": elicitation("A?")}, "again"))
    async with Client(fake, elicitation_handler=accept, options=options(max_rounds=1)) as c:
        with pytest.raises(McpError) as raised:
            await c.call_tool("t")
    assert raised.value.code == MAX_ROUNDS_EXCEEDED
    assert (raised.value.request_state, raised.value.input_responses) == ("again", None)


async def test_an_error_before_any_round_was_answered_carries_nothing() -> None:
    async with Client(FakeServer([Error(-32602, "Unknown tool: 't'")])) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("t")
    assert (raised.value.request_state, raised.value.input_responses) == (None, None)
