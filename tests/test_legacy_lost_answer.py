"""A legacy client's answer to a live question, POSTed to another instance than the one that
asked, reaches the asking one even when the broker message that carries it is lost: the call
completes, it never waits out its timeout.

Two servers share a store (one real redis-server) and a broker (another real redis-server),
each behind its own app, under an ASGI front on a loopback port that sends every request to
the first server and every response and notification to the second. The client's answer to
the first server's question thus goes to the second, which relays it; the broker's Redis is
paused (SIGSTOP) as the answer goes out, so the relay's publication times out and is lost
(as when one Redis serving both stalls between the store's read and the publication).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson
import pytest
import redis

from helpers.redis_instance import RedisInstance, running_redis
from helpers.transport_flow import serve
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult, ServerOptions
from mrtr.server.redis_store import RedisBroker, RedisStore
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.http_legacy_shared import ANSWER_SLOTS
from servers.legacy_cluster_server import build

GUARD = 15.0  # seconds: only ever reached when the call hangs
KEY = "lost-answer-key-" + "k" * 32


class AnswersElsewhere:
    """Requests (and GET, DELETE) go to `apps[0]`; POSTed responses and notifications go to
    `apps[1]`. Counts the responses it sent there."""

    def __init__(self, apps: list[StreamableHTTPApp]) -> None:
        self.apps = apps
        self.relayed = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await self.apps[0](scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        request = isinstance(parsed, dict) and "method" in parsed and "id" in parsed
        if isinstance(parsed, dict) and "result" in parsed:
            self.relayed += 1
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.apps[0 if request else 1](scope, replay, send)


def go_on(redis: RedisInstance) -> None:
    """Let a stopped redis-server go on (SIGCONT; nothing when it runs)."""
    if redis.process is not None:
        redis.process.send_signal(signal.SIGCONT)


async def test_an_answer_whose_broker_message_is_lost_still_reaches_the_instance_that_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mrtr.http")
    with running_redis() as store_redis, running_redis() as broker_redis:
        store = RedisStore(store_redis.url)
        brokers = [RedisBroker(broker_redis.url) for _ in range(2)]
        servers = [
            build("lost-answer", ServerOptions(request_state_key=KEY, store=store, broker=broker))
            for broker in brokers
        ]
        front = AnswersElsewhere([StreamableHTTPApp(server, sse_retry=0.05) for server in servers])
        asked = 0

        def stall_then_accept(params: ElicitRequestParams) -> ElicitResult:
            # The broker stalls as the answer goes out: its relay cannot be published.
            nonlocal asked
            asked += 1
            assert broker_redis.process is not None
            broker_redis.process.send_signal(signal.SIGSTOP)
            return ElicitResult(action="accept", content={"ok": True})

        try:
            async with AsyncExitStack() as stack:
                for server in servers:
                    await stack.enter_async_context(server.running())
                base = await stack.enter_async_context(serve(front))
                client = Client.http(
                    f"{base}/mcp",
                    elicitation_handler=stall_then_accept,
                    options=ClientOptions(protocol="legacy"),
                    timeout=4 * GUARD,  # the guard, not the client, ends a hung call
                )
                async with client:
                    async with asyncio.timeout(GUARD):
                        result = await client.call_tool("confirm", {"item": "lamp"})
                    go_on(broker_redis)  # before the session ends (its DELETE publishes)
                for app in front.apps:
                    app.close()
        finally:
            go_on(broker_redis)
            await store.aclose()
            for broker in brokers:
                await broker.aclose()
    assert asked == 1 and front.relayed == 1  # answered once, on the other server
    data = result.structured_content or {}
    assert (data["action"], data["ok"]) == ("accept", True)
    assert "an answer the broker lost was found in the store" in caplog.text


async def test_answers_to_requests_never_sent_fill_at_most_the_sessions_places() -> None:
    # What a client posts as answers is kept for the instance that asked: a client posting
    # answers to requests nobody sent makes the store hold a bounded number per session.
    with running_redis() as store_redis, running_redis() as broker_redis:
        store = RedisStore(store_redis.url)
        brokers = [RedisBroker(broker_redis.url) for _ in range(2)]
        servers = [
            build("answer-slots", ServerOptions(request_state_key=KEY, store=store, broker=broker))
            for broker in brokers
        ]
        front = AnswersElsewhere([StreamableHTTPApp(server, sse_retry=0.05) for server in servers])
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        try:
            async with AsyncExitStack() as stack:
                for server in servers:
                    await stack.enter_async_context(server.running())
                base = await stack.enter_async_context(serve(front))
                http = await stack.enter_async_context(httpx.AsyncClient(timeout=GUARD))
                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"elicitation": {}},
                        "clientInfo": {"name": "flood", "version": "0"},
                    },
                }
                opened = await http.post(f"{base}/mcp", json=init, headers=headers)
                assert opened.status_code == 200, opened.text
                session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
                session["MCP-Protocol-Version"] = "2025-11-25"
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await http.post(f"{base}/mcp", json=note, headers=session)).is_success
                sent = 4 * ANSWER_SLOTS
                for count in range(sent):
                    # Each from another made-up instance, as an attacker would vary them.
                    answer = {
                        "jsonrpc": "2.0",
                        "id": f"s-{count:012x}-{count}",
                        "result": {"action": "accept", "content": {"pad": "x" * 1000}},
                    }
                    posted = await http.post(f"{base}/mcp", json=answer, headers=session)
                    assert posted.status_code == 202, posted.text
                with redis.Redis.from_url(store_redis.url) as inspect:
                    kept = list(inspect.scan_iter(match="mrtr/answer/*"))
                for app in front.apps:
                    app.close()
        finally:
            await store.aclose()
            for broker in brokers:
                await broker.aclose()
    assert front.relayed == sent
    assert 0 < len(kept) <= ANSWER_SLOTS
