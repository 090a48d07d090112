"""`python benchmarks/fault_soak.py`: flows under faults, through the shipped haproxy config.

    python benchmarks/fault_soak.py                             # 128 clients, 60 s
    python benchmarks/fault_soak.py --clients 32 --duration 20  # smaller
    python benchmarks/fault_soak.py --keep-logs                 # keep logs (path on stderr)
    python benchmarks/fault_soak.py --faults pause,pause,pause --legacy-every 2
                                                                # one fault, three times
    python benchmarks/fault_soak.py --faults kill --on-uncertain retry
                                                                # the soak sees a doubled effect

Three `mrtr serve` instances of `benchmarks/fault_soak_server.py` run behind haproxy with
`deploy/haproxy.cfg`, sharing a real `redis-server` (append-only file on, fsync every second)
on a free loopback port. `--clients` clients run flows back to back: most are 2026-07-28
clients running the three-round `transfer` tool (two questions, then a side effect in
`ctx.once`), resuming a failed round (after a pause that doubles each time) from the
`requestState` and answers its error carries; one in `--legacy-every` is a legacy
(2025-11-25) session client calling the same tool, its questions asked live. The effect
reaches the ledger, an outside system the soak runs itself (a TCP service on a free loopback
port, outside the store): the ledger records the flow's id (unique per client call) when the
effect arrives and acknowledges it `--acknowledge-after` seconds later, so the effect and the
record of its outcome in the store are separate steps, with real I/O between them.
`--on-uncertain` is the tool's `on_uncertain` (fail, retry, or check: ask the ledger).

The run is cut into equal windows of `--duration` (six by default; a window lasts at least as
long as its fault takes): a baseline, then one fault each, injected at the window's start:

* kill -9 of an instance, aimed: as soon as the effect of one of its 2026-07-28 flows
  reaches the ledger (within `AIM_TIMEOUT`), while that effect waits for its
  acknowledgement; then a new one started on its port;
* Redis paused 3 s (SIGSTOP, SIGCONT);
* Redis killed and restarted on its append-only file (what it had, up to a second);
* Redis killed and restarted empty, without persistence;
* a rolling restart: each instance in turn SIGTERMed (it drains) and started again.

`--faults` picks the faults and their order (names in `FAULTS`; one may come more than
once), after the baseline window.

A flow counts against the window in which its trouble began (its first error, or the start of
the attempt that got no answer), or in which it started if it had none. Per window: flows, ok,
failed (gave up after `ATTEMPTS` tries), hung (no answer within `--flow-timeout`), uncertain
(ended with -32603 `effect_uncertain`: its `once` started in an attempt that never finished),
of which ran (the ledger has the uncertain flow's effect), side effects doubled (the ledger
got a flow's effect more than once), late (an effect the ledger got after its client gave up;
the ledger is read `--tail` seconds after the last flow ended), and time to recover (from the
injection to the moment the last flow in trouble got into it; 0 when none was). Each aimed
kill is then described (the flow whose effect it cut, how long after the effect arrived, and
whether its acknowledgement had gone out), and each hung flow listed with what its client last
saw: the request it waited on, how many questions it had answered, its last HTTP exchanges
(what each carried, when, and the status that came back), and the client's last log line.
Everything it starts is stopped on exit, Ctrl-C and SIGTERM included. Exit status 1 when any
flow hung, any effect ran twice or late.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import itertools
import json
import logging
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import Cluster, free_port, haproxy_binary, restart  # noqa: E402
from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult  # noqa: E402
from mrtr.protocol.errors import EFFECT_UNCERTAIN_REASON, REQUEST_TIMEOUT, McpError  # noqa: E402

TARGET = "benchmarks/fault_soak_server.py:server"
LEDGER_VARIABLE = "MRTR_SOAK_LEDGER"
ON_UNCERTAIN_VARIABLE = "MRTR_SOAK_ON_UNCERTAIN"
ON_UNCERTAIN = ("fail", "retry", "check")
INSTANCES = 3
ATTEMPTS = 4  # one try and up to 3 resumptions per modern flow; a legacy call is tried once
BACKOFF = 0.5  # seconds before the first resumption, doubled for each next one
REDIS_PAUSE = 3.0
REDIS_START_TIMEOUT = 10.0
STOP_MARGIN = 10.0  # past the flow timeout, seconds a client gets to notice the end
AIM_TIMEOUT = 5.0  # seconds an aimed kill waits for an effect of its instance


class Ledger:
    """The outside system `transfer`'s effect reaches, counted by the soak itself: a TCP
    service on a loopback socket (see `benchmarks/fault_soak_server.py` for its lines).

    An effect is recorded (flow id, time) as its line arrives and acknowledged
    `acknowledge_after` seconds later. `aim` makes the next effect of one process in a
    2026-07-28 flow (whose round journals its `once` in the store) set `hit`, for a kill that
    lands between an effect and the record of its outcome.
    """

    def __init__(self, acknowledge_after: float) -> None:
        self.acknowledge_after = acknowledge_after
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"
        #: Flow id -> when each of its effects arrived (`time.monotonic()`).
        self.effects: dict[str, list[float]] = defaultdict(list)
        self.keys: set[str] = set()  # the idempotency keys of the effects recorded
        #: Flow id -> when the acknowledgement of its last effect went out.
        self.acknowledged: dict[str, float] = {}
        self._lock = threading.Lock()
        self._aim: int | None = None
        self.hit = threading.Event()
        self.hit_flow = ""  # the flow whose effect set `hit`, and when it arrived
        self.hit_at = 0.0

    async def serve(self) -> asyncio.Server:
        """Answer on the ledger's socket (connections wait in its backlog until then)."""
        return await asyncio.start_server(self._exchange, sock=self.socket)

    def aim(self, pid: int | None) -> None:
        """Set `hit` when the next effect of process `pid` arrives (None: of no process)."""
        with self._lock:
            self._aim, self.hit_flow = pid, ""
            self.hit.clear()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            words = (await reader.readline()).decode(errors="replace").split()
            if len(words) == 5 and words[0] == "effect" and words[3].isdigit():
                _, flow, key, pid, era = words
                with self._lock:
                    self.effects[flow].append(time.monotonic())
                    self.keys.add(key)
                    if self._aim == int(pid) and era == "modern":
                        self._aim, self.hit_flow, self.hit_at = None, flow, time.monotonic()
                        self.hit.set()
                await asyncio.sleep(self.acknowledge_after)
                self.acknowledged[flow] = time.monotonic()
                writer.write(b"ok\n")
            elif len(words) == 2 and words[0] == "seen":
                writer.write(b"yes\n" if words[1] in self.keys else b"no\n")
            else:
                writer.write(b"error: expected 'effect FLOW KEY PID ERA' or 'seen KEY'\n")
            await writer.drain()
        except OSError:
            pass  # the instance was killed while it waited: its effect is recorded all the same
        finally:
            writer.close()


