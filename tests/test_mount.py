"""`Server.mount(prefix, other)`: a mounted server's tools, prompts, resources, templates and
completions under the prefix, its questions answered by the outer client in both eras, its
list changes announced by the outer server, its lifespan run inside the outer one, and
collisions refused whenever they happen.

The servers are `tests/servers/mount_server.py`: in memory here, and served by `mrtr serve`
over Streamable HTTP (our client in both eras) and stdio (the official SDK's legacy client).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

from helpers.loopback_process import free_port, listening
from mrtr import (
    Client,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    LifespanError,
    ListRootsResult,
    RequestContext,
    Root,
    Server,
    TextContent,
    ToolError,
)
from mrtr.client.options import ClientOptions
from mrtr.protocol.errors import McpError

SCRIPT = Path(__file__).resolve().parent / "servers" / "mount_server.py"
_spec = importlib.util.spec_from_file_location("mount_server", SCRIPT)
assert _spec is not None and _spec.loader is not None
mount_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mount_server)

GUARD = 20.0  # seconds: only reached when something is broken
LEGACY = ClientOptions(protocol="legacy")
ANSWERS = {"Units?": {"u": "C"}, "Days?": {"n": 3}}


class User:
    """Answers the forecast's two questions, and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        return ElicitResult(action="accept", content=ANSWERS[params.message])


@asynccontextmanager
async def hub_client(**kwargs: Any) -> AsyncIterator[tuple[Client, Server, User]]:
    hub, weather = mount_server.build()
    user = User()
    async with Client.in_memory(hub, elicitation_handler=user, **kwargs) as client:
        yield client, weather, user


def text(result: Any) -> str:
    return str(result.content[0].text)


# --- lists, calls, reads, prompts, completions ---------------------------------------------


@pytest.mark.parametrize("options", [None, LEGACY], ids=["modern", "legacy"])
async def test_everything_mounted_is_listed_under_the_prefix(options: Any) -> None:
    async with hub_client(options=options or ClientOptions()) as (client, _, _):
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["echo", "weather_forecast", "weather_station"]
        forecast = tools[1]
        assert forecast.description and forecast.description.startswith("The forecast")
        assert forecast.input_schema["required"] == ["city"]
        resources = (await client.list_resources()).resources
        assert [r.uri for r in resources] == ["weather://weather/stations"]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["weather://weather/city/{name}"]
        assert [p.name for p in (await client.list_prompts()).prompts] == ["weather_brief"]


@pytest.mark.parametrize("options", [None, LEGACY], ids=["modern", "legacy"])
async def test_mounted_resources_templates_prompts_and_completions_answer(options: Any) -> None:
    async with hub_client(options=options or ClientOptions()) as (client, _, _):
        static = await client.read_resource("weather://weather/stations")
        assert [(c.uri, c.text) for c in static.contents] == [  # type: ignore[union-attr]
            ("weather://weather/stations", "Kew, Heathrow")
        ]
        city = await client.read_resource("weather://weather/city/Oslo")
        assert [(c.uri, c.text) for c in city.contents] == [  # type: ignore[union-attr]
            ("weather://weather/city/Oslo", "city Oslo")
        ]
        prompt = await client.get_prompt("weather_brief", {"city": "Rome"})
        assert prompt.messages[0].content.text == "Brief me on the weather in Rome"  # type: ignore[union-attr]
        done = await client.complete(
            {"type": "ref/prompt", "name": "weather_brief"}, {"name": "city", "value": "L"}
        )
        assert done.completion.values == ["London", "Lisbon"]
        assert text(await client.call_tool("echo", {"text": "own"})) == "own"


# --- questions, logs and the lifespan --------------------------------------------------------


