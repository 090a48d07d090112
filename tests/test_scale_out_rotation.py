"""Key rotation and change notifications across real `mrtr serve` processes behind a real
haproxy (`deploy/haproxy.cfg`: round-robin, no stickiness), over HTTP on loopback.

* The documented two-phase rotation as a rolling restart under load: three instances start in
  phase 1 (seal old, verify-only new); clients run three-round flows without pause while the
  instances are restarted one by one into phase 2 (seal new, verify-only old) and then, once
  every flow started before phase 2 was complete has ended, one by one into phase 3 (new
  only). No flow fails; rounds sealed with one key were verified by instances sealing with
  the other, in both directions. A round that reached an instance as it stopped may fail with
  a connection error: the client resumes it from the `requestState` and answers the error
  carries, which is not a failed flow.
* The naive roll straight to `[new, old]` fails flows while it is under way: states the
  restarted instance seals with `new` are refused by those not yet restarted.
* A `subscriptions/listen` stream held on instance A receives the `tools/list_changed` that a
  tool call served by instance B raised, when the instances share a real `redis-server`
  (`MRTR_STORE_URL`); without it A's stream gets only A's own changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers.cluster import Cluster, haproxy_binary, restart
from helpers.redis_instance import RedisInstance, redis_instance
from mrtr import Client, ElicitRequestParams, ElicitResult
from mrtr.client.subscription import Change, Subscription
from mrtr.protocol.errors import CONNECTION_CLOSED, HTTP_ERROR, INVALID_PARAMS, McpError

__all__ = ["redis_instance"]  # the fixture, used by name

TARGET = "tests/servers/cluster_server.py:server"
OLD = "rotation-old-key-" + "o" * 32
NEW = "rotation-new-key-" + "n" * 32
PHASE_1 = {"MRTR_REQUEST_STATE_KEY": OLD, "MRTR_REQUEST_STATE_VERIFY_KEYS": NEW}
PHASE_2 = {"MRTR_REQUEST_STATE_KEY": NEW, "MRTR_REQUEST_STATE_VERIFY_KEYS": OLD}
PHASE_3: dict[str, str | None] = {
    "MRTR_REQUEST_STATE_KEY": NEW,
    "MRTR_REQUEST_STATE_VERIFY_KEYS": None,
}
CLIENTS = 8
PAUSE_MS = 20  # each round takes a little while, so that a restart finds flows in progress
ATTEMPTS = 4  # tries of one round: a first one and resumes after connection errors
LOAD_GUARD = 20.0  # seconds; only reached when something is broken


def start_cluster(tmp_path: Path, env: dict[str, str]) -> Iterator[Cluster]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    env = {**env, "MRTR_TEST_EFFECTS": str(tmp_path / "effects.log")}
    running = Cluster.start(TARGET, tmp_path, env)
    try:
        yield running
    finally:
        running.stop()


def accept(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def resumable(error: McpError) -> bool:
    """A round lost on the way (the instance stopped under it), not one the server refused."""
    return error.code == CONNECTION_CLOSED or (
        error.code == HTTP_ERROR and any(status in error.message for status in ("502", "503"))
    )


@dataclass
class Load:
    """Clients running `transfer` flows through haproxy until told to stop, counted by the
    phase the deployment was in when each flow started."""

    url: str
    phase: int = 1
    stop: bool = False
    completed: dict[str, list[int]] = field(default_factory=dict)  # flow -> pids of its rounds
    failed: dict[str, McpError] = field(default_factory=dict)
    resumed: list[McpError] = field(default_factory=list)
    active: dict[str, int] = field(default_factory=dict)  # flow -> phase at its start
    names: Iterator[str] = field(default_factory=lambda: (f"f{n}" for n in itertools.count()))
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # set as each flow ends

    async def flow(self, client: Client, name: str) -> None:
        state: str | None = None
        answers: dict[str, Any] | None = None
        last: McpError | None = None
        for _attempt in range(ATTEMPTS):
            try:
                result = await client.call_tool(
                    "transfer",
                    {"flow": name, "pause_ms": PAUSE_MS},
                    request_state=state,
                    input_responses=answers,
                )
            except McpError as error:
                if not resumable(error):
                    self.failed[name] = error
                    return
                last = error
                self.resumed.append(error)
                state, answers = error.request_state, error.input_responses
                continue
            assert not result.is_error, result
            self.completed[name] = list(result.structured_content["rounds"])
            return
        assert last is not None
        self.failed[name] = last

    async def client(self) -> None:
        async with Client.http(self.url, elicitation_handler=accept, connect_attempts=5) as client:
            while not self.stop:
                name = next(self.names)
                self.active[name] = self.phase
                try:
                    await self.flow(client, name)
                finally:
                    del self.active[name]
                    self.ended.set()

    async def flows_pass(self, count: int) -> None:
        """Wait until `count` more flows have ended."""
        target = len(self.completed) + len(self.failed) + count
        await self._until(lambda: len(self.completed) + len(self.failed) >= target)

    async def drain(self, before: int) -> None:
        """Wait until every flow started in a phase before `before` has ended."""
        await self._until(lambda: all(phase >= before for phase in self.active.values()))

    async def _until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(LOAD_GUARD):
            while not condition():
                self.ended.clear()
                await self.ended.wait()


async def roll(cluster: Cluster, env: dict[str, str | None]) -> dict[int, int]:
    """Restart every instance, one after the other, with `env`: old pid -> new pid."""
    replaced = {}
    for index, instance in enumerate(list(cluster.instances)):
        replaced[instance.pid] = await asyncio.to_thread(restart, cluster, index, env)
    return replaced


def crossings(completed: dict[str, list[int]], sealer: set[int], verifier: set[int]) -> int:
    """Rounds whose state was sealed by an instance in `sealer` and verified by one in
    `verifier` (the state of round i is verified by the instance of round i + 1)."""
    return sum(
        1
        for rounds in completed.values()
        for sealed, verified in itertools.pairwise(rounds)
        if sealed in sealer and verified in verifier
    )


@pytest.fixture
def phase_one(tmp_path: Path) -> Iterator[Cluster]:
    yield from start_cluster(tmp_path, PHASE_1)


async def test_two_phase_rolling_rotation_under_load_fails_no_flow(phase_one: Cluster) -> None:
    load = Load(phase_one.url)
    clients = [asyncio.create_task(load.client()) for _ in range(CLIENTS)]
    try:
        phase_1 = {instance.pid for instance in phase_one.instances}
        await load.flows_pass(CLIENTS)
        phase_2 = set((await roll(phase_one, dict(PHASE_2))).values())
        load.phase = 2
        await load.flows_pass(CLIENTS)
        # Phase 3 only once no state sealed with the old key can still be presented: every
        # flow that started before phase 2 was everywhere has ended.
        await load.drain(before=2)
        phase_3 = set((await roll(phase_one, PHASE_3)).values())
        await load.flows_pass(CLIENTS)
    finally:
        load.stop = True
        await asyncio.wait_for(asyncio.gather(*clients), timeout=LOAD_GUARD)

    assert load.failed == {}
    for error in load.resumed:
        assert resumable(error), error
    assert len(load.completed) >= 4 * CLIENTS
    # The mixed deployments were exercised: states sealed with the old key were read by
    # instances sealing with the new one, and the other way round, and phase-2 states by
    # instances that no longer know the old key.
    assert crossings(load.completed, phase_1, phase_2) > 0
    assert crossings(load.completed, phase_2, phase_1) > 0
    assert crossings(load.completed, phase_2, phase_3) > 0
    served = {pid for rounds in load.completed.values() for pid in rounds}
    assert phase_3 <= served


@pytest.fixture
def old_key_only(tmp_path: Path) -> Iterator[Cluster]:
    yield from start_cluster(tmp_path, {"MRTR_REQUEST_STATE_KEY": OLD})


async def test_the_naive_new_old_roll_fails_flows_mid_roll(old_key_only: Cluster) -> None:
    # One instance restarted straight to [new, old]; the other two still have only old.
    env = {"MRTR_REQUEST_STATE_KEY": f"{NEW},{OLD}"}
    restarted = await asyncio.to_thread(restart, old_key_only, 0, env)
    load = Load(old_key_only.url)
    async with Client.http(load.url, elicitation_handler=accept) as client:
        # One client alone: haproxy's round-robin sends its requests to the instances in a
        # fixed cycle (read here; a restart may have reordered it). A flow started just after
        # the instance before the restarted one answered has its first round sealed (with
        # new) by the restarted instance and its second round on the next, which refuses it.
        # Started one request later, it never needs the new key read, and completes.
        order = await cycle(client)
        assert restarted in order
        before = order[order.index(restarted) - 1]
        for n in range(3):
            await until_answered_by(client, before)
            await load.flow(client, f"sealed-with-new-{n}")
        await until_answered_by(client, restarted)
        await load.flow(client, "sealed-with-old")
    assert sorted(load.failed) == [f"sealed-with-new-{n}" for n in range(3)], load.completed
    for error in load.failed.values():
        assert error.code == INVALID_PARAMS, error
        assert "requestState" in error.message, error
    after = order.index(restarted)
    assert load.completed["sealed-with-old"] == [order[(after + 1) % 3], before, restarted]


async def whoami(client: Client) -> int:
    result = await client.call_tool("whoami")
    return int(result.structured_content["result"])


async def cycle(client: Client) -> list[int]:
    """The order in which haproxy sends this client's requests to the three instances."""
    seen = [await whoami(client) for _ in range(4)]
    assert len(set(seen[:3])) == 3 and seen[3] == seen[0], seen
    return seen[:3]