def accept(params: ElicitRequestParams) -> ElicitResult:
    """Answer every question of `transfer` with yes (and count it for the flow asking)."""
    flow = current_flow.get()
    if flow is not None and flow.outcome == "running":
        flow.answered += 1
    return ElicitResult(action="accept", content={"ok": True})


def error_kind(error: BaseException) -> str:
    """An error's type (and JSON-RPC code) and first words: errors that differ only in ids
    fall together."""
    words = " ".join(str(error).split()[:6])
    if isinstance(error, McpError):
        return f"McpError {error.code}: {words}"
    return f"{type(error).__name__}: {words}"


class Redis:
    """A `redis-server` on a free loopback port that can be paused, killed and restarted on
    its append-only file, or restarted empty."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (Debian: apt-get install redis-server)"
            )
        self.binary = binary
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir()
        self.process: subprocess.Popen[bytes] | None = None
        self.start(aof=True)

    @property
    def url(self) -> str:
        """The store URL the instances are given."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, aof: bool) -> None:
        """Start it on its port (and directory: with `aof`, on what the file kept)."""
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self, seconds: float) -> None:
        """Stop the process for `seconds` (SIGSTOP), then let it go on (SIGCONT)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            self.process.send_signal(signal.SIGCONT)

    def restart(self, *, aof: bool) -> None:
        """Kill it (a crash), then start it again: on its file with `aof`, else empty."""
        self.stop()
        if not aof:
            shutil.rmtree(self.dir)
            self.dir.mkdir()
        self.start(aof=aof)

    def stop(self) -> None:
        """Kill it and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused one dies as well
            self.process.kill()
        if self.process is not None:
            self.process.wait(timeout=REDIS_START_TIMEOUT)