async def test_a_mounted_tool_asks_twice_in_two_modern_rounds() -> None:
    logs: list[Any] = []
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    mount_server.SEEN.clear()
    async with hub_client(log_handler=logs.append, log_level="info") as (client, _, user):
        result = await client.call_tool(
            "weather_forecast", {"city": "London"}, progress_callback=on_progress
        )
    assert text(result) == "London: sunny in C for 3 days (Kew)"
    assert user.asked == ["Units?", "Days?"]
    # Logged and reported once, though the outer handler ran in three rounds.
    assert [entry["data"] for entry in logs] == ["forecast asked for London"]
    assert progress == [1]
    # The outer middleware runs around each round of the outer call; the mounted server's own
    # around each round of its handler, which runs once per question.
    assert mount_server.SEEN == [
        "hub saw weather_forecast",
        "weather saw forecast",
        "hub saw weather_forecast",
        "weather saw forecast",
        "hub saw weather_forecast",
        "weather saw forecast",
    ]


async def test_a_mounted_tool_asks_twice_live_on_a_legacy_session() -> None:
    logs: list[Any] = []
    async with hub_client(options=LEGACY, log_handler=logs.append) as (client, _, user):
        result = await client.call_tool("weather_forecast", {"city": "Paris"})
    assert text(result) == "Paris: sunny in C for 3 days (Kew)"
    assert user.asked == ["Units?", "Days?"]
    assert [entry["data"] for entry in logs] == ["forecast asked for Paris"]


@pytest.mark.parametrize("options", [None, LEGACY], ids=["modern", "legacy"])
async def test_a_mounted_tool_samples_and_lists_roots_through_the_outer_client(
    options: Any,
) -> None:
    files = Server("files")

    @files.tool()
    async def summarise(ctx: RequestContext) -> str:
        roots = await ctx.list_roots()
        reply = await ctx.sample(f"summarise {roots.roots[0].uri}")
        return reply.content.text  # type: ignore[union-attr]

    hub = Server("hub")
    hub.mount("files", files)

    def roots(params: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri="file:///notes")])

    def sample(params: CreateMessageRequestParams) -> CreateMessageResult:
        asked = params.messages[0].content.text  # type: ignore[union-attr]
        return CreateMessageResult(
            role="assistant", content=TextContent(text=f"{asked}: ok"), model="m"
        )

    async with Client.in_memory(
        hub, options=options or ClientOptions(), roots_handler=roots, sampling_handler=sample
    ) as client:
        result = await client.call_tool("files_summarise", {})
    assert text(result) == "summarise file:///notes: ok"


async def test_the_mounted_lifespan_runs_inside_the_outer_one() -> None:
    hub, weather = mount_server.build()
    with pytest.raises(LifespanError, match="not running"):
        _ = weather.lifespan_state
    async with Client.in_memory(hub) as client:
        state = weather.lifespan_state
        assert state["opened"] is True
        assert text(await client.call_tool("weather_station", {})) == "Kew"
    assert state["opened"] is False  # run out when the outer server stopped


async def test_a_mounted_lifespan_that_fails_stops_the_outer_server_cleanly() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def outer_lifespan(server: Server) -> AsyncIterator[None]:
        events.append("outer start")
        yield
        events.append("outer stop")

    @contextlib.asynccontextmanager
    async def broken_lifespan(server: Server) -> AsyncIterator[None]:
        raise ConnectionRefusedError("no database")
        yield

    hub = Server("hub", lifespan=outer_lifespan)
    hub.mount("db", Server("db", lifespan=broken_lifespan))
    with pytest.raises(LifespanError, match=r"'db' did not start.*no database"):
        async with hub.running():
            pass
    assert events == ["outer start", "outer stop"]


async def test_mounting_while_serving_is_refused() -> None:
    hub, _ = mount_server.build()
    async with hub.running():
        with pytest.raises(RuntimeError, match="mount before serving"):
            hub.mount("late", Server("late"))


# --- collisions ----------------------------------------------------------------------------


def test_a_collision_at_mount_time_is_an_error_naming_both_and_changes_nothing() -> None:
    outer = Server("outer")
    outer.add_tool(lambda: "mine", name="weather_station")
    weather = Server("weather")
    weather.add_tool(lambda: "its", name="station")
    weather.add_tool(lambda: "other", name="other")
    with pytest.raises(ValueError, match=r"'weather_station'.*'station' of 'weather'.*'weather'"):
        outer.mount("weather", weather)
    assert outer.tool_definition("weather_other") is None


