"""Two `mrtr proxy` instances sharing a Redis store and broker, and a request-state key, as
behind a load balancer: a modern client's rounds alternate between them, and each retry that
reaches the instance not holding the backend call is relayed to the one holding it. The
backend (mcp 1.30 FastMCP, asking twice) runs its tool once. When the holding instance is
killed (-9), a retry on the other gets a clear error at once, and nothing runs twice. Behind
the shipped haproxy configuration (round-robin), clients of both eras are served. The same
backend mounted in an mrtr server (`Server.mount` of a `ProxyBackend`), two instances of it
sharing Redis: its rounds are relayed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mrtr
from helpers.cluster import haproxy_binary, write_config
from helpers.interop.peers import venv_python
from helpers.loopback_process import free_port, listening
from helpers.mrtr_flows import http_tool_call
from helpers.redis_instance import RedisInstance, redis_instance
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client.options import RoundInfo
from mrtr.protocol.errors import INTERNAL_ERROR, McpError

pytestmark = pytest.mark.timeout(180)
__all__ = ["redis_instance"]  # the fixture, used by name

SERVERS = Path(__file__).resolve().parent / "servers"
BACKEND = SERVERS / "proxy_backend_mcp1.py"
HUB = SERVERS / "mount_proxy_server.py"
SRC = str(Path(mrtr.__file__).resolve().parent.parent)


@contextlib.contextmanager
def two_proxies(
    redis: RedisInstance, ledger: Path, *, mounted: bool = False
) -> Iterator[list[tuple[str, subprocess.Popen[Any]]]]:
    """Two instances over HTTP, sharing Redis and a key: `(url, process)` each. Each is
    `mrtr proxy -- <backend>`, or (`mounted`) `mrtr serve` of a hub mounting the backend at
    `ev` (its tools named `ev_<name>`)."""
    backend = [str(venv_python("mcp1")), str(BACKEND)]
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "PROXY_LEDGER": str(ledger),
        "MRTR_STORE_URL": redis.url,
        "MRTR_REQUEST_STATE_KEY": secrets.token_urlsafe(32),
        "MOUNT_EVERYTHING": json.dumps(backend),
    }
    if mounted:
        command = [sys.executable, "-m", "mrtr", "serve", f"{HUB}:server"]
    else:
        command = [sys.executable, "-m", "mrtr", "proxy"]
    with contextlib.ExitStack() as stack:
        instances = []
        for _ in range(2):
            port = free_port()
            argv = [*command, "--transport", "http", "--port", str(port)]
            process = stack.enter_context(
                listening(
                    argv if mounted else [*argv, "--", *backend],
                    port,
                    env=env,
                    stderr=subprocess.DEVNULL,
                )
            )
            instances.append((f"http://127.0.0.1:{port}/mcp", process))
        yield instances


def answer(params: Any) -> ElicitResult:
    if params.message.startswith("Size"):
        return ElicitResult(action="accept", content={"size": "big"})
    return ElicitResult(action="accept", content={"ok": True})


def client(url: str) -> Client:
    """A modern client that declares elicitation (the test answers by hand)."""
    never = ElicitResult(action="cancel")
    return Client.http(
        url, options=ClientOptions(protocol="modern"), elicitation_handler=lambda _: never
    )


def retry(first: dict[str, Any], params: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    [key] = first["inputRequests"]
    return {
        **params,
        "inputResponses": {key: {"action": "accept", "content": content}},
        "requestState": first["requestState"],
    }


@pytest.mark.parametrize("mounted", [False, True], ids=["proxy", "mounted"])
async def test_rounds_alternating_between_instances_reach_the_held_call(
    tmp_path: Path, redis_instance: RedisInstance, mounted: bool
) -> None:
    ledger = tmp_path / "ledger"
    params = {"name": "ev_book" if mounted else "book", "arguments": {"item": "tent"}}
    with two_proxies(redis_instance, ledger, mounted=mounted) as [(url_a, _), (url_b, _)]:
        async with client(url_a) as a, client(url_b) as b:
            first = await a.request("tools/call", params)
            assert first["resultType"] == "input_required"
            second = await b.request("tools/call", retry(first, params, {"size": "small"}))
            assert second["resultType"] == "input_required"
            [question] = second["inputRequests"].values()
            assert question["params"]["message"] == "Book a small tent?"
            done = await b.request("tools/call", retry(second, params, {"ok": True}))
    assert done["content"][0]["text"] == "booked a small tent"
    assert ledger.read_text().splitlines() == ["run tent"]


async def test_a_relayed_rounds_logs_and_progress_reach_the_client_in_order(
    tmp_path: Path, redis_instance: RedisInstance
) -> None:
    """The backend logs and reports progress in a round that reached the instance not holding
    its call: both reach the client on that round's stream, before the result."""
    ledger = tmp_path / "ledger"
    params = {"name": "survey", "arguments": {}}
    with two_proxies(redis_instance, ledger) as [(url_a, _), (url_b, _)]:
        async with client(url_a) as a:
            first = await a.request("tools/call", params)
        answered = retry(first, params, {"ok": True})
        body, headers = http_tool_call(
            "survey",
            caps={"elicitation": {}},
            extra={key: answered[key] for key in ("inputResponses", "requestState")},
            meta={"io.modelcontextprotocol/logLevel": "debug", "progressToken": "survey-1"},
            request_id=2,
        )
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(url_b, json=body, headers=headers)
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    messages = [
        json.loads(line.removeprefix("data:"))
        for line in response.text.splitlines()
        if line.startswith("data:") and line.removeprefix("data:").strip()
    ]
    assert [m.get("method", "result") for m in messages] == [
        "notifications/message",
        "notifications/progress",
        "result",
    ], messages
    assert messages[0]["params"]["data"] == "thanks for the rating (accept)"
    assert messages[1]["params"] == {
        "progressToken": "survey-1",
        "progress": 1,
        "total": 1,
        "message": "rated",
    }
    assert messages[2]["result"]["content"][0]["text"] == "rated"


