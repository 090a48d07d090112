"""`python benchmarks/memory_soak.py`: one `mrtr serve` instance over HTTP, its records kept in
memory with a short `request_state_ttl`, running multi-round flows for a fixed time, so that
records expire while it runs: does its memory stay flat once the live set is reached, and
does any request stall?

    python benchmarks/memory_soak.py                       # 8 clients, 180 s, ttl 20 s
    python benchmarks/memory_soak.py --rate 250            # 250 flows a second, steady
    python benchmarks/memory_soak.py --seconds 60 --ttl 10
    python benchmarks/memory_soak.py --quick               # 2 clients for 3 s: checks it runs
    PYTHONPATH=../main/src python benchmarks/memory_soak.py   # another tree's server

Each client is one `Client.http` running the `transfer` tool of
`tests/servers/cluster_server.py` (two questions: three requests a flow) back to back, as
`soak.py` does but against a single instance with no load balancer; with `--rate` the flows
start at that steady rate instead, so that the live set of records is the same all along.
The server's RSS is sampled every second. It prints completed flows, flows/s, flow latency
percentiles and the slowest flow (a stalled event loop shows there), and the RSS at the end
of the warm-up (`--warmup`, default two record lifetimes) and at the end, with its
least-squares slope in between in MB per hour. Exit status 1 on any failed flow.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import STOP_TIMEOUT, call_tool_once, free_port  # noqa: E402
from benchmarks.soak import accept, error_kind, percentile, rss_kib, terminate  # noqa: E402
from mrtr import Client  # noqa: E402
from mrtr.protocol.errors import McpError  # noqa: E402

TARGET = "tests/servers/cluster_server.py:server"
EFFECTS_VARIABLE = "MRTR_TEST_EFFECTS"
REQUEST_TIMEOUT = 30.0  # per HTTP request: far above any round, so only a hang reaches it
START_TIMEOUT = 30.0
DRAIN_GRACE = 30.0  # after the deadline, flows in flight get this long to finish
# Added to the ttl to reach the live set: outcomes are kept a few seconds past the state.
MARGIN = 5.0


@dataclass
class Tally:
    """What the clients saw."""

    completed: int = 0
    failed: int = 0
    flows: list[float] = field(default_factory=list)  # seconds per completed flow
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, error: BaseException) -> None:
        kind = error_kind(error)
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def run_flow(client: Client, flow: str, tally: Tally) -> None:
    """One `transfer` flow: its three requests, the client answering each question."""
    started = time.monotonic()
    try:
        result = await client.call_tool("transfer", {"flow": flow})
    except McpError as error:
        tally.error(error)
        tally.failed += 1
        return
    if result.is_error or (result.structured_content or {}).get("flow") != flow:
        tally.errors["tool error"] = tally.errors.get("tool error", 0) + 1
        tally.failed += 1
        return
    tally.completed += 1
    tally.flows.append(time.monotonic() - started)


async def run_client(
    url: str, stop_at: float, slots: Iterator[tuple[int, float]], tally: Tally
) -> None:
    """Run flows until `stop_at`, each at its slot's time (at once when that has passed)."""
    try:
        async with Client.http(
            url, elicitation_handler=accept, connect_attempts=5, timeout=REQUEST_TIMEOUT
        ) as client:
            while time.monotonic() < stop_at:
                n, at = next(slots)
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                await run_flow(client, f"flow-{n}", tally)
    except Exception as error:  # a client that cannot even open counts, and the rest go on
        tally.error(error)
        tally.failed += 1


async def run_load(
    url: str, pid: int, clients: int, seconds: float, rate: float, tally: Tally
) -> list[tuple[float, int]]:
    """Run the clients for `seconds`, starting `rate` flows a second between them (0: back to
    back); (seconds since start, RSS KiB) once a second."""
    samples: list[tuple[float, int]] = []
    started = time.monotonic()
    stop_at = started + seconds

    async def sample() -> None:
        while True:
            rss = rss_kib(pid)
            if rss is not None:
                samples.append((time.monotonic() - started, rss))
            await asyncio.sleep(1.0)

    # A steady rate keeps the live set steady, whatever else the machine runs.
    slots = ((n, started + n / rate if rate else 0.0) for n in itertools.count())
    sampler = asyncio.create_task(sample())
    tasks = [asyncio.create_task(run_client(url, stop_at, slots, tally)) for _ in range(clients)]
    _done, stuck = await asyncio.wait(tasks, timeout=seconds + DRAIN_GRACE)
    for task in stuck:
        task.cancel()
        tally.errors["client still busy after the grace period"] = len(stuck)
        tally.failed += 1
    sampler.cancel()
    await asyncio.wait([sampler, *stuck])
    return samples


