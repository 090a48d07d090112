"""The stateless lifecycle: no handshake, `server/discover`, per-request `_meta`, result
envelopes, list caching hints and pagination, per-request logging, progress and cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from mrtr import (
    CallToolResult,
    Client,
    RequestContext,
    Server,
    ServerOptions,
    TextContent,
)
from mrtr.protocol import errors, jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.server.connection import ServerConnection

MakeRequest = Callable[..., dict[str, Any]]
GUARD = 5.0  # seconds; only a failure guard, never an expectation
SERVER_INFO = {"name": "life", "version": "3.1.4"}


def full_server(**options: Any) -> Server:
    """One of everything, registered in a known order."""
    server = Server("life", version="3.1.4", options=ServerOptions(**options))

    @server.tool()
    def echo(text: str = "") -> str:
        return text

    @server.prompt()
    def greet(name: str = "you") -> str:
        return f"Hello {name}"

    @server.resource("file:///readme")
    def readme() -> str:
        return "read me"

    @server.resource_template("db://rows/{id}")
    def row(id: str) -> str:
        return id

    @server.completion()
    def complete(ref: Any, argument: Any, context: Any) -> list[str]:
        return ["a"]

    return server


class Notes:
    """Collects the notifications a request sends."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.sent.append(jsonrpc.loads(jsonrpc.dumps(message)))

    def of(self, method: str) -> list[dict[str, Any]]:
        return [m["params"] for m in self.sent if m.get("method") == method]


def result_of(response: dict[str, Any] | None) -> dict[str, Any]:
    assert response is not None and "error" not in response, response
    return response["result"]  # type: ignore[no-any-return]


class Wire:
    """A `ServerConnection` whose outgoing messages are recorded."""

    def __init__(self, server: Server) -> None:
        self.sent: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.connection = ServerConnection(server, self._send)

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self.arrived.set()

    async def cancel(self, request_id: Any) -> None:
        note = jsonrpc.notification(
            "notifications/cancelled", {"requestId": request_id, "reason": "user asked"}
        )
        await self.connection.feed_bytes(jsonrpc.dumps(note))

    async def finish(self) -> None:
        tasks = list(self.connection._tasks.values())
        async with asyncio.timeout(GUARD):
            await asyncio.gather(*tasks, return_exceptions=True)


# --- no handshake, discover -----------------------------------------------------------------


async def test_first_request_needs_no_initialize(make_request: MakeRequest) -> None:
    server = full_server()
    wire = Wire(server)
    call = make_request("tools/call", {"name": "echo", "arguments": {"text": "first"}})
    await wire.connection.feed_bytes(jsonrpc.dumps(call))
    await wire.finish()
    assert result_of(wire.sent[0])["content"] == [{"type": "text", "text": "first"}]


async def test_initialize_is_not_a_method_of_this_protocol(make_request: MakeRequest) -> None:
    response = await full_server().handle_message(make_request("initialize", {}))
    assert response is not None
    assert response["error"]["code"] == errors.METHOD_NOT_FOUND


async def test_discover_reports_versions_capabilities_instructions_and_caching(
    make_request: MakeRequest,
) -> None:
    server = full_server(list_ttl_ms=60_000, instructions="Use echo to echo.")
    result = result_of(await server.handle_message(make_request("server/discover")))
    capabilities = result.pop("capabilities")
    assert capabilities.keys() == {"logging", "tools", "prompts", "resources", "completions"}
    assert result == {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "instructions": "Use echo to echo.",
        "ttlMs": 60_000,
        "cacheScope": "public",
        "_meta": {meta_keys.SERVER_INFO: SERVER_INFO},
    }


async def test_discover_advertises_only_what_is_registered(make_client: Any) -> None:
    async with make_client(Server("bare")) as client:
        result = await client.discover()
    assert result.capabilities.to_wire() == {"logging": {}}
    assert result.instructions is None
    assert result.supported_versions == ["2026-07-28"]