@dataclass
class Exchange:
    """One HTTP exchange of a flow: when it started (seconds into the flow), what it carried
    and the status that came back ("-" while none came)."""

    at: float
    method: str
    carried: str = ""
    status: str = "-"

    def __str__(self) -> str:
        return f"{self.method} {self.carried} at +{self.at:.1f} s: {self.status}".replace("  ", " ")


#: Exchanges kept per flow.
EXCHANGES_KEPT = 4


def carried(body: bytes) -> str:
    """What a POSTed JSON-RPC message is, in a word or two (a method, or an answer's id)."""
    try:
        message = json.loads(body)
    except ValueError:
        return "?"
    if not isinstance(message, dict):
        return "?"
    if "method" in message:
        return str(message["method"])
    return f"answer to {message.get('id')}"


@dataclass
class Flow:
    """One flow as its client saw it (times are `time.monotonic()`, shared by processes)."""

    id: str
    legacy: bool
    start: float
    trouble: float | None = None  # its first error, or the start of the attempt that hung
    end: float = 0.0  # done, or given up
    outcome: str = "running"  # "ok", "failed", "hung" or "uncertain" (effect_uncertain)
    # What its client last saw while the flow ran, to tell where a flow that hung was stuck.
    method: str = "tools/call"  # the request it waited on
    answered: int = 0  # questions answered (each round but the last asks one)
    exchanges: list[Exchange] = field(default_factory=list)  # its last few HTTP exchanges
    log: str = ""  # the client's last log line during the flow

    def diagnosis(self) -> str:
        """What the client last saw, in one line."""
        return (
            f"waiting on {self.method}, {self.answered} question(s) answered; last HTTP "
            f"exchanges: {', '.join(map(str, self.exchanges)) or 'none'}; last client log: "
            f"{self.log or 'none'}"
        )


#: The flow whose request is being made, in the task making it and the tasks it starts (the
#: answers to questions, the resumptions of a stream): HTTP exchanges and log lines go to it.
current_flow: contextvars.ContextVar[Flow | None] = contextvars.ContextVar(
    "fault_soak_flow", default=None
)


class FlowLog(logging.Handler):
    """Keeps the client's last log line on the flow it was logged for."""

    def emit(self, record: logging.LogRecord) -> None:
        flow = current_flow.get()
        if flow is not None and flow.outcome == "running":
            flow.log = f"{record.levelname.lower()} {record.getMessage()}"[:300]


def observe(client: Client) -> None:
    """Note each HTTP exchange of `client` on the flow it is made for: its method and what it
    carried, then the status when the headers come back."""
    session = getattr(client.transport, "_session", None)
    if not isinstance(session, aiohttp.ClientSession):
        return

    async def started(
        _session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestStartParams
    ) -> None:
        flow = current_flow.get()
        context.exchange = None
        if flow is not None and flow.outcome == "running":
            context.exchange = Exchange(time.monotonic() - flow.start, params.method)
            flow.exchanges = [*flow.exchanges[1 - EXCHANGES_KEPT :], context.exchange]

    async def sent(
        _session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestChunkSentParams
    ) -> None:
        if context.exchange is not None and not context.exchange.carried:
            context.exchange.carried = carried(params.chunk)

    async def ended(
        _session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestEndParams
    ) -> None:
        if context.exchange is not None:
            response = params.response
            context.exchange.status = f"{response.status} {response.content_type}"

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(started)
    trace.on_request_chunk_sent.append(sent)
    trace.on_request_end.append(ended)
    trace.freeze()
    session.trace_configs.append(trace)


