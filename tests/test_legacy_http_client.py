"""`HTTPTransport` against legacy (2025-xx) Streamable HTTP servers, over real loopback HTTP.

The interop tests drive the official MCP Python SDK's server (`mcp` `MCPServer`, stateful
streamable HTTP, served by uvicorn on this loop). Behaviour no well-behaved server shows on
demand (a stream that stops after its priming event, replayed or repeated events, refusals,
endless streams) comes from a small scripted ASGI server. The handshake is done by hand here
(`initialize`, `notifications/initialized`, `start_legacy_session`), as the client does it, so
these tests pin the transport's side of the contract alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Route

from helpers.eventually import eventually
from helpers.transport_flow import LoopbackUvicorn, serve
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult, TextContent
from mrtr.client import era as eras
from mrtr.protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    LEGACY_ONLY_SERVER,
    METHOD_NOT_FOUND,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    RESPONSE_TOO_LARGE,
    SESSION_EXPIRED,
    McpError,
)
from mrtr.transport.http_client import HTTPTransport
from mrtr.transport.sse import SSEDecoder, SSEFrame

GUARD = 10.0  # seconds: only ever reached when something is broken
VERSION = "2025-11-25"

Message = dict[str, Any]


# --- the handshake, as the client does it ----------------------------------------------------


def initialize_request(request_id: Any = "init") -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "legacy-test", "version": "1.0.0"},
        },
    }


async def handshake(transport: HTTPTransport, request_id: Any = "init") -> Message:
    response = await transport.request(initialize_request(request_id))
    await transport.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    await transport.start_legacy_session(response["result"]["protocolVersion"])
    return response


def call(request_id: Any, name: str, arguments: Message | None = None) -> Message:
    params = {"name": name, "arguments": arguments or {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class Peer:
    """The client's side: notifications and server requests received, and the answers."""

    def __init__(self) -> None:
        self.notifications: list[Message] = []
        self.requests: list[Message] = []

    def on_notification(self, message: Message) -> None:
        self.notifications.append(message)

    async def on_request(self, message: Message) -> Message:
        self.requests.append(message)
        content = {"region": "eu"}
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"action": "accept", "content": content},
        }


@contextlib.asynccontextmanager
async def connected(
    url: str, peer: Peer | None = None, **options: Any
) -> AsyncIterator[HTTPTransport]:
    transport = HTTPTransport(url, **{"timeout": GUARD, **options})
    peer = peer or Peer()
    await transport.connect(peer.on_notification, peer.on_request)
    try:
        yield transport
    finally:
        await transport.close()


# --- the official SDK's server ----------------------------------------------------------------


class Region(BaseModel):
    region: str


class MemoryEventStore(EventStore):
    """Events kept in a list, replayed per stream: what makes the official server resumable."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = f"ev-{len(self.events) + 1}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        ids = [event[0] for event in self.events]
        if last_event_id not in ids:
            return None
        start = ids.index(last_event_id)
        stream = self.events[start][1]
        for event_id, stream_id, message in self.events[start + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def official_server() -> MCPServer:
    server = MCPServer("legacy-shop")

    @server.tool()
    async def order(item: str, ctx: Context) -> str:
        """Ask where to ship, with the classic server-to-client elicitation."""
        answer = await ctx.elicit(f"Ship {item} to which region?", Region)
        if answer.action != "accept" or answer.data is None:
            return "Cancelled"
        return f"Ordered {item}, shipping to {answer.data.region}"

    @server.tool()
    async def announce(ctx: Context) -> str:
        """A session-wide notification, which the server sends on the GET stream."""
        await ctx.session.send_tool_list_changed()
        return "announced"

    @server.tool()
    async def slow(ctx: Context) -> str:
        """Close this request's stream mid-call, then answer: the client must resume it."""
        await ctx.report_progress(1, 2, "half")
        await ctx.close_sse_stream()
        await asyncio.sleep(0.05)
        await ctx.report_progress(2, 2, "done")
        return "slow done"

    return server


