"""`ctx.once` in a redeemed round is recorded in the store, started and then finished: a second
attempt at the round (its request cancelled, then retried) reuses a finished result; a `once`
running when its request is cancelled finishes first (within `ONCE_GRACE`); and a `once` left
started by an attempt that never finished is "may have run": the retry fails with -32603
`effect_uncertain` by default, runs it again with `on_uncertain="retry"`, or asks a callable
that checks the outside system under `ctx.once_key`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.mrtr_flows import accept, call_tool, error_of, result_of
from mrtr import McpError, RequestContext, Server, ServerOptions
from mrtr.protocol.errors import INTERNAL_ERROR
from mrtr.server._engine import replay
from mrtr.server.store import MemoryStore

KEY = "j" * 40
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
GUARD = 5.0  # seconds: only ever reached when something is broken


class Payments:
    """A server whose `pay` asks once, then pays inside `ctx.once`, held where a test says.

    `hold`: "inside" holds inside the `once` after the payment, "before-effect" inside it
    before the payment, "after" after the `once` returned; "none" holds nowhere.
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = MemoryStore() if store is None else store
        self.server = Server(
            "payments",
            options=ServerOptions(
                request_state_key=KEY,
                store=self.store,
                input_required=ServerOptions.InputRequiredConfig(round_timeout=600),
            ),
        )
        #: The outside system: idempotency key of each payment made, in order.
        self.paid: list[str] = []
        self.checked: list[str] = []
        #: The idempotency key of each round's payment, as the handler saw it.
        self.references: list[str] = []
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

        def may_have_run(idempotency_key: str) -> bool:
            self.checked.append(idempotency_key)
            return idempotency_key in self.paid

        policies: dict[str, Any] = {"fail": "fail", "retry": "retry", "check": may_have_run}

        @self.server.tool()
        async def pay(ctx: RequestContext, amount: int, hold: str, policy: str = "fail") -> str:
            reference = ctx.once_key("payment")
            self.references.append(reference)
            await ctx.elicit("Pay?", SCHEMA, key="confirm")

            async def payment() -> str:
                if hold == "before-effect":
                    await self.held()
                self.paid.append(reference)
                if hold == "inside":
                    await self.held()
                return f"receipt {len(self.paid)} for {amount}"

            receipt: str = await ctx.once("payment", payment, on_uncertain=policies[policy])
            if hold == "after":
                await self.held()
            return f"{receipt} ({reference})"

    async def held(self) -> None:
        self.reached.set()
        await self.release.wait()

    async def first_state(self, **arguments: Any) -> str:
        first = result_of(await call_tool(self.server, "pay", arguments))
        assert first["resultType"] == "input_required"
        state: str = first["requestState"]
        return state

    async def final(self, state: str, **arguments: Any) -> dict[str, Any]:
        return await asyncio.wait_for(
            call_tool(
                self.server,
                "pay",
                arguments,
                responses={"confirm": accept(ok=True)},
                state=state,
            ),
            GUARD,
        )

    async def cancelled_when_held(self, state: str, release: bool = True, **arguments: Any) -> None:
        """Run the final round until it holds, cancel it (the client went away), let the hold
        go (unless not `release`) and wait for the cancellation to go through."""
        first = asyncio.create_task(self.final(state, **arguments))
        await asyncio.wait_for(self.reached.wait(), GUARD)
        first.cancel()
        await asyncio.sleep(0)  # the cancellation reaches the handler before the hold ends
        if release:
            self.release.set()
        with pytest.raises(asyncio.CancelledError):
            await first

    async def left_started(self) -> str:
        """Leave the flow's payment "started" in the store, as a process killed inside it
        does (the kill itself: `test_scale_out_once.py`); its idempotency key."""
        reference = self.references[-1]
        await self.store.set(f"mrtr/once/{reference}", b"S" + b"a-process-now-dead", 600)
        return reference


async def test_a_once_finished_before_the_cancellation_is_reused_by_the_retry() -> None:
    shop = Payments()
    arguments = {"amount": 5, "hold": "after"}
    state = await shop.first_state(**arguments)
    await shop.cancelled_when_held(state, **arguments)
    assert len(shop.paid) == 1

    text = result_of(await shop.final(state, **arguments))["content"][0]["text"]
    assert text == f"receipt 1 for 5 ({shop.paid[0]})"
    assert len(shop.paid) == 1