def test_a_resource_collision_at_mount_time_is_an_error() -> None:
    outer = Server("outer")
    outer.add_resource(lambda: "mine", "data://data/x")
    data = Server("data")
    data.add_resource(lambda: "its", "data://x")
    with pytest.raises(ValueError, match="data://data/x"):
        outer.mount("data", data)


def test_a_later_registration_on_either_side_that_would_collide_raises() -> None:
    hub, weather = mount_server.build()
    with pytest.raises(ValueError, match=r"'weather_forecast'.*mounted at prefix 'weather'"):
        hub.add_tool(lambda: "mine", name="weather_forecast")
    with pytest.raises(ValueError, match="weather_brief"):
        hub.add_prompt(lambda: "mine", name="weather_brief")
    hub.add_tool(lambda: "mine", name="weather_radar")
    with pytest.raises(ValueError, match=r"'weather_radar'.*'radar' of 'weather'"):
        weather.add_tool(lambda: "its", name="radar")
    assert weather.tool_definition("radar") is None  # refused before it was registered


def test_a_mounted_tool_keeps_the_scopes_it_was_registered_with() -> None:
    weather = Server("weather")
    weather.add_tool(lambda: "r", name="radar", scopes=["weather:read"])
    hub = Server("hub")
    hub.mount("weather", weather)
    assert hub.tool_scopes("weather_radar") == frozenset({"weather:read"})


def test_a_server_mounting_itself_or_a_cycle_is_refused() -> None:
    first, second = Server("first"), Server("second")
    first.add_tool(lambda: "one", name="one")
    with pytest.raises(ValueError, match="cannot mount 'first'"):
        first.mount("me", first)
    second.mount("first", first)
    with pytest.raises(ValueError, match="cannot mount 'second'"):
        first.mount("second", second)
    assert second.tool_definition("first_one") is not None


def test_a_bad_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="mount prefix 'a b'"):
        Server("outer").mount("a b", Server("inner"))


# --- list changes ----------------------------------------------------------------------------


async def test_list_changes_of_the_mounted_server_reach_the_outer_clients() -> None:
    async with hub_client() as (client, weather, _):
        async with client.listen(tools=True, resources=True) as changes:
            weather.add_tool(lambda: "wind", name="wind")
            async with asyncio.timeout(GUARD):
                first = await anext(aiter(changes))
            assert first.kind == "tools"
            names = [t.name for t in (await client.list_tools()).tools]
            assert "weather_wind" in names
            assert text(await client.call_tool("weather_wind", {})) == "wind"
            weather.remove_tool("wind")
            async with asyncio.timeout(GUARD):
                assert (await anext(aiter(changes))).kind == "tools"
            assert "weather_wind" not in [t.name for t in (await client.list_tools()).tools]
            weather.add_resource(lambda: "hi", "weather://alerts")
            async with asyncio.timeout(GUARD):
                assert (await anext(aiter(changes))).kind == "resources"
            weather.notify_tools_changed()  # said by hand, heard as well
            async with asyncio.timeout(GUARD):
                assert (await anext(aiter(changes))).kind == "tools"
        uris = [r.uri for r in (await client.list_resources()).resources]
        assert "weather://weather/alerts" in uris


async def test_a_mounted_resource_update_reaches_the_outer_subscribers() -> None:
    uris = ["weather://weather/stations"]
    async with hub_client() as (client, weather, _), client.listen(resource_uris=uris) as changes:
        weather.notify_resource_updated("weather://stations")
        async with asyncio.timeout(GUARD):
            change = await anext(aiter(changes))
    assert (change.kind, change.uri) == ("resource", "weather://weather/stations")


async def test_a_legacy_session_hears_the_mounted_list_change() -> None:
    changed = asyncio.Event()
    async with hub_client(options=LEGACY) as (client, weather, _):
        async with client.listen(tools=True) as changes:
            weather.add_tool(lambda: "gust", name="gust")
            async with asyncio.timeout(GUARD):
                assert (await anext(aiter(changes))).kind == "tools"
                changed.set()
        assert "weather_gust" in [t.name for t in (await client.list_tools()).tools]
    assert changed.is_set()


