"""A realistic, I/O-bound MCP server three times over: `python benchmarks/realistic.py`.

The same small server is written for `mrtr` (`realistic_app.py`, served by `mrtr serve`), the
official `mcp` SDK's `MCPServer` and FastMCP (`realistic_peer_server.py`, each run by its own
venv's interpreter under `.cache/realistic/`, at the versions `tests/helpers/interop/peers.py` pins:
the latest pinned `mcp` 2.x, else 1.x, and the latest pinned FastMCP). Its two tools wait on
what real servers wait on:

* `remember(key, value)`: `SET` then `GET` on a real `redis-server` this script starts on a
  free loopback port (`redis.asyncio`, one pool per process);
* `quote(item)`: `GET /price/<item>` on an upstream API this script starts on loopback
  (`realistic_upstream.py`, answering after `--upstream-ms`, 3 ms by default), through the
  HTTP client each SDK depends on (aiohttp for `mrtr`, httpx2 for the other two).

One load generator drives all three over Streamable HTTP with raw aiohttp requests (no SDK
client): `--users` virtual users (16) share one connection pool, so a session's requests go
out on whichever connection is free, as behind a load balancer. Each user runs sessions back
to back, every session `--calls` `tools/call`s (10) alternating the two tools, each answer
checked (the key and value back from Redis, the upstream's price for the item):

* `modern` (2026-07-28): every call is a request of its own (`_meta`, `Mcp-Method`, `Mcp-Name`,
  `MCP-Protocol-Version`); a session is just its calls;
* `legacy` (2025-11-25): `initialize`, `notifications/initialized`, the calls with the
  session's `Mcp-Session-Id`, then `DELETE`.

Each server runs with 1 and with 2 worker processes: `mrtr serve --workers 2` with a shared
request-state key and, for legacy sessions, the shared store its deployment guide asks for
(`MRTR_STORE_URL`, a second database of the same Redis); the other two under
`uvicorn.run(..., workers=2)`, as their docs run several workers. Their legacy sessions live
in one worker's memory, so with 2 workers the row is n/a; the script shows why by sending one
session's calls on fresh connections and counting the answers that do not know the session.
A modern row of a server that refuses a 2026-07-28 call (a non-2xx or a JSON-RPC error) is
n/a too; a wrong answer is an error, never an n/a.

Per row: sessions/s and calls/s (wall), calls/s per server core (calls / server CPU seconds:
what one core of server would sustain), p50/p99 of the calls' latency, server CPU per call
(utime + stime from `/proc/<pid>/stat` of every process of the server, workers and supervisor),
the server's share of a core, its RSS (all its processes, after the row) and the load
generator's own share of a core. Every row gets a warm-up run, then `--rounds` runs of
`--seconds`, the rows alternating. A wrong answer, a non-2xx or a socket error counts as an
error and fails the run once the table is printed.

    python benchmarks/realistic.py                 # about 3 minutes on 2 cores
    python benchmarks/realistic.py --quick         # a few seconds per row: checks everything
    python benchmarks/realistic.py --json out.json

Needs `redis-server` (Debian: `apt-get install redis-server`); installs the two peer venvs
with pip when missing (`--no-install` to refuse).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.realistic_upstream import price_of  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = ROOT / ".cache" / "realistic"
LOOPBACK = "127.0.0.1"
SERVERS = ("mrtr", "mcp", "fastmcp")
ERAS = ("modern", "legacy")
WORKER_COUNTS = (1, 2)
Era = Literal["modern", "legacy"]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
SHARED_KEY = "realistic-benchmark-shared-request-state-key-0001"
"""The request-state key every `mrtr` worker seals with (a benchmark's, not a secret)."""
PEER_EXTRAS = "redis==8.2.0 uvloop==0.23.0 httptools==0.9.0"
"""What each peer venv gets beside its SDK: the Redis client the tools use, and the uvloop and
httptools `mrtr serve` runs on (the versions of the project's own environment)."""
_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "realistic-load", "version": "1.0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Settings:
    """How long and how hard each row is driven."""

    seconds: float = 6.0
    rounds: int = 2
    warmup: float = 1.0
    users: int = 16
    calls: int = 10
    upstream_ms: float = 3.0


FULL = Settings()
QUICK = Settings(seconds=1.0, rounds=1, warmup=0.5, users=4, calls=4)


@dataclass(frozen=True)
class Row:
    """One server, one era, one worker count."""

    server: str
    era: Era
    workers: int

    @property
    def name(self) -> str:
        return f"{self.server}/{self.era}/{self.workers}w"


# --- the peers' venvs --------------------------------------------------------------------------


def _interop_peers() -> ModuleType:
    """`tests/helpers/interop/peers.py`, where the peers' pins live (the tests are no package)."""
    name = "realistic_interop_peers"
    if name in sys.modules:
        return sys.modules[name]
    path = ROOT / "tests" / "helpers" / "interop" / "peers.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def peer_names() -> dict[str, str]:
    """Which pinned peer (`tests/helpers/interop/peers.py`) each non-mrtr server is: the
    latest pinned `mcp` 2.x (else 1.x) and the latest pinned FastMCP."""
    pins: dict[str, str] = _interop_peers().PYTHON_PEERS

    def latest(names: Sequence[str]) -> str:
        def version(name: str) -> tuple[int, ...]:
            return tuple(int(p) for p in pins[name].split()[0].split("==")[1].split("."))

        return max(names, key=version)

    mcp2 = [n for n in pins if pins[n].startswith("mcp==2.")]
    mcp1 = [n for n in pins if pins[n].startswith("mcp==1.")]
    fastmcp = [n for n in pins if pins[n].startswith("fastmcp==")]
    return {"mcp": latest(mcp2 or mcp1), "fastmcp": latest(fastmcp)}


def peer_requirement(name: str) -> str:
    return f"{_interop_peers().PYTHON_PEERS[name]} {PEER_EXTRAS}"


def ensure_peers(allow_install: bool) -> dict[str, Path]:
    """The interpreter of each peer server's venv, installed with pip when missing (and
    allowed); a venv is stamped with its requirements (`.pinned`) and reinstalled when they
    change."""
    out: dict[str, Path] = {}
    for server, name in peer_names().items():
        venv = CACHE / f"venv-{name}"
        req = peer_requirement(name)
        stamp = venv / ".pinned"
        if not (stamp.exists() and stamp.read_text().strip() == req):
            if not allow_install:
                raise SystemExit(f"{req} is not in {venv}: run without --no-install")
            print(f"installing {req} into {venv}", file=sys.stderr)
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *req.split()],
                check=True,
                stderr=subprocess.DEVNULL,
            )
            stamp.write_text(req + "\n")
        out[server] = venv / "bin" / "python"
    return out


