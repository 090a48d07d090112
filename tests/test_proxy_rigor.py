"""The proxy's routing and exactly-once rules, through in-process proxies (`proxy_server`) in
front of an mrtr stdio backend (`servers/proxy_backend_rigor.py`, a real process): what the
backend sends during a request reaches that request's caller or is refused, never another's;
a round dropped after its answers reached the backend re-attaches on its re-send, so the
backend's effect runs once; a call really gone says `mayHaveRun`, and one its client cancels
is cancelled; and between two instances sharing a store and a broker, a partial answer, a
lost or a doubled broker message neither strand nor double a relayed round.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mrtr
from helpers.eventually import eventually
from helpers.mrtr_flows import accept, call_tool, error_of, request_meta, result_of
from mrtr import Client, ClientOptions, ElicitResult, ServerOptions
from mrtr.protocol import jsonrpc
from mrtr.protocol.errors import INVALID_PARAMS, McpError
from mrtr.proxy import BackendTarget, ProxyBackend, proxy_server
from mrtr.server.store import MemoryBroker, MemoryStore, StoreUnavailable
from mrtr.transport.stdio_server import serve_stdio

pytestmark = pytest.mark.timeout(120)

BACKEND = Path(__file__).resolve().parent / "servers" / "proxy_backend_rigor.py"
SRC = str(Path(mrtr.__file__).resolve().parent.parent)


def target(ledger: Path, era: str = "modern", delay: float = 0.0) -> BackendTarget:
    """The rigor backend as a stdio command, spoken to in `era` ("modern" or "legacy")."""
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "PROXY_LEDGER": str(ledger),
        "PROXY_EFFECT_DELAY": str(delay),
    }
    return BackendTarget(
        command=sys.executable,
        args=(str(BACKEND),),
        env=env,
        options=ClientOptions(protocol=era, probe_timeout=30.0),  # type: ignore[arg-type]
    )


def effects(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def by_message(questions: dict[str, Any]) -> dict[str, str]:
    """The keys of a round's questions, by the start of their message ("Size", "Book")."""
    return {q["params"]["message"].split()[0]: key for key, q in questions.items()}


# --- routing by request ----------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_question_during_a_prompt_never_reaches_another_callers_held_call(
    tmp_path: Path, era: str
) -> None:
    ledger = tmp_path / "ledger"
    proxy = proxy_server(ProxyBackend(target(ledger, era)))
    shown_a: list[str] = []
    shown_b: list[str] = []
    logs_a: list[Any] = []
    released = asyncio.Event()

    async def answer_a(params: Any) -> ElicitResult:
        shown_a.append(params.message)
        if params.message.startswith("Size"):
            await released.wait()  # A's call stays held, its session leased, meanwhile
            return ElicitResult(action="accept", content={"size": "big"})
        if params.message.startswith("Book"):
            return ElicitResult(action="accept", content={"ok": True})
        return ElicitResult(action="accept", content={"text": "A's words"})

    async def answer_b(params: Any) -> ElicitResult:
        shown_b.append(params.message)
        return ElicitResult(action="accept", content={"text": "hello"})

    async def log_a(params: Any) -> None:
        logs_a.append(params)

    async with (
        Client.in_memory(proxy, elicitation_handler=answer_a, log_handler=log_a) as a,
        Client.in_memory(proxy, elicitation_handler=answer_b) as b,
    ):
        call = asyncio.ensure_future(a.call_tool("book", {"item": "A-tent"}))
        await eventually(lambda: bool(shown_a), "A to be asked", timeout=20.0)
        prompt = asyncio.ensure_future(b.get_prompt("greet", {"who": "B-caller"}))
        await asyncio.wait([prompt], timeout=5)
        released.set()
        result = await asyncio.wait_for(call, 30)
        with contextlib.suppress(McpError):
            await asyncio.wait_for(prompt, 30)

    assert [m for m in shown_a if "B-caller" in m] == [], shown_a
    assert all("B-caller" not in repr(entry) for entry in logs_a), logs_a
    assert shown_a == ["Size of A-tent?", "Book A-tent?"]
    assert result.content[0].text == "booked A-tent (big)"  # type: ignore[union-attr]
    # B was asked its own question, or told plainly why not: never answered by A.
    if prompt.exception() is not None:
        error = prompt.exception()
        assert isinstance(error, McpError)
    else:
        assert shown_b == ["Greeting for B-caller?"]
        assert "hello, B-caller" in str(prompt.result())
    assert effects(ledger) == ["effect A-tent"]


# --- exactly once through the proxy ----------------------------------------------------------


