"""A legacy stdio backend for `mrtr proxy` tests, written with mcp 1.30's FastMCP.

Run with the mcp 1.30 peer's interpreter. `book` asks twice (`ctx.elicit`) and writes one line
to the ledger file named by `PROXY_LEDGER` each time it runs, so a test can tell that the
proxy ran it once however many rounds its client took. `survey` asks once, then logs and
reports progress, for a test to see them reach the client. `pid` and `wait` let a test kill
the process mid-call.
"""

import asyncio
import os

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

server = FastMCP("proxy-backend", log_level="WARNING")


class Size(BaseModel):
    size: str


class Confirm(BaseModel):
    ok: bool


def _record(item: str) -> None:
    with open(os.environ["PROXY_LEDGER"], "a") as ledger:
        ledger.write(f"run {item}\n")


@server.tool()
async def book(item: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Book an item, asking its size and a confirmation."""
    _record(item)
    size = await ctx.elicit(f"Size of the {item}?", schema=Size)
    if size.action != "accept":
        return f"no size ({size.action})"
    confirm = await ctx.elicit(f"Book a {size.data.size} {item}?", schema=Confirm)
    if confirm.action != "accept" or not confirm.data.ok:
        return "not booked"
    return f"booked a {size.data.size} {item}"


@server.tool()
async def survey(ctx: Context) -> str:  # type: ignore[type-arg]
    """Ask for a rating, then say thanks in a log message and a progress notification."""
    rating = await ctx.elicit("Rate the service?", schema=Confirm)
    await ctx.info(f"thanks for the rating ({rating.action})")
    await ctx.report_progress(1, 1, "rated")
    return "rated"


@server.tool()
def pid() -> str:
    """This process's id."""
    return str(os.getpid())


@server.tool()
async def wait(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "waited"


if __name__ == "__main__":
    server.run("stdio")