async def test_a_killed_holding_instance_gives_a_clear_error_on_the_other(
    tmp_path: Path, redis_instance: RedisInstance
) -> None:
    ledger = tmp_path / "ledger"
    params = {"name": "book", "arguments": {"item": "sled"}}
    with two_proxies(redis_instance, ledger) as [(url_a, process_a), (url_b, _)]:
        async with client(url_a) as a, client(url_b) as b:
            first = await a.request("tools/call", params)
            os.kill(process_a.pid, signal.SIGKILL)
            with pytest.raises(McpError) as gone:
                await asyncio.wait_for(
                    b.request("tools/call", retry(first, params, {"size": "big"})), 20
                )
    assert gone.value.code == INTERNAL_ERROR
    assert "is gone" in gone.value.message
    # The backend call died with its instance, maybe after its effect: check, not call again.
    assert gone.value.data == {"mayHaveRun": True}
    assert "check what it did before calling the tool again" in gone.value.message
    assert ledger.read_text().splitlines() == ["run sled"]


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_both_eras_through_haproxy_round_robin(
    tmp_path: Path, redis_instance: RedisInstance, era: str
) -> None:
    """The shipped `deploy/haproxy.cfg` (round-robin, no stickiness) in front of the two
    instances: a modern client's retries alternate between them, a legacy client's session
    and its live questions too, and the backend's tool runs once per call."""
    binary = haproxy_binary()
    assert binary is not None, "haproxy is not installed: apt-get install haproxy"
    ledger = tmp_path / "ledger"
    rounds: list[RoundInfo] = []
    with two_proxies(redis_instance, ledger) as [(url_a, _), (url_b, _)]:
        port = free_port()
        env = {
            **os.environ,
            "MRTR_LB_ADDR": f"127.0.0.1:{port}",
            "MRTR_INSTANCE_1": url_a.removeprefix("http://").removesuffix("/mcp"),
            "MRTR_INSTANCE_2": url_b.removeprefix("http://").removesuffix("/mcp"),
        }
        config = write_config(2, tmp_path / "haproxy.cfg")
        with listening([binary, "-db", "-f", str(config)], port, env=env):
            options = ClientOptions(protocol=era, on_round=rounds.append)  # type: ignore[arg-type]
            async with Client.http(
                f"http://127.0.0.1:{port}/mcp", options=options, elicitation_handler=answer
            ) as connected:
                first = await connected.call_tool("book", {"item": "tent"})
                second = await connected.call_tool("book", {"item": "cart"})
    assert first.content[0].text == "booked a big tent"  # type: ignore[union-attr]
    assert second.content[0].text == "booked a big cart"  # type: ignore[union-attr]
    assert len(rounds) == (4 if era == "modern" else 0)
    assert ledger.read_text().splitlines() == ["run tent", "run cart"]
