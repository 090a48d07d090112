"""Timing harness shared by every benchmark contender.

Nothing here knows about any MCP SDK: contenders hand in zero-argument
callables that each do one unit of work against a fixture they already built.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import socket
import statistics
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import uvicorn

AsyncOp = Callable[[], Awaitable[object]]
SyncOp = Callable[[], object]
LifespanMode = Literal["auto", "on", "off"]

_T = TypeVar("_T")

LOOPBACK = "127.0.0.1"


def run(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run `main` on uvloop, the loop every contender's server and client share."""
    import uvloop

    return uvloop.run(main())


# --- statistics -------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """Median of `values`; NaN when empty so a missing contender stays visible."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation between order statistics."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Sample:
    """Per-op seconds, one entry per timed repetition of a batch."""

    name: str
    per_op: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median(self.per_op)

    def percentile(self, q: float) -> float:
        return percentile(self.per_op, q)

    def summary(self) -> dict[str, float | int | str]:
        return {
            "name": self.name,
            "median_s": self.median,
            "p10_s": self.percentile(10),
            "p90_s": self.percentile(90),
            "reps": len(self.per_op),
        }


# --- timing -----------------------------------------------------------------


@contextmanager
def frozen_heap(enabled: bool = True) -> Iterator[None]:
    """Keep the collector off everything allocated before the block (`gc.freeze`).

    A benchmark process holds both SDKs, their servers and clients: a full
    collection walks all of it (tens of ms on a small machine, several times
    what a process serving one SDK would walk), and would land on whichever
    contender happens to be running. Frozen objects are skipped; everything
    the contenders allocate while timed is still collected as usual.
    """
    if not enabled:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def time_batch(op: AsyncOp, n: int) -> float:
    """Seconds per op over `n` back-to-back awaits of `op`."""
    start = time.perf_counter()
    for _ in range(n):
        await op()
    return (time.perf_counter() - start) / n


def time_batch_sync(op: SyncOp, n: int) -> float:
    """Seconds per op over `n` back-to-back calls of `op`."""
    start = time.perf_counter()
    for _ in range(n):
        op()
    return (time.perf_counter() - start) / n


async def measure(op: AsyncOp, *, n: int, reps: int, warmup: int, name: str = "") -> Sample:
    """Warm `op` up, then time `reps` batches of `n` ops each."""
    return (await alternate({name: op}, n=n, reps=reps, warmup=warmup))[name]


BatchSize = int | Mapping[str, int]
"""Ops per timed batch: one count for every contender, or one per contender name."""


def _batch_size(n: BatchSize, name: str) -> int:
    return n if isinstance(n, int) else n[name]


