"""What a proxy in front of a stdio MCP server costs: `mrtr proxy` beside supergateway and
mcp-proxy, each against the same backend called directly.

Backends (stdio programs): `@modelcontextprotocol/server-everything` (Node, its `echo` tool)
and our benchmark server `ours_stdio_server.py` (its `add` tool, and `confirm`, which asks
one question), which costs less itself, so that a proxy's own cost shows.

Rows, each with processes of its own (all of one backend's rows run at once, idle but for
the one measured):

* `direct`: our `Client` starts the backend and speaks to it over stdio (no proxy);
* `mrtr proxy` over Streamable HTTP, our `Client` in the 2026-07-28 era and in the legacy
  era; and once more with `--sessions 8` (one backend process per call in flight);
* `supergateway` (npm, pinned): stdio -> Streamable HTTP, `--stateful` (one backend process
  per client session; its stateless default starts a backend process per request);
* `mcp-proxy` (PyPI, pinned, in a venv of its own): stdio -> Streamable HTTP.

Per row: the median wall time of one `tools/call` (one client, calls back to back, after a
warm-up); the proxy process's CPU per call (all its threads, from /proc) and the backend's
(every process below the proxy, or below us for `direct`), so their sum is visible; calls/s
with 8 calls in flight on the one client; the ratios against `direct`. With the ours backend,
also the median of one `confirm` flow (the backend asks, the client answers through the
proxy). A gateway that is not installed, or that fails a workload, shows why in its row.

Each row's workloads run in 3 rounds alternating with the other rows' (the order rotating),
so that load from other work on the machine lands on every row alike. The client's own CPU is
not counted.

Usage: python benchmarks/proxy.py [--quick] [--json PATH] [--no-install]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Launched by path, so make the repository root importable for `benchmarks.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mrtr
from benchmarks.ours import STDIO_SERVER_SCRIPT, accept_ok
from benchmarks.xproc import NODE, cpu_seconds
from mrtr import Client, ClientOptions

ROOT = Path(__file__).resolve().parent.parent
GATEWAYS = ROOT / ".cache" / "bench-node-gateways"
"""Where the other gateways are installed: npm packages, and mcp-proxy's own venv."""
SUPERGATEWAY = "supergateway@4.0.0"
MCP_PROXY = "mcp-proxy==0.13.0"
SUPERGATEWAY_JS = GATEWAYS / "node_modules" / "supergateway" / "dist" / "index.js"
MCP_PROXY_VENV = GATEWAYS / "venv-mcp-proxy"
EVERYTHING_JS = (
    ROOT
    / ".cache"
    / "interop"
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
CONCURRENCY = 8
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Settings:
    """How long each row's workloads run, in seconds."""

    latency: float = 2.4
    concurrent: float = 1.2
    flow: float = 1.2
    rounds: int = 3
    """Each row's workloads are split into this many rounds, alternating with the others'."""


FULL = Settings()
QUICK = Settings(latency=0.2, concurrent=0.2, flow=0.1, rounds=1)


# --- installing the other gateways -----------------------------------------------------------


def ensure_gateways(allow_install: bool) -> dict[str, str]:
    """Install the pinned supergateway and mcp-proxy when missing (and allowed); returns, for
    each that is still missing, why (the row shows it)."""
    missing: dict[str, str] = {}
    GATEWAYS.mkdir(parents=True, exist_ok=True)
    if not SUPERGATEWAY_JS.exists():
        npm = shutil.which("npm")
        if not allow_install or npm is None or not NODE.exists():
            missing["supergateway"] = "not installed (npm or Node 22 missing, or --no-install)"
        else:
            done = subprocess.run(
                [
                    *(npm, "install", "--prefix", str(GATEWAYS), "--save-exact", "--no-audit"),
                    *("--no-fund", "--loglevel=error", SUPERGATEWAY),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ['PATH']}"},
            )
            if done.returncode != 0:
                missing["supergateway"] = f"npm install failed: {done.stderr.strip()[-300:]}"
    proxy_bin = MCP_PROXY_VENV / "bin" / "mcp-proxy"
    stamp = MCP_PROXY_VENV / ".pinned"
    if not (proxy_bin.exists() and stamp.exists() and stamp.read_text() == MCP_PROXY):
        if not allow_install:
            missing["mcp-proxy"] = "not installed (--no-install)"
        else:
            reason = _install_mcp_proxy()
            if reason:
                missing["mcp-proxy"] = reason
            else:
                stamp.write_text(MCP_PROXY)
    return missing


def _install_mcp_proxy() -> str | None:
    shutil.rmtree(MCP_PROXY_VENV, ignore_errors=True)
    uv = os.environ.get("UV") or shutil.which("uv")
    python = MCP_PROXY_VENV / "bin" / "python"
    steps: list[list[str]]
    if uv:
        # uv fills a venv in seconds where pip takes a minute.
        steps = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(MCP_PROXY_VENV)],
            [uv, "pip", "install", "--quiet", "--python", str(python), MCP_PROXY],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(MCP_PROXY_VENV)],
            [str(python), "-m", "pip", "install", "--quiet", MCP_PROXY],
        ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            return f"install failed: {done.stderr.strip()[-300:]}"
    return None


