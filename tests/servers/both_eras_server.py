"""Tools written once, served to both protocol eras (run as a stdio server, or imported).

Each tool asks the client something the way a handler author would, with no branch on the
era: `tests/test_both_eras.py` calls every one of them from a 2026-07-28 client and from the
official SDK's legacy (`initialize`) client and expects the same results.
"""

from __future__ import annotations

import asyncio
import itertools
import sys

from pydantic import BaseModel

from mrtr import InputRequiredResult, RequestContext, Server, ToolError, elicit_request

server = Server("both-eras", version="1.0.0", instructions="Every tool asks something.")

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
NAME = {"type": "object", "properties": {"name": {"type": "string"}}}

#: How many times each flow's `ctx.once` function really ran, by `ctx.flow_id`.
once_calls: dict[str, int] = {}
_tickets = itertools.count(1)


class Region(BaseModel):
    region: str


@server.tool()
async def confirm(ctx: RequestContext, item: str) -> str:
    """Ask for a confirmation with a JSON schema."""
    answer = await ctx.elicit(f"Order {item}?", CONFIRM)
    if answer.action != "accept" or not (answer.content or {}).get("ok"):
        return f"{item}: cancelled ({answer.action})"
    return f"{item}: confirmed"


@server.tool()
async def ship(ctx: RequestContext) -> str:
    """Ask for a region with a pydantic model."""
    answer = await ctx.elicit("Ship to which region?", Region)
    if not answer.is_accepted() or answer.content is None:
        return "not shipped"
    return f"shipping to {answer.content.region}"


@server.tool()
async def summarize(ctx: RequestContext, text: str) -> str:
    """Ask the client's model."""
    result = await ctx.sample(f"Summarize: {text}", max_tokens=50)
    content = result.content
    return f"summary: {getattr(content, 'text', '?')} ({result.model})"


@server.tool()
async def roots(ctx: RequestContext) -> str:
    """Ask for the client's roots."""
    listed = await ctx.list_roots()
    return "roots: " + ", ".join(str(root.uri) for root in listed.roots)


@server.tool()
async def pair(ctx: RequestContext) -> str:
    """Ask two questions at once, with gather and with ask."""
    first, second = await asyncio.gather(
        ctx.elicit("First name?", NAME, key="first"), ctx.elicit("Last name?", NAME, key="last")
    )
    both = await ctx.ask(
        {"city": elicit_request("City?", NAME), "zip": elicit_request("Zip?", NAME)}
    )
    names = [a.content["name"] for a in (first, second) if a.content]
    places = [both[k].content["name"] for k in ("city", "zip") if both[k].content]
    return " ".join(names + places)


@server.tool()
async def ticket(ctx: RequestContext) -> str:
    """A side effect in ctx.once, before and after a question."""

    def issue() -> int:
        once_calls[ctx.flow_id] = once_calls.get(ctx.flow_id, 0) + 1
        return next(_tickets)

    number = await ctx.once("ticket", issue)
    await ctx.elicit("Print the ticket?", CONFIRM)
    again = await ctx.once("ticket", issue)
    return f"ticket {number} == {again}, issued {once_calls[ctx.flow_id]} time(s)"


@server.tool()
async def rename(ctx: RequestContext, path: str) -> str | InputRequiredResult:
    """The manual style: return the question, read the answer on the next call."""
    answer = ctx.input_responses.get("new_name")
    if answer is None or ctx.request_state != "asked":
        return InputRequiredResult(
            input_requests={"new_name": elicit_request(f"Rename {path} to?", NAME)},
            request_state="asked",
        )
    return f"renamed {path} to {answer['content']['name']} in round {ctx.round}"


@server.tool()
async def slow(ctx: RequestContext, n: int) -> str:
    """Report progress and log, around a question."""
    await ctx.report_progress(1, n)
    await ctx.log("info", "started")
    await ctx.elicit("Go on?", CONFIRM)
    for step in range(2, n + 1):
        await ctx.report_progress(step, n)
    await ctx.log("debug", "finished")
    return "done"


@server.tool()
async def broken(ctx: RequestContext) -> str:
    """Fail after asking."""
    await ctx.elicit("Break?", CONFIRM)
    raise ToolError("the tool broke on purpose")


@server.tool()
async def touch(ctx: RequestContext, uri: str) -> str:
    """Announce a change of the tool list and of one resource."""
    ctx.server.notify_tools_changed()
    ctx.server.notify_resource_updated(uri)
    return "touched"


@server.resource("file:///notes")
def notes() -> str:
    return "notes"


@server.prompt()
async def greet(ctx: RequestContext) -> str:
    """A prompt that asks."""
    answer = await ctx.elicit("Whom to greet?", NAME)
    return f"Say hello to {(answer.content or {}).get('name')}."


if __name__ == "__main__":
    server.run("stdio" if len(sys.argv) < 2 else sys.argv[1])