@dataclass
class Fault:
    """One window: its fault, when it was injected and how long the injection took."""

    name: str
    action: Callable[[], str | None] | None  # gives what it did, if its name does not say
    injected: float = 0.0
    took: float = 0.0
    note: str = ""


@dataclass
class Run:
    """What the clients saw."""

    flows: list[Flow] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


async def run_modern(client: Client, flow: Flow, limit: float, run: Run) -> None:
    """A `transfer` flow, resumed after a failed round (after a pause that doubles each
    time, as a client honouring `Retry-After` would), within `limit` seconds in all."""
    current_flow.set(flow)
    state: str | None = None
    answers: dict[str, Any] | None = None
    deadline = flow.start + limit
    for attempt in range(ATTEMPTS):
        if attempt:
            await asyncio.sleep(min(BACKOFF * 2 ** (attempt - 1), deadline - time.monotonic()))
        attempt_started = time.monotonic()
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                result = await client.call_tool(
                    "transfer", {"flow": flow.id}, request_state=state, input_responses=answers
                )
        except TimeoutError:
            flow.trouble = flow.trouble or attempt_started
            flow.outcome, flow.end = "hung", time.monotonic()
            return
        except McpError as error:
            if error.code == REQUEST_TIMEOUT:  # the client's own timeout: no answer came
                flow.trouble = flow.trouble or attempt_started
                flow.outcome, flow.end = "hung", time.monotonic()
                return
            run.errors[error_kind(error)] += 1
            flow.trouble = flow.trouble or time.monotonic()
            if isinstance(error.data, dict) and error.data.get("reason") == EFFECT_UNCERTAIN_REASON:
                # The server cannot tell whether the effect ran; a retry gets the same answer.
                flow.outcome, flow.end = "uncertain", time.monotonic()
                return
            if error.request_state is not None:
                state, answers = error.request_state, error.input_responses
            continue
        except Exception as error:  # the client's own failure: resumed from the last state
            run.errors[error_kind(error)] += 1
            flow.trouble = flow.trouble or time.monotonic()
            continue
        ok = not result.is_error and (result.structured_content or {}).get("flow") == flow.id
        if not ok:
            run.errors["tool error: " + " ".join(str(result.content).split()[:6])] += 1
            flow.trouble = flow.trouble or time.monotonic()
        flow.outcome, flow.end = ("ok" if ok else "failed"), time.monotonic()
        return
    flow.outcome, flow.end = "failed", time.monotonic()