def slope_mb_per_hour(samples: list[tuple[float, int]]) -> float:
    """The least-squares slope of RSS over time, in MB (10^6 bytes) per hour."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (r - mean_r) for t, r in samples)
    return cov / var * 1024 * 3600 / 1e6 if var else 0.0


def report(
    args: argparse.Namespace, pid: int, tally: Tally, samples: list[tuple[float, int]]
) -> None:
    """Print the figures."""
    flows = sorted(tally.flows)
    after = [(t, r) for t, r in samples if t >= args.warmup]
    print(
        f"memory soak: {args.clients} clients, {args.seconds:g} s, 1 instance over HTTP, "
        f"store memory, request_state_ttl {args.ttl:g} s, warm-up {args.warmup:g} s, "
        f"rate {f'{args.rate:g} flows/s' if args.rate else 'unpaced'}"
    )
    print(f"server pid: {pid}")
    print(f"completed flows: {tally.completed} ({tally.completed / args.seconds:.1f}/s)")
    print(f"failed flows: {tally.failed}")
    for kind, count in sorted(tally.errors.items(), key=lambda item: -item[1]):
        print(f"  {count:6d}  {kind}")
    print(
        "flow latency ms: "
        + "  ".join(
            f"{name} {percentile(flows, q) * 1000:.1f}"
            for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))
        )
        + f"  max {(flows[-1] if flows else 0.0) * 1000:.1f}"
    )
    if after:
        print(
            f"rss MiB: {samples[0][1] / 1024:.1f} at start, {after[0][1] / 1024:.1f} after "
            f"warm-up, {after[-1][1] / 1024:.1f} at the end; "
            f"slope after warm-up {slope_mb_per_hour(after):+.1f} MB/h"
        )
    else:
        print("rss: the run ended before its warm-up did")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--ttl", type=float, default=20.0, help="request_state_ttl, seconds")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="flows started per second (0: back to back)"
    )
    parser.add_argument(
        "--warmup", type=float, default=None, help="seconds before the slope (2 lifetimes)"
    )
    parser.add_argument("--quick", action="store_true", help="2 clients for 3 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds = 2, 3.0
    if args.clients < 1 or args.seconds <= 0 or args.ttl <= 0 or args.rate < 0:
        parser.error(
            "--clients must be at least 1, --seconds and --ttl above 0, --rate not negative"
        )
    if args.warmup is None:
        args.warmup = min(2 * (args.ttl + MARGIN), args.seconds / 2)
    return args


def start_server(workdir: Path, ttl: float) -> tuple[subprocess.Popen[bytes], int, int]:
    """`mrtr serve` on a free port: the process, its port and its pid as it reports it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    env.update(
        MRTR_REQUEST_STATE_KEY="soak-" + secrets.token_hex(24),
        MRTR_REQUEST_STATE_TTL=f"{ttl:g}",
        **{EFFECTS_VARIABLE: str(workdir / "effects.log")},
    )
    port = free_port()
    with (workdir / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mrtr", "serve", TARGET,
             "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            log_text = (workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the server exited ({process.returncode}): {log_text}")
        pid = call_tool_once(port, "whoami", timeout=2.0)
        if isinstance(pid, int):
            return process, port, pid
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError("the server did not start in time")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    workdir = Path(tempfile.mkdtemp(prefix="mrtr-memory-soak-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        process, port, pid = start_server(workdir, args.ttl)
        tally = Tally()
        url = f"http://127.0.0.1:{port}/mcp"
        samples = asyncio.run(run_load(url, pid, args.clients, args.seconds, args.rate, tally))
        report(args, pid, tally, samples)
        return 0 if tally.failed == 0 else 1
    except KeyboardInterrupt:
        print("interrupted: stopping the server", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut cleanup
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