# --- processes and their CPU -----------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, ...), from /proc's parent links."""
    parents = _children()
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _children() -> dict[int, list[int]]:
    """Each process's children, from /proc's parent links."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:  # a process that just ended
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    return parents


def _running(argv: Sequence[str]) -> list[int]:
    """Our child processes running `argv`: the direct row's backend (other rows' gateways,
    started at the same time, are our children too, and their backends run the same argv)."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for pid in _children().get(os.getpid(), []):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline") as f:
            if f.read() == wanted:
                found.append(pid)
    return found


def _cpu(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


@dataclass
class Meter:
    """CPU of the proxy process (None for `direct`) and of the backend processes."""

    proxy: int | None
    backend: list[int]

    def refresh(self) -> None:
        """Read the backend processes again (a proxy may have started more since)."""
        if self.proxy:
            self.backend = descendants(self.proxy)

    def read(self) -> tuple[float, float]:
        return _cpu([self.proxy] if self.proxy else []), _cpu(self.backend)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


async def _listening(port: int, proc: asyncio.subprocess.Process, name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}) before it listened")
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection(LOOPBACK, port)
            writer.close()
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on port {port} within 60 s")


@contextlib.asynccontextmanager
async def process(argv: Sequence[str], port: int, name: str) -> AsyncIterator[int]:
    """Run a gateway until the block ends; yields its pid once it listens."""
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
        start_new_session=True,  # so the backend it started ends with it
    )
    try:
        await _listening(port, proc, name)
        yield proc.pid
    finally:
        below = descendants(proc.pid)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                # The row is measured: a gateway slow to stop only costs the run time.
                await asyncio.wait_for(proc.wait(), 2)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                await proc.wait()
        await _gone(below)


def _alive(pids: Sequence[int]) -> list[int]:
    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