def _loop_time(monotonic: float) -> float:
    """`monotonic` (a `time.monotonic()` value) on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic - time.monotonic())


async def run_legacy(client: Client, flow: Flow, limit: float, run: Run) -> bool:
    """A `transfer` call on a legacy session, tried once (a retry could run it twice);
    whether the client is still usable."""
    current_flow.set(flow)
    try:
        result = await asyncio.wait_for(client.call_tool("transfer", {"flow": flow.id}), limit)
    except TimeoutError:
        flow.trouble = flow.start
        flow.outcome, flow.end = "hung", time.monotonic()
        return False
    except Exception as error:
        if isinstance(error, McpError) and error.code == REQUEST_TIMEOUT:
            flow.trouble = flow.start  # the client's own timeout: no answer came
            flow.outcome, flow.end = "hung", time.monotonic()
            return False
        run.errors["legacy " + error_kind(error)] += 1
        flow.trouble = time.monotonic()
        flow.outcome, flow.end = "failed", time.monotonic()
        return False
    ok = not result.is_error and (result.structured_content or {}).get("flow") == flow.id
    if not ok:
        run.errors["legacy tool error: " + " ".join(str(result.content).split()[:6])] += 1
        flow.trouble = time.monotonic()
    flow.outcome, flow.end = ("ok" if ok else "failed"), time.monotonic()
    return True


async def run_client(
    url: str, legacy: bool, stop: asyncio.Event, names: Iterator[str], limit: float, run: Run
) -> None:
    """Run flows back to back until `stop`; a legacy client opens a new session after a
    failed call."""
    while not stop.is_set():
        current_flow.set(None)  # the client's own tasks (its GET stream) belong to no flow
        options = ClientOptions(protocol="legacy") if legacy else None
        client = Client.http(
            url, elicitation_handler=accept, options=options, timeout=limit, connect_attempts=5
        )
        try:
            async with asyncio.timeout(limit):
                await client.__aenter__()
        except Exception as error:
            run.errors[("legacy " if legacy else "") + "open: " + error_kind(error)] += 1
            await asyncio.sleep(0.2)  # the cluster is down: do not spin
            continue
        observe(client)
        try:
            while not stop.is_set():
                flow = Flow(next(names), legacy, time.monotonic())
                run.flows.append(flow)
                if legacy:
                    if not await run_legacy(client, flow, limit, run):
                        break
                else:
                    await run_modern(client, flow, limit, run)
        finally:
            try:
                async with asyncio.timeout(limit):
                    await client.__aexit__(None, None, None)
            except Exception as error:
                run.errors["close: " + error_kind(error)] += 1


async def inject(faults: list[Fault], window: float, stop: asyncio.Event) -> None:
    """Inject each fault at the start of its window, then let the clients run; `stop` after
    the last window."""
    for fault in faults:
        fault.injected = time.monotonic()
        if fault.action is not None:
            note: str | None = await asyncio.to_thread(fault.action)
            fault.note = note or ""
        fault.took = time.monotonic() - fault.injected
        await asyncio.sleep(max(0.0, fault.injected + window - time.monotonic()))
    stop.set()


async def soak(
    cluster: Cluster, ledger: Ledger, faults: list[Fault], args: argparse.Namespace, run: Run
) -> None:
    ledger_server = await ledger.serve()
    try:
        await soak_with(cluster, faults, args, run)
    finally:
        ledger_server.close()


async def soak_with(
    cluster: Cluster, faults: list[Fault], args: argparse.Namespace, run: Run
) -> None:
    stop = asyncio.Event()
    names = (f"flow-{n}" for n in itertools.count())
    clients = [
        asyncio.create_task(
            run_client(
                cluster.url,
                args.legacy_every > 0 and index % args.legacy_every == args.legacy_every - 1,
                stop,
                names,
                args.flow_timeout,
                run,
            )
        )
        for index in range(args.clients)
    ]
    driver = asyncio.create_task(inject(faults, args.duration / len(faults), stop))
    await driver
    # Each flow is bounded by the flow timeout, a client's close as well.
    _done, stuck = await asyncio.wait(clients, timeout=2 * args.flow_timeout + STOP_MARGIN)
    for task in stuck:
        task.cancel()
        run.errors["client still busy after the flows' timeout"] += 1
    if stuck:
        await asyncio.wait(stuck)
    await asyncio.sleep(args.tail)  # effects that come late have this long to show


def table(faults: list[Fault], run: Run, effects: dict[str, list[float]]) -> list[list[str]]:
    """One row per window, and a total."""
    starts = [fault.injected for fault in faults]

    def window_of(flow: Flow) -> int:
        at = flow.trouble if flow.trouble is not None else flow.start
        index = 0
        for i, start in enumerate(starts):
            if at >= start:
                index = i
        return index

    rows: list[list[str]] = []
    totals = Counter[str]()
    by_window: dict[int, list[Flow]] = defaultdict(list)
    for flow in run.flows:
        by_window[window_of(flow)].append(flow)
    for index, fault in enumerate(faults):
        flows = by_window[index]
        failed = [f for f in flows if f.outcome == "failed"]
        hung = [f for f in flows if f.outcome == "hung"]
        uncertain = [f for f in flows if f.outcome == "uncertain"]
        doubled = sum(1 for f in flows if len(effects.get(f.id, ())) > 1)
        late = sum(
            1
            for f in flows
            if f.outcome in ("failed", "hung") and any(t > f.end for t in effects.get(f.id, ()))
        )
        troubled = [f.trouble for f in flows if f.trouble is not None]
        recover = max(troubled) - fault.injected if troubled else 0.0
        count = Counter(
            flows=len(flows),
            ok=sum(1 for f in flows if f.outcome == "ok"),
            failed=len(failed),
            hung=len(hung),
            uncertain=len(uncertain),
            ran=sum(1 for f in uncertain if effects.get(f.id)),
            doubled=doubled,
            late=late,
        )
        totals.update(count)
        rows.append(
            [fault.name, *(str(count[k]) for k in COUNTED), f"{recover:.1f}", f"{fault.took:.1f}"]
        )
    rows.append(["total", *(str(totals[k]) for k in COUNTED), "", ""])
    return rows


#: The columns of `table` that count flows, in order.
COUNTED = ("flows", "ok", "failed", "hung", "uncertain", "ran", "doubled", "late")
HEAD = ["fault", *COUNTED[:5], "of which ran", *COUNTED[6:], "recover s", "took s"]


def print_table(rows: list[list[str]]) -> None:
    head = HEAD
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, ["-" * w for w in widths], *rows]:
        rest = zip(row[1:], widths[1:], strict=True)
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in rest]
        print("  ".join(cells))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=128, help="clients at once (128)")
    parser.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds of load, cut in windows: the baseline and one per fault (60)",
    )
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"the faults, in order, comma-separated; one may come again ({','.join(FAULTS)})",
    )
    parser.add_argument(
        "--flow-timeout", type=float, default=30.0, help="seconds a client waits for a flow (30)"
    )
    parser.add_argument(
        "--legacy-every", type=int, default=8, help="one client in N is legacy (8; 0 = none)"
    )
    parser.add_argument(
        "--tail", type=float, default=5.0, help="seconds to wait for late effects at the end (5)"
    )
    parser.add_argument(
        "--on-uncertain",
        choices=ON_UNCERTAIN,
        default="fail",
        help="the effect's on_uncertain: fail, retry, or check (ask the ledger) (fail)",
    )
    parser.add_argument(
        "--acknowledge-after",
        type=float,
        default=0.05,
        help="seconds the ledger takes to acknowledge an effect it recorded (0.05)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the instances' and haproxy's logs"
    )
    args = parser.parse_args(argv)
    if args.clients < 1 or args.duration <= 0 or args.flow_timeout <= 0 or args.tail < 0:
        parser.error("--clients must be at least 1, --duration and --flow-timeout above 0")
    if not 0 <= args.acknowledge_after < args.flow_timeout:
        parser.error("--acknowledge-after must be 0 or more, and less than --flow-timeout")
    if args.legacy_every < 0:
        parser.error("--legacy-every must be 0 or more")
    args.faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = sorted(set(args.faults) - set(FAULTS))
    if unknown:
        parser.error(f"--faults: no fault named {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    return args


def terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the run like Ctrl-C, so that the cleanup below runs."""
    raise KeyboardInterrupt


