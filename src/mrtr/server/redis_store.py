"""Redis as the shared `Store` and `Broker` of several instances (`MRTR_STORE_URL`).

Imported only when a Redis URL is configured: the rest of the package never imports `redis`
(install it with `pip install "mrtr[redis]"`).

* `RedisStore`: each `Store` operation is one command (`SET NX PX`, `GET`, `SET PX`, `DEL`),
  bounded by `timeout` seconds, on one of at most `max_connections` connections: in a burst
  a command waits up to `pool_timeout` seconds for one to be free instead of failing. A
  Redis that does not answer in time, or refuses the connection, gives `StoreUnavailable`
  (-32603, `data.reason` "store_unavailable", HTTP 503 with `Retry-After`) at once: the
  request that needed it fails, the others go on, and the next command reconnects, so
  service resumes by itself when Redis returns. The cause is logged, not sent to clients.
* Guarantees need Redis never to evict: run it with `maxmemory-policy noeviction` (its
  default). Then a Redis at `maxmemory` refuses writes ("OOM"), which becomes `StoreFull`
  (-32603, `data.reason` "store_full") for a guarantee and a silently dropped write for a
  cache. So that work already admitted can still record its outcome, a new guarantee
  (`add`) is refused earlier, once Redis's `used_memory` passes `maxmemory` less an eighth:
  `used_memory` is read (`INFO memory`, in the background) once a second, and sooner when
  what this store wrote since may have crossed that line. `check_reachable` logs a warning
  at start-up when the policy is an evicting one.
* `RedisBroker`: Redis pub/sub. Publishing never waits: messages queue (bounded) for one
  sender task, so one publisher's messages reach Redis in order. A subscription reads in a
  task that reconnects with backoff when the connection is lost; what was published while it
  was away is lost (Redis pub/sub keeps nothing), so once it is back it calls the
  subscriber's `on_gap` (the change hub then tells its listeners that every list may have
  changed).
* `check_reachable`: a synchronous PING, for a clear error at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis import Redis as SyncRedis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError

from .store import CACHE_PREFIX, Deliver, Gap, StoreFull, StoreUnavailable, Unsubscribe

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "RedisBroker",
    "RedisStore",
    "check_eviction_policy",
    "check_reachable",
]

logger = logging.getLogger("mrtr.server")

#: Seconds one Redis command (connecting included) may take before it counts as failed.
DEFAULT_TIMEOUT: Final = 1.0
#: Connections to Redis one `RedisStore` keeps at most. A command holds one for well under a
#: millisecond, so this serves thousands of commands a second; a burst past it waits.
DEFAULT_MAX_CONNECTIONS: Final = 32
#: Seconds a command waits for a free connection before it counts as failed.
DEFAULT_POOL_TIMEOUT: Final = 5.0
_QUEUE_LIMIT: Final = 10_000
_LOG_EVERY: Final = 10.0  # seconds between two log lines about the same lost connection
_SAMPLE_EVERY: Final = 1.0  # seconds between two readings of Redis's memory use
_SAMPLE_AT_MOST: Final = 0.05  # ... and at least this long when close to the line
_FIRST_RETRY: Final = 0.05
_LAST_RETRY: Final = 1.0

T = TypeVar("T")


def _where(url: str) -> str:
    """`host:port/db` of a URL, without any password it holds (for logs)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or ''}"


def _client(
    url: str,
    timeout: float,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
) -> aioredis.Redis:
    # No retries inside the client: a bounded failure now beats a hidden wait; the next
    # request reconnects anyway. The pool blocks when all its connections are in use (the
    # default pool raises "Too many connections" at once, failing requests in a burst).
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    return aioredis.Redis.from_pool(pool)


class _Throttle:
    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = -_LOG_EVERY

    def allows(self) -> bool:
        now = time.monotonic()
        if now - self._last < _LOG_EVERY:
            return False
        self._last = now
        return True


def check_reachable(url: str, timeout: float = 2.0) -> None:
    """PING Redis at `url` once, raising `ConnectionError` naming it when it does not answer
    within `timeout` seconds."""
    client = SyncRedis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=None
    )
    try:
        client.ping()
    except RedisError as exc:
        raise ConnectionError(
            f"Redis at {_where(url)} is unreachable ({exc}): start it, or fix the URL"
        ) from None
    try:
        check_eviction_policy(client, url)
    finally:
        client.close()


def check_eviction_policy(client: SyncRedis, url: str) -> str | None:
    """Log a warning when Redis at `url` may evict keys (`maxmemory-policy` other than
    `noeviction`): the records exactly-once rests on would go early. The policy, or None
    when Redis does not tell it (`CONFIG` disabled, as some hosted services do)."""
    try:
        found: Any = client.config_get("maxmemory-policy")
    except RedisError:
        logger.info(
            "could not read maxmemory-policy of Redis at %s: make sure it is noeviction",
            _where(url),
        )
        return None
    if not isinstance(found, dict):
        return None
    raw = found.get("maxmemory-policy", found.get(b"maxmemory-policy"))
    if raw is None:
        return None
    policy = raw.decode() if isinstance(raw, bytes) else str(raw)
    if policy != "noeviction":
        logger.warning(
            "Redis at %s has maxmemory-policy %s: it may evict the records exactly-once "
            "and replay protection rest on (a replayed round could run twice); set "
            "maxmemory-policy noeviction",
            _where(url),
            policy,
        )
    return policy