async def two_rounds(proxy: Any, item: str) -> dict[str, Any]:
    """The first two rounds of `book`: the final round's `responses` and `state`."""
    first = result_of(await call_tool(proxy, "book", {"item": item}))
    [size] = first["inputRequests"]
    second = result_of(
        await call_tool(
            proxy,
            "book",
            {"item": item},
            responses={size: accept(size="big")},
            state=first["requestState"],
        )
    )
    [confirm] = second["inputRequests"]
    return {"responses": {confirm: accept(ok=True)}, "state": second["requestState"]}


async def test_a_final_round_dropped_after_its_answer_reached_the_backend_re_attaches(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    proxy = proxy_server(ProxyBackend(target(ledger, delay=1.5)))
    async with proxy.running():
        final = await two_rounds(proxy, "tent")
        dropped = asyncio.ensure_future(call_tool(proxy, "book", {"item": "tent"}, **final))
        # The answer reached the backend: it has had its effect and is still answering.
        await eventually(lambda: effects(ledger) == ["effect tent"], "the effect", timeout=20.0)
        dropped.cancel()  # the connection drops (over HTTP a drop is a cancellation)
        with contextlib.suppress(asyncio.CancelledError):
            await dropped
        again = result_of(await call_tool(proxy, "book", {"item": "tent"}, **final))
        # Once more, after the call ended: its kept outcome, not a second run.
        once_more = result_of(await call_tool(proxy, "book", {"item": "tent"}, **final))
    assert again["content"][0]["text"] == "booked tent (big)"
    assert once_more == again
    assert effects(ledger) == ["effect tent"]


async def test_a_call_gone_after_it_may_have_run_says_so_and_does_not_advise_calling_again(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    proxy = proxy_server(ProxyBackend(target(ledger), hold_timeout=0.3))
    async with proxy.running():
        first = result_of(await call_tool(proxy, "book", {"item": "tent"}))
        [size] = first["inputRequests"]
        await asyncio.sleep(1.0)  # the hold timeout passes: the call is cancelled
        error = error_of(
            await call_tool(
                proxy,
                "book",
                {"item": "tent"},
                responses={size: accept(size="big")},
                state=first["requestState"],
            )
        )
    assert error["code"] == INVALID_PARAMS
    assert error["data"]["mayHaveRun"] is True
    assert "call the tool again" not in error["message"]
    assert "check" in error["message"]


# --- the relay between instances -------------------------------------------------------------


class FlakyBroker(MemoryBroker):
    """A `MemoryBroker` that loses, or delivers twice, the next message starting `prefix`, as
    the broker contract allows (a pub/sub reconnect is enough to lose one)."""

    def __init__(self) -> None:
        super().__init__()
        self.lose: list[bytes] = []
        self.double: list[bytes] = []

    def publish(self, channel: str, message: bytes) -> None:
        for prefix in self.lose:
            if message.startswith(prefix):
                self.lose.remove(prefix)
                return
        super().publish(channel, message)
        for prefix in self.double:
            if message.startswith(prefix):
                self.double.remove(prefix)
                super().publish(channel, message)


class PausingStore(MemoryStore):
    """A `MemoryStore` whose relay records stop answering for `outage` seconds once a round
    is forwarded (`StoreUnavailable`, as a paused or failing-over Redis)."""

    def __init__(self, outage: float = 0.0) -> None:
        super().__init__()
        self.outage = outage
        self.down_until = 0.0
        self.refused = 0

    def _check(self, key: str) -> None:
        if key.startswith("mrtr/proxy/") and time.monotonic() < self.down_until:
            self.refused += 1
            raise StoreUnavailable()

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        self._check(key)
        added = await super().add(key, value, ttl)
        if key.endswith("/ask") and self.outage:
            self.down_until, self.outage = time.monotonic() + self.outage, 0.0
        return added

    async def get(self, key: str) -> bytes | None:
        self._check(key)
        return await super().get(key)

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        self._check(key)
        await super().set(key, value, ttl)


@contextlib.asynccontextmanager
async def two_instances(
    ledger: Path, broker: MemoryBroker, store: MemoryStore | None = None
) -> Any:
    """Two proxies of the backend (one process each) sharing a store, `broker` and a key."""
    store, key = MemoryStore() if store is None else store, secrets.token_bytes(32)
    proxies = [
        proxy_server(
            ProxyBackend(target(ledger)),
            options=ServerOptions(store=store, broker=broker, request_state_key=key),
        )
        for _ in range(2)
    ]
    async with proxies[0].running(), proxies[1].running():
        yield proxies


async def test_a_partial_answer_relayed_is_asked_again_and_the_full_retry_completes(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    async with two_instances(ledger, MemoryBroker()) as (a, b):
        first = result_of(await call_tool(a, "pair", {"item": "tent"}))
        keys = by_message(first["inputRequests"])
        partial = result_of(
            await call_tool(
                b,
                "pair",
                {"item": "tent"},
                responses={keys["Size"]: accept(size="big")},
                state=first["requestState"],
            )
        )
        assert partial["resultType"] == "input_required"
        assert list(partial["inputRequests"]) == [keys["Book"]]  # the one left out
        full = result_of(
            await call_tool(
                b,
                "pair",
                {"item": "tent"},
                responses={keys["Size"]: accept(size="big"), keys["Book"]: accept(ok=True)},
                state=partial["requestState"],
            )
        )
    assert full.get("resultType") != "input_required", full
    assert full["content"][0]["text"] == "paired tent (big)"
    assert effects(ledger) == ["effect tent"]


@pytest.mark.parametrize("fault", ["lost", "doubled"])
async def test_a_relayed_round_survives_a_lost_or_doubled_broker_message(
    tmp_path: Path, fault: str
) -> None:
    ledger = tmp_path / "ledger"
    broker = FlakyBroker()
    async with two_instances(ledger, broker) as (a, b):
        first = result_of(await call_tool(a, "book", {"item": "tent"}))
        [size] = first["inputRequests"]
        (broker.lose if fault == "lost" else broker.double).append(b"serve ")
        second = result_of(
            await asyncio.wait_for(
                call_tool(
                    b,
                    "book",
                    {"item": "tent"},
                    responses={size: accept(size="big")},
                    state=first["requestState"],
                ),
                20,
            )
        )
        assert second["resultType"] == "input_required"
        [confirm] = second["inputRequests"]
        (broker.lose if fault == "lost" else broker.double).append(b"serve ")
        final = result_of(
            await call_tool(
                b,
                "book",
                {"item": "tent"},
                responses={confirm: accept(ok=True)},
                state=second["requestState"],
            )
        )
    assert final["content"][0]["text"] == "booked tent (big)"
    assert effects(ledger) == ["effect tent"]


async def test_a_relayed_round_rides_out_a_store_that_stops_answering(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    store = PausingStore()
    async with two_instances(ledger, MemoryBroker(), store) as (a, b):
        first = result_of(await call_tool(a, "book", {"item": "tent"}))
        [size] = first["inputRequests"]
        store.outage = 2.0  # from the moment B forwards the round
        second = result_of(
            await call_tool(
                b,
                "book",
                {"item": "tent"},
                responses={size: accept(size="big")},
                state=first["requestState"],
            )
        )
    assert store.refused > 0  # the outage happened, on both sides of the relay
    assert second["resultType"] == "input_required"
    assert [q["params"]["message"] for q in second["inputRequests"].values()] == ["Book tent?"]


class Lines:
    """Where a stdio server writes: each line decoded, in a queue."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def write(self, data: bytes) -> None:
        for line in data.splitlines():
            self.queue.put_nowait(json.loads(line))

    async def drain(self) -> None:
        return None

    async def response(self, request_id: int) -> dict[str, Any]:
        while True:
            message = await asyncio.wait_for(self.queue.get(), 30)
            if message.get("id") == request_id and "method" not in message:
                return message


async def test_a_round_its_client_cancels_cancels_the_backend_call(tmp_path: Path) -> None:
    """`notifications/cancelled` is the client's word: the call is not kept for a re-send."""
    ledger = tmp_path / "ledger"
    proxy = proxy_server(ProxyBackend(target(ledger, delay=1.5)))
    stdin, stdout = asyncio.StreamReader(), Lines()
    serving = asyncio.ensure_future(serve_stdio(proxy, stdin, stdout))

    def send(request_id: int, params: dict[str, Any]) -> None:
        body = {"name": "book", "arguments": {"item": "tent"}, **params, "_meta": request_meta()}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": body}
        stdin.feed_data(json.dumps(message).encode() + b"\n")

    try:
        send(1, {})
        first = result_of(await stdout.response(1))
        [size] = first["inputRequests"]
        send(
            2, {"inputResponses": {size: accept(size="big")}, "requestState": first["requestState"]}
        )
        second = result_of(await stdout.response(2))
        [confirm] = second["inputRequests"]
        final = {
            "inputResponses": {confirm: accept(ok=True)},
            "requestState": second["requestState"],
        }
        send(3, final)
        await eventually(lambda: effects(ledger) == ["effect tent"], "the effect", timeout=20.0)
        cancel = {"requestId": 3, "reason": "the user gave up"}
        stdin.feed_data(
            json.dumps(jsonrpc.notification("notifications/cancelled", cancel)).encode() + b"\n"
        )
        await asyncio.sleep(0.3)
        send(4, final)
        error = error_of(await stdout.response(4))
    finally:
        stdin.feed_eof()
        await asyncio.wait_for(serving, 30)
    assert error["code"] == INVALID_PARAMS
    assert error["data"]["mayHaveRun"] is True
    assert effects(ledger) == ["effect tent"]
