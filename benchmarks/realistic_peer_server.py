"""The realistic benchmark's server for the official `mcp` SDK (`MCPServer`) and for FastMCP:
`python benchmarks/realistic_peer_server.py {mcp,fastmcp} PORT WORKERS`, run by the peer's own
interpreter (its venv under `.cache/realistic/`), never by the project's.

The same two tools as `realistic_app.py` (`remember`: Redis `SET` + `GET` through
`redis.asyncio`; `quote`: the upstream API through httpx2, the HTTP client both SDKs depend
on), opened once per process in the SDK's lifespan. Both serve Streamable HTTP at `/mcp`,
stateful (legacy sessions live in the process's memory) and answering JSON
(`json_response=True`), under uvicorn as their docs run it, `WORKERS` processes sharing the
port (`uvicorn.run("module:factory", workers=N)`), with the settings `mrtr serve` uses:
uvloop, httptools, no access log, no server header.

Rules: nothing here imports `mrtr` or the benchmark package; the peer's venv has neither.
"""

# No `from __future__ import annotations`: both SDKs read the tools' annotations at runtime,
# and `Context` is imported inside the function that defines them.
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

KEY_PREFIX = "realistic:"
KEY_TTL = 60
KIND_ENV = "REALISTIC_KIND"


@contextlib.asynccontextmanager
async def _backends(_server: Any) -> AsyncIterator[dict[str, Any]]:
    import httpx2
    import redis.asyncio as aioredis

    redis = aioredis.Redis.from_url(os.environ["REALISTIC_REDIS_URL"])
    async with httpx2.AsyncClient(base_url=os.environ["REALISTIC_UPSTREAM_URL"]) as http:
        try:
            yield {"redis": redis, "http": http}
        finally:
            await redis.aclose()


async def _remember(backends: dict[str, Any], key: str, value: str) -> str:
    await backends["redis"].set(KEY_PREFIX + key, value, ex=KEY_TTL)
    stored = await backends["redis"].get(KEY_PREFIX + key)
    return f"{key}={stored.decode() if stored is not None else ''}"


async def _quote(backends: dict[str, Any], item: str) -> str:
    response = await backends["http"].get(f"/price/{item}")
    response.raise_for_status()
    data = response.json()
    return f"{data['item']} costs {data['price']}"


def _official_app() -> Any:
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("realistic", lifespan=_backends)

    @server.tool(structured_output=False)
    async def remember(key: str, value: str, ctx: Context) -> str:
        """Store `value` under `key` in Redis and read it back."""
        return await _remember(ctx.request_context.lifespan_context, key, value)

    @server.tool(structured_output=False)
    async def quote(item: str, ctx: Context) -> str:
        """The price of `item`, asked of the upstream API."""
        return await _quote(ctx.request_context.lifespan_context, item)

    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True)


def _fastmcp_app() -> Any:
    from fastmcp import Context, FastMCP

    server = FastMCP("realistic", lifespan=_backends)

    @server.tool(output_schema=None)
    async def remember(key: str, value: str, ctx: Context) -> str:
        """Store `value` under `key` in Redis and read it back."""
        return await _remember(ctx.lifespan_context, key, value)

    @server.tool(output_schema=None)
    async def quote(item: str, ctx: Context) -> str:
        """The price of `item`, asked of the upstream API."""
        return await _quote(ctx.lifespan_context, item)

    return server.http_app(path="/mcp", json_response=True, stateless_http=False)


def make_app() -> Any:
    """The app of one worker process (an app factory for uvicorn): the kind `REALISTIC_KIND`
    names."""
    kind = os.environ[KIND_ENV]
    if kind == "mcp":
        return _official_app()
    if kind == "fastmcp":
        return _fastmcp_app()
    raise SystemExit(f"unknown server kind {kind!r}: mcp or fastmcp")


def main() -> None:
    import uvicorn

    if len(sys.argv) != 4 or sys.argv[1] not in ("mcp", "fastmcp"):
        raise SystemExit("usage: realistic_peer_server.py {mcp,fastmcp} PORT WORKERS")
    os.environ[KIND_ENV] = sys.argv[1]
    uvicorn.run(
        "realistic_peer_server:make_app",
        factory=True,
        app_dir=str(Path(__file__).resolve().parent),
        host="127.0.0.1",
        port=int(sys.argv[2]),
        workers=int(sys.argv[3]),
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
