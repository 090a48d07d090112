"""The client at its edges, against real servers on loopback: an error that talks about a
session is the tool's answer (never an era verdict that sends the call again);
`request_timeout` bounds each round of a call."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from mrtr import Client, ClientOptions
from mrtr.client import era as eras
from mrtr.client.options import Protocol
from mrtr.protocol.errors import INVALID_PARAMS, REQUEST_TIMEOUT, McpError
from transport_flow import serve

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
