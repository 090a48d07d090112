"""Key rotation that cannot fail mid-roll: verify-only keys (accepted, never sealed with), the
two-phase rolling restart under load with no failed flow, and the naive `[new, old]` roll
failing flows (so the load test can fail)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from helpers.mrtr_flows import accept, call_tool
from mrtr import RequestContext, Server, ServerOptions
from mrtr.server.request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    digest_arguments,
    mint_request_state,
    verify_request_state,
)
from mrtr.settings import SettingsError, server_options

OLD, NEW = "o" * 40, "n" * 40
BINDING = StateBinding("tools/call", "t", digest_arguments({}), "rot")
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def test_a_verify_only_key_verifies_and_never_seals() -> None:
    phase1 = RequestStateKeyRing(OLD, verify_only=[NEW])
    token = mint_request_state(phase1, BINDING, b"data", round=1)
    # Sealed with OLD: an instance that has only OLD reads it, one with only NEW does not.
    assert verify_request_state(RequestStateKeyRing(OLD), BINDING, token).data == b"data"
    with pytest.raises(InvalidRequestState, match="unknown_key"):
        verify_request_state(RequestStateKeyRing(NEW), BINDING, token)
    # And it accepts what NEW sealed.
    sealed_new = mint_request_state(RequestStateKeyRing(NEW), BINDING, b"new", round=1)
    assert verify_request_state(phase1, BINDING, sealed_new).data == b"new"
    assert verify_request_state(RequestStateKeyRing(OLD, verify_only=NEW), BINDING, sealed_new)


def test_verify_only_keys_from_options_and_the_environment() -> None:
    options = ServerOptions(request_state_key=OLD, request_state_verify_keys=NEW)
    assert list(options.request_state_verify_keys) == [NEW]
    with pytest.raises(ValueError, match="at least 32 bytes"):
        ServerOptions(request_state_key=OLD, request_state_verify_keys=["short"])
    env = {"MRTR_REQUEST_STATE_KEY": NEW, "MRTR_REQUEST_STATE_VERIFY_KEYS": OLD}
    assert list(server_options(env).request_state_verify_keys) == [OLD]
    with pytest.raises(SettingsError, match="MRTR_REQUEST_STATE_VERIFY_KEYS"):
        server_options({"MRTR_REQUEST_STATE_VERIFY_KEYS": "short"})
    with pytest.raises(ValueError, match="needs a request_state_key"):
        Server("rot", options=ServerOptions(request_state_verify_keys=[NEW]))


def build(seal: str | list[str], verify_only: tuple[str, ...] = ()) -> Server:
    """One instance of the deployment: a three-round tool, keys as given, nothing shared."""
    server = Server(
        "rot",
        options=ServerOptions(request_state_key=seal, request_state_verify_keys=verify_only),
    )

    @server.tool()
    async def book(ctx: RequestContext, n: int) -> str:
        await ctx.elicit("Date?", SCHEMA, key="date")
        await ctx.elicit("Seat?", SCHEMA, key="seat")
        return f"booked {n}"

    return server


@dataclass
class Load:
    """Flows whose rounds alternate between instances A and B, counted as they go."""

    instances: dict[str, Server]
    rounds: int = 0
    done: int = 0
    failed: int = 0
    stop: bool = False
    progressed: asyncio.Event = field(default_factory=asyncio.Event)

    async def flow(self, n: int, first: str) -> None:
        order = itertools.cycle([first, "B" if first == "A" else "A"])
        state: Any = None
        responses: Any = None
        for answer in (None, "date", "seat"):
            if answer is not None:
                responses = {answer: accept(ok=True)}
            server = self.instances[next(order)]
            response = await call_tool(server, "book", {"n": n}, responses=responses, state=state)
            self.rounds += 1
            self.progressed.set()
            if "error" in response:
                self.failed += 1
                return
            state = response["result"].get("requestState")
            await asyncio.sleep(0)  # let other flows and the roll interleave
        assert response["result"]["content"][0]["text"] == f"booked {n}"
        self.done += 1

    async def worker(self, index: int) -> None:
        for n in itertools.count(index * 100_000):
            if self.stop:
                return
            await self.flow(n, "A" if n % 2 else "B")

    async def rounds_pass(self, count: int) -> None:
        target = self.rounds + count
        async with asyncio.timeout(10):
            while self.rounds < target:
                self.progressed.clear()
                await self.progressed.wait()


async def roll(steps: list[tuple[str, Server]]) -> Load:
    """Run 6 concurrent flows while each instance is replaced, one at a time, as listed."""
    load = Load({"A": build(OLD), "B": build(OLD)})
    workers = [asyncio.create_task(load.worker(i)) for i in range(6)]
    try:
        await load.rounds_pass(30)
        for name, server in steps:
            load.instances[name] = server
            await load.rounds_pass(60)  # flows run on the mixed deployment
    finally:
        load.stop = True
        await asyncio.gather(*workers)
    return load


async def test_two_phase_rotation_under_load_fails_no_flow() -> None:
    load = await roll(
        [
            ("A", build(OLD, (NEW,))),  # phase 1: seal old, accept new
            ("B", build(OLD, (NEW,))),
            ("A", build(NEW, (OLD,))),  # phase 2: seal new, accept old
            ("B", build(NEW, (OLD,))),
        ]
    )
    assert load.failed == 0
    assert load.done > 50


async def test_phase_three_drops_the_old_key_once_its_states_are_gone() -> None:
    # Every instance seals with NEW (phase 2 done) and no state sealed with OLD is in flight.
    load = Load({"A": build(NEW, (OLD,)), "B": build(NEW, (OLD,))})
    workers = [asyncio.create_task(load.worker(i)) for i in range(4)]
    try:
        await load.rounds_pass(30)
        load.instances["A"] = build(NEW)
        await load.rounds_pass(60)
        load.instances["B"] = build(NEW)
        await load.rounds_pass(60)
    finally:
        load.stop = True
        await asyncio.gather(*workers)
    assert load.failed == 0 and load.done > 30


async def test_the_naive_new_old_roll_fails_flows_mid_roll() -> None:
    # Straight to [new, old]: A seals with NEW while B, not yet restarted, has only OLD.
    load = await roll([("A", build([NEW, OLD])), ("B", build([NEW, OLD]))])
    assert load.failed > 0