# --- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def family(root: int) -> list[int]:
    """`root` and every process descended from it (a supervisor and its workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of `pids`, from `/proc/<pid>/stat`."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def rss_bytes(pids: Sequence[int]) -> int:
    """Resident set of `pids` together, from `/proc/<pid>/stat`."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[21]) * _PAGE
    return total


@dataclass
class Running:
    """A started process group, and where it answers."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str

    @property
    def pids(self) -> list[int]:
        return family(self.proc.pid)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the group this script made for it (workers too)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(15)


def _spawn(argv: Sequence[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, **env},
            start_new_session=True,  # a group of its own, so that its workers stop with it
        )


@asynccontextmanager
async def started(
    name: str, argv: Sequence[str], url: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Running]:
    """Run `argv` in a process group of its own for the block (its output to a log file in
    `CACHE`, shown if it fails to start)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    proc = _spawn(argv, CACHE / f"{name.replace('/', '-')}.log", env or {})
    try:
        yield Running(name, proc, url)
    finally:
        _stop(proc)


async def wait_listening(running: Running, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if running.proc.poll() is not None:
            log = CACHE / f"{running.name.replace('/', '-')}.log"
            raise RuntimeError(f"{running.name} exited: {log.read_text()[-2000:]}")
        try:
            _, writer = await asyncio.open_connection(LOOPBACK, port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{running.name} did not listen in {START_TIMEOUT:g} s"
                ) from None
            await asyncio.sleep(0.05)


@asynccontextmanager
async def redis_server() -> AsyncIterator[Running]:
    """A throwaway `redis-server` on a free loopback port, nothing persisted."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("needs redis-server (Debian: apt-get install redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
    async with started("redis", argv, f"redis://{LOOPBACK}:{port}") as running:
        await wait_listening(running, port)
        yield running


@asynccontextmanager
async def upstream_server(delay_ms: float) -> AsyncIterator[Running]:
    """The upstream API (`realistic_upstream.py`) on a free loopback port."""
    port = free_port()
    argv = [sys.executable, str(HERE / "realistic_upstream.py"), str(port), f"{delay_ms:g}"]
    async with started("upstream", argv, f"http://{LOOPBACK}:{port}") as running:
        await wait_listening(running, port)
        yield running


def server_argv(server: str, workers: int, port: int, python: Mapping[str, Path]) -> list[str]:
    if server == "mrtr":
        return [
            *(sys.executable, "-m", "mrtr", "serve", "benchmarks/realistic_app.py:server"),
            *("--transport", "http", "--host", LOOPBACK, "--port", str(port), "--no-sse"),
            *("--workers", str(workers)),
        ]
    script = HERE / "realistic_peer_server.py"
    return [str(python[server]), str(script), server, str(port), str(workers)]


def server_env(server: str, workers: int, redis: str, upstream: str) -> dict[str, str]:
    env = {"REALISTIC_REDIS_URL": f"{redis}/0", "REALISTIC_UPSTREAM_URL": upstream}
    if server == "mrtr":
        env["MRTR_REQUEST_STATE_KEY"] = SHARED_KEY
        if workers > 1:
            # Legacy sessions shared by the workers: the store of the deployment guide.
            env["MRTR_STORE_URL"] = f"{redis}/1"
    else:
        env["PYTHONPATH"] = ""  # the peer's venv alone, never this project's modules
    return env


# --- the load generator ------------------------------------------------------------------------


class BadAnswer(Exception):
    """A non-2xx, or an answer that is not the tool's."""


@dataclass
class Tally:
    """A row's counts over its measured runs."""

    sessions: int = 0
    calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    rss: int = 0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        def per(x: float, n: float) -> float:
            return x / n if n else math.nan

        return {
            "sessions": self.sessions,
            "calls": self.calls,
            "errors": self.errors,
            "seconds": self.seconds,
            "sessions_per_s": per(self.sessions, self.seconds),
            "calls_per_s": per(self.calls, self.seconds),
            "calls_per_server_core_s": per(self.calls, self.server_cpu_s),
            "sessions_per_server_core_s": per(self.sessions, self.server_cpu_s),
            "p50_s": percentile(self.latencies, 50),
            "p99_s": percentile(self.latencies, 99),
            "server_cpu_s_per_call": per(self.server_cpu_s, self.calls),
            "server_cores": per(self.server_cpu_s, self.seconds),
            "client_cores": per(self.client_cpu_s, self.seconds),
            "rss_bytes": self.rss,
            "first_error": self.first_error,
        }


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class Driver:
    """One virtual user's requests against one server; every answer checked."""

    def __init__(self, http: Any, url: str, era: Era, user: int) -> None:
        self.http = http
        self.url = url
        self.era = era
        self.user = user
        self.ids = itertools.count(1)
        self.serial = itertools.count()

    def _headers(self, session: str | None, method: str = "", name: str = "") -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": ACCEPT}
        if self.era == "modern":
            headers["MCP-Protocol-Version"] = MODERN
            if method:
                headers["Mcp-Method"] = method
            if name:
                headers["Mcp-Name"] = name
        elif session is not None:
            headers["MCP-Protocol-Version"] = LEGACY
            headers["Mcp-Session-Id"] = session
        return headers

    async def _post(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        async with self.http.post(self.url, data=json.dumps(body), headers=headers) as r:
            text = await r.text()
            if not 200 <= r.status < 300:
                raise BadAnswer(f"HTTP {r.status}: {text[:300]}")
            return r, text

    async def open(self) -> str | None:
        """A legacy session's `initialize` and `notifications/initialized`; its id."""
        if self.era == "modern":
            return None
        session = await self.initialize()
        await self.initialized(session)
        return session

    async def initialize(self) -> str:
        initialize = {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "realistic-load", "version": "1.0"},
            },
        }
        r, text = await self._post(initialize, self._headers(None))
        session: str | None = r.headers.get("Mcp-Session-Id")
        if session is None or '"protocolVersion"' not in text:
            raise BadAnswer(f"initialize gave no session: {text[:300]}")
        return session

    async def initialized(self, session: str) -> None:
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self._post(note, self._headers(session))

    async def call(self, session: str | None, n: int) -> None:
        """One `tools/call`, `remember` or `quote` by turn; raises unless its answer is right."""
        serial = next(self.serial)
        if n % 2 == 0:
            key, value = f"u{self.user}-{serial}", f"v{serial * 7}"
            name, arguments, expect = "remember", {"key": key, "value": value}, f"{key}={value}"
        else:
            item = f"item-{self.user}-{serial}"
            name, arguments = "quote", {"item": item}
            expect = f"{item} costs {price_of(item)}"
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if self.era == "modern":
            params["_meta"] = _META
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call", "params": params}
        _, text = await self._post(body, self._headers(session, "tools/call", name))
        if expect not in text or '"isError":true' in text.replace(" ", ""):
            raise BadAnswer(f"{name}: expected {expect!r}, got {text[:300]}")

    async def close(self, session: str | None) -> None:
        if session is None:
            return
        async with self.http.delete(self.url, headers=self._headers(session)) as r:
            text = await r.text()
            if not 200 <= r.status < 300:
                raise BadAnswer(f"DELETE: HTTP {r.status}: {text[:300]}")


