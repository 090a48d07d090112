"""kill -9 of an instance inside `ctx.once`: two real `mrtr serve` processes sharing a real
`redis-server`, over real HTTP on loopback.

Three final rounds run on instance A and hold there: one inside its payment `once` after
paying (default `on_uncertain`), one inside it before paying (`on_uncertain` a check of the
outside system by idempotency key), one after its `once` finished. A is killed with SIGKILL;
each round is then retried on instance B, which takes it over:

* started and not finished, default: -32603 `effect_uncertain` naming the key; paid once;
* started and not finished, the check finds no payment: it runs on B; paid once;
* finished before the kill: its result (made by A) is reused; paid once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from helpers.loopback_process import free_port, stop, wait_listening
from helpers.redis_instance import RedisInstance, redis_instance
from mrtr import Client, ElicitRequestParams, ElicitResult, McpError
from mrtr.protocol.errors import INTERNAL_ERROR

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests/servers/once_crash_server.py:server"
KEY = "once-crash-key-" + "c" * 32
GUARD = 20.0  # seconds: only ever reached when something is broken
HOLDS = {"inside": "fail", "before-effect": "check", "after": "fail"}

__all__ = ["redis_instance"]  # the fixture, used by name


def confirm(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def command(port: int) -> list[str]:
    return [
        sys.executable, "-m", "mrtr", "serve", TARGET,
        "--transport", "http", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


@contextlib.contextmanager
def started(port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """An instance on `port`, started (not yet listening); stopped (or reaped) at the end."""
    process = subprocess.Popen(
        command(port), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        stop(process)


def wait_for_file(path: Path) -> None:
    """Return once `path` exists (the server writes it where it holds), within GUARD."""
    deadline = time.monotonic() + GUARD
    while not path.exists():
        assert time.monotonic() < deadline, f"the server never reached {path.name}"
        time.sleep(0.02)


def hasten_liveness_expiry(url: str) -> str:
    """Delete the liveness key of the process that owns the held rounds, as its expiry would
    after LIVENESS_TTL (10 s); the process id it names."""
    store = redis.Redis.from_url(url)
    try:
        records = [store.get(key) for key in store.keys("mrtr/round/*")]
        assert len(records) == len(HOLDS)
        owners = set()
        for record in records:
            assert isinstance(record, bytes) and record[:1] == b"R", record  # "running"
            # After the tag and the answers' digest: the owning process (and any claim token
            # after a colon).
            owners.add(record[33:].decode().partition(":")[0])
        assert len(owners) == 1, owners
        owner = owners.pop()
        assert store.delete(f"mrtr/alive/{owner}") == 1
        return owner
    finally:
        store.close()


async def test_a_takeover_after_kill_9_inside_once_never_runs_the_effect_twice(
    tmp_path: Path, redis_instance: RedisInstance
) -> None:
    effects = tmp_path / "effects.log"
    hold_dir = tmp_path / "held"
    hold_dir.mkdir()
    env = {
        **os.environ,
        "MRTR_REQUEST_STATE_KEY": KEY,
        "MRTR_STORE_URL": redis_instance.url,
        "MRTR_TEST_EFFECTS": str(effects),
    }
    port_a, port_b = free_port(), free_port()
    with (
        started(port_a, {**env, "MRTR_TEST_HOLD": str(hold_dir)}) as victim,
        started(port_b, env) as survivor,
    ):
        # Both start at once (each takes seconds on a loaded machine); then both listen.
        await asyncio.to_thread(wait_listening, port_a, victim)
        await asyncio.to_thread(wait_listening, port_b, survivor)
        finals: dict[str, dict[str, Any]] = {}
        async with Client.http(
            f"http://127.0.0.1:{port_a}/mcp", elicitation_handler=confirm, connect_attempts=1
        ) as on_a:
            for amount, (hold, policy) in enumerate(HOLDS.items(), start=1):
                params = {
                    "name": "pay",
                    "arguments": {"amount": amount, "hold": hold, "policy": policy},
                }
                first = await on_a.request("tools/call", params)
                assert first["resultType"] == "input_required"
                finals[hold] = {
                    **params,
                    "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
                    "requestState": first["requestState"],
                }
            running = [
                asyncio.create_task(on_a.request("tools/call", final)) for final in finals.values()
            ]
            for hold in HOLDS:
                await asyncio.to_thread(wait_for_file, hold_dir / hold)
            victim.kill()  # SIGKILL, inside the once (or just after it) of each round
            victim.wait(GUARD)
            lost = await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), GUARD)
        assert all(isinstance(outcome, Exception) for outcome in lost), lost
        paid_on_a = effects.read_text().split()
        assert len(paid_on_a) == 2  # "inside" and "after" paid; "before-effect" did not

        hasten_liveness_expiry(redis_instance.url)
        async with Client.http(
            f"http://127.0.0.1:{port_b}/mcp", elicitation_handler=confirm
        ) as on_b:

            async def retry(hold: str) -> Any:
                try:
                    return await on_b.request("tools/call", finals[hold])
                except McpError as error:
                    return error

            outcomes = dict(
                zip(
                    HOLDS,
                    await asyncio.wait_for(asyncio.gather(*map(retry, HOLDS)), GUARD),
                    strict=True,
                )
            )
            repeated = await asyncio.wait_for(retry("inside"), GUARD)

    payments = Counter(effects.read_text().split())
    assert len(payments) == len(HOLDS) and set(payments.values()) == {1}, payments

    # Started inside the once and not finished: refused as "may have run", never rerun.
    uncertain = outcomes["inside"]
    assert isinstance(uncertain, McpError), uncertain
    assert uncertain.code == INTERNAL_ERROR
    assert uncertain.data["reason"] == "effect_uncertain"
    assert uncertain.data["onceKey"] == "payment"
    assert uncertain.data["idempotencyKey"] in paid_on_a
    assert isinstance(repeated, McpError) and repeated.data == uncertain.data

    # Started, not paid; the check by idempotency key says so: it ran once, on B.
    checked = outcomes["before-effect"]["structuredContent"]
    assert checked["reference"] not in paid_on_a and payments[checked["reference"]] == 1
    assert checked["receipt"] == f"receipt for 2 from {checked['pid']}"
    assert checked["pid"] != victim.pid

    # Finished on A before the kill: A's result reused, the payment not made again.
    reused = outcomes["after"]["structuredContent"]
    assert reused["reference"] in paid_on_a
    assert reused["receipt"] == f"receipt for 3 from {victim.pid}"
    assert reused["pid"] != victim.pid
