"""Streamable HTTP: the ASGI server app and the aiohttp client, over real loopback sockets.

Servers run in this process under uvicorn on port 0. Most tests share one server, which runs
in a thread of its own with its own event loop; tests that need an app of their own (a broken
stream, a scripted server, other options) serve it on their own loop. Waits for something to
happen are bounded by generous guards, never timed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import aiohttp
import orjson
import pytest
import pytest_asyncio
import uvicorn
from pydantic import Field

from helpers.eventually import eventually
from helpers.transport_flow import Handlers, LoopbackUvicorn, add_flow, serve
from mrtr import (
    Client,
    McpError,
    RequestContext,
    Server,
    TextContent,
)
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    HTTP_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.transport.headers import (
    HeaderParam,
    InvalidHeaderAnnotation,
    argument_matches,
    decode_value,
    encode_value,
    header_params,
)
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.http_client import HTTPTransport
from mrtr.transport.http_serve import UvicornServer
from mrtr.transport.sse import SSEDecoder, SSEEvent, encode_event

GUARD = 10.0  # seconds: only ever reached when something is broken
SUBSCRIPTION_ID = meta_keys.SUBSCRIPTION_ID


# --- serving an ASGI app on a loopback port ---------------------------------------------------


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run `app` on 127.0.0.1:<free port> in a thread with its own loop; yields the base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="off"
    )
    server = LoopbackUvicorn(config)
    thread = threading.Thread(target=server.run, name="http-test-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + GUARD
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.005)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(GUARD)


class Recorder:
    """ASGI middleware remembering the headers of every request that reaches the app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests.append({k.decode(): v.decode("latin-1") for k, v in scope["headers"]})
        await self.app(scope, receive, send)

    def last(self, method: str) -> dict[str, str]:
        return [h for h in self.requests if h.get("mcp-method") == method][-1]


# --- the server the flows run against --------------------------------------------------------


class Probe:
    """What a long-running handler reports: that it started, and that it was cancelled.

    Thread events: the shared server's handlers run on the server thread."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()


PROBES: dict[str, Probe] = {}


def build_flow_server() -> Server:
    """The transport flow (`add_flow`), plus tools that exercise streaming and headers."""
    server = Server("http-flows", "1.0.0")

    @server.tool()
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    add_flow(server)

    @server.resource("config://app")
    async def config() -> str:
        return "debug=false"

    @server.tool()
    async def chatty(ctx: RequestContext, steps: int) -> str:
        """Reports progress and logs before answering."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.log("info", {"step": step})
        return f"done after {steps}"

    @server.tool()
    async def wait_forever(ctx: RequestContext, label: str) -> str:
        """Waits until cancelled (reporting progress first when the client asked for it)."""
        probe = PROBES[label]
        await ctx.report_progress(1)
        probe.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            probe.cancelled.set()
            raise
        return "not reached"

    @server.tool()
    async def route(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
        priority: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Priority"})],
        note: Annotated[str | None, Field(json_schema_extra={"x-mcp-header": "Note"})] = None,
        query: str = "",
    ) -> str:
        """Mirrors region, priority and note into Mcp-Param-* headers."""
        return f"{region}/{priority}/{note}/{query}"

    @server.tool()
    async def needs_sampling(ctx: RequestContext) -> str:
        reply = await ctx.sample("hello")
        assert isinstance(reply.content, TextContent)
        return reply.content.text

    return server


FLOW_SERVER = build_flow_server()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Recorder]]:
    """The flow server at `<base>/mcp`, behind a header recorder."""
    recorder = Recorder(StreamableHTTPApp(FLOW_SERVER, max_body_size=64 * 1024))
    with serve_in_thread(recorder) as base:
        yield base + "/mcp", recorder


@pytest.fixture
def url(served: tuple[str, Recorder]) -> str:
    return served[0]


@pytest.fixture
def recorder(served: tuple[str, Recorder]) -> Recorder:
    return served[1]


@pytest_asyncio.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


# --- raw requests ------------------------------------------------------------------------------


def meta(**overrides: Any) -> dict[str, Any]:
    values = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_INFO: {"name": "raw", "version": "1"},
        meta_keys.CLIENT_CAPABILITIES: {},
    }
    values.update(overrides)
    return values


def wire(
    method: str, params: dict[str, Any] | None = None, id: Any = 1, **m: Any
) -> dict[str, Any]:
    body = dict(params or {})
    body["_meta"] = meta(**m)
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": body}


def headers_for(message: dict[str, Any], **changes: str | None) -> dict[str, str]:
    """The headers a conforming client sends for `message`, with `changes` (None removes)."""
    result = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": message["method"],
    }
    params = message.get("params") or {}
    if message["method"] in ("tools/call", "prompts/get"):
        result["Mcp-Name"] = params["name"]
    elif message["method"] == "resources/read":
        result["Mcp-Name"] = params["uri"]
    for key, value in changes.items():
        name = key.replace("_", "-")
        for existing in [k for k in result if k.lower() == name.lower()]:
            del result[existing]
        if value is not None:
            result[name] = value
    return result


class Reply:
    def __init__(self, status: int, headers: Any, raw: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw

    @property
    def content_type(self) -> str:
        return str(self.headers.get("Content-Type", "")).split(";")[0]

    def json(self) -> Any:
        return orjson.loads(self.raw)

    def events(self) -> list[dict[str, Any]]:
        decoder = SSEDecoder()
        events = decoder.feed(self.raw) + decoder.close()
        return [orjson.loads(e.data) for e in events]


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: Any,
    headers: dict[str, str],
    method: str = "POST",
) -> Reply:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.request(method, url, data=data, headers=headers) as response:
        return Reply(response.status, response.headers, await response.read())


