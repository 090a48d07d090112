"""A server as an author coming from other SDKs writes it: bare decorators, sync tools that
block, errors with secrets in them, a `ToolError`, content helpers, and tools that change the
tool list at run time. Served by `mrtr serve` over stdio in the tests."""

from __future__ import annotations

import asyncio
import base64
import threading
import time

from mrtr import Image, RequestContext, Server, ToolError

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SECRET = "postgres://admin:hunter2@db.internal/prod"

server = Server("author", instructions="Tools written the way authors write them.")


@server.tool
def leak(query: str) -> str:
    """Fail with an error whose text holds a secret."""
    raise RuntimeError(f"cannot run {query!r} on {SECRET}")


@server.tool
async def refuse(city: str) -> str:
    """Fail with a message meant for the model."""
    raise ToolError(f"No flights to {city} today; try tomorrow")


@server.tool
def nap(seconds: float) -> str:
    """Block the calling thread for `seconds`."""
    time.sleep(seconds)
    return f"rested in {threading.current_thread().name.split('_')[0]}"


@server.tool
async def quick() -> str:
    """Answer at once."""
    return "quick"


# `hold` blocks its worker thread until `wake` is called: a test shows what is served meanwhile
# by events, not by timing.
_holding, _woken = threading.Event(), threading.Event()


@server.tool
def hold() -> str:
    """Block the calling thread until `wake` is called."""
    _holding.set()
    _woken.wait(30)
    return f"held in {threading.current_thread().name.split('_')[0]}"


@server.tool
async def holding() -> bool:
    """Whether `hold` is blocking its thread now (waiting a little for it to start)."""
    await asyncio.to_thread(_holding.wait, 10)
    return _holding.is_set() and not _woken.is_set()


@server.tool
async def wake() -> str:
    """Let `hold` return."""
    _woken.set()
    return "woken"


@server.tool(timeout=0.2)
async def stuck() -> str:
    """Never finish on its own."""
    await asyncio.sleep(30)
    return "never"


@server.tool
def sync_asks(ctx: RequestContext) -> str:
    """A sync tool that tries to ask the user (it cannot: it runs in a thread)."""
    ctx.elicit("Really?", {"type": "object", "properties": {}})
    return "asked"


@server.tool
def chart() -> list[str | Image]:
    """Text and an image in one result."""
    return ["Chart:", Image(data=PNG)]


@server.tool(tags={"beta"})
def experiment() -> str:
    """A tool behind the "beta" tag."""
    return "experimental"


@server.tool
def toggle_beta(on: bool) -> str:
    """Show or hide the tools tagged "beta"."""
    if on:
        server.enable("beta")
    else:
        server.disable("beta")
    return "beta on" if on else "beta off"


@server.prompt
def broken_prompt() -> str:
    """A prompt whose failure names a file it should not."""
    raise OSError("cannot read /etc/author/secret.key")


@server.resource("file:///logo.png")
def logo() -> Image:
    return Image(data=PNG)


if __name__ == "__main__":
    server.run()
