"""A server that mounts another: `hub` offers its own `echo` and, under the prefix `weather`,
everything of the `weather` server (a tool that asks twice, resources, a template, a prompt,
completions, and a lifespan whose state the mounted handlers read); each server's middleware
notes the tool calls it sees in `SEEN`.

`build()` makes a fresh pair for in-memory tests; `server` is the hub `mrtr serve` serves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mrtr import RequestContext, Server
from mrtr.middleware import CallNext

#: What each server's middleware saw of the tool calls it ran around.
SEEN: list[str] = []


@contextlib.asynccontextmanager
async def weather_lifespan(server: Server) -> AsyncIterator[dict[str, Any]]:
    state = {"opened": True, "station": "Kew"}
    yield state
    state["opened"] = False


def build() -> tuple[Server, Server]:
    """A fresh `(hub, weather)`, `weather` mounted in `hub` at `weather`."""
    weather = Server("weather", lifespan=weather_lifespan)

    @weather.tool()
    async def forecast(city: str, ctx: RequestContext) -> str:
        """The forecast for a city, in the units and for the days the user picks."""
        await ctx.info(f"forecast asked for {city}")
        await ctx.report_progress(1, 2)
        units = await ctx.elicit(
            "Units?", {"type": "object", "properties": {"u": {"type": "string"}}}
        )
        days = await ctx.elicit(
            "Days?", {"type": "object", "properties": {"n": {"type": "integer"}}}
        )
        assert units.content is not None and days.content is not None
        station = ctx.state["station"]
        return f"{city}: sunny in {units.content['u']} for {days.content['n']} days ({station})"

    @weather.tool()
    def station(ctx: RequestContext) -> str:
        """The weather station (the lifespan's)."""
        return str(ctx.lifespan_context["station"])

    @weather.resource("weather://stations", mime_type="text/plain")
    def stations() -> str:
        return "Kew, Heathrow"

    @weather.resource_template("weather://city/{name}")
    def city(name: str) -> str:
        return f"city {name}"

    @weather.prompt()
    def brief(city: str) -> str:
        """A weather briefing prompt."""
        return f"Brief me on the weather in {city}"

    @weather.completion()
    def complete(ref: Any, argument: Any, context: Any) -> list[str]:
        return [c for c in ("London", "Lisbon", "Paris") if c.startswith(argument["value"])]

    @weather.middleware
    async def weather_seen(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        if ctx.method == "tools/call":
            SEEN.append(f"weather saw {ctx.params['name']}")
        return await call_next(ctx)

    hub = Server("hub")

    @hub.middleware
    async def hub_seen(ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        if ctx.method == "tools/call":
            SEEN.append(f"hub saw {ctx.params['name']}")
        return await call_next(ctx)

    @hub.tool()
    def echo(text: str) -> str:
        return text

    hub.mount("weather", weather)
    return hub, weather


server, weather = build()