class Recorder:
    """ASGI middleware keeping each HTTP request (method, headers, body) and what the server
    wrote back on it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.hits: list[Hit] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hit = Hit(scope["method"], {k.decode(): v.decode() for k, v in scope["headers"]})
        self.hits.append(hit)

        async def recording_receive() -> Any:
            event = await receive()
            hit.body += event.get("body", b"")
            return event

        async def recording_send(event: Any) -> None:
            if event["type"] == "http.response.start":
                hit.status = event["status"]
            hit.reply += event.get("body", b"")
            await send(event)

        await self.app(scope, recording_receive, recording_send)

    def of(self, method: str) -> list[Hit]:
        return [hit for hit in self.hits if hit.method == method]


class Hit:
    def __init__(self, method: str, headers: dict[str, str]) -> None:
        self.method = method
        self.headers = headers
        self.body = b""
        self.reply = b""
        self.status = 0
        self.at = time.monotonic()

    def message(self) -> Any:
        return orjson.loads(self.body) if self.body else None


@contextlib.asynccontextmanager
async def serve_official(**app_options: Any) -> AsyncIterator[tuple[str, Recorder]]:
    """The official server, stateful legacy streamable HTTP, on 127.0.0.1:<free port>/mcp."""
    async with serve_recorded(official_server().streamable_http_app(**app_options)) as served:
        yield served


@contextlib.asynccontextmanager
async def serve_recorded(app: Any) -> AsyncIterator[tuple[str, Recorder]]:
    """`app` (with its lifespan) on 127.0.0.1:<free port>, every HTTP request recorded; yields
    the URL of its `/mcp` endpoint and the recorder."""
    recorder = Recorder(app)
    config = uvicorn.Config(
        recorder, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="on"
    )
    server = LoopbackUvicorn(config)
    task = asyncio.create_task(server.serve())
    url = ""
    try:
        await eventually(
            lambda: server.started or task.done(), "the official server to start", timeout=GUARD
        )
        assert server.started, "the official server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/mcp"
        yield url, recorder
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, GUARD)
        # A client's era verdict outlives the server: a later one on this port must not inherit it.
        eras.forget(url)


MODERN_ONLY = ("mcp-method", "mcp-name")


async def test_official_server_session_id_version_get_stream_and_delete() -> None:
    async with serve_official() as (url, recorder):
        async with connected(url) as transport:
            init = await handshake(transport)
            assert init["result"]["protocolVersion"] == VERSION
            result = await transport.request(call(1, "order", {"item": "book"}))
            assert result["result"]["content"][0]["text"] == "Ordered book, shipping to eu"
        opening, *later = recorder.of("POST")
        # initialize goes bare: no session yet, and none of the 2026-07-28 headers.
        assert "mcp-session-id" not in opening.headers
        assert "mcp-protocol-version" not in opening.headers
        assert not any(name in opening.headers for name in MODERN_ONLY)
        assigned = opening_session_id(recorder)
        assert later and all(hit.headers.get("mcp-session-id") == assigned for hit in later)
        assert all(hit.headers.get("mcp-protocol-version") == VERSION for hit in later)
        assert not any(name in hit.headers for hit in later for name in MODERN_ONLY)
        (get,) = recorder.of("GET")
        assert get.headers["accept"] == "text/event-stream"
        assert get.headers["mcp-session-id"] == assigned
        (delete,) = recorder.of("DELETE")
        assert delete.headers["mcp-session-id"] == assigned and delete.status == 200


def opening_session_id(recorder: Recorder) -> str:
    """The session id the official server assigned (it echoes it on the GET stream too)."""
    return recorder.of("GET")[0].headers["mcp-session-id"]


async def test_official_server_elicitation_on_the_post_stream_is_answered_by_a_post() -> None:
    peer = Peer()
    async with serve_official() as (url, recorder), connected(url, peer) as transport:
        await handshake(transport)
        result = await transport.request(call(7, "order", {"item": "lamp"}))
        assert result["id"] == 7
        assert result["result"]["content"][0]["text"] == "Ordered lamp, shipping to eu"
        (asked,) = peer.requests
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["message"] == "Ship lamp to which region?"
        # The question came on the tools/call POST's own stream ...
        (call_hit,) = [h for h in recorder.of("POST") if (h.message() or {}).get("id") == 7]
        assert b"elicitation/create" in call_hit.reply
        # ... and the answer went back as a POST of its own, on the session.
        (answer,) = [h for h in recorder.of("POST") if "result" in (h.message() or {})]
        assert answer.message() == {
            "jsonrpc": "2.0",
            "id": asked["id"],
            "result": {"action": "accept", "content": {"region": "eu"}},
        }
        assert answer.status == 202
        assert answer.headers["mcp-session-id"] == opening_session_id(recorder)


async def test_official_server_session_notification_arrives_on_the_get_stream() -> None:
    peer = Peer()
    async with serve_official() as (url, recorder), connected(url, peer) as transport:
        await handshake(transport)
        result = await transport.request(call(1, "announce"))
        assert result["result"]["content"][0]["text"] == "announced"
        await eventually(
            lambda: bool(peer.notifications), "the list-changed notification", timeout=GUARD
        )
        assert peer.notifications == [
            {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        ]
        (get,) = recorder.of("GET")
        assert b"notifications/tools/list_changed" in get.reply


async def test_official_server_stream_closed_mid_call_is_resumed_not_resent() -> None:
    peer = Peer()
    store = MemoryEventStore()
    async with (
        serve_official(event_store=store, retry_interval=150) as (url, recorder),
        connected(url, peer) as transport,
    ):
        await handshake(transport)
        message = call(3, "slow")
        message["params"]["_meta"] = {"progressToken": "p"}
        result = await transport.request(message)
        assert result["id"] == 3
        assert result["result"]["content"][0]["text"] == "slow done"
        progress = [n["params"]["progress"] for n in peer.notifications]
        assert progress == [1, 2]  # each once: nothing replayed twice, nothing lost
        calls = [h for h in recorder.of("POST") if (h.message() or {}).get("id") == 3]
        assert len(calls) == 1  # resumed with GET, never sent again
        resumed = [h for h in recorder.of("GET") if "last-event-id" in h.headers]
        assert len(resumed) == 1
        assert resumed[0].headers["last-event-id"] in {event[0] for event in store.events}
        assert b"slow done" in resumed[0].reply


async def test_official_server_expired_session_is_reported_and_a_new_one_starts_bare() -> None:
    async with serve_official() as (url, recorder), connected(url) as transport:
        await handshake(transport)
        first = opening_session_id(recorder)
        # The session ends on the server's side (as when it expires): DELETE it behind our back.
        session = transport._require_session()
        async with session.delete(url, headers={"Mcp-Session-Id": first}) as response:
            assert response.status == 200
        with pytest.raises(McpError) as raised:
            await transport.request(call(1, "order", {"item": "x"}))
        assert raised.value.code == SESSION_EXPIRED
        assert "initialize" in raised.value.message
        # The client initializes again: bare, then under the new session id.
        await handshake(transport, "init-2")
        reopening = [h for h in recorder.of("POST") if (h.message() or {}).get("id") == "init-2"]
        assert "mcp-session-id" not in reopening[0].headers
        second = recorder.of("GET")[-1].headers["mcp-session-id"]
        assert second != first
        result = await transport.request(call(2, "order", {"item": "y"}))
        assert result["result"]["content"][0]["text"] == "Ordered y, shipping to eu"
        assert recorder.hits[-1].headers["mcp-session-id"] == second


async def test_client_over_the_official_server_in_a_legacy_session() -> None:
    asked: list[str] = []

    def answer(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"region": "apac"})

    async with serve_official() as (url, recorder):
        options = ClientOptions(protocol="legacy")
        async with Client.http(url, options=options, elicitation_handler=answer) as client:
            result = await client.call_tool("order", {"item": "desk"})
            assert client.era == "legacy" and client.protocol_version == VERSION
        block = result.content[0]
        assert isinstance(block, TextContent) and block.text == "Ordered desk, shipping to apac"
        assert asked == ["Ship desk to which region?"]
        assert len(recorder.of("GET")) == 1
        (delete,) = recorder.of("DELETE")
        assert delete.headers["mcp-session-id"] == opening_session_id(recorder)


# --- auto mode: one client script, the official server of either era ------------------------

_SHOP = Path(__file__).resolve().parent / "servers" / "official_shop.py"
_shop_spec = importlib.util.spec_from_file_location("official_shop", _SHOP)
assert _shop_spec is not None and _shop_spec.loader is not None
official_shop = importlib.util.module_from_spec(_shop_spec)
_shop_spec.loader.exec_module(official_shop)


class LegacyOnlySessions(StreamableHTTPSessionManager):
    """The official SDK's stateful Streamable HTTP sessions without its 2026-07-28 entry: every
    request goes to the `initialize`-based session transport, as on a server of 2025-11-25.

    The official app routes any request whose `MCP-Protocol-Version` header names a modern
    version to its stateless entry, where a classic `ctx.elicit()` has no session to ask on, so
    a legacy-only server is this transport alone (as `official_shop.py legacy` is over stdio).
    """

    async def _handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        await self._handle_stateful_request(scope, receive, send)


def official_shop_app(era: str) -> Any:
    """`official_shop.build(era)` over Streamable HTTP: legacy-only sessions, or the official
    dual-era app (which serves a 2026-07-28 request statelessly)."""
    server = official_shop.build(era)
    if era == "modern":
        return server.streamable_http_app()
    manager = LegacyOnlySessions(server._lowlevel_server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    route = Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))
    return Starlette(routes=[route], lifespan=lifespan)


async def order_book(url: str) -> tuple[str | None, str | None, list[str], list[str]]:
    """The one client script, unchanged whatever the server speaks: (era, negotiated version,
    the questions asked, the two results' texts)."""
    asked: list[str] = []

    def answer(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"region": "eu"})

    async with Client.http(url, elicitation_handler=answer) as client:
        assert client.era is None  # nothing decided before the first exchange
        ordered = await client.call_tool("order", {"item": "book"})
        added = await client.call_tool("add", {"a": 2, "b": 3})
        texts = [
            r.content[0].text for r in (ordered, added) if isinstance(r.content[0], TextContent)
        ]
        return client.era, client.protocol_version, asked, texts


