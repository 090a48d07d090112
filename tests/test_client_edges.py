"""The client at its edges, against real servers on loopback: an error that talks about a
session is the tool's answer (never an era verdict that sends the call again);
`request_timeout` bounds each round of a call; a redirect to another origin is never followed
(one within the same origin is, once); a legacy stdio
server is probed once per command, not on every connection; `protocol="modern"` against a
legacy-only server says so, naming its revisions."""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from helpers.transport_flow import serve
from mrtr import Client, ClientOptions, Server
from mrtr.client import era as eras
from mrtr.client.options import Protocol
from mrtr.protocol.errors import (
    HTTP_ERROR,
    INVALID_PARAMS,
    LEGACY_ONLY_SERVER,
    REQUEST_TIMEOUT,
    McpError,
)
from mrtr.transport.stdio_client import StdioTransport

SCRIPT = Path(__file__).resolve().parent / "servers" / "edge_server.py"
_spec = importlib.util.spec_from_file_location("edge_server", SCRIPT)
assert _spec is not None and _spec.loader is not None
edges = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(edges)


async def test_a_first_call_whose_tool_fails_about_a_session_runs_once() -> None:
    edges.runs.clear()
    async with serve(edges.server.asgi_app()) as base:
        url = f"{base}/mcp"
        async with Client.http(url) as client:
            with pytest.raises(McpError) as raised:
                await client.call_tool("checkout", {"cart": "c1"})
            assert client.era is None  # the tool's answer says nothing about the era
            assert eras.cached(url) is None
            assert edges.runs["checkout"] == 1
            # The next exchange settles the era from a plain answer.
            await client.list_tools()
            assert client.era == "modern"
    assert raised.value.code == INVALID_PARAMS
    assert "checkout session for cart c1 expired" in raised.value.message
    assert edges.runs["checkout"] == 1


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_request_timeout_bounds_each_round_of_call_tool(protocol: Protocol) -> None:
    edges.runs.clear()
    options = ClientOptions(request_timeout=0.5, protocol=protocol)
    sleep = 20.0  # the tool's sleep: the call must end long before it
    async with serve(edges.server.asgi_app()) as base:
        client = Client.http(f"{base}/mcp", options=options)
        async with client:
            await client.list_tools()  # the era settled: the call takes the usual path
            started = time.monotonic()
            with pytest.raises(McpError) as raised:
                await client.call_tool("dawdle", {"seconds": sleep})
            elapsed = time.monotonic() - started
    assert raised.value.code == REQUEST_TIMEOUT
    assert "within 0.5 s" in raised.value.message
    assert "ClientOptions.request_timeout" in raised.value.message
    assert elapsed < sleep / 2  # bounded by the option, not by the tool
    assert edges.runs["dawdle"] == 1


@pytest.mark.parametrize("status", [503, 413])
async def test_an_http_refusal_in_json_rpc_dress_is_no_era_verdict(status: int) -> None:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "busy"}}
    busy = Recorder(
        lambda method, body: (status, [(b"content-type", b"application/json")], orjson.dumps(error))
    )
    async with serve(busy) as base:
        url = f"{base}/mcp"
        async with Client.http(url) as client:
            with pytest.raises(McpError) as raised:
                await client.call_tool("pay", {"amount": 5})
            assert client.era is None
    assert [method for method, _ in busy.hits] == ["POST"]  # no initialize, nothing re-sent
    assert raised.value.code == HTTP_ERROR and raised.value.data["status"] == status
    assert "busy" in raised.value.message
    assert eras.cached(url) is None


# --- redirects --------------------------------------------------------------------------------