async def drive(url: str, era: Era, s: Settings, seconds: float, pids: list[int]) -> Tally:
    """`s.users` users running sessions of `s.calls` calls against `url` for `seconds` (each
    finishes the session it is in); the counts, latencies and server CPU over the run."""
    import aiohttp

    tally = Tally()
    connector = aiohttp.TCPConnector(limit=s.users, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as http:
        deadline = time.perf_counter() + seconds

        async def user(number: int) -> None:
            driver = Driver(http, url, era, number)
            while time.perf_counter() < deadline:
                try:
                    session = await driver.open()
                    for n in range(s.calls):
                        start = time.perf_counter()
                        await driver.call(session, n)
                        tally.latencies.append(time.perf_counter() - start)
                        tally.calls += 1
                    await driver.close(session)
                    tally.sessions += 1
                except (BadAnswer, aiohttp.ClientError, OSError) as exc:
                    tally.errors += 1
                    tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"
                    await asyncio.sleep(0.01)  # a failing server must not spin the generator

        cpu_before, client_before = cpu_seconds(pids), time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(user(i) for i in range(s.users)))
        tally.seconds = time.perf_counter() - start
        tally.server_cpu_s = cpu_seconds(pids) - cpu_before
        tally.client_cpu_s = time.process_time() - client_before
    tally.rss = rss_bytes(pids)
    return tally


