"""Held calls of `mrtr proxy`: the backend's call runs once, however many rounds its client
takes, and stays held on the proxy between them.

The backend is an mcp 1.30 FastMCP server (a legacy stdio server whose tool asks twice with
`ctx.elicit` and notes each run in a ledger file), started by `mrtr proxy` as a user's
command line would; the proxy serves Streamable HTTP. Covered: both eras through our
`Client`; a modern client's answers applied once (a replayed retry is refused), a retry for a
call that timed out, the per-caller bound, and a backend killed mid-call (a clear error, then
a restarted backend).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mrtr
from helpers.interop.peers import venv_python
from helpers.loopback_process import free_port, listening
from helpers.mrtr_flows import http_tool_call
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client.options import RoundInfo
from mrtr.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, McpError

pytestmark = pytest.mark.timeout(180)

BACKEND = Path(__file__).resolve().parent / "servers" / "proxy_backend_mcp1.py"
#: The mrtr the test imports, for the proxy process too.
SRC = Path(mrtr.__file__).resolve().parent.parent


@contextlib.contextmanager
def proxy(ledger: Path, *options: str) -> Iterator[str]:
    """`mrtr proxy --transport http [options] -- <mcp 1.30 backend>`: its URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--port", str(port),
        *options, "--", str(venv_python("mcp1")), str(BACKEND),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(SRC), "PROXY_LEDGER": str(ledger)}
    with listening(command, port, env=env, stderr=subprocess.DEVNULL):
        yield f"http://127.0.0.1:{port}/mcp"


def answer(params: Any) -> ElicitResult:
    if "Size" in params.message:
        return ElicitResult(action="accept", content={"size": "large"})
    return ElicitResult(action="accept", content={"ok": True})


@contextlib.asynccontextmanager
async def client(url: str, era: str = "modern", **options: Any) -> AsyncIterator[Client]:
    opts = ClientOptions(protocol=era, **options)  # type: ignore[arg-type]
    async with Client.http(url, options=opts, elicitation_handler=answer) as connected:
        yield connected