async def _gone(pids: Sequence[int]) -> None:
    """Wait for the backend processes a gateway started to end (they get its SIGTERM too, or
    their stdin closes), then kill any left, so that no row runs beside another."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not _alive(pids):
            return
        await asyncio.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _pythonpath() -> str:
    # The mrtr this process imports, for the proxy and the ours backend too.
    src = str(Path(mrtr.__file__).resolve().parent.parent)
    return os.pathsep.join([src, str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


# --- backends and rows -----------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    name: str
    argv: tuple[str, ...]
    tool: str
    arguments: dict[str, Any]
    expected: str
    flow_tool: str | None = None
    """A tool that asks the client one question (accepted with `{ok: true}`), answering "yes"."""


BACKENDS = (
    Backend(
        "server-everything",
        (str(NODE), str(EVERYTHING_JS), "stdio"),
        "echo",
        {"message": "hi"},
        "Echo: hi",
    ),
    Backend(
        "ours",
        (sys.executable, str(STDIO_SERVER_SCRIPT)),
        "add",
        {"a": 2, "b": 3},
        "5",
        flow_tool="confirm",
    ),
)


@dataclass(frozen=True)
class Row:
    name: str
    """`direct`, `mrtr-modern`, `mrtr-legacy`, `mrtr-modern-8`, `supergateway`, `mcp-proxy`."""
    era: str
    transport: str


ROWS = (
    Row("direct", "auto", "stdio"),
    Row("mrtr-modern", "modern", "Streamable HTTP"),
    Row("mrtr-legacy", "legacy", "Streamable HTTP"),
    Row("mrtr-modern-8", "modern", "Streamable HTTP, --sessions 8"),
    Row("supergateway", "legacy", "Streamable HTTP, --stateful"),
    Row("mcp-proxy", "legacy", "Streamable HTTP"),
)


def _gateway_argv(row: Row, backend: Backend, port: int) -> list[str]:
    if row.name.startswith("mrtr"):
        sessions = ["--sessions", "8"] if row.name.endswith("-8") else []
        return [
            *(sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--no-sse"),
            *("--drain-grace", "0"),
            *("--port", str(port), *sessions, "--", *backend.argv),
        ]
    if row.name == "supergateway":
        return [
            *(str(NODE), str(SUPERGATEWAY_JS), "--stdio", shlex.join(backend.argv)),
            *("--outputTransport", "streamableHttp", "--stateful", "--port", str(port)),
            *("--logLevel", "none"),
        ]
    return [
        str(MCP_PROXY_VENV / "bin" / "mcp-proxy"),
        *("--port", str(port), "--host", LOOPBACK, "--log-level", "WARNING"),
        # Else the backend gets a bare environment, without the PYTHONPATH the others get.
        *("--pass-environment", "--", *backend.argv),
    ]


@contextlib.asynccontextmanager
async def connected(row: Row, backend: Backend) -> AsyncIterator[tuple[Client, Meter]]:
    """A client connected through `row` to `backend`, and the meter of the row's processes."""
    options = ClientOptions(protocol=row.era)  # type: ignore[arg-type]
    if row.name == "direct":
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        client = Client.stdio(
            backend.argv[0],
            backend.argv[1:],
            env=env,
            cwd=str(ROOT),
            options=options,
            elicitation_handler=accept_ok,
        )
        async with client:
            await client.list_tools()
            yield client, Meter(None, _running(backend.argv))
        return
    port = free_port()
    async with process(_gateway_argv(row, backend, port), port, row.name) as pid:
        path = "/mcp"
        client = Client.http(
            f"http://{LOOPBACK}:{port}{path}", options=options, elicitation_handler=accept_ok
        )
        async with client:
            await client.list_tools()
            yield client, Meter(pid, descendants(pid))


def _check(result: Any, expected: str) -> None:
    text = getattr(result.content[0], "text", None) if result.content else None
    if result.is_error:
        raise AssertionError(f"the tool failed: {text!r}")
    if text != expected:
        raise AssertionError(f"expected {expected!r}, got {text!r}")


@dataclass
class Measured:
    calls: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    proxy_cpu: float = 0.0
    backend_cpu: float = 0.0


async def _run(
    op: Callable[[], Awaitable[None]],
    seconds: float,
    in_flight: int,
    meter: Meter,
    min_each: int = 1,
) -> Measured:
    """`in_flight` workers calling `op` back to back for `seconds` (and at least `min_each`
    times each); wall time per call and the processes' CPU over the stretch."""
    out = Measured()
    proxy0, backend0 = meter.read()
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        mine = 0
        while time.perf_counter() < deadline or mine < min_each:
            t0 = time.perf_counter()
            await op()
            out.latencies.append(time.perf_counter() - t0)
            out.calls += 1
            mine += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    out.seconds = time.perf_counter() - start
    proxy1, backend1 = meter.read()
    out.proxy_cpu, out.backend_cpu = proxy1 - proxy0, backend1 - backend0
    return out