async def probe_modern(url: str) -> str | None:
    """What the server said when it refused a 2026-07-28 call (a non-2xx, or a JSON-RPC
    error), or None when it serves one. A wrong answer is not a refusal: that row is measured,
    and its errors fail the run."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        driver = Driver(http, url, "modern", 0)
        try:
            for n in range(2):
                await driver.call(None, n)
        except aiohttp.ClientError as exc:
            return str(exc)
        except BadAnswer as exc:
            if str(exc).startswith("HTTP ") or '"error":' in str(exc):
                return str(exc)
    return None


async def probe_sessions_across_workers(url: str, requests: int = 20) -> int:
    """How many of one legacy session's `requests` (`notifications/initialized`, then calls),
    each on a fresh connection and so on whichever worker accepts it, the server refused as
    not knowing the session (404)."""
    import aiohttp

    refused = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        driver = Driver(http, url, "legacy", 0)
        session = await driver.initialize()
        for n in range(requests):
            try:
                if n == 0:
                    await driver.initialized(session)
                else:
                    await driver.call(session, n)
            except BadAnswer as exc:
                refused += str(exc).startswith("HTTP 404")
    return refused


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    """A row's result: its tally, or why it is n/a."""

    tally: Tally | None = None
    na: str = ""
    pids: list[int] = field(default_factory=list)
    """The server's processes (supervisor and workers), as they were at the end."""