# --- every result: resultType and serverInfo -------------------------------------------------

EVERY_METHOD = [
    ("server/discover", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "echo"}),
    ("prompts/list", {}),
    ("prompts/get", {"name": "greet"}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("resources/read", {"uri": "file:///readme"}),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {}}),
]


@pytest.mark.parametrize(("method", "params"), EVERY_METHOD, ids=[m for m, _ in EVERY_METHOD])
async def test_every_result_carries_result_type_and_server_info(
    make_request: MakeRequest, method: str, params: dict[str, Any]
) -> None:
    response = await full_server().handle_message(make_request(method, params, id="r"))
    assert response is not None and response["id"] == "r"
    result = result_of(response)
    assert result["resultType"] == "complete"
    assert result["_meta"] == {meta_keys.SERVER_INFO: SERVER_INFO}


async def test_server_info_carries_the_optional_identity_fields(make_client: Any) -> None:
    server = Server("named", "1.0", title="Named Server", website_url="https://example.com")
    async with make_client(server) as client:
        result = await client.discover()
    assert result.meta == {
        meta_keys.SERVER_INFO: {
            "name": "named",
            "version": "1.0",
            "title": "Named Server",
            "websiteUrl": "https://example.com",
        }
    }


async def test_result_meta_from_a_handler_keeps_its_keys_and_gains_server_info(
    make_client: Any,
) -> None:
    server = Server("life", version="3.1.4")

    @server.tool()
    def traced() -> CallToolResult:
        return CallToolResult(content=[TextContent(text="ok")], meta={"com.example/trace": "t1"})

    @server.tool()
    def plain() -> str:
        return "ok"

    async with make_client(server) as client:
        traced_result = await client.call_tool("traced")
        plain_result = await client.call_tool("plain")
    assert traced_result.meta == {"com.example/trace": "t1", meta_keys.SERVER_INFO: SERVER_INFO}
    # One handler's _meta never leaks into another's result.
    assert plain_result.meta == {meta_keys.SERVER_INFO: SERVER_INFO}


async def test_each_request_is_judged_by_its_own_client_capabilities(
    make_request: MakeRequest,
) -> None:
    server = Server("s")

    @server.tool()
    def caps(ctx: RequestContext) -> dict[str, Any]:
        return ctx.client_capabilities

    first = make_request(
        "tools/call", {"name": "caps"}, **{meta_keys.CLIENT_CAPABILITIES: {"sampling": {}}}
    )
    second = make_request("tools/call", {"name": "caps"})
    assert result_of(await server.handle_message(first))["structuredContent"] == {"sampling": {}}
    assert result_of(await server.handle_message(second))["structuredContent"] == {}


# --- lists: caching hints, order, pagination -------------------------------------------------

LISTS = [
    ("tools/list", "tools", "name"),
    ("prompts/list", "prompts", "name"),
    ("resources/list", "resources", "uri"),
    ("resources/templates/list", "resourceTemplates", "uriTemplate"),
]


def many(count: int, **options: Any) -> Server:
    """A server with `count` of each kind of list item, registered as item-0, item-1, ..."""
    server = Server("many", options=ServerOptions(**options))
    for i in range(count):
        server.tool(f"tool-{i}")(lambda: "")
        server.prompt(f"prompt-{i}")(lambda: "")
        server.resource(f"file:///item-{i}")(lambda: "")
        server.resource_template(f"db://item-{i}/{{id}}")(lambda id: id)
    return server


def keys_of(method: str, count: int) -> list[str]:
    return {
        "tools/list": [f"tool-{i}" for i in range(count)],
        "prompts/list": [f"prompt-{i}" for i in range(count)],
        "resources/list": [f"file:///item-{i}" for i in range(count)],
        "resources/templates/list": [f"db://item-{i}/{{id}}" for i in range(count)],
    }[method]


