"""Three `mrtr serve` processes behind a real haproxy (`deploy/haproxy.cfg`: round-robin, no
stickiness), over real HTTP on loopback.

* 32 concurrent clients run three-round flows for a bounded time: the rounds of single flows
  land on different instances (as the server reports), none fails, and the shared effect log
  holds exactly one line per completed flow.
* One instance is killed with SIGKILL mid-run: requests in flight on it fail, the flow is
  resumed from the `requestState` and answers carried by the error on a live instance, and no
  flow is lost or doubled.
* A final round replayed through haproxy: with each process's own in-memory store, every
  instance that receives the replay runs the effect once, so several instances mean several
  effects; with the Redis store shared by all (`MRTR_STORE_URL`, a real `redis-server`), the
  effect runs exactly once and every replay gets the first outcome.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers.cluster import Cluster, haproxy_binary
from helpers.redis_instance import RedisInstance, redis_instance
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult
from mrtr.client.client import InputRequiredError
from mrtr.client.options import InputRequiredConfig
from mrtr.protocol.errors import CONNECTION_CLOSED, HTTP_ERROR, McpError

TARGET = "tests/servers/cluster_server.py:server"
KEY = "scale-out-key-" + "s" * 32
CLIENTS = 32
PAUSE_MS = 20  # each round takes a little while, so that a kill finds requests in flight

__all__ = ["redis_instance"]  # the fixture, used by name


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.log"


def start_cluster(tmp_path: Path, effects: Path, **env: str) -> Iterator[Cluster]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install haproxy (scripts/test.sh does it)")
    env.update(MRTR_REQUEST_STATE_KEY=KEY, MRTR_TEST_EFFECTS=str(effects))
    running = Cluster.start(TARGET, tmp_path, env)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def cluster(tmp_path: Path, effects: Path) -> Iterator[Cluster]:
    """Three instances, each with its own in-memory store (the default)."""
    yield from start_cluster(tmp_path, effects)


@pytest.fixture
def shared_cluster(
    tmp_path: Path, effects: Path, redis_instance: RedisInstance
) -> Iterator[Cluster]:
    """Three instances sharing one Redis store."""
    yield from start_cluster(tmp_path, effects, MRTR_STORE_URL=redis_instance.url)


def effect_lines(path: Path) -> list[tuple[str, int]]:
    """(flow, pid) of every effect performed, in order."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(flow, int(pid)) for flow, pid in rows]


def accept(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


@dataclass
class Tally:
    """What the clients saw."""

    completed: dict[str, list[int]] = field(default_factory=dict)  # flow -> pids of its rounds
    failed: dict[str, str] = field(default_factory=dict)
    errors: list[McpError] = field(default_factory=list)  # rounds that failed and were resumed
    resumed: set[str] = field(default_factory=set)


async def run_client(url: str, stop_at: float, names: Iterator[str], tally: Tally) -> None:
    """Run flows one after another until `stop_at`, resuming a failed round (from the state
    and answers its error carries) up to 3 times."""
    async with Client.http(url, elicitation_handler=accept, connect_attempts=5) as client:
        while time.monotonic() < stop_at:
            flow = next(names)
            state: str | None = None
            answers: dict[str, Any] | None = None
            for _attempt in range(4):
                try:
                    result = await client.call_tool(
                        "transfer",
                        {"flow": flow, "pause_ms": PAUSE_MS},
                        request_state=state,
                        input_responses=answers,
                    )
                except McpError as error:
                    tally.errors.append(error)
                    tally.resumed.add(flow)
                    state, answers = error.request_state, error.input_responses
                    continue
                assert not result.is_error, result
                tally.completed[flow] = list(result.structured_content["rounds"])
                break
            else:
                tally.failed[flow] = str(tally.errors[-1])


async def run_load(url: str, seconds: float, tally: Tally) -> None:
    names = (f"flow-{n}" for n in itertools.count())
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(run_client(url, stop_at, names, tally) for _ in range(CLIENTS)))


async def test_rounds_spread_over_instances_and_every_flow_runs_its_effect_once(
    cluster: Cluster, effects: Path
) -> None:
    tally = Tally()
    await asyncio.wait_for(run_load(cluster.url, 4.0, tally), timeout=60)

    assert tally.failed == {}
    assert tally.errors == []
    assert len(tally.completed) >= CLIENTS  # every client finished at least one flow
    pids = {instance.pid for instance in cluster.instances}
    served = [pid for rounds in tally.completed.values() for pid in rounds]
    assert set(served) == pids  # every instance served rounds
    # Round-robin without stickiness: single flows were served by several instances.
    spread = [rounds for rounds in tally.completed.values() if len(set(rounds)) > 1]
    assert len(spread) > len(tally.completed) // 2
    # The effect ran once per completed flow, on the instance that served the final round.
    lines = effect_lines(effects)
    assert len(lines) == len(tally.completed)
    assert dict(lines) == {flow: rounds[2] for flow, rounds in tally.completed.items()}