async def measure(
    s: Settings, rows: Sequence[Row], python: Mapping[str, Path], helpers: dict[str, int]
) -> dict[Row, Outcome]:
    """Start Redis, the upstream and every server the rows need; probe each row, warm the
    measured ones up, then run them alternating. `helpers` gets Redis's and the upstream's
    pids."""
    outcomes: dict[Row, Outcome] = {}
    async with AsyncExitStack() as stack:
        redis_proc = await stack.enter_async_context(redis_server())
        upstream_proc = await stack.enter_async_context(upstream_server(s.upstream_ms))
        redis, upstream = redis_proc.url, upstream_proc.url
        helpers["redis"], helpers["upstream"] = redis_proc.proc.pid, upstream_proc.proc.pid
        groups: dict[tuple[str, int], Running] = {}
        for server, workers in dict.fromkeys((r.server, r.workers) for r in rows):
            port = free_port()
            running = await stack.enter_async_context(
                started(
                    f"{server}-{workers}w",
                    server_argv(server, workers, port, python),
                    f"http://{LOOPBACK}:{port}/mcp",
                    server_env(server, workers, redis, upstream),
                )
            )
            await wait_listening(running, port)
            groups[server, workers] = running
        measured: list[Row] = []
        for row in rows:
            running = groups[row.server, row.workers]
            await _until_answering(running, row.era)
            if row.era == "modern":
                wrong = await probe_modern(running.url)
                if wrong is not None:
                    outcomes[row] = Outcome(na=f"does not serve {MODERN}: {wrong[:120]}")
                    continue
            elif row.workers > 1 and row.server != "mrtr":
                refused = await probe_sessions_across_workers(running.url)
                outcomes[row] = Outcome(
                    na=f"sessions live in one worker's memory: {refused} of 20 requests of "
                    "one session, each on a new connection, were refused (404)"
                )
                continue
            measured.append(row)
            outcomes[row] = Outcome(Tally())
        for rnd in range(-1, s.rounds):  # round -1 warms every row up, checked, not counted
            shift = max(rnd, 0) % max(len(measured), 1)
            for row in [*measured[shift:], *measured[:shift]]:
                running = groups[row.server, row.workers]
                seconds = s.warmup if rnd < 0 else s.seconds
                run = await drive(running.url, row.era, s, seconds, running.pids)
                tally = outcomes[row].tally
                assert tally is not None
                if rnd < 0:
                    tally.errors += run.errors
                    tally.first_error = tally.first_error or run.first_error
                    continue
                tally.sessions += run.sessions
                tally.calls += run.calls
                tally.errors += run.errors
                tally.seconds += run.seconds
                tally.server_cpu_s += run.server_cpu_s
                tally.client_cpu_s += run.client_cpu_s
                tally.rss = max(tally.rss, run.rss)
                tally.latencies += run.latencies
                tally.first_error = tally.first_error or run.first_error
        for row, outcome in outcomes.items():
            outcome.pids = groups[row.server, row.workers].pids
    return outcomes