class Recorder:
    """An ASGI app that records every request it gets and answers each with `reply`."""

    def __init__(self, reply: Callable[[str, str], tuple[int, list[tuple[bytes, bytes]], bytes]]):
        self.reply = reply
        self.hits: list[tuple[str, dict[str, str]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.hits.append((scope["method"], headers))
        status, extra, content = self.reply(scope["method"], body.decode())
        await send({"type": "http.response.start", "status": status, "headers": extra})
        await send({"type": "http.response.body", "body": content})


def elsewhere() -> Recorder:
    """The origin a redirect points at: it must never be contacted."""
    return Recorder(lambda method, body: (200, [(b"content-type", b"application/json")], b"{}"))


@pytest.mark.parametrize("status", [307, 308])
async def test_a_redirect_on_an_mcp_request_is_never_followed(status: int) -> None:
    other = elsewhere()
    async with serve(other) as other_base:
        target = f"{other_base}/mcp"
        moved = Recorder(lambda method, body: (status, [(b"location", target.encode())], b""))
        async with serve(moved) as base:
            client = Client.http(f"{base}/mcp", headers={"X-Api-Key": "k-123"})
            async with client:
                with pytest.raises(McpError) as raised:
                    await client.call_tool("pay", {"amount": 5})
    assert other.hits == []  # neither the body nor the key went to the other origin
    assert [method for method, _ in moved.hits] == ["POST"]
    assert raised.value.code == HTTP_ERROR
    assert f"HTTP {status}" in raised.value.message
    assert f"redirects to {target}" in raised.value.message
    assert raised.value.data == {"status": status, "location": target}


async def test_a_legacy_session_follows_no_redirect_on_post_get_or_delete() -> None:
    other = elsewhere()
    async with serve(other) as other_base:
        target = f"{other_base}/mcp".encode()

        def reply(method: str, body: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            if method == "POST" and '"initialize"' in body:
                result = {
                    "jsonrpc": "2.0",
                    "id": orjson.loads(body)["id"],
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "moving", "version": "1"},
                    },
                }
                json = [(b"content-type", b"application/json"), (b"mcp-session-id", b"s-1")]
                return 200, json, orjson.dumps(result)
            if method == "POST" and '"notifications/initialized"' in body:
                return 202, [], b""
            return 307, [(b"location", target)], b""

        moved = Recorder(reply)
        options = ClientOptions(protocol="legacy")
        async with serve(moved) as base:
            client = Client.http(f"{base}/mcp", headers={"X-Api-Key": "k-123"}, options=options)
            async with client:
                with pytest.raises(McpError) as raised:
                    await client.list_tools()
    assert other.hits == []
    assert {method for method, _ in moved.hits} == {"POST", "GET", "DELETE"}
    assert raised.value.code == HTTP_ERROR and "redirects to" in raised.value.message


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_redirect_within_the_same_origin_is_followed_once_and_kept(
    status: int, protocol: Protocol
) -> None:
    # A framework that mounts the endpoint at `/mcp/` redirects `/mcp` there (mcp 1.10's
    # servers do): the same server, so the request and its headers may follow.
    server = Server("moved")

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    app = server.asgi_app()
    redirected: list[str] = []

    async def slash(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            redirected.append(scope["method"])
            headers = [(b"location", b"/mcp/"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] == "http":
            scope = {**scope, "path": "/mcp", "raw_path": b"/mcp"}
        await app(scope, receive, send)

    async with serve(slash) as base:
        options = ClientOptions(protocol=protocol)
        async with Client.http(f"{base}/mcp", options=options) as client:
            first = await client.call_tool("add", {"a": 1, "b": 2})
            second = await client.call_tool("add", {"a": 2, "b": 2})
    assert [first.content[0].text, second.content[0].text] == ["3", "4"]  # type: ignore[union-attr]
    assert redirected == ["POST"]  # once: the client keeps the address it was sent to


# --- the era, cached per stdio command ----------------------------------------------------------

LOGGED = Path(__file__).resolve().parent / "servers" / "official_legacy_logged.py"


async def test_a_legacy_stdio_server_is_probed_once_per_command(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mrtr.stdio.server")
    eras.forget(eras.endpoint_key(StdioTransport(sys.executable, [str(LOGGED)])))
    options = ClientOptions(probe_timeout=30.0)  # a slow start under load is no silence
    for _ in range(2):
        async with Client.stdio(sys.executable, [str(LOGGED)], options=options) as client:
            result = await client.call_tool("add", {"a": 1, "b": 2})
            assert client.era == "legacy"
        assert result.content[0].text == "3"  # type: ignore[union-attr]
    told = [r.getMessage() for r in caplog.records if r.name == "mrtr.stdio.server"]
    received = [line.removeprefix("received: ") for line in told if line.startswith("received")]
    # The first connection probes (a ping, which a legacy server answers: no server/discover);
    # the second starts with initialize, as the first ended.
    session = ["initialize", "notifications/initialized", "tools/call"]
    assert received == ["ping", *session, *session]
    assert not any("validation error" in line.lower() for line in told)


# --- protocol="modern" against a legacy-only server ---------------------------------------------

OFFICIAL = Path(__file__).resolve().parent / "servers" / "official_shop.py"


async def test_insisting_on_modern_with_a_legacy_only_server_says_which_revisions() -> None:
    options = ClientOptions(protocol="modern", probe_timeout=30.0)  # generous: a slow start
    async with Client.stdio(sys.executable, [str(OFFICIAL), "legacy"], options=options) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("add", {"a": 1, "b": 2})
        assert client.era is None  # not "modern"
        with pytest.raises(McpError) as again:
            await client.list_tools()
    error = raised.value
    assert error.code == LEGACY_ONLY_SERVER
    assert "speaks only initialize-based (legacy) protocol revisions (2025-11-25)" in error.message
    assert "protocol='auto'" in error.message
    assert error.data == {"supported": ["2025-11-25"], "requested": "2026-07-28", "era": "legacy"}
    assert again.value.message == error.message