@pytest.mark.parametrize(("method", "field", "key"), LISTS, ids=[m for m, _, _ in LISTS])
async def test_list_results_carry_the_configured_caching_hints(
    make_request: MakeRequest, method: str, field: str, key: str
) -> None:
    server = many(1, list_ttl_ms=300_000, list_cache_scope="private")
    result = result_of(await server.handle_message(make_request(method)))
    assert (result["ttlMs"], result["cacheScope"]) == (300_000, "private")
    assert "nextCursor" not in result


@pytest.mark.parametrize(("method", "field", "key"), LISTS, ids=[m for m, _, _ in LISTS])
async def test_lists_keep_registration_order(
    make_request: MakeRequest, method: str, field: str, key: str
) -> None:
    server = many(12)
    for _ in range(2):
        result = result_of(await server.handle_message(make_request(method)))
        assert [item[key] for item in result[field]] == keys_of(method, 12)


@pytest.mark.parametrize(("method", "field", "key"), LISTS, ids=[m for m, _, _ in LISTS])
async def test_lists_paginate_with_opaque_cursors(
    make_request: MakeRequest, method: str, field: str, key: str
) -> None:
    server = many(5, page_size=2)
    pages: list[list[str]] = []
    cursor: str | None = None
    for _ in range(10):  # bounded: 3 pages expected
        params = {} if cursor is None else {"cursor": cursor}
        result = result_of(await server.handle_message(make_request(method, params)))
        pages.append([item[key] for item in result[field]])
        assert "ttlMs" in result and "cacheScope" in result  # every page is cacheable
        cursor = result.get("nextCursor")
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [k for page in pages for k in page] == keys_of(method, 5)


async def test_the_same_cursor_gives_the_same_page(make_request: MakeRequest) -> None:
    server = many(5, page_size=2)
    first = result_of(await server.handle_message(make_request("tools/list")))
    cursor = first["nextCursor"]
    again = [
        result_of(await server.handle_message(make_request("tools/list", {"cursor": cursor})))
        for _ in range(2)
    ]
    assert again[0] == again[1]
    assert [t["name"] for t in again[0]["tools"]] == ["tool-2", "tool-3"]


async def test_client_follows_next_cursor_through_every_page(make_client: Any) -> None:
    async with make_client(many(7, page_size=3)) as client:
        names: list[str] = []
        cursor: str | None = None
        for _ in range(10):
            page = await client.list_prompts(cursor)
            names += [p.name for p in page.prompts]
            cursor = page.next_cursor
            if cursor is None:
                break
    assert names == keys_of("prompts/list", 7)


# --- per-request logging --------------------------------------------------------------------


def logging_server() -> Server:
    server = Server("logs")

    @server.tool()
    async def chatty(ctx: RequestContext) -> str:
        for level in meta_keys.LOG_LEVELS:
            await ctx.log(level, {"at": level}, logger="chatty")
        return "done"

    return server


async def test_no_log_messages_for_a_request_that_did_not_ask(make_request: MakeRequest) -> None:
    notes = Notes()
    response = await logging_server().handle_message(
        make_request("tools/call", {"name": "chatty"}), notes
    )
    assert result_of(response)["content"][0]["text"] == "done"
    assert notes.sent == []


@pytest.mark.parametrize("level", meta_keys.LOG_LEVELS)
async def test_log_level_sends_that_level_and_above_only(
    make_request: MakeRequest, level: str
) -> None:
    notes = Notes()
    message = make_request("tools/call", {"name": "chatty"}, **{meta_keys.LOG_LEVEL: level})
    await logging_server().handle_message(message, notes)
    wanted = meta_keys.LOG_LEVELS[meta_keys.LOG_LEVEL_RANK[level] :]
    assert notes.of("notifications/message") == [
        {"level": lvl, "data": {"at": lvl}, "logger": "chatty"} for lvl in wanted
    ]
    assert len(notes.sent) == len(wanted)