def posted(recorder: Recorder) -> list[tuple[str | None, str | None, int]]:
    """Each POST's JSON-RPC method (None for an answer), `MCP-Protocol-Version` and status."""
    hits = recorder.of("POST")
    return [
        ((h.message() or {}).get("method"), h.headers.get("mcp-protocol-version"), h.status)
        for h in hits
    ]


async def test_auto_mode_one_client_script_passes_on_official_http_servers_of_both_eras() -> None:
    expected_texts = ["Ordered book, shipping to eu", "5"]

    async with serve_recorded(official_shop_app("legacy")) as (url, recorder):
        era, version, asked, texts = await order_book(url)
        assert (era, version) == ("legacy", VERSION)
        assert asked == ["Ship book to which region?"]  # asked live, on the session
        assert texts == expected_texts
        # The first request went in the modern shape; the legacy server's 400 (no session)
        # decided the era, and the client opened a session and carried on.
        assert posted(recorder)[:3] == [
            ("tools/call", "2026-07-28", 400),
            ("initialize", None, 200),
            ("notifications/initialized", VERSION, 202),
        ]
        # The question came as a request on the call's own stream; the answer, as a POST.
        order_call = recorder.of("POST")[3]
        assert order_call.message()["params"]["name"] == "order"
        assert b'"method":"elicitation/create"' in order_call.reply
        assert [m for m, _, _ in posted(recorder)].count(None) == 1
        (delete,) = recorder.of("DELETE")
        assert delete.headers["mcp-session-id"] == opening_session_id(recorder)
        # The verdict belongs to the server: a second client opens with `initialize` at once.
        before = len(recorder.of("POST"))
        assert (await order_book(url))[:2] == ("legacy", VERSION)
        assert posted(recorder)[before][:2] == ("initialize", None)

    async with serve_recorded(official_shop_app("modern")) as (url, recorder):
        era, version, asked, texts = await order_book(url)
        assert (era, version) == ("modern", "2026-07-28")
        assert asked == ["Ship book to which region?"]  # asked in an MRTR round
        assert texts == expected_texts
        # Stateless: no handshake, no session; `order` took a round and its retry.
        assert [m for m, _, _ in posted(recorder)] == ["tools/call"] * 3
        assert all(v == "2026-07-28" and s == 200 for _, v, s in posted(recorder))
        first, retry = (h.message() for h in recorder.of("POST")[:2])
        sent = orjson.loads(recorder.of("POST")[0].reply)["result"]
        assert sent["resultType"] == "input_required"
        assert retry["params"]["requestState"] == sent["requestState"]  # echoed unchanged
        assert retry["id"] != first["id"]
        assert retry["params"]["inputResponses"]["region"]["content"] == {"region": "eu"}
        assert not recorder.of("GET") and not recorder.of("DELETE")
        assert not any("mcp-session-id" in h.headers for h in recorder.hits)


