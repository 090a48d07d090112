"""`python benchmarks/soak.py`: many clients running multi-round flows against several
`mrtr serve` instances behind haproxy, for a fixed time.

    python benchmarks/soak.py                          # 128 clients, 60 s, 3 instances
    python benchmarks/soak.py --store redis            # the instances share a redis-server
    python benchmarks/soak.py --quick                  # 8 clients for 2 s: checks it runs
    python benchmarks/soak.py --keep-logs              # keep the instances' logs (path on stderr)

Each client is one `Client.http` through haproxy (round-robin, no stickiness) running the
three-round `transfer` tool of `tests/servers/cluster_server.py` back to back, at least once
however late its connection opened; a round that fails is resumed from the `requestState` and
answers its error carries, up to 3 times. It prints completed flows, flows/s, errors grouped by
type, flow latency percentiles, each instance's RSS at start, middle and end, and the
side-effect count against completed flows.
Exit status 1 on any failed flow or a count mismatch. Everything it starts (instances,
haproxy, redis-server) is stopped on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import Cluster, free_port, haproxy_binary, write_config  # noqa: E402
from mrtr import Client, ElicitRequestParams, ElicitResult  # noqa: E402
from mrtr.protocol.errors import McpError  # noqa: E402

TARGET = "tests/servers/cluster_server.py:server"
EFFECTS_VARIABLE = "MRTR_TEST_EFFECTS"
ATTEMPTS = 4  # one try and up to 3 resumptions per flow
REQUEST_TIMEOUT = 30.0  # per HTTP request: far above any round, so only a hang reaches it
DRAIN_GRACE = 60.0  # after the deadline, flows in flight get this long to finish
REDIS_START_TIMEOUT = 10.0


def accept(params: ElicitRequestParams) -> ElicitResult:
    """Answer every question of `transfer` with yes."""
    return ElicitResult(action="accept", content={"ok": True})


def error_kind(error: BaseException) -> str:
    """The group an error is counted in: its type (and JSON-RPC code) plus the first words of
    its message, so that errors differing only in ids or numbers fall together."""
    words = " ".join(str(error).split()[:5])
    if isinstance(error, McpError):
        return f"McpError {error.code}: {words}"
    return f"{type(error).__name__}: {words}"


def rss_kib(pid: int) -> int | None:
    """The resident set size of `pid` in KiB (`VmRSS` of /proc/<pid>/status), None once gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, round(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Tally:
    """What the clients saw."""

    completed: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds per completed flow
    errors: Counter[str] = field(default_factory=Counter)


class RedisServer:
    """A `redis-server` without persistence on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (Debian: apt-get install redis-server)"
            )
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        try:
            while not self._answers():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}")
                time.sleep(0.02)
        except BaseException:  # Ctrl-C included: the caller never gets this object to stop
            self.stop()
            raise

    @property
    def url(self) -> str:
        """The store URL the instances are given."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Kill it and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=REDIS_START_TIMEOUT)


async def run_client(
    url: str, stop_at: float, names: Iterator[str], pause_ms: int, tally: Tally
) -> None:
    """Run flows back to back until `stop_at`, and at least one.

    At least one, so that a client whose connection opened late (a loaded machine, a slow
    instance start) still says whether a flow works: the quick run is a check, not a rate.
    """
    try:
        async with Client.http(
            url, elicitation_handler=accept, connect_attempts=5, timeout=REQUEST_TIMEOUT
        ) as client:
            while True:
                await run_flow(client, next(names), pause_ms, tally)
                if time.monotonic() >= stop_at:
                    break
    except Exception as error:  # a client that cannot even open counts, and the rest go on
        tally.errors[error_kind(error)] += 1
        tally.failed += 1


async def run_flow(client: Client, flow: str, pause_ms: int, tally: Tally) -> None:
    """One `transfer` flow, resumed from its last state after a failed round."""
    started = time.monotonic()
    state: str | None = None
    answers: dict[str, Any] | None = None
    for _attempt in range(ATTEMPTS):
        try:
            result = await client.call_tool(
                "transfer",
                {"flow": flow, "pause_ms": pause_ms},
                request_state=state,
                input_responses=answers,
            )
        except McpError as error:
            tally.errors[error_kind(error)] += 1
            state, answers = error.request_state, error.input_responses
            continue
        except (OSError, TimeoutError) as error:
            tally.errors[error_kind(error)] += 1
            break
        if result.is_error or (result.structured_content or {}).get("flow") != flow:
            tally.errors["tool error: " + " ".join(str(result.content).split()[:5])] += 1
            break
        tally.completed += 1
        tally.latencies.append(time.monotonic() - started)
        return
    tally.failed += 1


async def run_load(
    cluster: Cluster, clients: int, seconds: float, pause_ms: int, tally: Tally
) -> dict[str, list[int | None]]:
    """Run the clients for `seconds`; the instances' RSS at start, middle and end."""
    pids = [instance.pid for instance in cluster.instances]
    samples: dict[str, list[int | None]] = {"start": [rss_kib(pid) for pid in pids]}

    async def sample_middle() -> None:
        await asyncio.sleep(seconds / 2)
        samples["middle"] = [rss_kib(pid) for pid in pids]

    names = (f"flow-{n}" for n in itertools.count())
    stop_at = time.monotonic() + seconds
    middle = asyncio.create_task(sample_middle())
    tasks = [
        asyncio.create_task(run_client(cluster.url, stop_at, names, pause_ms, tally))
        for _ in range(clients)
    ]
    # Plain tasks, not one gathered future: on Ctrl-C `asyncio.run` cancels and reaps them.
    _done, stuck = await asyncio.wait(tasks, timeout=seconds + DRAIN_GRACE)
    for task in stuck:
        task.cancel()
        tally.errors["client still busy after the grace period"] += 1
        tally.failed += 1
    await asyncio.wait([middle, *stuck])
    samples["end"] = [rss_kib(pid) for pid in pids]
    return samples


def mib(kib: int | None) -> str:
    return "gone" if kib is None else f"{kib / 1024:.1f}"


def report(
    args: argparse.Namespace,
    tally: Tally,
    elapsed: float,
    pids: list[int],
    samples: dict[str, list[int | None]],
    effects: int,
) -> bool:
    """Print the figures; whether the run passed (no failed flow, one effect per flow)."""
    latencies = sorted(tally.latencies)
    print(
        f"soak: {args.clients} clients, {args.seconds:g} s, {args.instances} instances, "
        f"store {args.store}, pause {args.pause_ms} ms per round"
    )
    print(f"completed flows: {tally.completed}")
    print(f"flows/s: {tally.completed / elapsed:.1f}")
    print(f"failed flows: {tally.failed}")
    if tally.errors:
        print(f"errors: {sum(tally.errors.values())}")
        for kind, count in tally.errors.most_common():
            print(f"  {count:6d}  {kind}")
    else:
        print("errors: 0")
    print(
        "flow latency ms: "
        + "  ".join(
            f"{name} {percentile(latencies, q) * 1000:.1f}"
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        )
    )
    print("rss MiB (start / middle / end):")
    for index, pid in enumerate(pids):
        row = " / ".join(mib(samples[moment][index]) for moment in ("start", "middle", "end"))
        print(f"  instance {index + 1} (pid {pid}): {row}")
    matched = effects == tally.completed
    verdict = "match" if matched else "MISMATCH"
    print(f"side effects: {effects} for {tally.completed} completed flows ({verdict})")
    return tally.failed == 0 and matched


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--store", choices=("memory", "redis"), default="memory")
    parser.add_argument("--pause-ms", type=int, default=0, help="sleep in each round")
    parser.add_argument("--quick", action="store_true", help="8 clients for 2 s")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the instances' and haproxy's logs"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds = 8, 2.0
    if args.clients < 1 or args.seconds <= 0 or args.instances < 1:
        parser.error("--clients and --instances must be at least 1, --seconds above 0")
    return args


def terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the run like Ctrl-C, so that the cleanup below runs."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if haproxy_binary() is None:
        print("haproxy is not installed (Debian: apt-get install haproxy)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, terminate)
    workdir = Path(tempfile.mkdtemp(prefix="mrtr-soak-"))
    effects_path = workdir / "effects.log"
    redis: RedisServer | None = None
    cluster: Cluster | None = None
    try:
        env = {
            "MRTR_REQUEST_STATE_KEY": "soak-" + secrets.token_hex(24),
            EFFECTS_VARIABLE: str(effects_path),
        }
        if args.store == "redis":
            redis = RedisServer(workdir)
            env["MRTR_STORE_URL"] = redis.url
        config = write_config(args.instances, workdir / "haproxy.cfg")
        cluster = Cluster.start(TARGET, workdir, env, n=args.instances, config=config)
        tally = Tally()
        started = time.monotonic()
        samples = asyncio.run(run_load(cluster, args.clients, args.seconds, args.pause_ms, tally))
        elapsed = time.monotonic() - started
        effects = len(effects_path.read_text().splitlines()) if effects_path.exists() else 0
        pids = [instance.pid for instance in cluster.instances]
        return 0 if report(args, tally, elapsed, pids, samples, effects) else 1
    except KeyboardInterrupt:
        print("interrupted: stopping everything started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup
        if cluster is not None:
            cluster.stop()
        if redis is not None:
            redis.stop()
        if args.keep_logs:
            print(f"logs: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