async def test_log_messages_reach_the_client_before_the_result(make_client: Any) -> None:
    received: list[dict[str, Any]] = []
    async with make_client(logging_server(), log_handler=received.append) as client:
        result = await client.call_tool("chatty", meta={meta_keys.LOG_LEVEL: "critical"})
        quiet = len(received)
        await client.call_tool("chatty")
    assert result.content == [TextContent(text="done")]
    assert [r["level"] for r in received] == ["critical", "alert", "emergency"]
    assert quiet == len(received)  # the second call did not ask, and got nothing


@pytest.mark.parametrize("asked", [None, "debug"], ids=["not-asked", "asked"])
async def test_logging_at_an_unknown_level_is_a_handler_error_whoever_listens(
    make_request: MakeRequest, asked: str | None
) -> None:
    server = Server("logs", options=ServerOptions(mask_errors=False))  # the text as raised

    @server.tool()
    async def sloppy(ctx: RequestContext) -> str:
        await ctx.log("verbose", "hello")
        return "logged"

    notes = Notes()
    meta = {} if asked is None else {meta_keys.LOG_LEVEL: asked}
    response = await server.handle_message(
        make_request("tools/call", {"name": "sloppy"}, **meta), notes
    )
    result = result_of(response)
    assert result["isError"] is True
    assert "unknown log level 'verbose'" in result["content"][0]["text"]
    assert notes.sent == []


# --- progress ---------------------------------------------------------------------------------


def progress_server() -> Server:
    server = Server("progress")

    @server.tool()
    async def build(ctx: RequestContext) -> str:
        await ctx.report_progress(1, 4, "laying foundations")
        await ctx.report_progress(1, 4, "not an increase: dropped")
        await ctx.report_progress(2.5, 4)
        await ctx.report_progress(2, 4, "going backwards: dropped")
        await ctx.report_progress(4)
        return "built"

    return server


@pytest.mark.parametrize("token", ["build-1", 7], ids=["string", "integer"])
async def test_progress_notifications_carry_the_token_and_only_increase(
    make_request: MakeRequest, token: Any
) -> None:
    notes = Notes()
    message = make_request("tools/call", {"name": "build"}, **{meta_keys.PROGRESS_TOKEN: token})
    await progress_server().handle_message(message, notes)
    assert notes.of("notifications/progress") == [
        {"progressToken": token, "progress": 1, "total": 4, "message": "laying foundations"},
        {"progressToken": token, "progress": 2.5, "total": 4},
        {"progressToken": token, "progress": 4},
    ]


async def test_no_progress_for_a_request_without_a_token(make_request: MakeRequest) -> None:
    notes = Notes()
    await progress_server().handle_message(make_request("tools/call", {"name": "build"}), notes)
    assert notes.sent == []


async def test_client_progress_callback_sees_each_update(make_client: Any) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with make_client(progress_server()) as client:
        result = await client.call_tool("build", progress_callback=on_progress)
    assert result.content == [TextContent(text="built")]
    assert updates == [(1, 4, "laying foundations"), (2.5, 4, None), (4, None, None)]


# --- cancellation -----------------------------------------------------------------------------


