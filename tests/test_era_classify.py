"""`protocol/era.classify`: a request's era decided once, by the transport that decodes it, and
dispatched on as it is handed."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from helpers.http_calls import call, post
from mrtr import Server
from mrtr.protocol import errors, jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.era import Era, classify
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server import connection as connection_module
from mrtr.server import entry as entry_module
from mrtr.server.connection import ServerConnection
from mrtr.server.session import LegacySession
from mrtr.transport import http_app as http_app_module
from mrtr.transport.http_app import StreamableHTTPApp

VERSION = meta_keys.PROTOCOL_VERSION
CAPS = meta_keys.CLIENT_CAPABILITIES
MODERN_META = {VERSION: LATEST_PROTOCOL_VERSION, CAPS: {}}
LEGACY_INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}


def request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return jsonrpc.request(1, method, params)


@pytest.mark.parametrize(
    ("message", "has_session", "era"),
    [
        (request("tools/list", {"_meta": MODERN_META}), False, "modern"),
        (request("tools/list"), False, "modern"),  # checked as modern: -32602 for its _meta
        (request("initialize", LEGACY_INIT), False, "opens-session"),
        (request("initialize"), False, "opens-session"),
        (request("initialize", {"_meta": MODERN_META}), False, "modern"),
        # Any declared version is a modern client's, served or not.
        (request("initialize", {"_meta": {VERSION: "2099-01-01"}}), False, "modern"),
        (request("tools/list"), True, "legacy"),
        (request("initialize", LEGACY_INIT), True, "legacy"),
        (request("tools/list", {"_meta": MODERN_META}), True, "modern"),
        # On a session only a served version makes a request modern.
        (request("tools/list", {"_meta": {VERSION: "2099-01-01"}}), True, "legacy"),
        (request("tools/list", {"_meta": "not an object"}), True, "legacy"),
    ],
)
def test_classify_names_the_era_of_each_kind_of_request(
    message: dict[str, Any], has_session: bool, era: Era
) -> None:
    assert classify(message, has_session) == era


def counting(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[Era]:
    """Record every call of `classify` made through `modules` (the real function runs)."""
    seen: list[Era] = []

    def recorded(message: dict[str, Any], has_session: bool) -> Era:
        era = classify(message, has_session)
        seen.append(era)
        return era

    for module in modules:
        monkeypatch.setattr(module, "classify", recorded)
    return seen


async def test_a_connection_classifies_each_request_once_and_the_entry_trusts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server("s")
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        answered.set()

    seen = counting(monkeypatch, connection_module, entry_module)
    connection = ServerConnection(server, send)
    for params in (LEGACY_INIT, {"_meta": MODERN_META}, {}):
        answered.clear()
        method = "initialize" if params is LEGACY_INIT else "tools/list"
        await connection.feed(jsonrpc.request(len(seen) + 1, method, params))
        await asyncio.wait_for(answered.wait(), 10)
    await connection.aclose()
    assert seen == ["opens-session", "modern", "legacy"]
    assert all("result" in message for message in sent)
    assert connection.session is not None


async def test_the_http_app_classifies_a_request_once(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server("s")

    @server.tool
    def add(a: int, b: int) -> int:
        return a + b

    seen = counting(monkeypatch, http_app_module, entry_module)
    status, _, body = await post(StreamableHTTPApp(server), call("add", {"a": 1, "b": 2}))
    assert status == 200 and orjson.loads(body)["result"]["structuredContent"] == {"result": 3}
    assert seen == ["modern"]


async def test_the_entry_dispatches_on_the_era_it_is_handed() -> None:
    server = Server("s")
    message = request("tools/list")  # of a legacy session's era, were it classified here
    session = LegacySession()
    legacy = await server.handle_request(message, None, None, session)
    assert "before initialize" in legacy["error"]["message"]
    # Handed as modern, it is served as modern: its missing `_meta` is the modern error.
    modern = await server.handle_request(message, None, None, session, "modern")
    assert modern["error"]["code"] == errors.INVALID_PARAMS
    assert '"_meta" is required' in modern["error"]["message"]


async def test_a_stream_answers_an_initialize_declaring_a_version_as_http_does() -> None:
    """An `initialize` whose `_meta` names a version this server does not serve is a modern
    client's on every transport: refused with -32022, no session opened."""
    server = Server("s")
    params = {"_meta": {VERSION: "2099-01-01", CAPS: {}}, **LEGACY_INIT}
    message = jsonrpc.request(1, "initialize", params)
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def send(outgoing: dict[str, Any]) -> None:
        sent.append(outgoing)
        answered.set()

    connection = ServerConnection(server, send)
    await connection.feed(message)
    await asyncio.wait_for(answered.wait(), 10)
    await connection.aclose()
    assert connection.session is None
    assert sent[0]["error"]["code"] == errors.UNSUPPORTED_PROTOCOL_VERSION
    headers = {b"mcp-method": b"initialize", b"mcp-protocol-version": b"2099-01-01"}
    status, body = await bare_post(StreamableHTTPApp(server), message, headers)
    assert status == 400
    assert orjson.loads(body)["error"]["code"] == errors.UNSUPPORTED_PROTOCOL_VERSION


async def bare_post(
    app: StreamableHTTPApp, message: dict[str, Any], extra: dict[bytes, bytes]
) -> tuple[int, bytes]:
    """POST `message` with the headers every POST needs and `extra`: its status and body."""
    body = orjson.dumps(message)
    headers = {
        b"content-type": b"application/json",
        b"accept": b"application/json, text/event-stream",
        b"content-length": b"%d" % len(body),
        **extra,
    }
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": list(headers.items())}
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(event: dict[str, Any]) -> None:
        out.append(event)

    await asyncio.wait_for(app(scope, receive, send), 10)
    return out[0]["status"], b"".join(event.get("body", b"") for event in out[1:])
