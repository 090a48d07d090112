"""A report server whose `monthly_report` tool runs as a task (the tasks extension).

    python3 examples/long_running_task/server.py --port 8000

The tool asks which month by MRTR, on the original request; then it becomes a task (the
client gets a `CreateTaskResult` and polls), works in steps, reporting progress, and asks
through the task whether to include the draft figures before it finishes.
"""

from __future__ import annotations

import argparse
import asyncio

from pydantic import BaseModel

from mrtr import RequestContext, Server, TaskSettings

server = Server("reports", version="1.0.0")

STEPS = ("collecting", "adding up", "formatting")


class Month(BaseModel):
    month: str


class Drafts(BaseModel):
    include: bool


@server.tool(task=TaskSettings("required", start_after=None, ttl=600, poll_interval=0.2))
async def monthly_report(ctx: RequestContext, team: str) -> str:
    """Build a team's monthly report; takes a while, so it runs as a task."""
    month = await ctx.elicit(f"Report on {team} for which month?", Month)  # by MRTR
    if not month.is_accepted() or month.content is None:
        return "No report: no month given"
    await ctx.run_as_task()  # from here on the client polls tasks/get
    for step, what in enumerate(STEPS, start=1):
        await ctx.report_progress(step, len(STEPS) + 1, what)
        await asyncio.sleep(0.3)  # the real work
    drafts = await ctx.elicit("Include the draft figures?", Drafts)  # through the task
    include = drafts.is_accepted() and drafts.content is not None and drafts.content.include
    kind = "with drafts" if include else "final figures only"
    return f"Report for {team}, {month.content.month}: 42 items ({kind})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server.run(transport="http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