async def until_answered_by(client: Client, pid: int) -> None:
    """Send `whoami` through haproxy until instance `pid` answered one."""
    for _ in range(3):
        if await whoami(client) == pid:
            return
    raise AssertionError(f"round-robin never reached {pid}")


# --- change notifications across instances --------------------------------------------------


async def announce(port: int, kind: str) -> int:
    """Have the instance on `port` announce a `kind` list change; its pid."""
    async with Client.http(f"http://127.0.0.1:{port}/mcp") as client:
        result = await client.call_tool("announce", {"kind": kind})
    assert not result.is_error, result
    return int(result.structured_content["result"])


async def next_change(changes: Subscription) -> Change:
    return await asyncio.wait_for(anext(aiter(changes)), timeout=LOAD_GUARD)


async def changes_on_a_from_b(cluster: Cluster, late: float) -> list[Change]:
    """Listen on instance A (its own port, as a connection pinned to it is); B announces a
    tools change, then A a prompts change; what A's stream delivered until A's own change
    arrived and, when B's has not come by then, for `late` seconds more or until it does."""
    a, b = cluster.instances[0], cluster.instances[1]
    async with (
        Client.http(f"http://127.0.0.1:{a.port}/mcp") as client,
        client.listen(tools=True, prompts=True) as changes,
    ):
        assert changes.honoured == {"toolsListChanged": True, "promptsListChanged": True}
        assert await announce(b.port, "tools") == b.pid
        assert await announce(a.port, "prompts") == a.pid
        seen = [await next_change(changes)]
        while Change("prompts") not in seen:
            seen.append(await next_change(changes))
        if Change("tools") not in seen:
            # B's change goes through the broker: it may arrive after A's own.
            with contextlib.suppress(TimeoutError):
                seen.append(await asyncio.wait_for(anext(aiter(changes)), timeout=late))
        return seen


@pytest.fixture
def shared_cluster(tmp_path: Path, redis_instance: RedisInstance) -> Iterator[Cluster]:
    yield from start_cluster(
        tmp_path, {"MRTR_REQUEST_STATE_KEY": OLD, "MRTR_STORE_URL": redis_instance.url}
    )


async def test_a_listen_stream_on_one_instance_gets_a_change_raised_on_another(
    shared_cluster: Cluster,
) -> None:
    seen = await changes_on_a_from_b(shared_cluster, late=LOAD_GUARD)
    assert sorted(change.kind for change in seen) == ["prompts", "tools"]


async def test_without_a_shared_broker_the_stream_gets_only_its_own_instance_changes(
    old_key_only: Cluster,
) -> None:
    # Within a second the broker delivers across instances (the test above, on loopback).
    seen = await changes_on_a_from_b(old_key_only, late=1.0)
    assert seen == [Change("prompts")]