async def alternate(
    contenders: Mapping[str, AsyncOp], *, n: BatchSize, reps: int, warmup: int
) -> dict[str, Sample]:
    """Time several async contenders, interleaving their repetitions.

    Each repetition runs one batch per contender, rotating who goes first, so
    slow drift (thermal, GC pressure, a noisy neighbour) lands on all of them.
    `n` may differ per contender (see `calibrate`), so a contender ten times
    faster still gets batches long enough to time.
    """
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            await contenders[name]()
    samples = {name: Sample(name) for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            batch = _batch_size(n, name)
            samples[name].per_op.append(await time_batch(contenders[name], batch))
    return samples


def alternate_sync(
    contenders: Mapping[str, SyncOp], *, n: BatchSize, reps: int, warmup: int
) -> dict[str, Sample]:
    """`alternate` for synchronous ops (no event-loop overhead in the timing)."""
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            contenders[name]()
    samples = {name: Sample(name) for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            batch = _batch_size(n, name)
            samples[name].per_op.append(time_batch_sync(contenders[name], batch))
    return samples


async def calibrate(
    op: AsyncOp, *, batch_seconds: float, warmup_seconds: float, min_ops: int = 3
) -> int:
    """Warm `op` up for about `warmup_seconds` (at least `min_ops` calls), then return how
    many ops make a batch of about `batch_seconds`, judged from the second half of the
    warm-up (the first half pays for caches, JIT-like specialisation and connection setup)."""
    times: list[float] = []
    deadline = time.perf_counter() + warmup_seconds
    while len(times) < min_ops or (time.perf_counter() < deadline and len(times) < 100_000):
        start = time.perf_counter()
        await op()
        times.append(time.perf_counter() - start)
    per_op = statistics.median(times[len(times) // 2 :])
    return max(1, round(batch_seconds / per_op)) if per_op > 0 else 1


def calibrate_sync(
    op: SyncOp, *, batch_seconds: float, warmup_seconds: float, min_ops: int = 3
) -> int:
    """`calibrate` for synchronous ops; timed in groups so clock reads stay negligible."""
    group = 100
    per_group: list[float] = []
    deadline = time.perf_counter() + warmup_seconds
    while len(per_group) < min_ops or (time.perf_counter() < deadline and len(per_group) < 10_000):
        per_group.append(time_batch_sync(op, group))
    per_op = statistics.median(per_group[len(per_group) // 2 :])
    return max(1, round(batch_seconds / per_op)) if per_op > 0 else 1


@dataclass
class ConcurrencyResult:
    """Throughput and latency of workers hammering a server at once."""

    workers: int
    duration_s: float
    ops: int
    errors: int
    ops_per_s: float
    p50_s: float
    p99_s: float


async def run_concurrent(
    workers: Sequence[AsyncOp],
    *,
    duration: float,
    max_ops_per_worker: int = 100_000,
    latencies_out: list[float] | None = None,
) -> ConcurrencyResult:
    """Run every worker in a loop until `duration` elapses; stops by itself.

    Each worker owns its own client, so this measures the server and the
    client stacks under contention rather than one shared connection pool.
    `latencies_out`, when given, receives every successful op's latency, so
    several runs can be pooled into one distribution.
    """
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration

    async def loop(op: AsyncOp) -> None:
        nonlocal errors
        for _ in range(max_ops_per_worker):
            if time.perf_counter() >= deadline:
                return
            start = time.perf_counter()
            try:
                await op()
            except Exception:  # count and keep going: one failure must not end the run
                errors += 1
                continue
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(loop(op) for op in workers))
    elapsed = time.perf_counter() - start
    if latencies_out is not None:
        latencies_out.extend(latencies)
    return ConcurrencyResult(
        workers=len(workers),
        duration_s=elapsed,
        ops=len(latencies),
        errors=errors,
        ops_per_s=len(latencies) / elapsed if elapsed > 0 else math.nan,
        p50_s=percentile(latencies, 50),
        p99_s=percentile(latencies, 99),
    )


# --- reporting --------------------------------------------------------------


@dataclass
class Row:
    """One table line: a workload's median for each side, in `unit`s.

    `higher_is_better` marks rates (ops/s, flows/s), whose ratio is taken the
    other way round so that a ratio above 1 always means ours is better.
    """

    workload: str
    official: float | None
    ours: float | None
    unit: str = "us"
    higher_is_better: bool = False

    @property
    def ratio(self) -> float | None:
        """official/ours (ours/official for rates): above 1 means ours is better."""
        if self.official is None or self.ours is None:
            return None
        num, den = (
            (self.ours, self.official) if self.higher_is_better else (self.official, self.ours)
        )
        if den == 0 or math.isnan(num) or math.isnan(den):
            return None
        return num / den


_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6}


def _fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * _SCALE.get(unit, 1.0):,.1f}"


def format_table(rows: Sequence[Row]) -> str:
    """Plain-text table of medians with a ratio column (see `Row.ratio`).

    Values are stored in seconds for time units ("s", "ms", "us") and scaled
    on display; any other unit (ops/s, bytes) is printed as stored.
    """
    header = ("workload", "unit", "official", "ours", "ratio")
    body = [
        (
            r.workload,
            r.unit,
            _fmt(r.official, r.unit),
            _fmt(r.ours, r.unit),
            "-" if r.ratio is None else f"{r.ratio:.2f}x",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(b) for b in body)])


def dump_json(path: str | Path, payload: Any) -> None:
    """Write `payload` (dataclasses allowed) as indented JSON."""

    def default(obj: Any) -> Any:
        if hasattr(obj, "__dataclass_fields__"):
            return asdict(obj)
        raise TypeError(f"not JSON serializable: {type(obj).__name__}")

    Path(path).write_text(json.dumps(payload, indent=2, default=default) + "\n")


# --- uvicorn ----------------------------------------------------------------


def uvicorn_config(app: Any, port: int, *, lifespan: LifespanMode = "auto") -> uvicorn.Config:
    """The one uvicorn configuration every contender's HTTP server uses."""
    return uvicorn.Config(
        app,
        host=LOOPBACK,
        port=port,
        log_level="warning",
        # Off as in `mrtr`'s own `serve_http`: even with nothing logged at this level,
        # uvicorn formats the access-log arguments (client address, quoted path) per response.
        access_log=False,
        # Off as in `serve_http` too: one header less per response, for every contender.
        server_header=False,
        loop="uvloop",
        http="httptools",
        lifespan=lifespan,
    )


def _loopback_socket() -> socket.socket:
    # Binding port 0 ourselves and handing uvicorn the socket avoids the
    # pick-a-port-then-bind race.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    return sock


@asynccontextmanager
async def serve_uvicorn(
    app: Any,
    *,
    lifespan: LifespanMode = "auto",
    in_thread: bool = False,
    startup_timeout: float = 10.0,
) -> AsyncIterator[int]:
    """Serve `app` on a free loopback port for the block; yields the port.

    By default the server runs as a task on the caller's loop (one thread, so
    client and server costs add up deterministically). `in_thread=True` gives
    it its own thread and uvloop loop instead.
    """
    sock = _loopback_socket()
    port: int = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, port, lifespan=lifespan))
    task: asyncio.Task[None] | None = None
    thread: threading.Thread | None = None
    if in_thread:
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
    else:
        task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if task is not None and task.done():
                task.result()  # surface the startup failure
                raise RuntimeError("uvicorn exited during startup")
            if thread is not None and not thread.is_alive():
                raise RuntimeError("uvicorn exited during startup")
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start in time")
            await asyncio.sleep(0.005)
        yield port
    finally:
        server.should_exit = True
        if task is not None:
            await task
        if thread is not None:
            await asyncio.to_thread(thread.join, startup_timeout)
        sock.close()
