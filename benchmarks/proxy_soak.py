"""`python benchmarks/proxy_soak.py`: proxied calls under faults, two `mrtr proxy` instances
behind the shipped haproxy config, relaying rounds through Redis.

    python benchmarks/proxy_soak.py                      # 64 clients, 60 s, every fault
    python benchmarks/proxy_soak.py --short              # 16 clients, 20 s: a test's run
    python benchmarks/proxy_soak.py --faults broker      # the baseline and one fault
    python benchmarks/proxy_soak.py --faults kill,kill   # one fault, twice
    python benchmarks/proxy_soak.py --keep-logs          # keep the logs (path on stderr)

Two `mrtr proxy --transport http` processes run behind haproxy with `deploy/haproxy.cfg`
(round-robin, no stickiness: successive rounds of one call land on different instances),
sharing one real `redis-server` as store and broker (`MRTR_STORE_URL`) and one
`MRTR_REQUEST_STATE_KEY`. Each proxies the stdio backend `benchmarks/proxy_soak_server.py`
(`--sessions` processes at most; a call waits for a free one), whose `transfer` tool asks
twice and then appends the call's id to an effects file outside Redis. A round reaching the
instance that does not hold its backend call is relayed through Redis to the one that does.
Before the load, `--sessions` calls at once go straight to each instance (counted nowhere),
so that its backend processes are running: the baseline measures proxies, not their start.

`--clients` clients (one in `--legacy-every` of the legacy era, the others 2026-07-28;
`mrtr.Client.http`) call `transfer` back to back, each call with a fresh id, answering both
questions; a call is tried once (no resumption: what its client was told is what counts). A
legacy client opens a new session after a failed call.

The run is cut into equal windows of `--duration` (a window lasts at least as long as its
fault takes): a baseline, then one per fault of `--faults`, injected at the window's start:

* `kill`: kill -9 of proxy instance 1 (it holds about half the calls in flight), then a new
  one started on its port, as a supervisor would;
* `pause`: Redis stopped 3 s (SIGSTOP, SIGCONT);
* `broker`: `CLIENT KILL TYPE pubsub` on the Redis: every instance's subscription drops and
  must be made again.

A call counts against the window in which its trouble began (its error, or its start when no
answer came), or in which it started if it had none. Per window: calls, completed, failed (an
error came back), hung (no answer within `--call-timeout` seconds), doubled (the call's
effect recorded more than once), ran-failed (a failed or hung call whose effect is recorded:
allowed when the client was not told otherwise) and told-not-run (the client got an error
whose `data.mayHaveRun` is false, and yet the effect is recorded), and the calls completed per
second of the window (how far the instances recovered). Effects are read `--tail`
seconds after the last call ended. The errors clients saw follow, by window. Everything it
starts is stopped on exit, Ctrl-C and SIGTERM included. Exit status 1 when any call hung,
any effect was doubled or any told-not-run effect exists.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import free_port, haproxy_binary, write_config  # noqa: E402
from benchmarks.fault_soak import REDIS_PAUSE, Redis, error_kind  # noqa: E402
from benchmarks.proxy_soak_server import EFFECTS_VARIABLE  # noqa: E402
from benchmarks.soak import terminate  # noqa: E402
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult  # noqa: E402
from mrtr.protocol.errors import REQUEST_TIMEOUT, McpError  # noqa: E402

BACKEND = ROOT / "benchmarks" / "proxy_soak_server.py"
INSTANCES = 2
START_TIMEOUT = 30.0  # seconds for a proxy instance, or haproxy, to answer
STOP_TIMEOUT = 10.0
WARM_UP_PER_SESSION = 2.0  # seconds the warm-up may take per backend session, past START_TIMEOUT
STOP_MARGIN = 10.0  # past the call timeout, seconds a client gets to notice the end
#: Backend sessions per instance: a call waits for one while all are taken (each call holds
#: one for its three rounds), so fewer than the calls in flight only queue them; each is a
#: process to start.
SESSIONS = 8
HUNG_SHOWN = 10  # hung calls listed after the table
#: `FAULTS` name -> the table's label.
FAULTS = {
    "kill": "kill -9 proxy instance",
    "pause": "Redis paused 3 s",
    "broker": "broker reconnect",
}
#: `--short`: a run for a test (about 25 s of load with every fault, 40 s in all). Its calls
#: get the full run's 20 s bound: beside the rest of the test command a call cut by the kill
#: can take ten seconds to be told its holder is gone, while a stranded one never ends.
SHORT = {"clients": 16, "duration": 20.0, "call_timeout": 20.0, "tail": 2.0, "sessions": 6}


def accept(params: ElicitRequestParams) -> ElicitResult:
    """Answer each question of `transfer` with yes."""
    return ElicitResult(action="accept", content={"ok": True})


# --- the processes -----------------------------------------------------------------------------


def answers_405(port: int) -> bool:
    """Whether a proxy instance's endpoint is up: GET /mcp answered 405, as haproxy checks."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request("GET", "/mcp")
        return connection.getresponse().status == 405
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


