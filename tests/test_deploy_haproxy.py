"""The shipped `deploy/haproxy.cfg`, through a real haproxy in front of a real `mrtr serve`:

* a live question on a legacy session's SSE stream reaches the client at once (without
  `option http-no-delay` haproxy holds each event for the kernel's ~200 ms);
* a client that disconnects mid-request cancels the handler on the instance (without
  `option abortonclose` the handler runs on to its end);
* the instance counts each client by its own address, not haproxy's (`option forwardfor`),
  and an `X-Forwarded-For` the client sends itself changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers.cluster import Cluster, haproxy_binary, wait_for_file, write_config
from helpers.mrtr_flows import http_tool_call
from helpers.transport_flow import GUARD
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

TARGET = "tests/servers/deploy_server.py:server"
KEY = "deploy-key-" + "d" * 32
QUESTIONS = 8
# The kernel holds data haproxy sends with MSG_MORE for 200 ms: half of it separates an
# event that was held from one that was not, whatever the machine's load adds to a few.
STALL = 0.2


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deploy")


@pytest.fixture(scope="module")
def single(workdir: Path) -> Iterator[Cluster]:
    """One instance behind haproxy with the shipped config (its server lines cut to one)."""
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    config = write_config(1, workdir / "haproxy.cfg")
    env = {"MRTR_REQUEST_STATE_KEY": KEY, "MRTR_TEST_DIR": str(workdir)}
    running = Cluster.start(TARGET, workdir, env, n=1, config=config)
    try:
        yield running
    finally:
        running.stop()


async def test_a_live_question_on_a_legacy_stream_is_not_held(single: Cluster) -> None:
    delays: list[float] = []

    def answer(params: ElicitRequestParams) -> ElicitResult:
        # The message is the server's monotonic clock when it asked (one clock per machine).
        delays.append(time.monotonic() - float(params.message))
        return ElicitResult(action="accept", content={"ok": True})

    client = Client.http(
        single.url, elicitation_handler=answer, options=ClientOptions(protocol="legacy")
    )
    async with client:
        for _ in range(QUESTIONS):
            result = await asyncio.wait_for(client.call_tool("stamped", {}), GUARD)
            assert result.structured_content == {"result": True}
        assert client.era == "legacy"
    assert len(delays) == QUESTIONS
    # Held events each take the full stall; the quickest of several shows whether they are.
    assert min(delays) < STALL / 2, delays


def _post_hold(port: int, name: str) -> socket.socket:
    body = json.dumps({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "hold",
            "arguments": {"name": name},
            "_meta": {
                meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
                meta_keys.CLIENT_INFO: {"name": "deploy-test", "version": "1"},
                meta_keys.CLIENT_CAPABILITIES: {},
            },
        },
    }).encode()  # fmt: skip
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {LATEST_PROTOCOL_VERSION}\r\nMcp-Method: tools/call\r\n"
        f"Mcp-Name: hold\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
    sock.sendall(head + body)
    return sock


async def test_a_client_that_disconnects_cancels_the_handler(
    single: Cluster, workdir: Path
) -> None:
    sock = _post_hold(single.port, "gone")
    try:
        await asyncio.to_thread(wait_for_file, workdir / "gone.started", "the handler started")
    finally:
        sock.close()
    # haproxy passes the client's close on: the instance cancels the handler.
    await asyncio.to_thread(wait_for_file, workdir / "gone.cancelled", "the handler was cancelled")


@pytest.mark.parametrize("claimed", [None, "10.9.9.9"], ids=["plain", "spoofing"])
async def test_the_instance_sees_each_clients_own_address(
    single: Cluster, claimed: str | None
) -> None:
    """A client on 127.0.0.2 reaches the instance through haproxy (on 127.0.0.1): the server
    sees 127.0.0.2, whatever `X-Forwarded-For` the client itself sent."""
    body, headers = http_tool_call("caller", caps={})
    if claimed is not None:
        headers["x-forwarded-for"] = claimed
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(transport=transport, timeout=GUARD) as http:
        response = await http.post(single.url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["content"][0]["text"] == "127.0.0.2", response.text