async def assert_still_serves(http: aiohttp.ClientSession, url: str) -> None:
    message = wire("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, id="after")
    reply = await post(http, url, message, headers_for(message))
    assert reply.status == 200
    assert reply.json()["id"] == "after"
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "3"}]


def route_call(
    region: str = "eu-west", priority: int = 7, note: str | None = None
) -> dict[str, Any]:
    arguments: dict[str, Any] = {"region": region, "priority": priority}
    if note is not None:
        arguments["note"] = note
    return wire("tools/call", {"name": "route", "arguments": arguments}, id=9)


# --- MRTR rounds over HTTP (the full flow is in test_flow_every_transport.py) ---------------


async def test_every_round_is_its_own_post_with_the_metadata_headers(
    url: str, recorder: Recorder
) -> None:
    handlers = Handlers()
    before = len(recorder.requests)
    async with Client.http(url, **handlers.client_kwargs()) as client:
        await client.call_tool("plan_trip", {"city": "Oslo"})
    posts = recorder.requests[before:]
    assert len(posts) == 3
    for headers in posts:
        assert headers["mcp-method"] == "tools/call"
        assert headers["mcp-name"] == "plan_trip"
        assert headers["mcp-protocol-version"] == LATEST_PROTOCOL_VERSION
        assert headers["accept"] == "application/json, text/event-stream"
        assert headers["content-type"] == "application/json"


async def test_plain_requests_and_errors_through_the_client(url: str) -> None:
    async with Client.http(url) as client:
        discovered = await client.discover()
        assert discovered.supported_versions == [LATEST_PROTOCOL_VERSION]
        names = [t.name for t in (await client.list_tools()).tools]
        assert "plan_trip" in names and "route" in names
        with pytest.raises(McpError) as unknown:
            await client.request("no/such/method")
        assert unknown.value.code == METHOD_NOT_FOUND
        with pytest.raises(McpError) as missing:
            await client.call_tool("needs_sampling")
        assert missing.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY


# --- request validation: each bad input, then proof the server still serves -----------------


