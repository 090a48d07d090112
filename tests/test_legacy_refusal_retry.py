"""A legacy session's messages the server refuses unread (HTTP 503 with `Retry-After`) are sent
again when that is safe, and a call never waits out its timeout for an answer that was lost.

* The answer to a server's question (a JSON-RPC response) refused with 503 is re-sent after
  `Retry-After`, and the call completes; refused every time, the call fails at once, naming
  the answer it could not deliver.
* A request refused with 503 before it ran (`data.mayHaveRun` false: the shared store could not
  find the session) is re-sent under the same id and runs once; a 503 that does not say so
  fails the call at once with the server's retryable error, and it is not sent again.

Against the real server app on a loopback port: behind an ASGI wrapper that refuses chosen
POSTs, or sharing a real redis-server paused with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from helpers.redis_instance import RedisInstance, redis_instance
from helpers.transport_flow import serve
from mrtr import (
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
    RequestContext,
    Server,
    ServerOptions,
)
from mrtr.protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    SESSION_EXPIRED,
    McpError,
)
from mrtr.server.redis_store import RedisBroker, RedisStore

__all__ = ["redis_instance"]  # the fixture, used by name

GUARD = 15.0  # seconds: only ever reached when a call hangs
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
KEY = "legacy-refusal-key-" + "r" * 32
LEGACY = ClientOptions(protocol="legacy")


def build_server(**options: Any) -> tuple[Server, list[str]]:
    """A server whose `confirm` asks live and `record` records each run (the side effect)."""
    server = Server("refusals", options=ServerOptions(request_state_key=KEY, **options))
    runs: list[str] = []

    @server.tool()
    async def confirm(ctx: RequestContext, item: str) -> str:
        """Ask whether to go on with `item`."""
        answer = await ctx.elicit(f"Confirm {item}?", CONFIRM)
        return f"{item}: {answer.action} {(answer.content or {}).get('ok')}"

    @server.tool()
    async def record(item: str) -> str:
        """Record `item` once per run."""
        runs.append(item)
        return f"recorded {item}"

    return server, runs


def accept(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


class Refusing:
    """The app, except that POSTs `refuse(message)` picks (up to `limit` of them) get `status`
    (503 with `Retry-After: 0` by default) and a JSON-RPC error whose data is `data`; counts
    what it refused."""

    def __init__(
        self,
        app: Any,
        refuse: Callable[[dict[str, Any]], bool],
        limit: int,
        data: dict[str, Any] | None = None,
        status: int = 503,
    ) -> None:
        self.app = app
        self.status = status
        self.refuse = refuse
        self.limit = limit
        self.data = data
        self.refused: list[dict[str, Any]] = []
        self.passed: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        body = b"".join(chunks)
        message = orjson.loads(body)
        if self.refuse(message) and len(self.refused) < self.limit:
            self.refused.append(message)
            error: dict[str, Any] = {"code": INTERNAL_ERROR, "message": "store unavailable"}
            if self.data is not None:
                error["data"] = self.data
            answer = orjson.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": error})
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", b"%d" % len(answer)),
                        (b"retry-after", b"0"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": answer})
            return
        self.passed.append(message)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def is_answer(message: dict[str, Any]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)


def is_call_of(tool: str) -> Callable[[dict[str, Any]], bool]:
    def check(message: dict[str, Any]) -> bool:
        params = message.get("params")
        return message.get("method") == "tools/call" and (params or {}).get("name") == tool

    return check


async def test_an_answer_refused_with_503_is_sent_again_and_the_call_completes() -> None:
    server, _ = build_server()
    app = Refusing(server.asgi_app(), is_answer, limit=2)
    async with serve(app) as base:
        client = Client.http(f"{base}/mcp", elicitation_handler=accept, options=LEGACY)
        async with client, asyncio.timeout(GUARD):
            result = await client.call_tool("confirm", {"item": "lamp"})
    assert result.content[0].text == "lamp: accept True"  # type: ignore[union-attr]
    assert len(app.refused) == 2
    delivered = [message for message in app.passed if is_answer(message)]
    assert [m["id"] for m in delivered] == [app.refused[0]["id"]]  # the same answer, once taken


async def test_an_answer_refused_every_time_fails_the_call_at_once() -> None:
    server, _ = build_server()
    app = Refusing(server.asgi_app(), is_answer, limit=1_000)
    async with serve(app) as base:
        client = Client.http(f"{base}/mcp", elicitation_handler=accept, options=LEGACY)
        async with client:
            started = time.monotonic()
            with pytest.raises(McpError) as raised:
                async with asyncio.timeout(GUARD):
                    await client.call_tool("confirm", {"item": "lamp"})
            took = time.monotonic() - started
    error = raised.value
    assert error.code == CONNECTION_CLOSED, error.message
    assert "elicitation/create" in error.message and "503" in error.message
    assert error.data["mayHaveRun"] is True and error.data["undelivered"] == "elicitation/create"
    assert 2 <= len(app.refused) <= 5  # a few tries, bounded
    assert took < GUARD


async def test_an_answer_to_a_forgotten_session_fails_the_call_at_once_not_resent() -> None:
    server, _ = build_server()
    app = Refusing(server.asgi_app(), is_answer, limit=1_000, status=404)
    async with serve(app) as base:
        client = Client.http(f"{base}/mcp", elicitation_handler=accept, options=LEGACY)
        async with client:
            with pytest.raises(McpError) as raised:
                async with asyncio.timeout(GUARD):
                    await client.call_tool("confirm", {"item": "lamp"})
    # Not SESSION_EXPIRED, which would make the client send the call again: it ran already.
    assert raised.value.code == CONNECTION_CLOSED, raised.value.message
    assert raised.value.data["cause"]["code"] == SESSION_EXPIRED
    assert raised.value.data["undelivered"] == "elicitation/create"
    assert raised.value.data["mayHaveRun"] is True
    assert len(app.refused) == 1  # neither the answer nor the call was sent again


async def test_a_notification_refused_with_503_is_sent_again_and_the_session_opens() -> None:
    server, _ = build_server()

    def is_initialized(message: dict[str, Any]) -> bool:
        return message.get("method") == "notifications/initialized"

    app = Refusing(server.asgi_app(), is_initialized, limit=2)
    async with (
        serve(app) as base,
        Client.http(f"{base}/mcp", options=LEGACY) as client,
        asyncio.timeout(GUARD),
    ):
        result = await client.call_tool("record", {"item": "z"})
    assert result.content[0].text == "recorded z"  # type: ignore[union-attr]
    assert len(app.refused) == 2
    assert [m for m in app.passed if is_initialized(m)] == [app.refused[0]]


async def test_a_request_refused_before_it_ran_is_sent_again_under_its_id() -> None:
    server, runs = build_server()
    app = Refusing(server.asgi_app(), is_call_of("record"), limit=2, data={"mayHaveRun": False})
    async with (
        serve(app) as base,
        Client.http(f"{base}/mcp", options=LEGACY) as client,
        asyncio.timeout(GUARD),
    ):
        result = await client.call_tool("record", {"item": "x"})
    assert result.content[0].text == "recorded x"  # type: ignore[union-attr]
    assert runs == ["x"]
    ids = {m["id"] for m in app.refused} | {m["id"] for m in app.passed if is_call_of("record")(m)}
    assert len(ids) == 1  # one request, sent three times under one id


async def test_a_503_that_does_not_say_not_run_fails_the_call_at_once_unsent_again() -> None:
    server, runs = build_server()
    app = Refusing(server.asgi_app(), is_call_of("record"), limit=1_000)
    async with serve(app) as base, Client.http(f"{base}/mcp", options=LEGACY) as client:
        with pytest.raises(McpError) as raised:
            async with asyncio.timeout(GUARD):
                await client.call_tool("record", {"item": "x"})
    assert raised.value.code == INTERNAL_ERROR and "store unavailable" in raised.value.message
    assert len(app.refused) == 1 and runs == []


async def test_a_plain_503_fails_the_call_at_once_saying_it_is_retryable() -> None:
    server, runs = build_server()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            while True:
                event = await receive()
                body += event.get("body", b"")
                if not event.get("more_body"):
                    break
            if is_call_of("record")(orjson.loads(body)):  # a proxy with no instance to use
                page = b"<html>No server is available to handle this request.</html>"
                headers = [(b"content-type", b"text/html"), (b"retry-after", b"2")]
                await send({"type": "http.response.start", "status": 503, "headers": headers})
                await send({"type": "http.response.body", "body": page})
                return

            async def replay() -> Any:
                return {"type": "http.request", "body": body, "more_body": False}

            await inner(scope, replay, send)
            return
        await inner(scope, receive, send)

    inner = server.asgi_app()
    async with serve(app) as base, Client.http(f"{base}/mcp", options=LEGACY) as client:
        with pytest.raises(McpError) as raised:
            async with asyncio.timeout(GUARD):
                await client.call_tool("record", {"item": "x"})
    assert raised.value.code == HTTP_ERROR and "retryable" in raised.value.message
    assert raised.value.data["status"] == 503 and raised.value.data["retryAfter"] == 2
    assert runs == []


def pause_for(redis: RedisInstance, seconds: float) -> None:
    """Stop redis-server (SIGSTOP) now and let it go on after `seconds` (SIGCONT)."""
    process = redis.process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    asyncio.get_running_loop().call_later(seconds, process.send_signal, signal.SIGCONT)


async def test_redis_paused_while_the_answer_is_posted_the_call_still_completes(
    redis_instance: RedisInstance, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mrtr.http")
    store, broker = RedisStore(redis_instance.url), RedisBroker(redis_instance.url)
    server, _ = build_server(store=store, broker=broker)

    def pause_then_accept(params: ElicitRequestParams) -> ElicitResult:
        pause_for(redis_instance, 1.5)  # the answer's POST finds the store stalled
        return accept(params)

    try:
        async with serve(server.asgi_app()) as base:
            client = Client.http(
                f"{base}/mcp", elicitation_handler=pause_then_accept, options=LEGACY
            )
            async with client, asyncio.timeout(GUARD):
                result = await client.call_tool("confirm", {"item": "lamp"})
    finally:
        assert redis_instance.process is not None
        redis_instance.process.send_signal(signal.SIGCONT)
        await store.aclose()
        await broker.aclose()
    assert result.content[0].text == "lamp: accept True"  # type: ignore[union-attr]
    assert "HTTP 503" in caplog.text  # the store's stall was met, and waited out


async def test_redis_paused_when_a_request_is_posted_it_runs_once_after(
    redis_instance: RedisInstance, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mrtr.http")
    store, broker = RedisStore(redis_instance.url), RedisBroker(redis_instance.url)
    server, runs = build_server(store=store, broker=broker)
    try:
        async with (
            serve(server.asgi_app()) as base,
            Client.http(f"{base}/mcp", options=LEGACY) as client,
        ):
            await client.list_tools()
            pause_for(redis_instance, 1.5)  # the session cannot be looked up for a while
            async with asyncio.timeout(GUARD):
                result = await client.call_tool("record", {"item": "y"})
    finally:
        assert redis_instance.process is not None
        redis_instance.process.send_signal(signal.SIGCONT)
        await store.aclose()
        await broker.aclose()
    assert result.content[0].text == "recorded y"  # type: ignore[union-attr]
    assert runs == ["y"]
    assert "refused before it ran (503)" in caplog.text
