"""The official SDK's legacy-only server (`official_shop.py legacy`), saying on stderr the
method of each message it reads ("received: <method>"), so a test can tell which requests a
client sent it. Everything else is the official server unchanged."""

from __future__ import annotations

import sys
from typing import IO

import anyio
import orjson
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from official_shop import build


class _Told:
    """stdin, line by line, each line's method said on stderr before the server reads it."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source

    def readline(self) -> str:
        line = self._source.readline()
        try:
            method = orjson.loads(line).get("method")
        except (orjson.JSONDecodeError, AttributeError):
            method = None
        if method is not None:
            print(f"received: {method}", file=sys.stderr, flush=True)
        return line.decode("utf-8", "replace")


async def main() -> None:
    lowlevel = build("legacy")._lowlevel_server
    stdin = anyio.wrap_file(_Told(sys.stdin.buffer))  # type: ignore[arg-type]
    async with lowlevel.lifespan(lowlevel) as state, stdio_server(stdin=stdin) as (read, write):
        await serve_loop(
            lowlevel,
            read,
            write,
            lifespan_state=state,
            init_options=lowlevel.create_initialization_options(),
        )


if __name__ == "__main__":
    anyio.run(main)