async def test_killed_instance_fails_its_requests_and_flows_resume_elsewhere(
    cluster: Cluster, effects: Path
) -> None:
    tally = Tally()
    load = asyncio.create_task(run_load(cluster.url, 4.0, tally))
    await asyncio.sleep(1.5)
    victim = await asyncio.to_thread(cluster.kill, 0)
    await asyncio.wait_for(load, timeout=60)

    # The requests in flight on the killed instance failed (haproxy answers 502 or, once the
    # response had begun, drops the connection), and each of those flows was resumed on a
    # live instance: none was lost.
    assert tally.errors, "no request was in flight on the killed instance"
    for error in tally.errors:
        assert error.code == CONNECTION_CLOSED or (
            error.code == HTTP_ERROR and "502" in error.message
        ), error
    assert tally.failed == {}
    assert tally.resumed <= set(tally.completed)
    survivors = {instance.pid for instance in cluster.instances} - {victim}
    for flow in tally.resumed:
        assert tally.completed[flow][2] in survivors
    # Exactly one effect per completed flow. The one exception the test allows: a final
    # round whose effect the victim ran just before dying, before its answer left; the
    # resumed round then runs it again elsewhere (no store survives a kill -9 of its
    # process; the effect's own idempotency key, `ctx.flow_id`, is the defence there).
    counts = Counter(flow for flow, _pid in effect_lines(effects))
    assert set(counts) == set(tally.completed)
    doubled = {flow for flow, count in counts.items() if count > 1}
    assert doubled <= tally.resumed
    for flow, pid in effect_lines(effects):
        if flow in doubled:
            assert pid == victim or pid == tally.completed[flow][2]
    assert all(count <= 2 for count in counts.values())


async def final_round(url: str) -> tuple[str, dict[str, Any], list[int]]:
    """Run a flow to its end by hand: the final round's state and answers, and its rounds."""
    options = ClientOptions(input_required=InputRequiredConfig(auto_fulfill=False))
    answer = {"action": "accept", "content": {"ok": True}}
    async with Client.http(url, options=options, elicitation_handler=accept) as client:
        with pytest.raises(InputRequiredError) as first:
            await client.call_tool("transfer", {"flow": "replayed"})
        state = first.value.result.request_state
        assert state is not None
        with pytest.raises(InputRequiredError) as second:
            await client.call_tool(
                "transfer",
                {"flow": "replayed"},
                request_state=state,
                input_responses={"one": answer},
            )
        final_state = second.value.result.request_state
        assert final_state is not None
        answers = {"two": answer}
        result = await client.call_tool(
            "transfer", {"flow": "replayed"}, request_state=final_state, input_responses=answers
        )
        return final_state, answers, list(result.structured_content["rounds"])


async def pid_of(client: Client) -> int:
    result = await client.call_tool("whoami")
    return int(result.structured_content["result"])


async def replay(url: str, state: str, answers: dict[str, Any]) -> tuple[list[int], list[Any]]:
    """Send the final round 5 times through haproxy; the instance each one reached and its
    outcome (rounds). Round-robin is one cycle over the instances: it is read from three
    requests just before, and a request just after checks that it was not disturbed."""
    async with Client.http(url, elicitation_handler=accept) as client:
        await pid_of(client)  # the first exchange settles the era
        cycle = [await pid_of(client) for _ in range(3)]
        assert len(set(cycle)) == 3
        outcomes = []
        for _ in range(5):
            result = await client.call_tool(
                "transfer", {"flow": "replayed"}, request_state=state, input_responses=answers
            )
            outcomes.append(list(result.structured_content["rounds"]))
        assert await pid_of(client) == cycle[5 % 3]
    return [cycle[n % 3] for n in range(5)], outcomes


async def test_replayed_final_round_with_per_process_stores_runs_once_per_instance(
    cluster: Cluster, effects: Path
) -> None:
    state, answers, rounds = await final_round(cluster.url)
    first = rounds[2]  # the instance that ran the final round
    assert effect_lines(effects) == [("replayed", first)]

    reached, outcomes = await replay(cluster.url, state, answers)

    # The instance that ran the final round answers its replays from its store: the first
    # outcome, the effect not run again. Each other instance's store has never seen the
    # state: the first replay it gets runs the effect again (the rounds sealed in the state
    # are kept), and later ones get that outcome from its own store. Three instances, three
    # effects: only a store shared by all instances makes it one.
    assert set(reached) == {instance.pid for instance in cluster.instances}
    for pid, outcome in zip(reached, outcomes, strict=True):
        assert outcome == [*rounds[:2], pid]
    others = list(dict.fromkeys(pid for pid in reached if pid != first))
    assert effect_lines(effects) == [("replayed", pid) for pid in [first, *others]]
    assert len(effect_lines(effects)) == 3


async def test_replayed_final_round_with_a_shared_store_runs_its_effect_once(
    shared_cluster: Cluster, effects: Path
) -> None:
    state, answers, rounds = await final_round(shared_cluster.url)
    reached, outcomes = await replay(shared_cluster.url, state, answers)

    # The replays reached every instance, and each answered with the first outcome from the
    # shared store: the effect ran once, on the instance of the final round.
    assert set(reached) == {instance.pid for instance in shared_cluster.instances}
    assert outcomes == [rounds] * 5
    assert effect_lines(effects) == [("replayed", rounds[2])]