async def _until_answering(running: Running, era: Era) -> None:
    """Wait until every worker has started (a worker still importing leaves requests waiting
    in the backlog): the first `initialize` answered is enough once the workers are up."""
    import aiohttp

    deadline = time.monotonic() + START_TIMEOUT
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                await Driver(http, running.url, "legacy", 0).initialize()
                return
            except (BadAnswer, aiohttp.ClientError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


# --- the report --------------------------------------------------------------------------------


def format_table(outcomes: Mapping[Row, Outcome], s: Settings) -> str:
    header = [
        "server", "era", "workers", "sessions/s", "sessions/s/core", "calls/s", "calls/s/core",
        "p50 ms", "p99 ms",
        "CPU us/call", "server cores", "RSS MiB", "gen cores", "errors",
    ]  # fmt: skip
    table = [header]
    notes: list[str] = []
    for row, outcome in outcomes.items():
        cells = [row.server, row.era, str(row.workers)]
        if outcome.tally is None:
            notes.append(f"{len(notes) + 1}: {row.name}: {outcome.na}")
            cells += [f"n/a ({len(notes)})"] + [""] * (len(header) - 4)
        else:
            t = outcome.tally.summary()
            cells += [
                f"{t['sessions_per_s']:,.0f}",
                f"{t['sessions_per_server_core_s']:,.0f}",
                f"{t['calls_per_s']:,.0f}",
                f"{t['calls_per_server_core_s']:,.0f}",
                f"{t['p50_s'] * 1e3:.1f}",
                f"{t['p99_s'] * 1e3:.1f}",
                f"{t['server_cpu_s_per_call'] * 1e6:,.0f}",
                f"{t['server_cores']:.2f}",
                f"{t['rss_bytes'] / 2**20:,.0f}",
                f"{t['client_cores']:.2f}",
                str(t["errors"]),
            ]
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [
        f"{s.users} users, sessions of {s.calls} tools/call (remember: Redis SET+GET; quote: "
        f"upstream HTTP, {s.upstream_ms:g} ms); {s.rounds} x {s.seconds:g} s per row, alternating",
        "",
    ]
    lines += [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in table
    ]
    lines += [
        "",
        "/core: per second of server CPU (all its processes: what one core of server sustains);",
        "p50/p99: one tools/call's latency; server cores: its CPU over wall time; gen cores: the",
        "load generator's; RSS: all the server's processes; a modern session is its calls alone",
        *notes,
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per row")
    parser.add_argument("--seconds", type=float, help="seconds of each measured run")
    parser.add_argument("--rounds", type=int, help="measured runs per row")
    parser.add_argument("--users", type=int, help="concurrent virtual users")
    parser.add_argument("--calls", type=int, help="tools/call per session")
    parser.add_argument("--upstream-ms", type=float, help="the upstream API's delay")
    parser.add_argument("--only", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--eras", nargs="+", choices=ERAS, default=list(ERAS))
    parser.add_argument("--workers", nargs="+", type=int, choices=WORKER_COUNTS,
                        default=list(WORKER_COUNTS))  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    parser.add_argument("--no-install", action="store_true", help="never pip-install the peers")
    args = parser.parse_args()
    s = QUICK if args.quick else FULL
    overrides = {
        k: getattr(args, k)
        for k in ("seconds", "rounds", "users", "calls", "upstream_ms")
        if getattr(args, k) is not None
    }
    s = Settings(**{**asdict(s), **overrides})
    python = ensure_peers(not args.no_install) if set(args.only) - {"mrtr"} else {}
    rows = [
        Row(server, era, workers)
        for era in args.eras
        for workers in args.workers
        for server in args.only
    ]
    import uvloop

    from benchmarks.run import machine

    info = machine()
    started_at = time.perf_counter()
    helpers: dict[str, int] = {}
    outcomes = uvloop.run(measure(s, rows, python, helpers))
    info["wall_s"] = round(time.perf_counter() - started_at, 1)
    info["loadavg_end"] = os.getloadavg()
    info["peers"] = {k: peer_requirement(v) for k, v in peer_names().items()}
    print(
        f"{info['date']}  |  {info['cores']} cores, {info['cpu']}  |  Python {info['python']}  |  "
        f"{', '.join(info['peers'][k].split()[0] for k in sorted(info['peers']))}  |  "
        f"wall {info['wall_s']} s"
    )
    print(format_table(outcomes, s))
    if args.json:
        payload = {
            "machine": info,
            "settings": asdict(s),
            "rows": {
                row.name: {
                    **asdict(row),
                    **(o.tally.summary() if o.tally else {"na": o.na}),
                    "pids": o.pids,
                }
                for row, o in outcomes.items()
            },
            "helper_pids": helpers,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    failed = [
        (r, o.tally)
        for r, o in outcomes.items()
        if o.tally and (o.tally.errors or not o.tally.calls)
    ]
    for row, tally in failed:
        print(
            f"FAILED {row.name}: {tally.calls} calls answered, {tally.errors} errors; "
            f"first: {tally.first_error or '-'}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