class RedisStore:
    """A `Store` in Redis, shared by every instance given the same URL (see the module
    docstring for failure behaviour). Keys are written as given, under `prefix`."""

    __slots__ = (
        "_client",
        "_full_throttle",
        "_limit",
        "_sampled",
        "_sampler",
        "_throttle",
        "_used",
        "_written",
        "max_connections",
        "pool_timeout",
        "prefix",
        "refusals",
        "timeout",
        "url",
    )

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        prefix: str = "",
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> None:
        """`url`: `redis://host:port/db` (or `rediss://`, `unix://`); no connection is made
        until the first command."""
        if not timeout > 0:
            raise ValueError(f"RedisStore.timeout must be a number of seconds > 0, not {timeout}")
        if isinstance(max_connections, bool) or not (
            isinstance(max_connections, int) and max_connections >= 1
        ):
            raise ValueError(
                f"RedisStore.max_connections must be a positive integer, not {max_connections!r}"
            )
        if not pool_timeout > 0:
            raise ValueError(
                f"RedisStore.pool_timeout must be a number of seconds > 0, not {pool_timeout}"
            )
        self.url = url
        self.timeout = timeout
        self.prefix = prefix
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self._client = _client(url, timeout, max_connections, pool_timeout)
        self._throttle = _Throttle()
        self._full_throttle = _Throttle()
        #: Writes of guarantees refused with `StoreFull` (Redis full, or past its line).
        self.refusals = 0
        # Redis's memory use at the last reading, the line past which new guarantees are
        # refused (0: none, no maxmemory or not readable) and the bytes written since.
        self._used = 0
        self._limit = 0
        self._written = 0
        self._sampled = -_SAMPLE_EVERY
        self._sampler: asyncio.Task[None] | None = None

    async def _run(self, what: str, command: Awaitable[T]) -> T:
        try:
            # The wait for a free connection, then the command itself.
            async with asyncio.timeout(self.pool_timeout + self.timeout):
                return await command
        except OutOfMemoryError:
            raise self._full() from None
        except (RedisError, OSError, TimeoutError) as exc:
            if self._throttle.allows():
                logger.error(
                    "the shared store (Redis at %s) failed on %s: %s",
                    _where(self.url),
                    what,
                    exc or type(exc).__name__,
                )
            raise StoreUnavailable() from None

    def _full(self) -> StoreFull:
        self.refusals += 1
        if self._full_throttle.allows():
            logger.error(
                "the shared store (Redis at %s) is full (maxmemory reached, OOM): new "
                "work is refused until records expire; raise maxmemory",
                _where(self.url),
            )
        return StoreFull()

    async def _sample(self) -> None:
        """Read Redis's memory use and bound (not fatal when Redis does not tell them)."""
        written = self._written
        try:
            async with asyncio.timeout(self.timeout):
                info = await self._client.info("memory")
        except (RedisError, OSError, TimeoutError):
            return  # the commands themselves report a Redis that is gone
        self._written -= written  # what was written while reading is not in the reading
        maxmemory = int(info.get("maxmemory") or 0)
        self._used = int(info.get("used_memory") or 0)
        self._limit = maxmemory - maxmemory // 8 if maxmemory > 0 else 0

    async def _room_for(self, key: str, size: int) -> None:
        """Refuse a new guarantee once Redis is past its line (see the module docstring)."""
        if key.startswith(CACHE_PREFIX):
            return
        now = time.monotonic()
        since = now - self._sampled
        close = self._limit and self._used + self._written + size > self._limit
        if (since >= _SAMPLE_EVERY or (close and since >= _SAMPLE_AT_MOST)) and (
            self._sampler is None or self._sampler.done()
        ):
            # Read in the background: a write never waits for it (nor fails with it).
            self._sampled = now
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        if self._limit and self._used + self._written + size > self._limit:
            raise self._full()

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """See `Store.add` (`SET key value NX PX ttl`)."""
        try:
            await self._room_for(key, len(key) + len(value))
            self._written += len(key) + len(value)
            written = await self._run(
                "SET NX", self._client.set(self.prefix + key, value, px=_ms(ttl), nx=True)
            )
        except StoreFull:
            if key.startswith(CACHE_PREFIX):
                return True  # a cache that does not fit: written and dropped at once
            # A full Redis refuses the command before looking: a key already there is
            # still an `add` that changes nothing (a replay must find its record).
            if await self._run("EXISTS", self._client.exists(self.prefix + key)):
                return False
            raise
        return bool(written)

    async def get(self, key: str) -> bytes | None:
        """See `Store.get`."""
        value = await self._run("GET", self._client.get(self.prefix + key))
        # Not decoded (the client is made without decode_responses): bytes or None.
        return value if isinstance(value, bytes) or value is None else value.encode()

    async def set(self, key: str, value: bytes, ttl: float) -> None:
        """See `Store.set` (`SET key value PX ttl`)."""
        self._written += len(key) + len(value)
        try:
            await self._run("SET", self._client.set(self.prefix + key, value, px=_ms(ttl)))
        except StoreFull:
            if not key.startswith(CACHE_PREFIX):
                raise

    async def delete(self, key: str) -> None:
        """See `Store.delete`."""
        await self._run("DEL", self._client.delete(self.prefix + key))

    async def script(self, source: str, keys: list[str], args: list[str | int]) -> Any:
        """Run the Lua `source` atomically on `keys` (under `prefix`) with `args`: what counts
        held things across instances (`budgets.RedisTally`) needs more than one command."""
        keys = [self.prefix + key for key in keys]
        return await self._run("EVAL", self._client.eval(source, len(keys), *keys, *args))

    async def ping(self) -> None:
        """Check that Redis answers (`StoreUnavailable` when it does not)."""
        await self._run("PING", self._client.ping())

    async def aclose(self) -> None:
        """Close the connections."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        await self._client.aclose()


def _ms(ttl: float) -> int:
    if not (ttl > 0 and ttl != float("inf")):
        raise ValueError(f"a store entry's ttl must be a finite number of seconds > 0, not {ttl}")
    return max(1, round(ttl * 1000))


class RedisBroker:
    """A `Broker` over Redis pub/sub (see the module docstring)."""

    __slots__ = ("_client", "_queue", "_sender", "_throttle", "timeout", "url")

    def __init__(self, url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """`url` as for `RedisStore`; no connection is made until first used."""
        if not timeout > 0:
            raise ValueError(f"RedisBroker.timeout must be a number of seconds > 0, not {timeout}")
        self.url = url
        self.timeout = timeout
        self._client = _client(url, timeout)
        self._queue: asyncio.Queue[tuple[str, bytes]] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._throttle = _Throttle()

    def publish(self, channel: str, message: bytes) -> None:
        """See `Broker.publish`. Outside a running event loop, or with `_QUEUE_LIMIT`
        messages still waiting for Redis, the message is dropped (and logged)."""
        if not isinstance(message, bytes):
            raise TypeError("broker messages are bytes")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            logger.debug("not publishing to %s outside an event loop", channel)
            return
        if self._queue is None or self._sender is None or self._sender.done():
            self._queue = asyncio.Queue(_QUEUE_LIMIT)
            self._sender = loop.create_task(self._send(self._queue), name="mrtr redis publish")
        try:
            self._queue.put_nowait((channel, message))
        except asyncio.QueueFull:
            if self._throttle.allows():
                logger.error(
                    "Redis at %s is behind: change notifications dropped", _where(self.url)
                )

    async def _send(self, queue: asyncio.Queue[tuple[str, bytes]]) -> None:
        while True:
            channel, message = await queue.get()
            try:
                async with asyncio.timeout(self.timeout):
                    await self._client.publish(channel, message)
            except (RedisError, OSError, TimeoutError) as exc:
                if self._throttle.allows():
                    logger.error(
                        "could not publish a change notification to Redis at %s: %s",
                        _where(self.url),
                        exc or type(exc).__name__,
                    )

    async def subscribe(
        self, channel: str, deliver: Deliver, on_gap: Gap | None = None
    ) -> Unsubscribe:
        """See `Broker.subscribe`. Waits (up to `timeout`) for Redis to confirm the
        subscription, so what is published after this returns is received; when Redis does
        not answer, this logs it and returns anyway, and the subscription starts once it does.
        """
        ready = asyncio.Event()
        task = asyncio.get_running_loop().create_task(
            self._read(channel, deliver, ready, on_gap), name=f"mrtr redis subscribe {channel}"
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout * 2):
                await ready.wait()

        async def unsubscribe() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        return unsubscribe

    async def _read(
        self, channel: str, deliver: Deliver, ready: asyncio.Event, on_gap: Gap | None
    ) -> None:
        delay = _FIRST_RETRY
        lost = False
        while True:
            pubsub = self._client.pubsub()
            try:
                async with asyncio.timeout(self.timeout):
                    await pubsub.subscribe(channel)
                    # The confirmation, so that `ready` means "subscribed on the server".
                    while await pubsub.get_message(timeout=self.timeout) is None:
                        pass
                if lost:
                    logger.warning(
                        "change notifications from Redis at %s resumed", _where(self.url)
                    )
                    lost = False
                    if on_gap is not None:
                        try:
                            on_gap()
                        except Exception:
                            logger.exception("a subscriber failed on a gap in %s", channel)
                ready.set()
                delay = _FIRST_RETRY
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        deliver(message["data"])
            except (RedisError, OSError, TimeoutError) as exc:
                if not lost or self._throttle.allows():
                    logger.error(
                        "change notifications from Redis at %s stopped (%s); reconnecting",
                        _where(self.url),
                        exc or type(exc).__name__,
                    )
                lost = True
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.shield(pubsub.aclose())  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LAST_RETRY)

    async def aclose(self) -> None:
        """Stop sending and close the connections."""
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        await self._client.aclose()