async def test_insisting_on_modern_with_the_official_legacy_http_server_names_its_revision() -> (
    None
):
    async with serve_recorded(official_shop_app("legacy")) as (url, recorder):
        options = ClientOptions(protocol="modern")
        async with Client.http(url, options=options) as client:
            with pytest.raises(McpError) as raised:
                await client.call_tool("add", {"a": 1, "b": 2})
            assert client.era is None
        calls = [m for m, _, _ in posted(recorder)]
        deletes = recorder.of("DELETE")
    assert raised.value.code == LEGACY_ONLY_SERVER
    assert raised.value.data == {"supported": [VERSION], "requested": "2026-07-28", "era": "legacy"}
    assert calls == ["tools/call", "server/discover", "initialize"]  # the call ran nowhere
    assert len(deletes) == 1  # the session initialize opened to learn the revision is ended


# --- a scripted legacy server -----------------------------------------------------------------

Send = Callable[[Any], Awaitable[None]]
Script = Callable[["Exchange"], Awaitable[None]]


class Exchange:
    """One HTTP request to the scripted server and the means to answer it."""

    def __init__(self, hit: Hit, send: Send) -> None:
        self.hit = hit
        self._send = send
        self.ended_at = 0.0
        self.gone = asyncio.Event()  # the client closed the connection

    async def hold(self) -> None:
        """Keep the stream open until the client goes (bounded)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gone.wait(), GUARD)

    async def status(self, status: int, body: bytes = b"", content_type: str = "") -> None:
        headers = [(b"content-type", content_type.encode())] if content_type else []
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})

    async def json(self, message: Any, session_id: str | None = None) -> None:
        headers = [(b"content-type", b"application/json")]
        if session_id is not None:
            headers.append((b"mcp-session-id", session_id.encode()))
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": orjson.dumps(message)})

    async def open_stream(self) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})

    async def write(self, raw: bytes) -> None:
        await self._send({"type": "http.response.body", "body": raw, "more_body": True})

    async def event(self, message: Any, event_id: str | None = None) -> None:
        head = f"id: {event_id}\n".encode() if event_id is not None else b""
        await self.write(head + b"data: " + orjson.dumps(message) + b"\n\n")

    async def end(self) -> None:
        self.ended_at = time.monotonic()
        await self._send({"type": "http.response.body", "body": b""})


class ScriptedServer:
    """A legacy server whose answers each test writes: `initialize` opens session `sess-1`
    (then `sess-2` ...), notifications and responses get 202, DELETE 200, GET 405, and any other
    request goes to the test's `on_call`; GETs go to `on_get` when set."""

    def __init__(self) -> None:
        self.recorder = Recorder(self._app)
        self.on_call: Script | None = None
        self.on_get: Script | None = None
        self.sessions = 0
        self.delete_status = 200
        self.exchanges: list[Exchange] = []

    async def _app(self, scope: Any, receive: Any, send: Send) -> None:
        hit = self.recorder.hits[-1]
        while True:
            event = await receive()
            if not event.get("more_body"):
                break
        exchange = Exchange(hit, send)
        self.exchanges.append(exchange)
        watcher = asyncio.create_task(self._watch(receive, exchange))
        try:
            await self._answer(exchange)
        finally:
            watcher.cancel()

    @staticmethod
    async def _watch(receive: Any, exchange: Exchange) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        exchange.gone.set()

    async def _answer(self, exchange: Exchange) -> None:
        hit = exchange.hit
        message = hit.message()
        if hit.method == "GET":
            await (self.on_get(exchange) if self.on_get else exchange.status(405))
        elif hit.method == "DELETE":
            await exchange.status(self.delete_status)
        elif isinstance(message, dict) and message.get("method") == "initialize":
            self.sessions += 1
            result = {"protocolVersion": VERSION, "capabilities": {}, "serverInfo": {"name": "s"}}
            await exchange.json(
                {"jsonrpc": "2.0", "id": message["id"], "result": result}, f"sess-{self.sessions}"
            )
        elif not isinstance(message, dict) or "id" not in message or "method" not in message:
            await exchange.status(202)
        else:
            assert self.on_call is not None, f"unexpected request {message}"
            await self.on_call(exchange)

    def posts(self, method: str) -> list[Hit]:
        return [h for h in self.recorder.of("POST") if (h.message() or {}).get("method") == method]

    def answers(self) -> list[Message]:
        found = [h.message() for h in self.recorder.of("POST")]
        return [m for m in found if isinstance(m, dict) and "method" not in m]