REJECTED: list[tuple[Any, ...]] = [
    ("no Mcp-Method", wire("tools/list"), {"Mcp-Method": None}, 400, HEADER_MISMATCH),
    (
        "other Mcp-Method",
        wire("tools/list"),
        {"Mcp-Method": "prompts/list"},
        400,
        HEADER_MISMATCH,
    ),
    ("Mcp-Method case", wire("tools/list"), {"Mcp-Method": "TOOLS/LIST"}, 400, HEADER_MISMATCH),
    (
        "no version header",
        wire("tools/list"),
        {"MCP-Protocol-Version": None},
        400,
        HEADER_MISMATCH,
    ),
    (
        "version header vs body",
        wire("server/discover", **{meta_keys.PROTOCOL_VERSION: "v999.0.0"}),
        {},
        400,
        HEADER_MISMATCH,
    ),
    (
        "unsupported version",
        wire("server/discover", **{meta_keys.PROTOCOL_VERSION: "v999.0.0"}),
        {"MCP-Protocol-Version": "v999.0.0"},
        400,
        UNSUPPORTED_PROTOCOL_VERSION,
    ),
    (
        "no Mcp-Name",
        wire("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}),
        {"Mcp-Name": None},
        400,
        HEADER_MISMATCH,
    ),
    (
        "other Mcp-Name",
        wire("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}),
        {"Mcp-Name": "plan_trip"},
        400,
        HEADER_MISMATCH,
    ),
    (
        "Mcp-Name bad Base64",
        wire("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}),
        {"Mcp-Name": "=?base64?YWRk!?="},
        400,
        HEADER_MISMATCH,
    ),
    (
        "resource Mcp-Name",
        wire("resources/read", {"uri": "config://app"}),
        {"Mcp-Name": "config://other"},
        400,
        HEADER_MISMATCH,
    ),
    ("no Mcp-Param", route_call(), {}, 400, HEADER_MISMATCH),
    (
        "other Mcp-Param",
        route_call(),
        {"Mcp-Param-Region": "us-east", "Mcp-Param-Priority": "7"},
        400,
        HEADER_MISMATCH,
    ),
    (
        "Mcp-Param bad padding",
        route_call(region="Hello"),
        {"Mcp-Param-Region": "=?base64?SGVsbG8?=", "Mcp-Param-Priority": "7"},
        400,
        HEADER_MISMATCH,
    ),
    (
        "Mcp-Param without body value",
        route_call(),
        {"Mcp-Param-Region": "eu-west", "Mcp-Param-Priority": "7", "Mcp-Param-Note": "x"},
        400,
        HEADER_MISMATCH,
    ),
    (
        "no _meta",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {},
        400,
        INVALID_PARAMS,
    ),
    ("unknown method", wire("unknown/method"), {}, 404, METHOD_NOT_FOUND),
    ("removed method", wire("ping"), {}, 404, METHOD_NOT_FOUND),
    (
        "missing capability",
        wire("tools/call", {"name": "needs_sampling"}),
        {},
        400,
        MISSING_REQUIRED_CLIENT_CAPABILITY,
    ),
]


@pytest.mark.parametrize(
    ("case", "message", "changes", "status", "code"),
    REJECTED,
    ids=[case[0] for case in REJECTED],
)
async def test_rejected_requests_get_status_and_jsonrpc_error(
    session: aiohttp.ClientSession,
    url: str,
    case: str,
    message: dict[str, Any],
    changes: dict[str, str | None],
    status: int,
    code: int,
) -> None:
    reply = await post(session, url, message, headers_for(message, **changes))
    assert reply.status == status, reply.raw
    assert reply.content_type == "application/json"
    body = reply.json()
    assert body["error"]["code"] == code
    assert body["id"] == message["id"]  # errors echo the request id
    assert body["error"]["message"]
    await assert_still_serves(session, url)


async def test_header_mismatch_message_names_both_values(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    reply = await post(session, url, message, headers_for(message, **{"Mcp-Name": "foo"}))
    assert reply.json()["error"]["message"] == (
        "Header mismatch: Mcp-Name header value 'foo' does not match body params.name 'add'"
    )


async def test_unsupported_version_lists_supported_versions(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("server/discover", **{meta_keys.PROTOCOL_VERSION: "v999.0.0"})
    reply = await post(
        session, url, message, headers_for(message, **{"MCP-Protocol-Version": "v999.0.0"})
    )
    assert reply.json()["error"]["data"] == {
        "supported": [LATEST_PROTOCOL_VERSION],
        "requested": "v999.0.0",
    }


ACCEPTED: list[tuple[Any, ...]] = [
    (
        "lowercase names",
        wire("tools/list"),
        {"Mcp-Method": None, "mcp-method": "tools/list"},
        None,
    ),
    (
        "uppercase names",
        wire("tools/list"),
        {"Mcp-Method": None, "MCP-METHOD": "tools/list"},
        None,
    ),
    (
        "whitespace around Mcp-Name",
        wire("tools/call", {"name": "add", "arguments": {"a": 2, "b": 2}}),
        {"Mcp-Name": "  add  "},
        "4",
    ),
    (
        "Base64 Mcp-Name",
        wire("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}),
        {"Mcp-Name": "=?base64?" + base64.b64encode(b"add").decode() + "?="},
        "5",
    ),
    (
        "numeric Mcp-Param",
        route_call(),
        {"Mcp-Param-Region": "eu-west", "Mcp-Param-Priority": "7.0"},
        "eu-west/7/None/",
    ),
    (
        "Base64 Mcp-Param",
        route_call(region="Hello, 世界", note=" padded "),
        {
            "Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
            "Mcp-Param-Priority": "7",
            "Mcp-Param-Note": "=?base64?IHBhZGRlZCA=?=",
        },
        "Hello, 世界/7/ padded /",
    ),
    (
        "sentinel without suffix is literal",
        route_call(region="=?base64?SGVsbG8="),
        {"Mcp-Param-Region": "=?base64?SGVsbG8=", "Mcp-Param-Priority": "7"},
        "=?base64?SGVsbG8=/7/None/",
    ),
]


@pytest.mark.parametrize(
    ("case", "message", "changes", "expected"),
    ACCEPTED,
    ids=[case[0] for case in ACCEPTED],
)
async def test_accepted_header_forms(
    session: aiohttp.ClientSession,
    url: str,
    case: str,
    message: dict[str, Any],
    changes: dict[str, str | None],
    expected: str | None,
) -> None:
    reply = await post(session, url, message, headers_for(message, **changes))
    assert reply.status == 200, reply.raw
    result = reply.json()["result"]
    if expected is not None:
        assert result["content"][0]["text"] == expected


async def test_foreign_origin_is_forbidden_and_localhost_origins_pass(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("tools/list")
    for origin in ("http://evil.example.com", "null", "http://localhost.evil.com"):
        reply = await post(session, url, message, headers_for(message, Origin=origin))
        assert reply.status == 403, origin
        assert reply.json()["error"]["code"] == INVALID_REQUEST
        assert "Origin" in reply.json()["error"]["message"]
    for origin in ("http://localhost:5173", "https://127.0.0.1", "http://[::1]:8080"):
        reply = await post(session, url, message, headers_for(message, Origin=origin))
        assert reply.status == 200, origin
    await assert_still_serves(session, url)


async def test_configured_origins_and_hosts_replace_the_localhost_default(
    session: aiohttp.ClientSession,
) -> None:
    app = StreamableHTTPApp(
        FLOW_SERVER, allowed_origins=["https://app.example.com"], allowed_hosts=["127.0.0.1"]
    )
    async with serve(app) as base:
        endpoint = base + "/mcp"
        message = wire("tools/list")
        ok = await post(
            session, endpoint, message, headers_for(message, Origin="https://app.example.com")
        )
        assert ok.status == 200
        local = await post(
            session, endpoint, message, headers_for(message, Origin="http://localhost")
        )
        assert local.status == 403
        spoofed = await post(
            session, endpoint, message, headers_for(message, Host="evil.example.com")
        )
        assert spoofed.status == 403
        assert "Host" in spoofed.json()["error"]["message"]
        await assert_still_serves(session, endpoint)


async def test_oversized_body_is_413(session: aiohttp.ClientSession, url: str) -> None:
    message = wire(
        "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2, "pad": "x" * 70_000}}
    )
    reply = await post(session, url, message, headers_for(message))
    assert reply.status == 413
    assert reply.json()["error"]["code"] == INVALID_REQUEST

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds while reading
        for _ in range(10):
            yield b" " * 10_000

    async with session.post(url, data=chunks(), headers=headers_for(message)) as response:
        assert response.status == 413
    await assert_still_serves(session, url)


async def test_non_json_body_is_parse_error(session: aiohttp.ClientSession, url: str) -> None:
    reply = await post(session, url, b"{not json", headers_for(wire("tools/list")))
    assert reply.status == 400
    body = reply.json()
    assert body["error"]["code"] == PARSE_ERROR
    assert "id" not in body  # the id could not be read
    await assert_still_serves(session, url)


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
        b'{"jsonrpc":"2.0","id":1}',
        b'"x"',
    ],
)
async def test_not_a_jsonrpc_message_is_invalid_request(
    session: aiohttp.ClientSession, url: str, body: bytes
) -> None:
    reply = await post(session, url, body, headers_for(wire("tools/list")))
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    await assert_still_serves(session, url)


async def test_client_sent_response_is_refused(session: aiohttp.ClientSession, url: str) -> None:
    response = {"jsonrpc": "2.0", "id": 4, "result": {}}
    reply = await post(session, url, response, headers_for(wire("tools/list")))
    assert reply.status == 400
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {
            "code": INVALID_REQUEST,
            "message": "Invalid Request: this endpoint takes requests and notifications, "
            "not responses",
        },
    }
    await assert_still_serves(session, url)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_wrong_content_type_is_415(
    session: aiohttp.ClientSession, url: str, content_type: str | None
) -> None:
    message = wire("tools/list")
    reply = await post(session, url, message, headers_for(message, Content_Type=content_type))
    assert reply.status == 415
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    await assert_still_serves(session, url)


async def test_json_content_type_with_charset_is_accepted(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("tools/list")
    changes = {"Content_Type": "Application/JSON; charset=utf-8"}
    assert (await post(session, url, message, headers_for(message, **changes))).status == 200


async def test_accept_without_json_is_406(session: aiohttp.ClientSession, url: str) -> None:
    message = wire("tools/list")
    for accept in ("text/html", "text/event-stream", "application/json;q=0"):
        reply = await post(session, url, message, headers_for(message, Accept=accept))
        assert reply.status == 406, accept
        assert reply.json()["error"]["code"] == INVALID_REQUEST
    for accept in ("application/json", "*/*", "application/*", None):  # None: no header
        reply = await post(session, url, message, headers_for(message, Accept=accept))
        assert reply.status == 200, accept
    await assert_still_serves(session, url)


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT", "OPTIONS"])
async def test_other_http_methods_are_405_with_allow(
    session: aiohttp.ClientSession, url: str, verb: str
) -> None:
    reply = await post(session, url, b"", {"Accept": "application/json, text/event-stream"}, verb)
    assert reply.status == 405
    assert reply.headers["Allow"] == "POST"
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    await assert_still_serves(session, url)


async def test_notification_is_accepted_with_202_and_no_body(
    session: aiohttp.ClientSession, url: str
) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    reply = await post(session, url, note, headers_for({"method": note["method"]}))
    assert reply.status == 202
    assert reply.raw == b""
    await assert_still_serves(session, url)


async def test_other_paths_are_404(session: aiohttp.ClientSession, url: str) -> None:
    message = wire("tools/list")
    reply = await post(session, url.removesuffix("/mcp") + "/other", message, headers_for(message))
    assert reply.status == 404
    await assert_still_serves(session, url)


# --- SSE responses -----------------------------------------------------------------------------


async def test_progress_and_logs_stream_before_the_result(url: str) -> None:
    seen: list[Any] = []

    def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", progress, total, message))

    async with Client.http(url, log_handler=lambda p: seen.append(("log", p["data"]))) as client:
        result = await client.call_tool(
            "chatty",
            {"steps": 2},
            progress_callback=on_progress,
            meta={meta_keys.LOG_LEVEL: "info"},
        )
        seen.append(("result", result.content[0].text))  # type: ignore[union-attr]
    assert seen == [
        ("progress", 1, 2, "step 1"),
        ("log", {"step": 1}),
        ("progress", 2, 2, "step 2"),
        ("log", {"step": 2}),
        ("result", "done after 2"),
    ]


async def test_streamed_response_is_sse_with_notifications_then_response(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire(
        "tools/call",
        {"name": "chatty", "arguments": {"steps": 2}},
        id=31,
        progressToken="tok",
    )
    reply = await post(session, url, message, headers_for(message))
    assert reply.status == 200
    assert reply.content_type == "text/event-stream"
    assert reply.headers["X-Accel-Buffering"] == "no"
    events = reply.events()
    assert [e.get("method") for e in events] == [
        "notifications/progress",
        "notifications/progress",
        None,
    ]
    assert [e["params"]["progress"] for e in events[:2]] == [1, 2]
    assert events[-1]["id"] == 31
    assert events[-1]["result"]["content"] == [{"type": "text", "text": "done after 2"}]
    for line in reply.raw.split(b"\n"):  # one compact JSON per data line
        assert line == b"" or line.startswith(b"data: {")


async def test_request_without_progress_token_or_log_level_gets_plain_json(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("tools/call", {"name": "chatty", "arguments": {"steps": 3}}, id=32)
    reply = await post(session, url, message, headers_for(message))
    assert reply.status == 200
    assert reply.content_type == "application/json"
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "done after 3"}]


async def test_client_that_cannot_take_sse_gets_json_without_notifications(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = wire("tools/call", {"name": "chatty", "arguments": {"steps": 2}}, progressToken=1)
    reply = await post(session, url, message, headers_for(message, Accept="application/json"))
    assert reply.content_type == "application/json"
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "done after 2"}]


# --- cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
async def test_client_going_away_cancels_the_handler(url: str, streaming: bool) -> None:
    label = f"cancel-{streaming}"
    probe = PROBES[label] = Probe()
    async with Client.http(url) as client:
        progress = (lambda *_: None) if streaming else None
        call = asyncio.create_task(
            client.call_tool("wait_forever", {"label": label}, progress_callback=progress)
        )
        await eventually(probe.started.is_set, "the handler to start", timeout=GUARD)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(probe.cancelled.is_set, "the handler to be cancelled", timeout=GUARD)


async def test_request_timeout_closes_the_stream_and_cancels_the_handler(url: str) -> None:
    probe = PROBES["timeout"] = Probe()
    # Long enough for the handler to start on a slow machine; the test never waits it out
    # for anything else.
    async with Client.http(url, timeout=1.0) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("wait_forever", {"label": "timeout"})
        assert raised.value.code == REQUEST_TIMEOUT
        assert "within 1 s" in raised.value.message
        assert probe.started.is_set()
        await eventually(probe.cancelled.is_set, "the handler to be cancelled", timeout=GUARD)


# --- the client against misbehaving servers ----------------------------------------------------


def scripted_app(script: Callable[[int, dict[str, Any]], Any], seen: list[dict[str, Any]]) -> Any:
    """A raw ASGI app: `script(n, message)` plays the n-th POST (0-based) on (send)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        message = orjson.loads(body)
        seen.append(
            {"message": message, "headers": {k.decode(): v.decode() for k, v in scope["headers"]}}
        )
        await script(len(seen) - 1, message)(send)

    return app


def json_reply(payload: Any, status: int = 200, content_type: bytes = b"application/json") -> Any:
    async def play(send: Any) -> None:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type)],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    return play


def broken_stream(abrupt: bool) -> Any:
    """An SSE answer with one log notification that ends without the response."""

    async def play(send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "hi"},
        }
        await send(
            {
                "type": "http.response.body",
                "body": encode_event(orjson.dumps(note)),
                "more_body": True,
            }
        )
        if abrupt:
            raise RuntimeError("simulated crash mid-stream")  # uvicorn drops the connection
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return play


def ok_result(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": message["id"],
        "result": {"resultType": "complete", "content": [{"type": "text", "text": "fine"}]},
    }


@pytest.mark.parametrize("abrupt", [False, True], ids=["stream-ends", "connection-drops"])
async def test_broken_stream_of_a_read_is_reissued_with_a_new_id(abrupt: bool) -> None:
    # Only a method that just reads is sent again (a tools/call never is: see
    # test_client_hardening.py).
    seen: list[dict[str, Any]] = []
    contents = {"contents": [{"uri": "file:///x", "text": "fine"}]}

    def script(n: int, message: dict[str, Any]) -> Any:
        if n == 0:
            return broken_stream(abrupt)
        return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": contents})

    logs: list[Any] = []
    async with (
        serve(scripted_app(script, seen)) as base,
        Client.http(base, log_handler=logs.append) as client,
    ):
        result = await client.read_resource("file:///x")
    assert result.contents[0].text == "fine"  # type: ignore[union-attr]
    first, second = (s["message"] for s in seen)
    assert second["id"] != first["id"]
    assert second["params"] == first["params"]
    assert logs == [{"level": "info", "data": "hi"}]  # delivered from the broken stream


async def test_reissuing_stops_after_a_bound() -> None:
    seen: list[dict[str, Any]] = []
    async with (
        serve(scripted_app(lambda n, m: broken_stream(False), seen)) as base,
        Client.http(base) as client,
    ):
        with pytest.raises(McpError) as raised:
            await client.list_tools()
    assert raised.value.code == CONNECTION_CLOSED
    assert "3 attempts" in raised.value.message
    assert len({s["message"]["id"] for s in seen}) == 3


async def test_http_error_without_jsonrpc_body_raises_with_the_status() -> None:
    seen: list[dict[str, Any]] = []
    app = scripted_app(lambda n, m: json_reply(b"upstream down", 502, b"text/plain"), seen)
    async with serve(app) as base, Client.http(base) as client:
        with pytest.raises(McpError) as raised:
            await client.discover()
    assert raised.value.code == HTTP_ERROR
    assert "HTTP 502" in raised.value.message and "upstream down" in raised.value.message
    assert raised.value.data == {"status": 502, "body": "upstream down"}


async def test_http_error_with_jsonrpc_body_raises_that_error() -> None:
    def script(n: int, message: dict[str, Any]) -> Any:
        error = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32603, "message": "boom"},
        }
        return json_reply(error, 500)

    async with serve(scripted_app(script, [])) as base, Client.http(base) as client:
        with pytest.raises(McpError) as raised:
            await client.discover()
    assert (raised.value.code, raised.value.message) == (-32603, "boom")


async def test_unreachable_server_fails_clearly() -> None:
    async with serve(scripted_app(lambda n, m: json_reply({}), [])) as base:
        pass  # the port is free again once the server has stopped
    async with Client.http(base, timeout=5) as client:
        with pytest.raises(McpError) as raised:
            await client.discover()
    assert raised.value.code == CONNECTION_CLOSED
    assert "cannot connect" in raised.value.message


async def test_sse_response_with_event_name_and_crlf_is_read() -> None:
    def script(n: int, message: dict[str, Any]) -> Any:
        async def play(send: Any) -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            body = b": keep-alive\r\n\r\nevent: message\r\nid: 7\r\ndata: " + orjson.dumps(
                ok_result(message)
            )
            await send({"type": "http.response.body", "body": body[:40], "more_body": True})
            await send({"type": "http.response.body", "body": body[40:] + b"\r\n\r\n"})

        return play

    async with serve(scripted_app(script, [])) as base, Client.http(base) as client:
        result = await client.call_tool("anything")
    assert result.content[0].text == "fine"  # type: ignore[union-attr]


# --- x-mcp-header: the client mirrors, the server checks -------------------------------------


async def test_client_mirrors_annotated_arguments_into_param_headers(
    url: str, recorder: Recorder
) -> None:
    async with Client.http(url) as client:
        await client.list_tools()
        result = await client.call_tool(
            "route", {"region": "eu west", "priority": 7, "note": "Grüße", "query": "q"}
        )
        assert result.content[0].text == "eu west/7/Grüße/q"  # type: ignore[union-attr]
        sent = recorder.last("tools/call")
        assert sent["mcp-param-region"] == "eu west"  # inner spaces stay plain
        assert sent["mcp-param-priority"] == "7"
        assert (
            sent["mcp-param-note"]
            == "=?base64?" + base64.b64encode("Grüße".encode()).decode() + "?="
        )
        assert "mcp-param-query" not in sent  # not annotated

        await client.call_tool("route", {"region": "x", "priority": 1, "note": None})
        assert "mcp-param-note" not in recorder.last("tools/call")  # null is omitted


async def test_client_lists_tools_again_after_header_mismatch_and_retries(
    url: str, recorder: Recorder
) -> None:
    before = len(recorder.requests)
    async with Client.http(url) as client:  # never listed: it cannot know the annotations yet
        result = await client.call_tool("route", {"region": "ap", "priority": 3})
    assert result.content[0].text == "ap/3/None/"  # type: ignore[union-attr]
    methods = [h["mcp-method"] for h in recorder.requests[before:]]
    assert methods == ["tools/call", "tools/list", "tools/call"]
    assert recorder.requests[-1]["mcp-param-region"] == "ap"


INVALID_TOOLS = {
    "invalid_empty_header": {"value": {"type": "string", "x-mcp-header": ""}},
    "invalid_object_header": {"data": {"type": "object", "x-mcp-header": "Data"}},
    "invalid_array_header": {
        "items": {"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"}
    },
    "invalid_null_header": {"nil": {"type": "null", "x-mcp-header": "Nil"}},
    "invalid_number_header": {"score": {"type": "number", "x-mcp-header": "Score"}},
    "invalid_duplicate_same_case": {
        "field1": {"type": "string", "x-mcp-header": "Region"},
        "field2": {"type": "string", "x-mcp-header": "Region"},
    },
    "invalid_duplicate_diff_case": {
        "field1": {"type": "string", "x-mcp-header": "MyField"},
        "field2": {"type": "string", "x-mcp-header": "myfield"},
    },
    "invalid_space_in_name": {"value": {"type": "string", "x-mcp-header": "My Region"}},
    "invalid_colon_in_name": {"value": {"type": "string", "x-mcp-header": "Region:Primary"}},
    "invalid_non_ascii_name": {"value": {"type": "string", "x-mcp-header": "Région"}},
    "invalid_control_char_name": {"value": {"type": "string", "x-mcp-header": "Region\t1"}},
}


async def test_client_drops_tools_with_invalid_header_annotations(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = [
        {
            "name": "valid_tool",
            "inputSchema": {
                "type": "object",
                "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            },
        }
    ] + [
        {"name": name, "inputSchema": {"type": "object", "properties": props}}
        for name, props in INVALID_TOOLS.items()
    ]
    seen: list[dict[str, Any]] = []

    def script(n: int, message: dict[str, Any]) -> Any:
        if message["method"] == "tools/list":
            result = {"resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "private"}
            return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return json_reply(ok_result(message))

    async with serve(scripted_app(script, seen)) as base, Client.http(base) as client:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["valid_tool"]
        await client.call_tool("valid_tool", {"region": "us-west1"})
    assert seen[-1]["headers"]["mcp-param-region"] == "us-west1"
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "mrtr.http")
    assert all(name in warned for name in INVALID_TOOLS)


# --- subscriptions/listen ----------------------------------------------------------------------


def listen_request(request_id: int, **wanted: Any) -> dict[str, Any]:
    return wire("subscriptions/listen", {"notifications": wanted}, id=request_id)


@contextlib.asynccontextmanager
async def listening(
    base_url: str, request: dict[str, Any]
) -> AsyncIterator[tuple[list[dict[str, Any]], asyncio.Task[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    transport = HTTPTransport(base_url)
    await transport.connect(received.append)
    task = asyncio.create_task(transport.request(request))
    try:
        yield received, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await transport.close()


def subscription_server() -> Server:
    server = Server("subscriptions", "1.0.0")

    @server.tool()
    def ping() -> str:
        return "pong"

    @server.prompt()
    def hello() -> str:
        return "hello"

    @server.resource("file:///watched.txt")
    def watched() -> str:
        return "v1"

    return server


async def test_discover_advertises_change_notifications(url: str) -> None:
    async with Client.http(url) as client:
        caps = (await client.discover()).capabilities
    assert caps.tools == {"listChanged": True}
    assert caps.prompts == {"listChanged": True}
    assert caps.resources == {"listChanged": True, "subscribe": True}


async def test_listen_acknowledges_then_delivers_tools_list_changed() -> None:
    server = subscription_server()
    async with (
        serve(server.asgi_app()) as base,
        listening(base + "/mcp", listen_request(77, toolsListChanged=True)) as (received, _),
    ):
        await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
        assert received[0] == {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUBSCRIPTION_ID: 77}, "notifications": {"toolsListChanged": True}},
        }
        server.notify_prompts_changed()  # not asked for: never sent
        server.notify_tools_changed()
        await eventually(
            lambda: len(received) == 2, "the tools list-changed notification", timeout=GUARD
        )
        assert received[1] == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID: 77}},
        }

        @server.tool()
        def late() -> str:  # registering a tool while serving announces it too
            return "late"

        await eventually(
            lambda: len(received) == 3, "the announcement of a new tool", timeout=GUARD
        )
        assert received[2]["method"] == "notifications/tools/list_changed"


async def test_listen_delivers_resource_updates_only_for_subscribed_uris() -> None:
    server = subscription_server()
    request = listen_request(5, resourceSubscriptions=["file:///watched.txt"], unknownFlag=True)
    async with serve(server.asgi_app()) as base, listening(base + "/mcp", request) as (received, _):
        await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
        assert received[0]["params"]["notifications"] == {
            "resourceSubscriptions": ["file:///watched.txt"]
        }
        server.notify_resource_updated("file:///other.txt")
        server.notify_tools_changed()
        server.notify_resource_updated("file:///watched.txt")
        await eventually(lambda: len(received) == 2, "the update", timeout=GUARD)
        assert received[1]["method"] == "notifications/resources/updated"
        assert received[1]["params"] == {
            "_meta": {SUBSCRIPTION_ID: 5},
            "uri": "file:///watched.txt",
        }


async def test_acknowledgement_leaves_out_types_the_server_does_not_offer() -> None:
    server = Server("tools-only")

    @server.tool()
    def ping() -> str:
        return "pong"

    request = listen_request(1, toolsListChanged=True, promptsListChanged=True)
    async with serve(server.asgi_app()) as base, listening(base + "/mcp", request) as (received, _):
        await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
        assert received[0]["params"]["notifications"] == {"toolsListChanged": True}


async def test_server_ends_listen_streams_gracefully() -> None:
    server = subscription_server()
    async with (
        serve(server.asgi_app()) as base,
        listening(base + "/mcp", listen_request(12, toolsListChanged=True)) as (received, task),
    ):
        await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
        server.close_subscriptions()
        response = await asyncio.wait_for(task, GUARD)
    assert response["id"] == 12
    assert response["result"]["resultType"] == "complete"
    assert response["result"]["_meta"][SUBSCRIPTION_ID] == 12


async def test_shutdown_ends_listen_streams_before_draining_connections() -> None:
    server = subscription_server()
    config = uvicorn.Config(server.asgi_app(), host="127.0.0.1", port=0, log_level="warning")
    runner = UvicornServer(config, server)
    serving = asyncio.create_task(runner.serve())
    await eventually(lambda: runner.started, "uvicorn to start", timeout=GUARD)
    port = runner.servers[0].sockets[0].getsockname()[1]
    async with listening(
        f"http://127.0.0.1:{port}/mcp", listen_request(3, toolsListChanged=True)
    ) as (
        received,
        task,
    ):
        await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
        runner.should_exit = True
        response = await asyncio.wait_for(task, GUARD)
        assert response["result"]["_meta"][SUBSCRIPTION_ID] == 3
    await asyncio.wait_for(serving, GUARD)


async def test_closing_the_listen_stream_ends_the_subscription() -> None:
    server = subscription_server()
    async with serve(server.asgi_app()) as base:
        async with listening(base + "/mcp", listen_request(8, toolsListChanged=True)) as (
            received,
            _,
        ):
            await eventually(lambda: len(received) == 1, "the acknowledgement", timeout=GUARD)
            assert len(server._subscriptions) == 1
        await eventually(
            lambda: len(server._subscriptions) == 0, "the subscription to end", timeout=GUARD
        )


async def test_quiet_listen_stream_gets_keepalive_comments() -> None:
    server = subscription_server()
    message = listen_request(4, toolsListChanged=True)
    async with (
        serve(StreamableHTTPApp(server, keepalive_interval=0.01)) as base,
        aiohttp.ClientSession() as http,
        http.post(
            base + "/mcp", data=orjson.dumps(message), headers=headers_for(message)
        ) as response,
    ):
        assert response.headers["Content-Type"] == "text/event-stream"
        received = b""
        async with asyncio.timeout(GUARD):
            while received.count(b":\n\n") < 2:
                received += await response.content.readany()
    acknowledgement, _, rest = received.partition(b"\n\n")
    assert orjson.loads(acknowledgement.removeprefix(b"data: "))["method"] == (
        "notifications/subscriptions/acknowledged"
    )
    assert rest.startswith(b":\n\n")


async def test_listen_without_sse_in_accept_is_406(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = listen_request(2, toolsListChanged=True)
    reply = await post(session, url, message, headers_for(message, Accept="application/json"))
    assert reply.status == 406
    assert reply.json()["id"] == 2
    await assert_still_serves(session, url)


async def test_listen_with_malformed_filter_is_invalid_params(
    session: aiohttp.ClientSession, url: str
) -> None:
    message = listen_request(2, toolsListChanged="yes")
    reply = await post(session, url, message, headers_for(message))
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_PARAMS
    assert "toolsListChanged" in reply.json()["error"]["message"]


# --- mounting --------------------------------------------------------------------------------


async def test_app_mounts_under_a_starlette_prefix() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app = Starlette(routes=[Mount("/api", app=FLOW_SERVER.asgi_app())])
    async with serve(app) as base, Client.http(base + "/api/mcp") as client:
        result = await client.call_tool("add", {"a": 20, "b": 22})
    assert result.content[0].text == "42"  # type: ignore[union-attr]


# --- sans-I/O pieces: SSE framing and header values ------------------------------------------


def decode_all(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events + decoder.close()


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_sse_decoder_handles_every_line_ending(newline: bytes) -> None:
    stream = newline.join([b"data: a", b"data: b", b"", b"event: custom", b"data:c", b"", b""])
    assert decode_all(stream) == [SSEEvent("message", b"a\nb"), SSEEvent("custom", b"c")]


def test_sse_decoder_reassembles_events_split_anywhere() -> None:
    stream = b'\xef\xbb\xbf: comment\r\nid: 3\r\nretry: 10\r\ndata: {"x":1}\r\n\r\ndata: 2\r\n\r\n'
    expected = [SSEEvent("message", b'{"x":1}'), SSEEvent("message", b"2")]
    for cut in range(len(stream) + 1):
        assert decode_all(stream[:cut], stream[cut:]) == expected, cut
    assert decode_all(*[stream[i : i + 1] for i in range(len(stream))]) == expected


def test_sse_decoder_drops_an_event_cut_off_by_the_end_of_the_stream() -> None:
    assert decode_all(b"data: complete\n\ndata: cut off\n") == [SSEEvent("message", b"complete")]
    assert decode_all(b"data: complete\n\r") == [SSEEvent("message", b"complete")]


def test_sse_decoder_ignores_events_without_data() -> None:
    assert decode_all(b"event: ping\n\n:\n\nid: 1\n\n") == []


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("us-west1", "us-west1"),
        ("us west 1", "us west 1"),
        ("", ""),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("\tindented", "=?base64?CWluZGVudGVk?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
    ],
)
def test_header_values_encode_and_decode_back(value: str, encoded: str) -> None:
    assert encode_value(value) == encoded
    assert decode_value(encoded.encode()) == value


@pytest.mark.parametrize(
    "raw",
    [
        b"=?base64?SGVsbG8?=",
        b"=?base64?SGVs!!!bG8=?=",
        b"=?base64?/w==?=",
        b"caf\xc3\xa9",
        b"a\x01b",
    ],
)
def test_undecodable_header_values_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(raw)


@pytest.mark.parametrize(
    ("header", "body", "matches"),
    [
        ("42", 42, True),
        ("42.0", 42, True),
        ("4.2e1", 42, True),
        ("1_000", 1000, False),
        ("+42", 42, False),
        ("true", True, True),
        ("True", True, False),
        ("false", 0, False),
        ("abc", "abc", True),
        ("abc", None, False),
    ],
)
def test_param_header_comparison(header: str, body: Any, matches: bool) -> None:
    assert argument_matches(header, body) is matches


def test_header_params_follow_properties_chains_only() -> None:
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "filter": {
                "type": "object",
                "properties": {"tenant": {"type": ["integer", "null"], "x-mcp-header": "Tenant"}},
            },
            "maybe": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "x-mcp-header": "Maybe"},
            "data": {"type": "string", "default": {"x-mcp-header": "not a schema"}},
        },
    }
    assert header_params(schema) == (
        HeaderParam("Tenant", ("filter", "tenant")),
        HeaderParam("Maybe", ("maybe",)),
        HeaderParam("Region", ("region",)),
    )


@pytest.mark.parametrize(
    "schema",
    [{"type": "object", "properties": props} for props in INVALID_TOOLS.values()]
    + [
        {"type": "string", "x-mcp-header": "Root"},
        {
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}
            },
        },
        {
            "type": "object",
            "$defs": {"a": {"type": "string", "x-mcp-header": "A"}},
            "properties": {},
        },
        {
            "type": "object",
            "properties": {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}},
        },
        {"type": "object", "properties": {"a": {"x-mcp-header": "A"}}},
    ],
)
def test_invalid_header_annotations_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidHeaderAnnotation):
        header_params(schema)


async def test_header_blocks_are_reused_per_method_and_name_but_never_mixed(
    url: str, recorder: Recorder
) -> None:
    async with Client.http(url) as client:
        await client.list_tools()
        for region in ("eu", "us"):  # a tool mirroring arguments: headers built per call
            await client.call_tool("route", {"region": region, "priority": 1})
            assert recorder.last("tools/call")["mcp-param-region"] == region
        await client.call_tool("add", {"a": 1, "b": 2})
        await client.read_resource("config://app")
        await client.call_tool("add", {"a": 3, "b": 4})
        seen = [(h["mcp-method"], h.get("mcp-name")) for h in recorder.requests[-3:]]
        assert seen == [
            ("tools/call", "add"),
            ("resources/read", "config://app"),
            ("tools/call", "add"),
        ]
        # A name that is not a string cannot be a header; the server says what is wrong.
        with pytest.raises(McpError) as info:
            await client.request("tools/call", {"name": ["add"]})
    assert info.value.code in (INVALID_PARAMS, HEADER_MISMATCH)