@dataclass
class Proxies:
    """`INSTANCES` `mrtr proxy` processes behind haproxy; `url` is haproxy's endpoint."""

    workdir: Path
    env: dict[str, str]
    #: `mrtr proxy` and its options but `--port`, then the backend's command line.
    proxy: list[str]
    backend: list[str]
    ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: Every process group started (a killed instance's backends may outlive it).
    groups: list[int] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        """Start the instances, then haproxy; wait until each answers, haproxy included."""
        self.ports = [free_port() for _ in range(INSTANCES)]
        self.processes = [self._spawn(index) for index in range(INSTANCES)]
        for index in range(INSTANCES):
            self._wait(index)
        binary = haproxy_binary()
        assert binary is not None
        self.port = free_port()
        env = dict(self.env, MRTR_LB_ADDR=f"127.0.0.1:{self.port}")
        for index, port in enumerate(self.ports, 1):
            env[f"MRTR_INSTANCE_{index}"] = f"127.0.0.1:{port}"
        config = write_config(INSTANCES, self.workdir / "haproxy.cfg")
        with (self.workdir / "haproxy.log").open("wb") as log:
            self.haproxy = subprocess.Popen(
                [binary, "-db", "-f", str(config)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        self.groups.append(self.haproxy.pid)
        deadline = time.monotonic() + START_TIMEOUT
        while not answers_405(self.port):
            if self.haproxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("haproxy did not start: " + self._tail("haproxy.log"))
            time.sleep(0.05)
        time.sleep(1.5)  # haproxy's health checks see both instances up (rise 2, 500 ms apart)

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        argv = [*self.proxy, "--port", str(self.ports[index]), "--", *self.backend]
        with (self.workdir / f"proxy-{index + 1}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                start_new_session=True,
            )  # fmt: skip
        self.groups.append(process.pid)
        return process

    def _wait(self, index: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not answers_405(self.ports[index]):
            process = self.processes[index]
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"proxy instance {index + 1} did not start ({process.poll()}): "
                    + self._tail(f"proxy-{index + 1}.log")
                )
            time.sleep(0.05)

    def _tail(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def kill_and_restart(self, index: int) -> None:
        """kill -9 instance `index` (the process alone, as a crash), then start a new one on
        its port and wait until it answers."""
        self.processes[index].kill()
        self.processes[index].wait(timeout=STOP_TIMEOUT)
        self.processes[index] = self._spawn(index)
        self._wait(index)

    def stop(self) -> None:
        """SIGTERM every process, SIGKILL what is left of each group after `STOP_TIMEOUT`."""
        processes = [*self.processes, *([self.haproxy] if self.haproxy else [])]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT)
        for group in self.groups:  # backends of a killed instance, or one that did not stop
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)


def kill_pubsub(port: int) -> int:
    """`CLIENT KILL TYPE pubsub` on the Redis at `port`: how many connections it closed."""
    command = [b"CLIENT", b"KILL", b"TYPE", b"pubsub"]
    wire = b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in command)
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(wire)
        reply = sock.recv(64)
    if not reply.startswith(b":"):
        raise RuntimeError(f"CLIENT KILL TYPE pubsub: {reply!r}")
    return int(reply[1:].split(b"\r\n")[0])


# --- the clients -------------------------------------------------------------------------------


@dataclass
class Call:
    """One `transfer` call as its client saw it (times are `time.monotonic()`)."""

    id: str
    legacy: bool
    start: float
    trouble: float | None = None  # when its error came, or its start when no answer came
    outcome: str = "running"  # "ok", "failed" or "hung"
    error: str = ""  # the error's kind
    #: `data.mayHaveRun` of the error: True, False, or None when the error had none.
    may_have_run: bool | None = None


@dataclass
class Fault:
    """One window: its fault, when it was injected and how long the injection took."""

    name: str
    action: Callable[[], Any] | None
    injected: float = 0.0
    took: float = 0.0
    ended: float = 0.0  # when the next window began, or the load stopped
    note: str = ""


async def call_once(client: Client, call: Call, limit: float) -> None:
    """One `transfer` call, bounded by `limit` seconds; its outcome on `call`."""
    try:
        async with asyncio.timeout(limit):
            result = await client.call_tool("transfer", {"call": call.id})
    except TimeoutError:
        call.trouble, call.outcome = call.start, "hung"
        return
    except McpError as error:
        if error.code == REQUEST_TIMEOUT:  # the client's own timeout: no answer came
            call.trouble, call.outcome = call.start, "hung"
            return
        data = error.data if isinstance(error.data, dict) else {}
        flag = data.get("mayHaveRun")
        call.may_have_run = flag if isinstance(flag, bool) else None
        call.trouble, call.outcome, call.error = time.monotonic(), "failed", error_kind(error)
        return
    except Exception as error:  # the client's own failure (a connection, say)
        call.trouble, call.outcome, call.error = time.monotonic(), "failed", error_kind(error)
        return
    if result.is_error or (result.structured_content or {}).get("call") != call.id:
        call.error = "tool error: " + " ".join(str(result.content).split()[:6])
        call.trouble, call.outcome = time.monotonic(), "failed"
        return
    call.outcome = "ok"


async def run_client(
    url: str,
    legacy: bool,
    stop: asyncio.Event,
    ids: itertools.count[int],
    limit: float,
    calls: list[Call],
    opens: Counter[str],
) -> None:
    """Calls back to back until `stop`; a legacy client opens a new session after a failure."""
    options = ClientOptions(protocol="legacy" if legacy else "modern")
    while not stop.is_set():
        client = Client.http(
            url, elicitation_handler=accept, options=options, timeout=limit, connect_attempts=5
        )
        try:
            async with asyncio.timeout(limit):
                await client.__aenter__()
        except Exception as error:
            opens[("legacy " if legacy else "") + "open: " + error_kind(error)] += 1
            await asyncio.sleep(0.2)  # the instances are down: do not spin
            continue
        try:
            while not stop.is_set():
                call = Call(f"call-{next(ids)}", legacy, time.monotonic())
                calls.append(call)
                await call_once(client, call, limit)
                if legacy and call.outcome != "ok":
                    break
        finally:
            try:
                async with asyncio.timeout(limit):
                    await client.__aexit__(None, None, None)
            except Exception as error:
                opens["close: " + error_kind(error)] += 1


async def warm_up(ports: list[int], calls: int) -> None:
    """`calls` calls at once straight to each instance, so that each has that many backend
    sessions open before the load: the baseline measures a running proxy, not its backends'
    start. Their ids are `warm-<n>`; they count nowhere."""
    ids = itertools.count()

    async def one(client: Client) -> None:
        await client.call_tool("transfer", {"call": f"warm-{next(ids)}"})

    async def warm(port: int) -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        options = ClientOptions(protocol="modern")
        async with Client.http(url, elicitation_handler=accept, options=options) as client:
            await asyncio.gather(*(one(client) for _ in range(calls)))

    # Each backend process takes about half a second of CPU to start, more on a busy machine.
    bound = START_TIMEOUT + WARM_UP_PER_SESSION * calls * len(ports)
    try:
        async with asyncio.timeout(bound):
            await asyncio.gather(*(warm(port) for port in ports))
    except Exception as error:
        raise RuntimeError(
            f"warming up {calls} backend sessions per instance failed ({error_kind(error)}, "
            f"bound {bound:g} s): the machine is too busy, or try fewer --sessions"
        ) from error


async def inject(faults: list[Fault], window: float, stop: asyncio.Event) -> None:
    """Each fault at the start of its window, then the clients run on; `stop` after the last."""
    for fault in faults:
        fault.injected = time.monotonic()
        if fault.action is not None:
            note = await asyncio.to_thread(fault.action)
            fault.note = "" if note is None else str(note)
        fault.took = time.monotonic() - fault.injected
        await asyncio.sleep(max(0.0, fault.injected + window - time.monotonic()))
        fault.ended = time.monotonic()
    stop.set()


async def soak(
    url: str,
    ports: list[int],
    faults: list[Fault],
    args: argparse.Namespace,
    calls: list[Call],
    opens: Counter[str],
) -> float:
    """Warm the instances up, run the clients through the windows and wait for the last call
    to end; seconds the load lasted (the windows, each lengthened to its fault's injection)."""
    await warm_up(ports, args.sessions)
    stop = asyncio.Event()
    ids = itertools.count()
    every = args.legacy_every
    clients = [
        asyncio.create_task(
            run_client(
                url,
                every > 0 and index % every == every - 1,
                stop,
                ids,
                args.call_timeout,
                calls,
                opens,
            )
        )
        for index in range(args.clients)
    ]
    await inject(faults, args.duration / len(faults), stop)
    load = time.monotonic() - faults[0].injected
    # Each call, and each open and close, is bounded by the call timeout.
    _done, stuck = await asyncio.wait(clients, timeout=2 * args.call_timeout + STOP_MARGIN)
    for task in stuck:
        task.cancel()
        opens["client still busy past the call timeout"] += 1
    if stuck:
        await asyncio.wait(stuck)
    await asyncio.sleep(args.tail)  # effects that come late have this long to show
    return load


# --- the report --------------------------------------------------------------------------------


def read_effects(path: Path) -> Counter[str]:
    """Call id -> how many times its effect was recorded."""
    effects: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            effects[line.split()[0]] += 1
    return effects


COLUMNS = ("calls", "completed", "failed", "hung", "doubled", "ran-failed", "told-not-run")


def windows(faults: list[Fault], calls: list[Call]) -> list[list[Call]]:
    """The calls of each window: by when their trouble began, else when they started."""
    by_window: list[list[Call]] = [[] for _ in faults]
    for call in calls:
        at = call.trouble if call.trouble is not None else call.start
        index = max((i for i, f in enumerate(faults) if at >= f.injected), default=0)
        by_window[index].append(call)
    return by_window


def count(calls: list[Call], effects: Counter[str]) -> Counter[str]:
    """The table's figures for `calls` (see the module docstring)."""
    troubled = [c for c in calls if c.outcome in ("failed", "hung")]
    return Counter(
        {
            "calls": len(calls),
            "completed": sum(1 for c in calls if c.outcome == "ok"),
            "failed": sum(1 for c in calls if c.outcome == "failed"),
            "hung": sum(1 for c in calls if c.outcome == "hung"),
            "doubled": sum(1 for c in calls if effects[c.id] > 1),
            "ran-failed": sum(1 for c in troubled if effects[c.id] > 0),
            "told-not-run": sum(
                1 for c in troubled if c.may_have_run is False and effects[c.id] > 0
            ),
        }
    )


def table(faults: list[Fault], calls: list[Call], effects: Counter[str]) -> list[list[str]]:
    """One row per window, and a total."""
    rows: list[list[str]] = []
    totals: Counter[str] = Counter()
    for fault, members in zip(faults, windows(faults, calls), strict=True):
        figures = count(members, effects)
        totals.update(figures)
        rate = figures["completed"] / max(fault.ended - fault.injected, 1e-9)
        rows.append(
            [fault.name, *(str(figures[k]) for k in COLUMNS), f"{rate:.0f}", f"{fault.took:.1f}"]
        )
    rows.append(["total", *(str(totals[k]) for k in COLUMNS), "", ""])
    return rows


def print_table(rows: list[list[str]]) -> None:
    head = ["fault", *COLUMNS, "completed/s", "took s"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, ["-" * w for w in widths], *rows]:
        rest = zip(row[1:], widths[1:], strict=True)
        print("  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in rest)]))


def print_errors(faults: list[Fault], calls: list[Call], effects: Counter[str]) -> None:
    """The errors of each window's calls, by era, kind and `mayHaveRun`, most common first."""
    for fault, members in zip(faults, windows(faults, calls), strict=True):
        kinds = Counter(
            (
                "legacy" if c.legacy else "modern",
                c.error or "no answer",
                c.may_have_run,
                effects[c.id] > 0,
            )
            for c in members
            if c.outcome in ("failed", "hung")
        )
        if not kinds:
            continue
        print(f"errors in '{fault.name}'{f' ({fault.note})' if fault.note else ''}:")
        for (era, kind, flag, ran), n in kinds.most_common(8):
            told = {True: "true", False: "false", None: "absent"}[flag]
            effect = "recorded" if ran else "none"
            print(f"  {n:5d}  {era}  {kind}  [mayHaveRun {told}; effect {effect}]")


# --- the command -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--short",
        action="store_true",
        help="a short run for a test: 16 clients, 20 s, call timeout 20 s, 6 sessions",
    )
    parser.add_argument("--clients", type=int, help="clients at once (64)")
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds of load, cut in windows: the baseline and one per fault (60)",
    )
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"the faults, in order, comma-separated; one may come again ({','.join(FAULTS)})",
    )
    parser.add_argument(
        "--call-timeout", type=float, help="seconds a call may take before it counts as hung (20)"
    )
    parser.add_argument(
        "--legacy-every",
        type=int,
        default=2,
        help="one client in N is of the legacy era (2; 0 = none)",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        help=f"backend sessions (processes) per instance ({SESSIONS}, or --clients if fewer)",
    )
    parser.add_argument(
        "--tail", type=float, help="seconds to wait for late effects at the end (3)"
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the instances' and haproxy's logs"
    )
    args = parser.parse_args(argv)
    defaults = (
        SHORT
        if args.short
        else {"clients": 64, "duration": 60.0, "call_timeout": 20.0, "tail": 3.0}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.sessions is None:
        args.sessions = min(args.clients, SESSIONS)
    if args.clients < 1 or args.sessions < 1 or args.legacy_every < 0:
        parser.error("--clients and --sessions must be at least 1, --legacy-every 0 or more")
    if args.duration <= 0 or args.call_timeout <= 0 or args.tail < 0:
        parser.error("--duration and --call-timeout must be above 0, --tail 0 or more")
    args.faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = sorted(set(args.faults) - set(FAULTS))
    if unknown:
        parser.error(f"--faults: no fault named {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    return args


def faults_for(proxies: Proxies, redis: Redis, names: list[str]) -> list[Fault]:
    """The baseline window, then one window per fault named (see `FAULTS`)."""
    actions: dict[str, Callable[[], Any]] = {
        "kill": lambda: proxies.kill_and_restart(0),
        "pause": lambda: redis.pause(REDIS_PAUSE),
        "broker": lambda: f"{kill_pubsub(redis.port)} subscriptions closed",
    }
    return [Fault("baseline (no fault)", None), *(Fault(FAULTS[n], actions[n]) for n in names)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if haproxy_binary() is None:
        print("haproxy is not installed (Debian: apt-get install haproxy)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, terminate)
    workdir = Path(tempfile.mkdtemp(prefix="mrtr-proxy-soak-"))
    effects_path = workdir / "effects.log"
    redis: Redis | None = None
    proxies: Proxies | None = None
    try:
        redis = Redis(workdir)
        held = str(args.clients * 2)  # every client's call may be held on one instance
        base = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
        env = {
            **base,
            "MRTR_REQUEST_STATE_KEY": "proxy-soak-" + secrets.token_hex(24),
            "MRTR_STORE_URL": redis.url,
            EFFECTS_VARIABLE: str(effects_path),
        }
        proxy = [
            sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--host", "127.0.0.1",
            "--sessions", str(args.sessions), "--max-held", held,
            "--max-held-per-principal", held, "--hold-timeout", str(4 * args.call_timeout),
        ]  # fmt: skip
        proxies = Proxies(workdir, env, proxy, [sys.executable, str(BACKEND)])
        proxies.start()
        faults = faults_for(proxies, redis, args.faults)
        calls: list[Call] = []
        opens: Counter[str] = Counter()
        started = time.monotonic()
        load = asyncio.run(soak(proxies.url, proxies.ports, faults, args, calls, opens))
        effects = read_effects(effects_path)
        legacy = 0 if args.legacy_every == 0 else args.clients // args.legacy_every
        print(
            f"proxy soak: {args.clients} clients ({legacy} legacy), {load:.0f} s of load "
            f"({time.monotonic() - started:.0f} s with warm-up and drain), {INSTANCES} mrtr "
            f"proxy instances (--sessions {args.sessions}) behind haproxy (deploy/haproxy.cfg), "
            f"Redis; call timeout {args.call_timeout:g} s"
        )
        rows = table(faults, calls, effects)
        print_table(rows)
        print_errors(faults, calls, effects)
        lost = sum(1 for c in calls if c.outcome == "ok" and effects[c.id] == 0)
        if lost:
            print(f"completed calls with no effect recorded: {lost}")
        for call in [c for c in calls if c.outcome == "hung"][:HUNG_SHOWN]:
            era = "legacy" if call.legacy else "modern"
            print(
                f"hung: {call.id} ({era}), started {call.start - faults[0].injected:.1f} s into "
                f"the load, {effects[call.id]} effect(s)"
            )
        warm = {c for c in effects if c.startswith("warm-")}
        unmatched = len(set(effects) - warm - {c.id for c in calls})
        if unmatched:
            print(f"effects of no call the clients made: {unmatched}")
        for kind, n in opens.most_common(8):
            print(f"client sessions: {n} x {kind}")
        total = dict(zip(COLUMNS, rows[-1][1:], strict=False))
        return 0 if total["hung"] == total["doubled"] == total["told-not-run"] == "0" else 1
    except KeyboardInterrupt:
        print("interrupted: stopping everything started", file=sys.stderr)
        return 130
    except RuntimeError as error:  # a process that did not start, or the warm-up
        print(f"proxy soak: {error}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup
        if proxies is not None:
            proxies.stop()
        if redis is not None:
            redis.stop()
        if args.keep_logs:
            print(f"logs: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
