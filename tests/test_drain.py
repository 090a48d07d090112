"""SIGTERM drains `mrtr serve --transport http` (a rolling restart loses no request):

* one real `mrtr serve` process with a request in flight: on SIGTERM the health check
  (`GET /mcp`, which haproxy checks) answers 503, requests sent meanwhile, on a new
  connection or on one kept alive from before, are answered with `Connection: close`; the
  request in flight completes; a second SIGTERM ends the grace, and the process exits 0;
* a legacy session's request in flight also finishes once new connections are refused;
* two instances behind the shipped haproxy config, restarted one after the other
  (SIGTERM, then a new process on the same port) while clients send requests without pause
  on kept-alive connections: not one request fails.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from helpers.cluster import ROOT, Cluster, haproxy_binary, restart, wait_for_file, write_config
from helpers.legacy_sessions import HEADERS, message, open_session
from helpers.loopback_process import free_port, wait_listening
from helpers.transport_flow import GUARD
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

TARGET = "tests/servers/deploy_server.py:server"
KEY = "drain-key-" + "r" * 32
CLIENTS = 24
INSTANCES = 2  # behind the shipped config, its server lines cut to two


def call(name: str, arguments: dict[str, Any] | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a 2026-07-28 `tools/call` of `name`."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments or {},
            "_meta": {
                meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
                meta_keys.CLIENT_INFO: {"name": "drain-test", "version": "1"},
                meta_keys.CLIENT_CAPABILITIES: {},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return json.dumps(body).encode(), headers


def result_of(response: http.client.HTTPResponse) -> Any:
    """The tool's result in a 200 answer (fails on anything else)."""
    payload = response.read()
    assert response.status == 200, (response.status, payload)
    return json.loads(payload)["result"]["structuredContent"]["result"]


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    # A grace longer than the test: the second SIGTERM ends it.
    env.update(MRTR_REQUEST_STATE_KEY=KEY, MRTR_TEST_DIR=str(tmp_path), MRTR_DRAIN_GRACE="600")
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr", "serve", TARGET, "--transport", "http",
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        wait_listening(port, process)
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(GUARD)
        log.close()


def test_sigterm_fails_the_health_check_and_answers_every_request(
    serving: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    process, port = serving
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    body, headers = call("whoami")
    kept.request("POST", "/mcp", body, headers)
    assert result_of(kept.getresponse()) == process.pid  # `kept` stays open, idle

    answered: list[Any] = []

    def in_flight() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
        connection.request("POST", "/mcp", *call("wait_for", {"name": "slow"}))
        answered.append(result_of(connection.getresponse()))
        connection.close()

    waiter = threading.Thread(target=in_flight)
    waiter.start()
    wait_for_file(tmp_path / "slow.started", "the request in flight started")
    process.send_signal(signal.SIGTERM)

    # The health check fails (the flag is set by the signal handler: poll until then)...
    deadline = time.monotonic() + GUARD
    while True:
        health = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
        health.request("GET", "/mcp")
        checked = health.getresponse()
        text = checked.read()
        health.close()
        if checked.status != 405 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert checked.status == 503, (checked.status, text)
    assert b"shutting down" in text
    # ...while a request on the connection kept alive from before, and one on a new
    # connection, are answered, each closing its connection.
    kept.request("POST", "/mcp", body, headers)
    response = kept.getresponse()
    assert result_of(response) == process.pid
    assert response.getheader("connection") == "close"
    kept.close()
    fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    fresh.request("POST", "/mcp", body, headers)
    response = fresh.getresponse()
    assert result_of(response) == process.pid
    assert response.getheader("connection") == "close"
    fresh.close()
    # The request in flight completes; a second SIGTERM ends the grace; the exit is clean.
    (tmp_path / "slow.go").touch()
    waiter.join(GUARD)
    assert answered == [process.pid]
    process.send_signal(signal.SIGTERM)
    assert process.wait(GUARD) == 0


# --- a rolling restart through haproxy -------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    env = {"MRTR_REQUEST_STATE_KEY": KEY, "MRTR_TEST_DIR": str(tmp_path)}
    config = write_config(INSTANCES, tmp_path / "haproxy.cfg")
    running = Cluster.start(TARGET, tmp_path, env, n=INSTANCES, config=config)
    try:
        yield running
    finally:
        running.stop()


async def steady_client(url: str, stop: asyncio.Event, outcomes: list[str]) -> None:
    """`whoami` again and again on one kept-alive connection until `stop`; each outcome."""
    body, headers = call("whoami")
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=GUARD)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http_session:
        while not stop.is_set():
            try:
                async with http_session.post(url, data=body, headers=headers) as response:
                    payload = await response.read()
                    ok = response.status == 200 and "result" in json.loads(payload)
                    outcomes.append("ok" if ok else f"{response.status} {payload[:200]!r}")
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")


async def test_a_rolling_restart_through_haproxy_fails_no_request(cluster: Cluster) -> None:
    stop = asyncio.Event()
    outcomes: list[str] = []
    clients = [
        asyncio.create_task(steady_client(cluster.url, stop, outcomes)) for _ in range(CLIENTS)
    ]
    try:
        old = {instance.pid for instance in cluster.instances}
        new = set()
        for index in range(len(cluster.instances)):
            new.add(await asyncio.to_thread(restart, cluster, index))
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), GUARD)
    assert not new & old
    failed = [outcome for outcome in outcomes if outcome != "ok"]
    assert len(outcomes) > 100
    assert failed == [], f"{len(failed)} of {len(outcomes)} failed: {failed[:5]}"


async def test_a_drain_lets_a_legacy_request_in_flight_finish(
    serving: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    process, port = serving
    url = f"http://127.0.0.1:{port}/mcp"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD)) as http:
        session_id = await open_session(http, url)
        request = message("tools/call", {"name": "wait_for", "arguments": {"name": "legacy"}})
        headers = dict(HEADERS, **{"Mcp-Session-Id": session_id})

        async def in_flight() -> str:
            async with http.post(url, json=request, headers=headers) as response:
                return await response.text()

        answer = asyncio.create_task(in_flight())
        await asyncio.to_thread(wait_for_file, tmp_path / "legacy.started", "the call started")
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(wait_until_refused, port, process, twice=True)
        # Shutting down (no new connection taken), the call still runs: it finishes.
        (tmp_path / "legacy.go").touch()
        text = await asyncio.wait_for(answer, GUARD)
    assert f'"result":{process.pid}' in text.replace(" ", ""), text
    assert await asyncio.to_thread(process.wait, GUARD) == 0


def wait_until_refused(port: int, process: subprocess.Popen[bytes], twice: bool) -> None:
    """Return once `port` refuses connections; with `twice`, send a second SIGTERM (ending
    the grace) once the health check fails, that is once the first one was handled."""
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        try:
            health = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
            health.request("GET", "/mcp")
            status = health.getresponse().status
            health.close()
        except OSError:
            return
        if twice and status == 503:
            twice = False
            process.send_signal(signal.SIGTERM)
        time.sleep(0.01)
    raise AssertionError(f"port {port} still takes connections after {GUARD} s")
