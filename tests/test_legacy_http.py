"""Legacy (`initialize`-based) Streamable HTTP sessions on the shared endpoint, over raw HTTP
against a real uvicorn on loopback: the session lifecycle, 404s, DELETE, the GET stream, event
ids and `Last-Event-ID` resumption, client responses, bounds, and modern requests served beside
them. The event log's rules (`sse_events.py`) are tested directly at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from helpers.transport_flow import GUARD, serve
from mrtr import RequestContext, Server, ServerOptions
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server import InputRequiredConfig
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.http_legacy import MAX_SESSION_REQUESTS, close_sse_stream
from mrtr.transport.sse_events import STANDALONE, EventLog, ReplayGap, parse_event_id

LEGACY = "2025-11-25"
NAME = {"type": "object", "properties": {"name": {"type": "string"}}}


class Probe:
    """What the tools of `build_server` saw, and the gate they wait on."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.failures: list[str] = []


def build_server(probe: Probe, **options: Any) -> Server:
    server = Server("legacy-http", version="1.0.0", options=ServerOptions(**options))

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @server.tool()
    async def ask_name(ctx: RequestContext) -> str:
        """Ask the user for a name."""
        answer = await ctx.elicit("Name?", NAME)
        return f"hello {(answer.content or {}).get('name')}"

    @server.tool()
    async def gated(ctx: RequestContext) -> str:
        """Log, then wait for the test to open the gate."""
        await ctx.log("info", "waiting")
        probe.started.set()
        await probe.gate.wait()
        return "released"

    @server.tool()
    async def polled(ctx: RequestContext) -> str:
        """End the connection early, then answer once the gate opens."""
        assert close_sse_stream()
        await probe.gate.wait()
        return "answered after the cut"

    @server.tool()
    async def forever(ctx: RequestContext) -> str:
        """Wait until cancelled."""
        probe.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            probe.cancelled.set()
            raise
        return "never"

    @server.tool()
    async def ask_forever(ctx: RequestContext) -> str:
        """Ask, and report how the wait ended."""
        probe.started.set()
        try:
            await ctx.elicit("Still there?", NAME)
        except BaseException as exc:
            probe.failures.append(type(exc).__name__)
            raise
        return "answered"

    @server.resource("file:///watched")
    def watched() -> str:
        return "watched"

    return server


# --- raw HTTP ----------------------------------------------------------------------------------


class Event:
    def __init__(self, fields: dict[str, str]) -> None:
        self.id = fields.get("id")
        self.retry = fields.get("retry")
        self.data = fields.get("data", "")

    @property
    def message(self) -> dict[str, Any]:
        value = orjson.loads(self.data)
        assert isinstance(value, dict)
        return value


class Stream:
    """The SSE body of one response, read event by event."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.buffer = b""

    async def next(self) -> Event | None:
        """The next event (comments skipped), or None when the stream ended."""
        while True:
            while b"\n\n" in self.buffer:
                block, self.buffer = self.buffer.split(b"\n\n", 1)
                fields: dict[str, str] = {}
                for line in block.decode().split("\n"):
                    if line.startswith(":"):
                        continue
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                if fields:
                    return Event(fields)
            chunk = await asyncio.wait_for(self.response.content.readany(), GUARD)
            if not chunk:
                return None
            self.buffer += chunk

    async def rest(self) -> list[Event]:
        events = []
        while (event := await self.next()) is not None:
            events.append(event)
        return events


class Legacy:
    """A hand-driven legacy client of one endpoint."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self.ids = iter(range(1, 10_000))

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LEGACY,
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        headers.update(extra)
        return {k: v for k, v in headers.items() if v}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        status, headers, body = await self.send(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": capabilities if capabilities is not None else {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
            session=False,
        )
        assert status == 200, body
        self.session_id = headers["Mcp-Session-Id"]
        await self.notify("notifications/initialized")
        return body

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params or {}}

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: bool = True,
        **headers: str,
    ) -> tuple[int, Any, Any]:
        """POST a request; its status, headers and JSON body (a JSON answer expected)."""
        saved = self.session_id
        if not session:
            self.session_id = None
        try:
            return await self.post(self.request(method, params), **headers)
        finally:
            self.session_id = saved

    async def post(self, message: dict[str, Any], **headers: str) -> tuple[int, Any, Any]:
        async with self.http.post(
            self.url, data=orjson.dumps(message), headers=self.headers(**headers)
        ) as r:
            raw = await r.read()
            return r.status, r.headers, orjson.loads(raw) if raw else None

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> int:
        message = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        status, _, body = await self.post(message)
        assert (body is None) == (status == 202)
        return status

    @contextlib.asynccontextmanager
    async def stream(self, message: dict[str, Any]) -> AsyncIterator[Stream]:
        """POST a request whose answer is an SSE stream."""
        async with self.http.post(
            self.url, data=orjson.dumps(message), headers=self.headers()
        ) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/event-stream"
            yield Stream(r)

    @contextlib.asynccontextmanager
    async def get(self, **headers: str) -> AsyncIterator[aiohttp.ClientResponse]:
        async with self.http.get(
            self.url, headers=self.headers(Accept="text/event-stream", **headers)
        ) as r:
            yield r