async def test_a_once_running_when_its_round_is_cancelled_finishes_and_is_reused() -> None:
    shop = Payments()
    arguments = {"amount": 6, "hold": "inside"}
    state = await shop.first_state(**arguments)
    await shop.cancelled_when_held(state, **arguments)
    assert len(shop.paid) == 1

    text = result_of(await shop.final(state, **arguments))["content"][0]["text"]
    assert text == f"receipt 1 for 6 ({shop.paid[0]})"
    assert len(shop.paid) == 1


async def test_a_once_still_running_past_the_grace_is_left_may_have_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay, "ONCE_GRACE", 0.05)  # the bound, shortened for the test
    shop = Payments()
    arguments = {"amount": 6, "hold": "inside"}
    state = await shop.first_state(**arguments)
    await shop.cancelled_when_held(state, release=False, **arguments)
    assert len(shop.paid) == 1

    error = error_of(await shop.final(state, **arguments))
    assert error["code"] == INTERNAL_ERROR
    assert error["data"] == {
        "reason": "effect_uncertain",
        "onceKey": "payment",
        "idempotencyKey": shop.paid[0],
    }
    assert "may have happened" in error["message"] and shop.paid[0] in error["message"]
    # The refusal is the round's outcome: a repeat gets it too, and nothing is paid again.
    assert error_of(await shop.final(state, **arguments)) == error
    assert len(shop.paid) == 1


async def test_a_once_left_started_fails_the_round_as_may_have_run_by_default() -> None:
    shop = Payments()
    arguments = {"amount": 7, "hold": "none"}
    state = await shop.first_state(**arguments)
    reference = await shop.left_started()

    error = error_of(await shop.final(state, **arguments))
    assert error["data"] == {
        "reason": "effect_uncertain",
        "onceKey": "payment",
        "idempotencyKey": reference,
    }
    assert shop.paid == []  # not run again


async def test_a_check_that_finds_no_effect_runs_the_once_left_started() -> None:
    shop = Payments()
    arguments = {"amount": 7, "hold": "none", "policy": "check"}
    state = await shop.first_state(**arguments)
    reference = await shop.left_started()

    text = result_of(await shop.final(state, **arguments))["content"][0]["text"]
    assert shop.checked == [reference] and shop.paid == [reference]
    assert text == f"receipt 1 for 7 ({reference})"


async def test_a_check_that_finds_the_effect_fails_the_round() -> None:
    shop = Payments()
    arguments = {"amount": 8, "hold": "none", "policy": "check"}
    state = await shop.first_state(**arguments)
    reference = await shop.left_started()
    shop.paid.append(reference)  # the dead process had paid

    error = error_of(await shop.final(state, **arguments))
    assert error["data"]["reason"] == "effect_uncertain"
    assert shop.checked == [reference] and shop.paid == [reference]


async def test_on_uncertain_retry_runs_the_once_left_started() -> None:
    shop = Payments()
    arguments = {"amount": 9, "hold": "none", "policy": "retry"}
    state = await shop.first_state(**arguments)
    reference = await shop.left_started()

    text = result_of(await shop.final(state, **arguments))["content"][0]["text"]
    assert text == f"receipt 1 for 9 ({reference})" and shop.paid == [reference]
    assert shop.references == [reference, reference]  # one key on every round


async def test_once_records_live_in_the_store_under_the_flow() -> None:
    shop = Payments()
    arguments = {"amount": 4, "hold": "none"}
    state = await shop.first_state(**arguments)
    text = result_of(await shop.final(state, **arguments))["content"][0]["text"]
    flow_id, once_key = shop.paid[0].split("/")
    assert once_key == "payment" and text.endswith(f"({flow_id}/payment)")
    record = await shop.store.get(f"mrtr/once/{flow_id}/payment")
    assert record == b'F"receipt 1 for 4"'


async def test_a_once_whose_function_raised_is_not_left_uncertain() -> None:
    store = MemoryStore()
    server = Server("flaky", options=ServerOptions(request_state_key=KEY, store=store))
    calls: list[int] = []
    flows: list[str] = []

    @server.tool()
    async def flaky(ctx: RequestContext) -> str:
        flows.append(ctx.flow_id)
        await ctx.elicit("Go?", SCHEMA, key="go")

        def attempt() -> str:
            calls.append(1)
            if len(calls) == 1:
                raise McpError(-32000, "the outside system said no")
            return "done"

        result: str = await ctx.once("attempt", attempt)
        return result

    first = result_of(await call_tool(server, "flaky", {}))
    state = first["requestState"]
    failed = await call_tool(server, "flaky", {}, responses={"go": accept()}, state=state)
    assert error_of(failed)["code"] == -32000
    assert await store.get(f"mrtr/once/{flows[-1]}/attempt") is None


