"""The realistic benchmark's server for `mrtr`, served as a user would serve it:
`mrtr serve benchmarks/realistic_app.py:server --transport http [--workers N]`.

Two tools that wait on what real servers wait on, opened once per process in the lifespan:

* `remember(key, value)`: `SET` then `GET` on Redis (`redis.asyncio`, `REALISTIC_REDIS_URL`);
  answers `key=value` as Redis gave it back;
* `quote(item)`: `GET /price/<item>` on an upstream HTTP API (`REALISTIC_UPSTREAM_URL`) with
  aiohttp, the HTTP client `mrtr` itself depends on; answers `<item> costs <price>`.

`benchmarks/realistic_peer_server.py` holds the same two tools for the official SDK and FastMCP.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import redis.asyncio as aioredis

from mrtr import Server, State

KEY_PREFIX = "realistic:"
"""Redis keys of the `remember` tool; they expire after `KEY_TTL` seconds."""
KEY_TTL = 60


@dataclass
class Backends:
    """What every tool call of one process shares: the Redis pool and the upstream session."""

    redis: aioredis.Redis
    http: aiohttp.ClientSession
    upstream: str


@contextlib.asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[Backends]:
    redis = aioredis.Redis.from_url(os.environ["REALISTIC_REDIS_URL"])
    http = aiohttp.ClientSession()
    try:
        yield Backends(redis, http, os.environ["REALISTIC_UPSTREAM_URL"])
    finally:
        await http.close()
        await redis.aclose()


server = Server("realistic", lifespan=lifespan)


@server.tool(structured_output=False)
async def remember(backends: State[Backends], key: str, value: str) -> str:
    """Store `value` under `key` in Redis and read it back."""
    await backends.redis.set(KEY_PREFIX + key, value, ex=KEY_TTL)
    stored = await backends.redis.get(KEY_PREFIX + key)
    return f"{key}={stored.decode() if stored is not None else ''}"


@server.tool(structured_output=False)
async def quote(backends: State[Backends], item: str) -> str:
    """The price of `item`, asked of the upstream API."""
    async with backends.http.get(f"{backends.upstream}/price/{item}") as response:
        response.raise_for_status()
        data = await response.json()
    return f"{data['item']} costs {data['price']}"
