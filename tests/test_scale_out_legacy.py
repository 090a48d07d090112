"""Legacy (`initialize`) sessions across real processes: three `mrtr serve --transport http`
instances behind haproxy (`deploy/haproxy.cfg`: round-robin, no stickiness) sharing a real
`redis-server` (`MRTR_STORE_URL`), over real HTTP on loopback.

* Our client in the legacy era and the official SDK's client (`mode="legacy"`) run sessions
  at the same time, each request of each going to the next instance: tools/list, a tool that
  elicits live (the client's answer is POSTed through haproxy, so to another instance than
  the one waiting; the scenarios are those of `test_scale_out_sessions.py`), setLevel then a
  logging tool, subscribe, a resource update heard on the GET stream, unsubscribe, ping, and
  DELETE (then every instance answers 404). No request fails, and the questions were asked
  by every instance.
* The same cluster without `MRTR_STORE_URL` (each instance its own sessions): the same
  official-client session fails, so the test above can fail.
* An instance killed in the middle of a call whose answer it streams: the official client
  resumes the stream (`GET` + `Last-Event-ID`) on a surviving instance, which answers from
  what the dead one kept in the store: an error saying the request was interrupted, at once,
  and the session goes on.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp
import pytest

from helpers.cluster import Cluster, Instance, haproxy_binary
from helpers.legacy_sessions import (
    INIT,
    message,
    official_scenario,
    open_session,
    ours_scenario,
    post,
)
from helpers.redis_instance import RedisInstance, redis_instance
from helpers.transport_flow import GUARD

TARGET = "tests/servers/legacy_cluster_server.py:server"
KEY = "legacy-scale-out-key-" + "l" * 32
SESSIONS = 3  # of each client, at once

__all__ = ["redis_instance"]  # the fixture, used by name


def start(tmp_path: Path, **env: str) -> Iterator[Cluster]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    running = Cluster.start(TARGET, tmp_path, dict(env, MRTR_REQUEST_STATE_KEY=KEY))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def shared(tmp_path: Path, redis_instance: RedisInstance) -> Iterator[Cluster]:
    yield from start(tmp_path, MRTR_STORE_URL=redis_instance.url)


@pytest.fixture
def apart(tmp_path: Path) -> Iterator[Cluster]:
    yield from start(tmp_path)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_legacy_sessions_alternate_between_instances_with_no_failure(
    shared: Cluster,
) -> None:
    url = shared.url
    runs = [ours_scenario(url) for _ in range(SESSIONS)]
    runs += [official_scenario(url) for _ in range(SESSIONS)]
    async with asyncio.timeout(GUARD * 3):
        asked = await asyncio.gather(*runs)
    pids = {int(label) for labels in asked for label in labels}
    assert pids == {instance.pid for instance in shared.instances}
    # DELETE through haproxy ends the session on every instance.
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        for _ in range(3):
            assert (await post(http, url, message("tools/list"), session_id))[0] == 200
        async with http.delete(url, headers={"Mcp-Session-Id": session_id}) as response:
            assert response.status == 204
        for _ in range(3):
            status, data, _ = await post(http, url, message("tools/list"), session_id)
            assert status == 404 and "Session not found" in data["error"]["message"]
        status, data, _ = await post(http, url, INIT)
        assert status == 200  # a new one opens as usual


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_without_the_shared_store_the_same_session_fails(apart: Cluster) -> None:
    with pytest.raises((mcp.MCPError, TimeoutError, ExceptionGroup)):
        await asyncio.wait_for(official_scenario(apart.url), 3.0)


async def kill_mid_call(cluster: Cluster, client: mcp.Client, logged: asyncio.Queue[Any]) -> Any:
    """Call `stall`, kill the instance streaming its answer once it has logged, and return the
    outcome of the call (the error it raised), within a bound."""
    call = asyncio.ensure_future(client.call_tool("stall", {}))
    try:
        async with asyncio.timeout(GUARD):
            while not str(data := await logged.get()).startswith("stalling in "):
                pass
        pid = int(str(data).rsplit(" ", 1)[1])
        victim: Instance = next(i for i in cluster.instances if i.pid == pid)
        os.killpg(victim.process.pid, signal.SIGKILL)
        victim.process.wait(GUARD)
        async with asyncio.timeout(20.0):  # a client that hangs fails here
            with pytest.raises(mcp.MCPError) as failed:
                await call
        return failed.value.error
    finally:
        call.cancel()


async def logged_client(url: str) -> tuple[mcp.Client, asyncio.Queue[Any]]:
    logged: asyncio.Queue[Any] = asyncio.Queue()

    async def log(params: Any) -> None:
        logged.put_nowait(params.data)

    return mcp.Client(url, mode="legacy", logging_callback=log), logged


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_legacy_client_whose_instance_dies_mid_call_gets_an_error_at_once(
    shared: Cluster,
) -> None:
    client, logged = await logged_client(shared.url)
    async with client:
        error = await kill_mid_call(shared, client, logged)
        # The surviving instance's answer, not the client giving up after its retries.
        assert error.code == -32603
        assert "Request interrupted" in error.message and "send it again" in error.message
        assert error.data == {"mayHaveRun": True}  # whether it ran is unknown
        # The session lives in the store: the next calls are served by the survivors.
        for _ in range(2):
            result = await asyncio.wait_for(client.call_tool("whoami", {}), GUARD)
            assert not result.is_error