def runs(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_tool_asking_twice_runs_once_on_the_backend(tmp_path: Path, era: str) -> None:
    ledger = tmp_path / "ledger"
    rounds: list[RoundInfo] = []
    with proxy(ledger) as url:
        async with client(url, era, on_round=rounds.append) as connected:
            result = await connected.call_tool("book", {"item": "tent"})
            assert connected.era == era
    assert result.content[0].text == "booked a large tent"  # type: ignore[union-attr]
    assert runs(ledger) == ["run tent"]
    # Modern: two input_required rounds, each answered by a retry; legacy: asked live.
    assert len(rounds) == (2 if era == "modern" else 0)


async def test_an_answer_sent_twice_is_not_applied_twice(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with proxy(ledger) as url:
        async with client(url) as connected:
            params = {"name": "book", "arguments": {"item": "tent"}}
            first = await connected.request("tools/call", params)
            assert first["resultType"] == "input_required"
            [(size_key, size_question)] = first["inputRequests"].items()
            assert size_question["params"]["message"] == "Size of the tent?"
            size = {"action": "accept", "content": {"size": "small"}}
            retry = {
                **params,
                "inputResponses": {size_key: size},
                "requestState": first["requestState"],
            }
            second = await connected.request("tools/call", retry)
            assert second["resultType"] == "input_required"
            [(confirm_key, confirm)] = second["inputRequests"].items()
            assert confirm["params"]["message"] == "Book a small tent?"

            # The same retry again (a client re-sending after a lost response) gets the same
            # outcome; the backend is not handed the answer a second time.
            replayed = await connected.request("tools/call", retry)
            assert replayed["inputRequests"] == second["inputRequests"]

            done = await connected.request(
                "tools/call",
                {
                    **params,
                    "inputResponses": {confirm_key: {"action": "accept", "content": {"ok": True}}},
                    "requestState": second["requestState"],
                },
            )
    assert done["content"][0]["text"] == "booked a small tent"
    assert runs(ledger) == ["run tent"]


async def test_a_retry_after_the_hold_timeout_is_told_the_call_may_have_run(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with proxy(ledger, "--hold-timeout", "0.5") as url:
        async with client(url) as connected:
            params = {"name": "book", "arguments": {"item": "lamp"}}
            first = await connected.request("tools/call", params)
            [key] = first["inputRequests"]
            await asyncio.sleep(1.5)
            with pytest.raises(McpError) as gone:
                await connected.request(
                    "tools/call",
                    {
                        **params,
                        "inputResponses": {key: {"action": "accept", "content": {"size": "s"}}},
                        "requestState": first["requestState"],
                    },
                )
            assert gone.value.code == INVALID_PARAMS
            assert "no longer held" in gone.value.message
            # Its backend call may have had its effect: the client is told to check first.
            assert gone.value.data == {"mayHaveRun": True}
            assert "check what it did before calling the tool again" in gone.value.message
            # The backend session was freed: the next call runs.
            assert (await connected.call_tool("wait", {"seconds": 0})).content[0].text == "waited"  # type: ignore[union-attr]


class AnswerLater:
    """An elicitation handler that answers once `release` is set: meanwhile the proxy holds
    the backend call, and its backend session with it."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, params: Any) -> ElicitResult:
        self.asked.set()
        await self.release.wait()
        return answer(params)


async def call_from(url: str, address: str, name: str, arguments: dict[str, Any]) -> Any:
    """A 2026-07-28 `tools/call` sent from the loopback `address` (a caller of its own to the
    proxy's budgets, which count unauthenticated callers by address): its JSON-RPC answer."""
    body, headers = http_tool_call(name, arguments, caps={"elicitation": {}})
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        response = await http.post(url, json=body, headers=headers)
    return response.json()


async def test_calls_held_per_caller_are_bounded(tmp_path: Path) -> None:
    """Each caller has its own bound (by address, without auth) and all share the total: a
    caller past its own is refused while another still calls, none past the total, and no
    held call is dropped to refuse them."""
    ledger = tmp_path / "ledger"
    later = AnswerLater()
    options = ClientOptions(protocol="modern")
    # Three backend sessions: a held call keeps one to itself (`--sessions`, default 1).
    bounds = ("--max-held-per-principal", "1", "--max-held", "2", "--sessions", "3")
    with proxy(ledger, *bounds) as url:
        async with Client.http(url, options=options, elicitation_handler=later) as connected:
            booking = asyncio.ensure_future(connected.call_tool("book", {"item": "a"}))
            await asyncio.wait_for(later.asked.wait(), 30)
            with pytest.raises(McpError) as refused:
                await connected.request("tools/call", {"name": "pid"})
            assert refused.value.code == INVALID_PARAMS
            assert refused.value.data == {
                "reason": "budget_exceeded",
                "budget": "proxied calls in flight",
                "limit": 1,
                "bound": "principal",
            }
            # Another caller is not held to the first one's bound...
            other = await call_from(url, "127.0.0.2", "pid", {})
            assert other["result"]["content"][0]["text"].isdigit(), other
            held = await call_from(url, "127.0.0.2", "book", {"item": "b"})
            assert held["result"]["resultType"] == "input_required", held
            # ... but with two calls held, a third caller meets the total.
            third = await call_from(url, "127.0.0.3", "pid", {})
            assert third["error"]["code"] == INVALID_PARAMS, third
            assert third["error"]["data"]["bound"] == "total", third
            assert "Too many proxied calls in flight" in third["error"]["message"]
            # The first call was held throughout: answered now, it finishes, run once.
            later.release.set()
            booked = await asyncio.wait_for(booking, 30)
            assert booked.content[0].text == "booked a large a"  # type: ignore[union-attr]
        assert runs(ledger) == ["run a", "run b"]


async def test_a_call_finding_every_session_taken_is_refused_after_the_wait(
    tmp_path: Path,
) -> None:
    """With the one backend session held by a call waiting for its client's answer, another
    call waits `--session-wait` seconds, then is told the backend is busy and that nothing
    ran (so it may be sent again); once the first call ends, the same call succeeds."""
    ledger = tmp_path / "ledger"
    later = AnswerLater()
    options = ClientOptions(protocol="modern")
    with proxy(ledger, "--session-wait", "1") as url:
        async with Client.http(url, options=options, elicitation_handler=later) as connected:
            booking = asyncio.ensure_future(connected.call_tool("book", {"item": "a"}))
            await asyncio.wait_for(later.asked.wait(), 30)
            with pytest.raises(McpError) as busy:
                await asyncio.wait_for(connected.request("tools/call", {"name": "pid"}), 20)
            assert busy.value.code == INTERNAL_ERROR
            assert "the backend is busy: its 1 session(s) stayed taken" in busy.value.message
            assert busy.value.data == {"mayHaveRun": False}
            later.release.set()
            booked = await asyncio.wait_for(booking, 30)
            assert booked.content[0].text == "booked a large a"  # type: ignore[union-attr]
            pid = await asyncio.wait_for(connected.call_tool("pid"), 20)
            assert pid.content[0].text.isdigit()  # type: ignore[union-attr]
    assert runs(ledger) == ["run a"]


async def test_a_backend_killed_mid_call_fails_the_call_clearly_and_is_restarted(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    with proxy(ledger) as url:
        async with client(url) as connected:
            pid = int((await connected.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
            waiting = asyncio.ensure_future(connected.call_tool("wait", {"seconds": 60}))
            await asyncio.sleep(1.0)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(McpError) as failed:
                await asyncio.wait_for(waiting, 20)
            assert "backend" in failed.value.message and "failed" in failed.value.message
            again = int((await connected.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
            assert again != pid
            # Killed while idle: the next call starts it again first, and succeeds.
            os.kill(again, signal.SIGKILL)
            await asyncio.sleep(1.0)
            third = int((await connected.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
            assert third not in (pid, again)


async def test_a_legacy_client_failing_to_answer_ends_the_backend_call(tmp_path: Path) -> None:
    """The backend call ends with the request: its session is free for the next call at once
    (with one session, a call left held would block every other one)."""
    ledger = tmp_path / "ledger"

    def refuse(params: Any) -> ElicitResult:
        raise RuntimeError("no answer from this user")

    with proxy(ledger, "--sessions", "1") as url:
        options = ClientOptions(protocol="legacy")
        async with Client.http(url, options=options, elicitation_handler=refuse) as connected:
            with pytest.raises(McpError) as failed:
                await connected.call_tool("book", {"item": "kite"})
            assert "elicitation" in failed.value.message
            waited = await asyncio.wait_for(connected.call_tool("wait", {"seconds": 0}), 10)
            assert waited.content[0].text == "waited"  # type: ignore[union-attr]


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_cancelled_call_cancels_the_backend_call(tmp_path: Path, era: str) -> None:
    """The client gives up on a call (its stream closes, or `notifications/cancelled`): the
    backend call is cancelled, and its one session serves the next call at once."""
    ledger = tmp_path / "ledger"
    with proxy(ledger, "--sessions", "1") as url:
        async with client(url, era) as connected:
            waiting = asyncio.ensure_future(connected.call_tool("wait", {"seconds": 60}))
            await asyncio.sleep(1.0)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            waited = await asyncio.wait_for(connected.call_tool("wait", {"seconds": 0}), 10)
            assert waited.content[0].text == "waited"  # type: ignore[union-attr]


async def test_a_question_the_client_cannot_answer_is_refused_to_the_backend(
    tmp_path: Path,
) -> None:
    """A client that declared no elicitation is not asked: the backend's `elicitation/create`
    is refused (-32601) and the call ends with the backend's own reaction, with no round."""
    ledger = tmp_path / "ledger"
    rounds: list[RoundInfo] = []
    with proxy(ledger) as url:
        options = ClientOptions(protocol="modern", on_round=rounds.append)
        async with Client.http(url, options=options) as connected:
            result = await asyncio.wait_for(connected.call_tool("book", {"item": "cap"}), 20)
    assert result.is_error
    assert "cannot answer elicitation/create" in result.content[0].text  # type: ignore[union-attr]
    assert rounds == []
    assert runs(ledger) == ["run cap"]