@contextlib.asynccontextmanager
async def scripted() -> AsyncIterator[tuple[str, ScriptedServer]]:
    server = ScriptedServer()
    async with serve(server.recorder) as base:
        yield base + "/mcp", server


def response(request_id: Any, text: str = "done") -> Message:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": text}]},
    }


def progress(value: int) -> Message:
    params = {"progressToken": "p", "progress": value}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


async def test_stream_ended_after_its_priming_event_resumes_after_retry() -> None:
    async def call_stream(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.write(b"id: prime-1\nretry: 300\ndata: \n\n")
        await exchange.end()  # the connection closes; the stream does not

    async def resumed(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.event(progress(1), "ev-2")
        await exchange.event(response(5), "ev-3")
        await exchange.hold()  # left open: the client stops at its response

    peer = Peer()
    async with scripted() as (url, server), connected(url, peer) as transport:
        await handshake(transport)
        server.on_call, server.on_get = call_stream, resumed
        started = time.monotonic()
        result = await transport.request(call(5, "work"))
        assert result == response(5)
        assert peer.notifications == [progress(1)]
        (get,) = server.recorder.of("GET")[1:]  # after the session's own GET stream
        assert get.headers["last-event-id"] == "prime-1"
        assert get.headers["mcp-session-id"] == "sess-1"
        assert get.headers["accept"] == "text/event-stream"
        # Not sooner than the 300 ms the server asked for, counted from the stream's end.
        call_exchange = next(e for e in server.exchanges if (e.hit.message() or {}).get("id") == 5)
        assert get.at - call_exchange.ended_at >= 0.3
        assert get.at - started < 0.3 + GUARD / 2
        assert len(server.posts("tools/call")) == 1  # resumed, never re-sent


async def test_replayed_repeated_and_out_of_order_events_are_delivered_once() -> None:
    ask = {"jsonrpc": "2.0", "id": 40, "method": "roots/list"}
    ask_again = {**ask}  # the same request id under another event id: a server repeating itself

    async def call_stream(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.write(b"retry: 10\n\n")
        await exchange.event(progress(1), "9")
        await exchange.event(ask, "3")
        await exchange.event(progress(1), "9")  # repeated at once
        await exchange.end()

    async def resumed(exchange: Exchange) -> None:
        await exchange.open_stream()
        # A server replaying from the start, out of order, then the rest.
        await exchange.event(ask, "3")
        await exchange.event(progress(1), "9")
        await exchange.event(progress(2), "7")
        await exchange.event(ask_again, "8")
        await exchange.event(response(4), "10")
        await exchange.hold()

    peer = Peer()
    async with scripted() as (url, server), connected(url, peer) as transport:
        await handshake(transport)
        server.on_call, server.on_get = call_stream, resumed
        result = await transport.request(call(4, "work"))
        assert result == response(4)
        assert peer.notifications == [progress(1), progress(2)]
        await eventually(lambda: bool(server.answers()), "the answer to roots/list", timeout=GUARD)
        assert peer.requests == [ask]  # answered once
        # The cursor is the newest id that arrived, not the largest one.
        assert server.recorder.of("GET")[-1].headers["last-event-id"] == "3"
        await asyncio.sleep(0.05)
        assert len(server.answers()) == 1


async def test_get_and_delete_refused_with_405_are_fine_and_not_retried() -> None:
    async with scripted() as (url, server):
        server.delete_status = 405
        async with connected(url) as transport:
            started = time.monotonic()
            await handshake(transport)
            assert time.monotonic() - started < GUARD / 2
            server.on_call = lambda exchange: exchange.json(response(1))
            assert await transport.request(call(1, "work")) == response(1)
            await asyncio.sleep(0.1)
            assert len(server.recorder.of("GET")) == 1
        # Closing went through the refused DELETE quietly, and only once.
        assert [d.status for d in server.recorder.of("DELETE")] == [405]


async def test_a_refused_resumption_fails_saying_the_call_may_have_run() -> None:
    async def call_stream(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.write(b"id: a\nretry: 10\ndata: \n\n")
        await exchange.end()

    async with scripted() as (url, server), connected(url) as transport:
        await handshake(transport)
        server.on_call = call_stream  # GET stays 405: the server cannot resume
        with pytest.raises(McpError) as raised:
            await transport.request(call(1, "work"))
        assert raised.value.code == CONNECTION_CLOSED
        assert raised.value.data["mayHaveRun"] is True
        assert "refused to resume" in raised.value.message
        assert len(server.posts("tools/call")) == 1


async def test_resumption_that_brings_nothing_gives_up_after_bounded_attempts() -> None:
    async def priming_only(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.write(b"id: same\nretry: 10\ndata: \n\n")
        await exchange.end()

    async with scripted() as (url, server), connected(url, max_resumptions=3) as transport:
        await handshake(transport)
        server.on_call = priming_only
        server.on_get = priming_only  # every reconnection: the same id again, then closed
        with pytest.raises(McpError) as raised:
            await transport.request(call(1, "work"))
        assert raised.value.code == CONNECTION_CLOSED
        assert raised.value.data == {"mayHaveRun": True}
        resumes = [h for h in server.recorder.of("GET") if "last-event-id" in h.headers]
        assert len(resumes) == 3
        assert len(server.posts("tools/call")) == 1


async def test_endless_streams_are_bounded() -> None:
    async def keepalives(exchange: Exchange) -> None:
        await exchange.open_stream()
        while not exchange.gone.is_set():
            await exchange.write(b":\n\n")
            await asyncio.sleep(0.01)

    async def one_endless_event(exchange: Exchange) -> None:
        await exchange.open_stream()
        while not exchange.gone.is_set():
            await exchange.write(b"data: " + b"x" * 4096 + b"\n")
            await asyncio.sleep(0.001)

    async with scripted() as (url, server):
        async with connected(url, timeout=0.5) as transport:
            await handshake(transport)
            server.on_call = keepalives
            with pytest.raises(McpError) as raised:
                await transport.request(call(1, "work"))
            assert raised.value.code == REQUEST_TIMEOUT
        async with connected(url, max_message_size=64 * 1024) as transport:
            await handshake(transport)
            server.on_call = one_endless_event
            with pytest.raises(McpError) as raised:
                await transport.request(call(2, "work"))
            assert raised.value.code == RESPONSE_TOO_LARGE


async def test_get_stream_that_keeps_closing_is_given_up_after_bounded_attempts() -> None:
    async def closes_at_once(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.write(b"retry: 10\n\n")
        await exchange.end()

    async with scripted() as (url, server), connected(url, max_resumptions=3) as transport:
        server.on_get = closes_at_once
        await handshake(transport)
        await eventually(
            lambda: len(server.recorder.of("GET")) >= 3, "the reconnections", timeout=GUARD
        )
        await asyncio.sleep(0.2)
        assert len(server.recorder.of("GET")) == 3


async def test_get_stream_delivers_notifications_and_answers_requests() -> None:
    ping = {"jsonrpc": "2.0", "id": "s-1", "method": "ping"}

    async def session_stream(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.event({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        await exchange.event(ping)
        await exchange.event(response(99))  # a response to nothing ever sent: ignored
        await exchange.hold()

    peer = Peer()
    async with scripted() as (url, server), connected(url, peer) as transport:
        server.on_get = session_stream
        await handshake(transport)
        await eventually(lambda: bool(server.answers()), "the answer to ping", timeout=GUARD)
        assert peer.notifications == [
            {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        ]
        assert peer.requests == [ping]
        (answer,) = [h for h in server.recorder.of("POST") if "method" not in (h.message() or {})]
        assert answer.headers["mcp-session-id"] == "sess-1"
        assert answer.headers["mcp-protocol-version"] == VERSION


async def test_server_requests_without_a_handler_or_with_a_failing_one_get_errors() -> None:
    sample = {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {}}

    async def asks(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.event(sample)
        await eventually(lambda: bool(server.answers()), "the answer", timeout=GUARD)
        await exchange.event(response((exchange.hit.message() or {})["id"]))
        await exchange.end()

    async with scripted() as (url, server):
        server.on_call = asks
        transport = HTTPTransport(url, timeout=GUARD)
        await transport.connect(lambda message: None)  # no request handler
        try:
            await handshake(transport)
            assert await transport.request(call(1, "work")) == response(1)
            (answer,) = server.answers()
            assert answer["id"] == 1 and answer["error"]["code"] == METHOD_NOT_FOUND
        finally:
            await transport.close()

        async def broken(message: Message) -> Message:
            raise RuntimeError("secret internals")

        server.recorder.hits.clear()
        transport = HTTPTransport(url, timeout=GUARD)
        await transport.connect(lambda message: None, broken)
        try:
            await handshake(transport)
            assert await transport.request(call(2, "work")) == response(2)
            (answer,) = server.answers()
            assert answer["error"]["code"] == INTERNAL_ERROR
            assert "secret" not in answer["error"]["message"]
        finally:
            await transport.close()


async def test_cancelling_a_legacy_request_tells_the_server() -> None:
    async def never_answers(exchange: Exchange) -> None:
        await exchange.open_stream()
        await exchange.hold()

    async with scripted() as (url, server), connected(url) as transport:
        await handshake(transport)
        server.on_call = never_answers
        task = asyncio.create_task(transport.request(call(11, "work")))
        await eventually(
            lambda: bool(server.posts("tools/call")), "the call to go out", timeout=GUARD
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(
            lambda: bool(server.posts("notifications/cancelled")), "the cancel", timeout=GUARD
        )
        (cancel,) = server.posts("notifications/cancelled")
        assert cancel.message()["params"]["requestId"] == 11
        assert cancel.headers["mcp-session-id"] == "sess-1"


async def test_404_on_a_request_with_the_session_id_is_session_expired() -> None:
    async with scripted() as (url, server), connected(url) as transport:
        await handshake(transport)
        server.on_call = lambda exchange: exchange.status(404, b"Session not found")
        with pytest.raises(McpError) as raised:
            await transport.request(call(1, "work"))
        assert raised.value.code == SESSION_EXPIRED
        # The session is forgotten: a notification now goes without it, and the next
        # initialize opens a new one.
        await transport.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert "mcp-session-id" not in server.recorder.hits[-1].headers
        await handshake(transport, "again")
        server.on_call = lambda exchange: exchange.json(response(2))
        assert await transport.request(call(2, "work")) == response(2)
        assert server.recorder.hits[-1].headers["mcp-session-id"] == "sess-2"


async def test_a_second_initialize_replaces_the_session() -> None:
    async with scripted() as (url, server), connected(url) as transport:
        await handshake(transport)
        await handshake(transport, "second")
        (second,) = [h for h in server.posts("initialize") if h.message()["id"] == "second"]
        assert "mcp-session-id" not in second.headers
        server.on_call = lambda exchange: exchange.json(response(1))
        await transport.request(call(1, "work"))
        assert server.recorder.hits[-1].headers["mcp-session-id"] == "sess-2"
    deletes = server.recorder.of("DELETE")
    assert [d.headers["mcp-session-id"] for d in deletes] == ["sess-2"]


async def test_http_error_carries_the_start_of_its_body() -> None:
    async with scripted() as (url, server), connected(url) as transport:
        await handshake(transport)
        body = b"Bad Request: " + b"y" * 400
        server.on_call = lambda exchange: exchange.status(400, body, "text/plain")
        with pytest.raises(McpError) as raised:
            await transport.request(call(1, "work"))
        assert raised.value.code == HTTP_ERROR
        assert raised.value.data == {"status": 400, "body": body.decode()[:200]}


async def test_a_session_id_the_spec_forbids_is_a_protocol_violation() -> None:
    async def bad_initialize(scope: Any, receive: Any, send: Send) -> None:
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"mcp-session-id", b"a b")],
            }
        )
        body = {"jsonrpc": "2.0", "id": "init", "result": {"protocolVersion": VERSION}}
        await send({"type": "http.response.body", "body": orjson.dumps(body)})

    async with serve(bad_initialize) as base, connected(base + "/mcp") as transport:
        with pytest.raises(McpError) as raised:
            await transport.request(initialize_request())
        assert raised.value.code == PROTOCOL_VIOLATION


# --- SSE framing: what resumption reads ----------------------------------------------------


def frames(*chunks: bytes) -> tuple[list[SSEFrame], SSEDecoder]:
    decoder = SSEDecoder()
    found: list[SSEFrame] = []
    for chunk in chunks:
        found.extend(decoder.feed_frames(chunk))
    return found + decoder.close_frames(), decoder


def test_sse_frames_carry_ids_retry_and_priming_events() -> None:
    stream = b"id: p\nretry: 500\ndata: \n\nid: q\n\ndata: {}\n\nid: r\ndata: 1\n\n"
    for cut in range(len(stream) + 1):
        found, decoder = frames(stream[:cut], stream[cut:])
        assert found == [
            SSEFrame("message", b"", "p"),
            SSEFrame("message", None, "q"),
            SSEFrame("message", b"{}", None),
            SSEFrame("message", b"1", "r"),
        ]
        assert decoder.retry == 500 and decoder.last_event_id == "r"
    # `feed` is unchanged: events with data only, no ids.
    assert [tuple(e) for e in SSEDecoder().feed(stream)] == [
        ("message", b""),
        ("message", b"{}"),
        ("message", b"1"),
    ]


def test_sse_ids_and_retry_a_client_cannot_use_are_ignored() -> None:
    found, decoder = frames(
        b"id: ok\ndata: 1\n\n",
        b"id: bad\x00id\ndata: 2\n\n",  # a NUL: the field is ignored
        b"id: " + b"z" * 2000 + b"\ndata: 3\n\n",  # too long to send back
        b"retry: 1" + b"0" * 5000 + b"\nretry: 12x\n\n",  # huge, and not digits
    )
    assert [f.id for f in found] == ["ok", None, None]
    assert decoder.last_event_id == "ok" and decoder.retry is None
    found, decoder = frames(b"id: a\ndata: 1\n\nid:\ndata: 2\n\n")  # an empty id resets
    assert [f.id for f in found] == ["a", None] and decoder.last_event_id == ""