@contextlib.asynccontextmanager
async def endpoint(server: Server, **app_options: Any) -> AsyncIterator[tuple[Legacy, Any]]:
    app = StreamableHTTPApp(server, **app_options)
    async with serve(app) as base, aiohttp.ClientSession() as http:
        yield Legacy(http, base + "/mcp"), app
        app.close()


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def server(probe: Probe) -> Server:
    return build_server(probe)


def modern_call(name: str, arguments: dict[str, Any], id: int = 99) -> tuple[Any, dict[str, str]]:
    meta = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_CAPABILITIES: {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return body, headers


# --- the session lifecycle ---------------------------------------------------------------------


async def test_initialize_opens_a_session_that_delete_ends(server: Server) -> None:
    async with endpoint(server) as (client, app):
        init = await client.initialize()
        assert init["result"]["protocolVersion"] == LEGACY
        assert init["result"]["serverInfo"]["name"] == "legacy-http"
        session_id = client.session_id
        assert session_id is not None and all(0x21 <= ord(c) <= 0x7E for c in session_id)
        assert len(session_id) >= 16
        status, _, listed = await client.send("tools/list")
        assert status == 200
        assert "add" in [tool["name"] for tool in listed["result"]["tools"]]
        assert "resultType" not in listed["result"]  # a legacy result, not a 2026-07-28 one
        status, _, called = await client.send(
            "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}
        )
        assert called["result"]["content"][0]["text"] == "5"

        async with client.http.delete(client.url, headers=client.headers()) as r:
            assert r.status == 204
        assert len(app.sessions.store) == 0
        # The ended session's id: 404 with a JSON-RPC error saying what to do, on every verb.
        status, _, body = await client.send("tools/list")
        assert status == 404
        assert body["error"]["code"] == INVALID_REQUEST
        assert "send initialize" in body["error"]["message"]
        async with client.http.delete(client.url, headers=client.headers()) as r:
            assert r.status == 404
        async with client.get() as r:
            assert r.status == 404


async def test_unknown_session_ids_are_404(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        for forged in ("not-a-session", "x" * 5000, client.session_id + "x"):  # type: ignore[operator]
            client.session_id = forged
            status, _, body = await client.send("tools/list")
            assert status == 404, forged
            assert body["error"]["code"] == INVALID_REQUEST
            assert await client.notify("notifications/initialized") == 404


async def test_protocol_version_header_must_match_the_session(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        status, _, body = await client.send("tools/list", **{"MCP-Protocol-Version": "2025-06-18"})
        assert status == 400
        assert "negotiated (2025-11-25)" in body["error"]["message"]
        assert body["id"] is not None
        # Without the header the negotiated version applies.
        status, _, body = await client.send("tools/list", **{"MCP-Protocol-Version": ""})
        assert status == 200 and "tools" in body["result"]


async def test_a_second_initialize_on_a_session_is_refused(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        status, _, body = await client.send("initialize", {"protocolVersion": LEGACY})
        assert status == 200  # a JSON-RPC error on a legacy session goes out with 200
        assert body["error"]["code"] == INVALID_REQUEST
        assert "already initialized" in body["error"]["message"]
        status, _, _ = await client.send("tools/list")
        assert status == 200  # the session is unharmed


async def test_initialize_without_the_legacy_shim_is_400_naming_supported(probe: Probe) -> None:
    server = build_server(probe, input_required=InputRequiredConfig(legacy_shim=False))
    async with endpoint(server) as (client, app):
        for extra in ({}, {"Mcp-Method": "initialize"}):
            status, headers, body = await client.send(
                "initialize", {"protocolVersion": LEGACY, "capabilities": {}}, **extra
            )
            assert status == 400
            assert "Mcp-Session-Id" not in headers
            assert body["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
            assert body["error"]["data"]["supported"] == [LATEST_PROTOCOL_VERSION]
        assert len(app.sessions.store) == 0
        # And a session id means nothing to a server without legacy sessions: modern rules.
        client.session_id = "anything"
        status, _, body = await client.send("tools/list")
        assert status == 400 and body["error"]["code"] == HEADER_MISMATCH
        async with client.get() as r:
            assert r.status == 405


async def test_a_request_of_neither_era_says_how_to_start_either(server: Server) -> None:
    async with endpoint(server) as (client, _):
        status, _, body = await client.send("tools/list", session=False)
        assert status == 400
        assert body["error"]["code"] == HEADER_MISMATCH
        message = body["error"]["message"]
        assert "Mcp-Method header is required" in message
        assert "sends initialize first" in message


async def test_a_modern_initialize_is_method_not_found(server: Server) -> None:
    async with endpoint(server) as (client, app):
        message = client.request(
            "initialize",
            {
                "_meta": {
                    meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
                    meta_keys.CLIENT_CAPABILITIES: {},
                }
            },
        )
        modern = {"Mcp-Method": "initialize", "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION}
        status, _, body = await client.post(message, **modern)
        assert status == 404 and body["error"]["code"] == METHOD_NOT_FOUND
        assert len(app.sessions.store) == 0


async def test_modern_requests_are_served_beside_open_sessions(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        async with client.get() as listening:
            assert listening.status == 200
            body, headers = modern_call("add", {"a": 20, "b": 22})
            async with client.http.post(client.url, data=orjson.dumps(body), headers=headers) as r:
                answer = orjson.loads(await r.read())
            assert r.status == 200
            assert answer["result"]["structuredContent"] == {"result": 42}
            assert answer["result"]["resultType"] == "complete"
            assert "Mcp-Session-Id" not in r.headers
        status, _, listed = await client.send("tools/list")
        assert status == 200 and listed["result"]["tools"]


# --- streams ----------------------------------------------------------------------------------


async def test_the_get_stream_carries_list_changes_with_ids(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        async with client.get() as r:
            assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
            stream = Stream(r)
            priming = await stream.next()
            assert priming is not None and priming.data == "" and priming.retry == "1000"
            assert priming.id is not None and parse_event_id(priming.id) is not None
            async with client.get() as second:
                assert second.status == 409  # one GET stream per session
                assert "already open" in (await second.json())["error"]["message"]
            server.notify_tools_changed()
            event = await stream.next()
            assert (
                event is not None and event.message["method"] == "notifications/tools/list_changed"
            )
            assert event.id is not None and event.id.startswith(f"{STANDALONE}-")


async def test_changes_sent_while_no_get_stream_is_open_wait_for_one(server: Server) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        status, _, _ = await client.send("resources/subscribe", {"uri": "file:///watched"})
        assert status == 200
        server.notify_resource_updated("file:///watched")
        server.notify_prompts_changed()
        await asyncio.sleep(0.05)  # the sends are scheduled by the server
        async with client.get() as r:
            stream = Stream(r)
            assert (await stream.next()).data == ""  # type: ignore[union-attr]
            first, second = await stream.next(), await stream.next()
            assert first is not None and second is not None
            assert first.message == {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "file:///watched"},
            }
            assert second.message["method"] == "notifications/prompts/list_changed"


async def test_an_elicitation_goes_out_on_the_request_stream_and_is_answered(
    server: Server,
) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize({"elicitation": {"form": {}}})
        async with client.stream(client.request("tools/call", {"name": "ask_name"})) as stream:
            priming = await stream.next()
            assert priming is not None and priming.data == "" and priming.id == "1-0"
            asked = await stream.next()
            assert asked is not None and asked.id is not None and asked.id.startswith("1-")
            request = asked.message
            assert request["method"] == "elicitation/create"
            assert request["params"]["message"] == "Name?"
            # A response nobody waits for, and a malformed one, change nothing: 202.
            for stray in (
                {"jsonrpc": "2.0", "id": "s-999", "result": {"action": "cancel"}},
                {"jsonrpc": "2.0", "id": 12345, "error": {"code": -1, "message": "?"}},
            ):
                assert (await client.post(stray))[0] == 202
            reply = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
            status, _, body = await client.post(reply)
            assert status == 202 and body is None
            # The same answer again is late: ignored.
            assert (await client.post(reply))[0] == 202
            rest = await stream.rest()
        assert [e.message["result"]["content"][0]["text"] for e in rest] == ["hello Ada"]


async def test_a_dropped_stream_is_resumed_with_last_event_id(server: Server, probe: Probe) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        call = client.request("tools/call", {"name": "gated"})
        async with client.stream(call) as stream:
            await stream.next()  # priming
            logged = await stream.next()
            assert logged is not None and logged.message["method"] == "notifications/message"
            last = logged.id
            assert last is not None
        # The connection is gone; the request goes on (only notifications/cancelled stops it).
        await asyncio.wait_for(probe.started.wait(), GUARD)
        probe.gate.set()
        await asyncio.sleep(0.05)
        async with client.get(**{"Last-Event-ID": last}) as r:
            assert r.status == 200
            events = await Stream(r).rest()
        assert events[0].data == "" and events[0].id == last  # primed where it resumes
        assert [e.message for e in events[1:]] == [
            {
                "jsonrpc": "2.0",
                "id": call["id"],
                "result": {"content": [{"type": "text", "text": "released"}]},
            }
        ]
        # Nothing of another stream is replayed: the standalone stream's own GET is separate.
        async with client.get(**{"Last-Event-ID": "1-999999"}) as r:
            assert r.status == 400
        for bad in ("garbage", "77-1", "-1", "1-"):
            async with client.get(**{"Last-Event-ID": bad}) as r:
                assert r.status == 400, bad
                assert "cannot be replayed" in (await r.json())["error"]["message"]


async def test_a_handler_may_end_its_connection_and_the_client_polls(
    server: Server, probe: Probe
) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        call = client.request("tools/call", {"name": "polled"})
        async with client.stream(call) as stream:
            events = await stream.rest()
        assert len(events) == 1 and events[0].data == "" and events[0].retry == "1000"
        last = events[0].id
        assert last is not None
        async with client.get(**{"Last-Event-ID": last}) as r:
            stream = Stream(r)
            assert (await stream.next()).id == last  # type: ignore[union-attr]
            probe.gate.set()
            answer = await stream.next()
            assert answer is not None
            assert answer.message["result"]["content"][0]["text"] == "answered after the cut"
            assert await stream.next() is None  # the stream ends after its response


async def test_cancelled_notification_stops_the_handler(server: Server, probe: Probe) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize()
        call = client.request("tools/call", {"name": "forever"})
        posting = asyncio.ensure_future(client.post(call))
        await asyncio.wait_for(probe.started.wait(), GUARD)
        # A second request with the id still in use is refused.
        status, _, body = await client.post(call)
        assert status == 400 and "already in use" in body["error"]["message"]
        params = {"requestId": call["id"], "reason": "changed my mind"}
        assert await client.notify("notifications/cancelled", params) == 202
        await asyncio.wait_for(probe.cancelled.wait(), GUARD)
        status, _, _ = await asyncio.wait_for(posting, GUARD)
        assert status == 200
        status, _, _ = await client.send("tools/list")
        assert status == 200


async def test_delete_fails_what_waits_on_the_client(server: Server, probe: Probe) -> None:
    async with endpoint(server) as (client, _):
        await client.initialize({"elicitation": {}})
        call = client.request("tools/call", {"name": "ask_forever"})
        async with client.stream(call) as stream:
            await stream.next()
            asked = await stream.next()
            assert asked is not None and asked.message["method"] == "elicitation/create"
            async with client.http.delete(client.url, headers=client.headers()) as r:
                assert r.status == 204
            assert await stream.rest() == []  # the stream ends with the session
        assert probe.failures  # the handler's wait ended instead of hanging


# --- bounds -----------------------------------------------------------------------------------


async def test_sessions_past_the_bound_are_refused_none_ended(server: Server) -> None:
    async with endpoint(server, max_sessions=2) as (client, app):
        ids = []
        for _ in range(2):
            await client.initialize()
            ids.append(client.session_id)
        client.session_id = None
        status, _, body = await client.send("initialize", {"protocolVersion": LEGACY})
        assert status == 200 and "Too many legacy sessions" in body["error"]["message"]
        assert len(app.sessions.store) == 2
        for kept in ids:
            client.session_id = kept
            assert (await client.send("tools/list"))[0] == 200


async def test_idle_sessions_expire(server: Server) -> None:
    async with endpoint(server, session_idle_timeout=0.05) as (client, _):
        await client.initialize()
        assert (await client.send("tools/list"))[0] == 200
        await asyncio.sleep(0.15)
        assert (await client.send("tools/list"))[0] == 404


async def test_the_session_buffer_is_bounded(server: Server) -> None:
    async with endpoint(server, session_buffer_bytes=600) as (client, _):
        await client.initialize()
        for _ in range(20):
            server.notify_tools_changed()
        await asyncio.sleep(0.05)
        async with client.get() as r:
            stream = Stream(r)
            primed = await stream.next()
            assert primed is not None and primed.id is not None
            kept = []
            while sum(len(e.data) for e in kept) < 400:
                event = await stream.next()
                assert event is not None
                kept.append(event)
        # About 600 bytes of the 20 changes (each ~60) were kept; the oldest are gone.
        assert 6 <= len(kept) <= 11
        first_kept = parse_event_id(kept[0].id or "")
        assert first_kept is not None and first_kept[1] > 1
        async with client.get(**{"Last-Event-ID": f"{STANDALONE}-1"}) as r:
            assert r.status == 400
            assert "older than the events" in (await r.json())["error"]["message"]


async def test_running_requests_per_session_are_bounded(server: Server) -> None:
    async with endpoint(server) as (client, app):
        await client.initialize()
        assert client.session_id is not None
        # Fill the session with running requests without holding a connection for each.
        channel = app.sessions._channels[client.session_id]
        blockers = [asyncio.ensure_future(asyncio.sleep(3600)) for _ in range(MAX_SESSION_REQUESTS)]
        channel.tasks.update({f"busy-{i}": task for i, task in enumerate(blockers)})
        try:
            status, headers, body = await client.send("tools/list")
            assert status == 429 and headers["Retry-After"] == "1"
            assert "in progress" in body["error"]["message"]
        finally:
            for task in blockers:
                task.cancel()
            channel.tasks.clear()
        assert (await client.send("tools/list"))[0] == 200


# --- the event log, directly ------------------------------------------------------------------


def test_event_ids_name_their_stream_and_parse_back() -> None:
    log = EventLog(max_bytes=10_000)
    first, second = log.open(), log.open()
    first.add(b'{"a":1}')
    second.add(b'{"b":2}')
    first.add(b'{"c":3}', final=True)
    assert [n for n, _ in first.after(0)] == [1, 3]
    assert [n for n, _ in second.after(0)] == [2]
    assert first.frame(3, b"{}") == b"id: 1-3\ndata: {}\n\n"
    assert parse_event_id("1-3") == (1, 3)
    for bad in ("", "1", "a-1", "1-a", "1-2-3", "-1", "1" * 50 + "-1"):
        assert parse_event_id(bad) is None, bad
    assert first.finished and first.final == 3
    first.add(b"late")  # a finished stream takes nothing more
    assert first.last == 3


def test_the_log_drops_finished_streams_first_and_reports_gaps() -> None:
    log = EventLog(max_bytes=30)
    done, running = log.open(), log.open()
    done.add(b"x" * 10, final=True)
    running.add(b"y" * 10)
    running.add(b"z" * 10)
    assert log.size == 30
    running.add(b"w" * 10)  # past the bound: the finished stream's event goes first
    assert done.after(done.dropped) == [] and done.dropped == 1
    with pytest.raises(ReplayGap):
        done.after(0)
    running.add(b"v" * 10)  # then the oldest of the running one
    with pytest.raises(ReplayGap):
        running.after(0)
    assert [data for _, data in running.after(running.dropped)] == [b"z" * 10, b"w" * 10, b"v" * 10]
    assert log.size <= 30


def test_the_log_keeps_a_bounded_number_of_finished_streams() -> None:
    log = EventLog(max_bytes=10_000, max_streams=3)  # the standalone stream is one of them
    streams = [log.open() for _ in range(2)]
    for stream in streams:
        stream.add(b"{}", final=True)
    newer = log.open()
    assert log.get(streams[0].id) is None  # the oldest finished stream made room
    assert log.get(newer.id) is newer and log.get(STANDALONE) is log.standalone
    running = [log.open() for _ in range(3)]  # unfinished streams are never dropped
    assert all(log.get(s.id) is s for s in running)