# --- over real transports -------------------------------------------------------------------


@pytest.mark.parametrize("options", [None, LEGACY], ids=["modern", "legacy"])
async def test_over_http_a_mounted_tool_asks_twice(options: Any) -> None:
    port = free_port()
    command = [sys.executable, "-m", "mrtr", "serve", f"{SCRIPT}:server"]
    with listening([*command, "--transport", "http", "--port", str(port)], port):
        user = User()
        async with Client.http(
            f"http://127.0.0.1:{port}/mcp",
            elicitation_handler=user,
            options=options or ClientOptions(),
        ) as client:
            assert "weather_forecast" in [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("weather_forecast", {"city": "Oslo"})
            assert text(result) == "Oslo: sunny in C for 3 days (Kew)"
            read = await client.read_resource("weather://weather/city/Bergen")
            assert read.contents[0].text == "city Bergen"  # type: ignore[union-attr]
    assert user.asked == ["Units?", "Days?"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_over_stdio_answers_a_mounted_tool(mode: str) -> None:
    """`legacy`: live questions on an `initialize` session; `auto`: it finds the server
    modern and runs the MRTR rounds itself."""
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content=ANSWERS[params.message])

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mrtr", "serve", f"{SCRIPT}:server"],
        env=dict(os.environ),  # its default environment leaves out PYTHONPATH
    )
    async with mcp.Client(params, mode=mode, elicitation_callback=elicit) as client:
        result = await client.call_tool("weather_forecast", {"city": "Lima"})
    assert result.content[0].text == "Lima: sunny in C for 3 days (Kew)"  # type: ignore[union-attr]
    assert asked == ["Units?", "Days?"]


# --- failures, and a mountable that is not a Server -------------------------------------------


async def test_a_mounted_tool_failure_is_its_result_and_a_protocol_error_stays_one() -> None:
    weather = Server("weather")

    @weather.tool()
    def broken() -> str:
        raise ToolError("the barometer is broken")

    hub = Server("hub")
    hub.mount("weather", weather)
    async with Client.in_memory(hub) as client:
        failed = await client.call_tool("weather_broken", {})
        assert failed.is_error and "the barometer is broken" in text(failed)
        weather.remove_tool("broken")
        with pytest.raises(McpError, match="Unknown tool: 'weather_broken'"):
            await client.call_tool("weather_broken", {})


class Almanac:
    """A `Mountable` that is no `Server`: one tool, answered in place, asking one question."""

    name = "almanac"

    def __init__(self) -> None:
        self.changed: Callable[[str], None] | None = None
        self.tools = [{"name": "sunrise", "inputSchema": {"type": "object"}}]

    def listing(self, kind: str) -> list[dict[str, Any]]:
        return self.tools if kind == "tools" else []

    def watch(
        self,
        changed: Callable[[str], None],
        check: Callable[[str, str], None],
        updated: Callable[[str], None],
    ) -> None:
        self.changed = changed

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        yield

    def tool_scopes(self, name: str) -> frozenset[str]:
        return frozenset()

    async def request(
        self, method: str, params: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        answer = await ctx.elicit("Where?", {"type": "object"})
        where = (answer.content or {}).get("place")
        return {"content": [{"type": "text", "text": f"{params['name']} at {where}: 06:12"}]}


async def test_any_mountable_can_be_mounted() -> None:
    almanac = Almanac()
    hub = Server("hub")
    hub.mount("almanac", almanac)

    def where(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"place": "Kew"})

    async with Client.in_memory(hub, elicitation_handler=where) as client:
        result = await client.call_tool("almanac_sunrise", {})
        assert text(result) == "sunrise at Kew: 06:12"
        almanac.tools = [*almanac.tools, {"name": "sunset", "inputSchema": {"type": "object"}}]
        assert almanac.changed is not None
        almanac.changed("toolsListChanged")
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["almanac_sunrise", "almanac_sunset"]