@dataclass
class Live:
    """A row whose processes run and whose client is connected, with what it measured."""

    row: Row
    client: Client
    meter: Meter
    seq: Measured = field(default_factory=Measured)
    conc: Measured = field(default_factory=Measured)
    flow: Measured = field(default_factory=Measured)
    flow_error: str | None = None


def _add(total: Measured, part: Measured) -> None:
    total.calls += part.calls
    total.seconds += part.seconds
    total.latencies += part.latencies
    total.proxy_cpu += part.proxy_cpu
    total.backend_cpu += part.backend_cpu


async def _start(stack: contextlib.AsyncExitStack, row: Row, backend: Backend) -> Live:
    """Start a row's processes, connect its client and warm it up."""
    client, meter = await stack.enter_async_context(connected(row, backend))
    live = Live(row, client, meter)
    await _run(_caller(live, backend), 0.2, 1, meter, min_each=20)
    # With 8 in flight too: a proxy that opens backend sessions on demand opens them here
    # (each worker's first call may wait seconds for a backend process to start).
    await _run(_caller(live, backend), 0.2, CONCURRENCY, meter, min_each=3)
    meter.refresh()
    if backend.flow_tool:
        try:  # the flow's warm-up, and whether it works at all
            await asyncio.wait_for(_flow(live, backend.flow_tool)(), 20)
        except Exception as exc:  # a gateway that cannot relay the question: say so
            live.flow_error = _reason(exc)
    return live


def _caller(live: Live, backend: Backend) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await live.client.call_tool(backend.tool, backend.arguments)
        _check(result, backend.expected)

    return call


def _flow(live: Live, tool: str) -> Callable[[], Awaitable[None]]:
    async def flow() -> None:
        _check(await live.client.call_tool(tool, {}), "yes")

    return flow


async def _round(live: Live, backend: Backend, s: Settings) -> None:
    """One round of a row: back-to-back calls, calls 8 in flight, and the asking flow."""
    call = _caller(live, backend)
    _add(live.seq, await _run(call, s.latency / s.rounds, 1, live.meter))
    _add(live.conc, await _run(call, s.concurrent / s.rounds, CONCURRENCY, live.meter))
    if backend.flow_tool and live.flow_error is None:
        flow = _flow(live, backend.flow_tool)
        _add(live.flow, await _run(flow, s.flow / s.rounds, 1, live.meter))


def _summary(live: Live) -> dict[str, Any]:
    seq, conc, flow, proxy = live.seq, live.conc, live.flow, live.meter.proxy
    out: dict[str, Any] = {
        "era": live.client.era,
        "transport": live.row.transport,
        "proxy_pid": proxy,
        "backend_pids": live.meter.backend,
        "calls": seq.calls,
        "median_s": statistics.median(seq.latencies),
        "proxy_cpu_s": seq.proxy_cpu / seq.calls if proxy else None,
        "backend_cpu_s": seq.backend_cpu / seq.calls,
        "concurrent_calls": conc.calls,
        "calls_per_s": conc.calls / conc.seconds,
        "concurrent_proxy_cpu_s": conc.proxy_cpu / conc.calls if proxy else None,
        "concurrent_backend_cpu_s": conc.backend_cpu / conc.calls,
    }
    if live.flow_error:
        out["flow_error"] = live.flow_error
    elif flow.calls:
        out["flow_calls"] = flow.calls
        out["flow_median_s"] = statistics.median(flow.latencies)
        out["flow_proxy_cpu_s"] = flow.proxy_cpu / flow.calls if proxy else None
        out["flow_backend_cpu_s"] = flow.backend_cpu / flow.calls
    return out


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out (no answer within 20 s)"
    if isinstance(exc, AssertionError):  # a wrong answer (`_check`): its message says it
        return str(exc).splitlines()[0][:200]
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