async def test_an_unknown_on_uncertain_is_refused_clearly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Server("typo", options=ServerOptions(request_state_key=KEY))

    @server.tool()
    async def typo(ctx: RequestContext) -> str:
        result: str = await ctx.once("x", lambda: "x", on_uncertain="never")  # type: ignore[arg-type]
        return result

    result = result_of(await call_tool(server, "typo", {}))
    # The handler's own error: a tool error result, its text in the server's log.
    assert result["isError"] is True
    assert "on_uncertain must be 'fail', 'retry' or a callable" in caplog.text


async def test_concurrent_calls_of_one_key_in_a_redeemed_round_share_one_run() -> None:
    store = MemoryStore()
    server = Server("one-store", options=ServerOptions(request_state_key=KEY, store=store))
    runs: list[int] = []
    flows: list[str] = []

    @server.tool()
    async def twice(ctx: RequestContext) -> list[str]:
        flows.append(ctx.flow_id)
        await ctx.elicit("Go?", SCHEMA, key="go")

        async def effect() -> str:
            runs.append(1)
            await asyncio.sleep(0)
            return "made"

        both: list[str] = await asyncio.gather(ctx.once("e", effect), ctx.once("e", effect))
        return both

    first = result_of(await call_tool(server, "twice", {}))
    final = await call_tool(
        server, "twice", {}, responses={"go": accept()}, state=first["requestState"]
    )
    assert result_of(final)["structuredContent"] == {"result": ["made", "made"]}
    assert runs == [1]
    assert await store.get(f"mrtr/once/{flows[-1]}/e") == b'F"made"'


async def test_an_async_once_that_raised_is_not_left_uncertain() -> None:
    store = MemoryStore()
    server = Server("flaky-async", options=ServerOptions(request_state_key=KEY, store=store))
    flows: list[str] = []

    @server.tool()
    async def flaky(ctx: RequestContext) -> str:
        flows.append(ctx.flow_id)
        await ctx.elicit("Go?", SCHEMA, key="go")

        async def attempt() -> str:
            await asyncio.sleep(0)
            raise McpError(-32000, "the outside system said no")

        result: str = await ctx.once("attempt", attempt)
        return result

    first = result_of(await call_tool(server, "flaky", {}))
    state = first["requestState"]
    failed = await call_tool(server, "flaky", {}, responses={"go": accept()}, state=state)
    assert error_of(failed)["code"] == -32000
    assert await store.get(f"mrtr/once/{flows[-1]}/attempt") is None


async def test_round_timeout_inside_a_once_still_ends_the_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay, "ONCE_GRACE", 0.05)  # the bound, shortened for the test
    store = MemoryStore()
    config = ServerOptions.InputRequiredConfig(round_timeout=0.2)
    server = Server(
        "stuck", options=ServerOptions(request_state_key=KEY, store=store, input_required=config)
    )
    never = asyncio.Event()

    @server.tool()
    async def stuck(ctx: RequestContext) -> str:
        await ctx.elicit("Go?", SCHEMA, key="go")

        async def hangs() -> str:
            await never.wait()
            return "never"

        result: str = await ctx.once("hangs", hangs)
        return result

    first = result_of(await call_tool(server, "stuck", {}))
    final = await asyncio.wait_for(
        call_tool(server, "stuck", {}, responses={"go": accept()}, state=first["requestState"]),
        GUARD,
    )
    error = error_of(final)
    assert error["code"] == INTERNAL_ERROR and "round_timeout" in error["message"]


async def test_a_once_the_store_has_no_room_for_does_not_run_and_the_round_says_so() -> None:
    # Two entries: the process's liveness key and the round's claim fit; the `once`'s
    # "started" record does not, so its function must not run (nothing would say it had).
    shop = Payments(MemoryStore(max_entries=2))
    arguments = {"amount": 4, "hold": "none"}
    state = await shop.first_state(**arguments)
    error = error_of(await shop.final(state, **arguments))
    assert error["code"] == INTERNAL_ERROR and error["data"] == {"reason": "store_full"}
    assert shop.paid == []
    assert await shop.store.get(f"mrtr/once/{shop.references[-1]}") is None