#: The faults `--faults` may name, in the order of a default run.
FAULTS = ("kill", "pause", "aof", "no-aof", "rolling")


def faults_for(cluster: Cluster, redis: Redis, ledger: Ledger, names: list[str]) -> list[Fault]:
    """The baseline window, then one window per fault named (see `FAULTS`)."""

    def kill_one() -> str:
        pid = cluster.instances[0].pid
        ledger.aim(pid)
        aimed = ledger.hit.wait(AIM_TIMEOUT)
        killing = time.monotonic()
        cluster.kill(0)
        acknowledged = ledger.acknowledged.get(ledger.hit_flow, killing)
        restart(cluster, 0)
        if not aimed:
            ledger.aim(None)
            return f"no modern effect of process {pid} reached the ledger in {AIM_TIMEOUT:g} s"
        when = "before" if acknowledged >= killing else "after"
        return (
            f"killed {killing - ledger.hit_at:.3f} s after the effect of {ledger.hit_flow} "
            f"reached the ledger, {when} its acknowledgement went out"
        )

    def rolling() -> None:
        for index in range(len(cluster.instances)):
            restart(cluster, index)

    def make(name: str) -> Fault:
        if name == "kill":
            return Fault("kill -9 instance", kill_one)
        if name == "pause":
            return Fault(f"Redis paused {REDIS_PAUSE:g} s", lambda: redis.pause(REDIS_PAUSE))
        if name == "aof":
            return Fault("Redis restarted, AOF", lambda: redis.restart(aof=True))
        if name == "no-aof":
            return Fault("Redis restarted, no AOF", lambda: redis.restart(aof=False))
        assert name == "rolling"
        return Fault("rolling restart", rolling)

    return [Fault("baseline (no fault)", None), *(make(name) for name in names)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if haproxy_binary() is None:
        print("haproxy is not installed (Debian: apt-get install haproxy)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, terminate)
    flow_log = FlowLog(logging.INFO)
    logging.getLogger("mrtr").addHandler(flow_log)
    logging.getLogger("mrtr").setLevel(logging.INFO)
    workdir = Path(tempfile.mkdtemp(prefix="mrtr-fault-soak-"))
    ledger = Ledger(args.acknowledge_after)
    redis: Redis | None = None
    cluster: Cluster | None = None
    try:
        redis = Redis(workdir)
        env = {
            "MRTR_REQUEST_STATE_KEY": "fault-soak-" + secrets.token_hex(24),
            "MRTR_STORE_URL": redis.url,
            LEDGER_VARIABLE: ledger.address,
            ON_UNCERTAIN_VARIABLE: args.on_uncertain,
        }
        cluster = Cluster.start(TARGET, workdir, env, n=INSTANCES)
        faults = faults_for(cluster, redis, ledger, args.faults)
        run = Run()
        started = time.monotonic()
        asyncio.run(soak(cluster, ledger, faults, args, run))
        effects = ledger.effects
        print(
            f"fault soak: {args.clients} clients ({_legacy_count(args)} legacy), "
            f"{args.duration:g} s of load in {time.monotonic() - started:.0f} s, "
            f"{INSTANCES} instances behind haproxy (deploy/haproxy.cfg), Redis; "
            f"flow timeout {args.flow_timeout:g} s; effect in ctx.once, "
            f"on_uncertain {args.on_uncertain}"
        )
        rows = table(faults, run, effects)
        print_table(rows)
        for fault in faults:
            if fault.note:
                print(f"{fault.name}: {fault.note}")
        for flow in run.flows:
            ran = len(effects.get(flow.id, ()))
            if flow.outcome == "uncertain" or ran > 1:
                print(f"{flow.outcome}: {flow.id}, its effect ran {ran} time(s)")
        for flow in run.flows:
            if flow.outcome == "hung":
                era = "legacy" if flow.legacy else "modern"
                print(
                    f"hung: {flow.id} ({era}), started {flow.start - started:.1f} s in, "
                    f"trouble at {(flow.trouble or flow.start) - started:.1f} s, "
                    f"{len(effects.get(flow.id, ()))} effect(s); {flow.diagnosis()}"
                )
        unmatched = len(set(effects) - {flow.id for flow in run.flows})
        if unmatched:
            print(f"effects of no flow the clients started: {unmatched}")
        if run.errors:
            print(f"errors seen by clients (resumed or not): {sum(run.errors.values())}")
            for kind, count in run.errors.most_common(12):
                print(f"  {count:6d}  {kind}")
        total = dict(zip(COUNTED, rows[-1][1:], strict=False))
        return 0 if total["hung"] == total["doubled"] == total["late"] == "0" else 1
    except KeyboardInterrupt:
        print("interrupted: stopping everything started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup
        if cluster is not None:
            cluster.stop()
        if redis is not None:
            redis.stop()
        ledger.socket.close()
        if args.keep_logs:
            print(f"logs: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _legacy_count(args: argparse.Namespace) -> int:
    return 0 if args.legacy_every == 0 else args.clients // args.legacy_every


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