async def run_backend(backend: Backend, s: Settings, missing: dict[str, str]) -> dict[str, Any]:
    """Every row for one backend: all started, then measured in alternating rounds (the order
    rotating), so that load from elsewhere on the machine spreads over the rows alike. A row
    that cannot start, or fails, records why."""
    errors = dict(missing)
    async with contextlib.AsyncExitStack() as stack:
        live: dict[str, Live] = {}

        async def start(row: Row) -> None:
            try:
                live[row.name] = await asyncio.wait_for(_start(stack, row, backend), 120)
            except Exception as exc:
                errors[row.name] = _reason(exc)

        # Started together (starting is mostly waiting on imports), measured one at a time.
        await asyncio.gather(*(start(row) for row in ROWS if row.name not in errors))
        live = {row.name: live[row.name] for row in ROWS if row.name in live}
        for rnd in range(s.rounds):
            names = list(live)
            shift = rnd % max(len(names), 1)
            for name in names[shift:] + names[:shift]:
                try:
                    await asyncio.wait_for(_round(live[name], backend, s), 60)
                except Exception as exc:
                    errors[name] = _reason(exc)
                    del live[name]
        summaries = {name: _summary(row) for name, row in live.items()}
    rows: dict[str, dict[str, Any]] = {}
    for row in ROWS:
        if row.name in summaries:
            rows[row.name] = summaries[row.name]
        else:
            rows[row.name] = {"error": errors[row.name], "transport": row.transport}
    direct = rows["direct"]
    for entry in rows.values():
        if "median_s" in entry and "median_s" in direct:
            entry["added_s"] = entry["median_s"] - direct["median_s"]
            entry["latency_x_direct"] = entry["median_s"] / direct["median_s"]
            entry["throughput_x_direct"] = entry["calls_per_s"] / direct["calls_per_s"]
    return rows


async def run(s: Settings, missing: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every row for every backend, one backend after the other."""
    return {backend.name: await run_backend(backend, s, missing) for backend in BACKENDS}


# --- the table -------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 1e3:.3f}"


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The results as a Markdown table, one line per (backend, row)."""
    head = (
        "| backend | row | era, transport | p50 ms/call | added ms | x direct | proxy CPU ms/call "
        f"| backend CPU ms/call | calls/s @{CONCURRENCY} | x direct | ask flow p50 ms |"
    )
    lines = [head, "|" + " --- |" * 11]
    for backend, rows in results.items():
        for name, r in rows.items():
            if "error" in r:
                lines.append(f"| {backend} | {name} | {r['transport']} | {r['error']} ||||||||")
                continue
            flow = (
                _ms(r["flow_median_s"])
                if "flow_median_s" in r
                else (f"fails: {r['flow_error']}" if "flow_error" in r else "-")
            )
            lines.append(
                f"| {backend} | {name} | {r['era']}, {r['transport']} | {_ms(r['median_s'])} "
                f"| {_ms(r.get('added_s'))} | {r.get('latency_x_direct', math.nan):.2f} "
                f"| {_ms(r['proxy_cpu_s'])} "
                f"| {_ms(r['backend_cpu_s'])} | {r['calls_per_s']:.0f} "
                f"| {r.get('throughput_x_direct', math.nan):.2f} | {flow} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run, to check it works")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument(
        "--no-install", action="store_true", help="do not install a missing gateway"
    )
    args = parser.parse_args(argv)
    if not NODE.exists() or not EVERYTHING_JS.exists():
        raise SystemExit(
            f"Node 22 ({NODE}) or server-everything ({EVERYTHING_JS}) is missing: "
            "run bash scripts/interop_peers.sh once"
        )
    missing = ensure_gateways(allow_install=not args.no_install)
    settings = QUICK if args.quick else FULL
    started = time.perf_counter()
    results = asyncio.run(run(settings, missing))
    print(table(results))
    print(f"\n({time.perf_counter() - started:.0f} s; CPU per call from /proc schedstat)")
    if args.json:
        report = {
            "settings": settings.__dict__,
            "concurrency": CONCURRENCY,
            "versions": {"supergateway": SUPERGATEWAY, "mcp-proxy": MCP_PROXY},
            "results": results,
        }
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