class Blocker:
    """A tool body that blocks until cancelled, and records that it was."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self) -> str:
        self.started.set()
        try:
            await asyncio.Event().wait()  # never set: only cancellation ends this
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return "unreachable"


def blocking_server(blocker: Blocker) -> Server:
    server = Server("cancel")
    server.tool("block")(blocker.__call__)

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server


async def test_cancelled_notification_cancels_the_handler_and_sends_no_response(
    make_request: MakeRequest,
) -> None:
    blocker = Blocker()
    wire = Wire(blocking_server(blocker))
    await wire.connection.feed(make_request("tools/call", {"name": "block"}, id="long"))
    async with asyncio.timeout(GUARD):
        await blocker.started.wait()
    await wire.cancel("long")
    async with asyncio.timeout(GUARD):
        await blocker.cancelled.wait()
    await wire.finish()
    assert wire.sent == []
    assert wire.connection._tasks == {}


async def test_cancelling_one_request_leaves_the_others_running(make_request: MakeRequest) -> None:
    blocker = Blocker()
    wire = Wire(blocking_server(blocker))
    await wire.connection.feed(make_request("tools/call", {"name": "block"}, id=1))
    async with asyncio.timeout(GUARD):
        await blocker.started.wait()
    await wire.cancel(2)  # unknown id: ignored
    await wire.connection.feed(
        make_request("tools/call", {"name": "echo", "arguments": {"text": "alive"}}, id=3)
    )
    async with asyncio.timeout(GUARD):
        await wire.arrived.wait()
    assert [m["id"] for m in wire.sent] == [3]
    assert not blocker.cancelled.is_set()
    await wire.cancel(1)
    await wire.finish()
    assert blocker.cancelled.is_set()
    assert [m["id"] for m in wire.sent] == [3]


async def test_cancellation_after_the_response_is_ignored(make_request: MakeRequest) -> None:
    wire = Wire(blocking_server(Blocker()))
    await wire.connection.feed(
        make_request("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=1)
    )
    await wire.finish()
    await wire.cancel(1)
    await wire.connection.feed(
        make_request("tools/call", {"name": "echo", "arguments": {"text": "y"}}, id=1)
    )
    await wire.finish()
    assert [m["result"]["content"][0]["text"] for m in wire.sent] == ["x", "y"]


async def test_client_cancelling_a_call_cancels_the_server_handler() -> None:
    blocker = Blocker()
    async with Client.in_memory(blocking_server(blocker)) as client:
        call = asyncio.create_task(client.call_tool("block"))
        async with asyncio.timeout(GUARD):
            await blocker.started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        async with asyncio.timeout(GUARD):
            await blocker.cancelled.wait()
        # The connection is still good for the next call.
        assert (await client.call_tool("echo", {"text": "next"})).content == [
            TextContent(text="next")
        ]


@pytest.mark.parametrize("tool", ["echo_now", "echo_later"])
async def test_a_request_id_is_free_once_its_answer_goes_out(
    make_request: MakeRequest, tool: str
) -> None:
    # A client that reuses an id the moment its answer arrives (here: from inside the delivery
    # of that answer) starts a new request, whether the first answered in its first step or
    # after waiting; it is never told the id is in use, and the request now holding the id
    # can still be cancelled by it once the earlier ones are long gone.
    blocker = Blocker()
    server = Server("reuse")
    server.tool("hold")(blocker.__call__)

    @server.tool()
    async def echo_now(text: str) -> str:
        return text

    @server.tool()
    async def echo_later(text: str) -> str:
        await asyncio.sleep(0)
        return text

    answers: list[dict[str, Any]] = []

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return make_request("tools/call", {"name": name, "arguments": arguments}, id="same")

    async def send(message: dict[str, Any]) -> None:
        answers.append(message)
        if len(answers) < 2:
            await connection.feed(call(tool, {"text": str(len(answers))}))
        else:
            await connection.feed(call("hold", {}))

    connection = ServerConnection(server, send)
    await connection.feed(call(tool, {"text": "0"}))
    async with asyncio.timeout(GUARD):
        await blocker.started.wait()
    assert [result_of(a)["content"][0]["text"] for a in answers] == ["0", "1"]
    for _ in range(3):
        await asyncio.sleep(0)  # the earlier requests' done callbacks have run by now
    assert "same" in connection._tasks
    note = jsonrpc.notification("notifications/cancelled", {"requestId": "same"})
    await connection.feed(note)
    async with asyncio.timeout(GUARD):
        await blocker.cancelled.wait()
    await asyncio.sleep(0)
    assert connection._tasks == {}
    assert len(answers) == 2  # a cancelled request gets no answer
