"""Server instructions per request, counted by valgrind: `python benchmarks/instructions.py`.

The timed cross-process rows move with whatever else the machine runs (a busy hour doubled
every server's CPU per request, and ours more than the floor). Instruction counts do not: the
same code given the same requests executes the same instructions. Each server (the
`xproc_server.py` kinds: ours through `mrtr serve`'s own entry, the official `MCPServer`, the
bare-ASGI floor) runs in its own process under `valgrind --tool=callgrind`; its client (each
SDK's own, bare keep-alive POSTs for the floor) warms it up, the counters are zeroed
(`callgrind_control -z`), a fixed number of operations runs, and the counters are dumped
(`callgrind_control -d`). Instructions per operation = the dump's total / operations. One
server process serves every workload in turn (plain calls, then flows), each warmed up and
counted on its own: starting a server under valgrind takes 20-30 s, a count a few seconds.

`floor-mcp` (plain calls only) is the floor app doing the least JSON-RPC work our client's
`tools/call` needs (decode, add, encode our result; no checks), driven by our client with its
headers: what any Python MCP server pays on top of the HTTP floor.

The string-hash seed changes dict and set layouts: with a random seed, counts of the same
code differed by up to 10% from run to run; under a fixed seed they repeat within 1%. So each
server runs under fixed `PYTHONHASHSEED`s (`--seeds`, default 0 1 2) and the table gives their
mean, with the spread between seeds; compare two versions of the code under the same seeds.

What it counts: the user-space instructions of the server process, uvicorn, httptools and
uvloop included; not the kernel's work (the socket calls), which is about the same for every
server, nor cache misses, which make our larger code cost more per instruction deployed than
in a tight loop (`deployed_cost.py`). Needs valgrind (Debian: `apt-get install valgrind`);
under it a server runs about 50x slower, so the default counts take a few minutes.

The regression guard: `--record` writes ours' counts per plain call and per flow (with fewer
operations, 100 and 50) to `benchmarks/instructions.json`, with the Python and package versions
they depend on (`instruction_record.py`); `--check`, a step of `scripts/test.sh`, counts again
as recorded and fails when either grew more than 5% (`--strict`: or when the record does not
apply to this environment). `--constraints` prints the record's packages as pins, which the
test command installs the guard's environment with. `--server-path DIR` counts a server that
imports `mrtr` from DIR/src (another checkout, say the main branch's), driven by this tree's
client.

    python benchmarks/instructions.py                               # the table, every server
    python benchmarks/instructions.py --kinds ours --record         # update the record
    python benchmarks/instructions.py --check                       # the guard (1-2 minutes)
    python benchmarks/instructions.py --constraints > pins.txt      # the record's packages
    python benchmarks/instructions.py --kinds ours --server-path ../main   # an older tree
    python benchmarks/instructions.py --kinds floor-lean floor-mcp-lean ours-lean  # no uvicorn

The `-lean` kinds serve with `lean_http.py`, a measuring stick for the HTTP layer, instead of
uvicorn (RESULTS.md, "What the targets would take").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("floor", "floor-mcp", "ours", "mcpserver")
#: The floor, floor-mcp and ours served by `lean_http.py` instead of uvicorn (not by default).
LEAN_KINDS = ("floor-lean", "floor-mcp-lean", "ours-lean")
WORKLOADS = ("plain", "flow")
STARTUP_SECONDS = 600.0  # importing a server under valgrind takes tens of seconds
_SUMMARY = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def instructions_in(path: Path) -> int:
    """The instruction total of one callgrind output file."""
    found = _SUMMARY.search(path.read_bytes())
    if found is None:
        raise RuntimeError(f"{path}: no instruction total (not a callgrind output file?)")
    return int(found.group(1))


@asynccontextmanager
async def _operation(
    kind: str, url: str, workload: str
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """One operation of `workload` against server `kind`: a plain `tools/call` or a two-round
    MRTR flow with the server's own SDK's client, or the same number of bare POSTs."""
    from benchmarks import official, ours, tool_calls, xproc

    if xproc.base_kind(kind) == "floor":
        async with xproc.floor_client(url, 2 if workload == "flow" else 1) as op:
            yield op
        return
    once: Callable[[Any], Awaitable[None]] = (
        tool_calls.mrtr_flow_once if workload == "flow" else tool_calls.plain_call_once
    )
    connect = official.http_client if kind == "mcpserver" else ours.http_client
    async with connect(url) as client:
        yield lambda: once(client)


async def count(
    kind: str,
    workloads: Sequence[str],
    operations: int,
    warmup: int,
    out_dir: Path,
    seed: int = 0,
    server_path: Path | None = None,
) -> dict[str, float]:
    """Server `kind`'s instructions per operation of each of `workloads` (in that order, one
    server process), under hash seed `seed`; `mrtr` imported from `server_path/src` if given."""
    from benchmarks import xproc

    out = out_dir / f"{kind}.{seed}.callgrind"
    argv = [
        "valgrind",
        "--tool=callgrind",
        # Instrumentation starts with the counted requests (`-i on` below), not at the start:
        # importing the server uninstrumented takes seconds instead of most of a minute.
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(xproc.SERVER_SCRIPT),
        kind,
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=xproc.ROOT,
        env=server_env(seed, server_path),
    )
    assert proc.stdout is not None
    per_op: dict[str, float] = {}
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), STARTUP_SECONDS)
        if not line.startswith(b"READY "):
            raise RuntimeError(f"{kind} server failed to start under valgrind: {line!r}")
        url = f"http://127.0.0.1:{int(line.split()[1])}" + xproc.endpoint_path(kind)
        await asyncio.to_thread(_control, "-i", "on", str(proc.pid))
        # One server for every workload, as starting one under valgrind takes 20-30 s: each
        # is warmed up, then counted between a zeroing and a dump of the counters.
        for part, workload in enumerate(workloads, start=1):
            n = operations if workload == "plain" else max(1, operations // 2)
            async with _operation(kind, url, workload) as op:
                for _ in range(warmup):
                    await op()
                await asyncio.to_thread(_control, "-z", str(proc.pid))
                for _ in range(n):
                    await op()
                await asyncio.to_thread(_control, "-d", str(proc.pid))
            # Each dump asked for is the next numbered part; the end of the run writes the rest.
            per_op[workload] = instructions_in(out.with_name(f"{out.name}.{part}")) / n
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 120)
    return per_op


def server_env(seed: int, server_path: Path | None) -> dict[str, str]:
    """The server process's environment: the hash seed, and `server_path/src` first on the
    import path when counting another tree's `mrtr`."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    if server_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(server_path / "src"), os.environ.get("PYTHONPATH")) if p
        )
    return env


def check_server_path(server_path: Path) -> None:
    """Fail unless a server started with `server_path` imports `mrtr` from its `src`."""
    from benchmarks import xproc

    src = (server_path / "src").resolve()
    if not (src / "mrtr").is_dir():
        raise SystemExit(f"--server-path {server_path}: no {src / 'mrtr'} (a checkout's root?)")
    found = subprocess.run(
        [sys.executable, "-c", "import mrtr; print(mrtr.__file__)"],
        capture_output=True,
        text=True,
        cwd=xproc.ROOT,
        env=server_env(0, server_path),
        check=False,
    )
    origin = Path(found.stdout.strip() or "?").resolve()
    if found.returncode != 0 or not origin.is_relative_to(src):
        raise SystemExit(
            f"--server-path {server_path}: the server would import mrtr from {origin}, not "
            f"{src}: {found.stderr.strip()[-500:]}"
        )


async def count_all(
    kinds: Sequence[str],
    workloads: Sequence[str],
    *,
    operations: int,
    warmup: int,
    seeds: Sequence[int],
    parallel: int,
    server_path: Path | None = None,
) -> dict[tuple[str, str], list[float]]:
    """Each kind's instructions per operation of each workload, one count per seed."""
    slots = asyncio.Semaphore(parallel)
    with tempfile.TemporaryDirectory(prefix="mrtr-callgrind-") as tmp:

        async def one(kind: str, seed: int) -> dict[str, float]:
            # `floor-mcp` answers plain calls only (it has no MRTR).
            plain_only = kind.removesuffix("-lean") == "floor-mcp"
            serves = [w for w in workloads if not plain_only or w == "plain"]
            async with slots:
                return await count(kind, serves, operations, warmup, Path(tmp), seed, server_path)

        runs = [(kind, seed) for kind in kinds for seed in seeds]
        counts = await asyncio.gather(*(one(kind, seed) for kind, seed in runs))
    by_job: dict[tuple[str, str], list[float]] = {}
    for workload in workloads:
        for (kind, _seed), per_op in zip(runs, counts, strict=True):
            if workload in per_op:
                by_job.setdefault((kind, workload), []).append(per_op[workload])
    return by_job


def print_table(
    by_job: dict[tuple[str, str], list[float]],
    kinds: Sequence[str],
    workloads: Sequence[str],
    seeds: Sequence[int],
) -> None:
    per_op = {job: sum(values) / len(values) for job, values in by_job.items()}
    print("server instructions per operation (user space, callgrind; the same for the same code")
    print(f"and hash seed; mean of PYTHONHASHSEED {' '.join(map(str, seeds))})")
    header = ["workload", *kinds]
    if "floor" in kinds and "ours" in kinds:
        header.append("ours/floor")
    if "mcpserver" in kinds and "ours" in kinds:
        header.append("MCPServer/ours")
    rows = [header]
    for workload in workloads:
        row = [workload] + [
            f"{per_op[kind, workload]:,.0f}" if (kind, workload) in per_op else "-"
            for kind in kinds
        ]
        if "ours/floor" in header:
            row.append(f"{per_op['ours', workload] / per_op['floor', workload]:.2f}x")
        if "MCPServer/ours" in header:
            row.append(f"{per_op['mcpserver', workload] / per_op['ours', workload]:.2f}x")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    print("(plain: one tools/call, or one bare POST for the floor; flow: a two-round MRTR flow, "
          "or two bare POSTs;")  # fmt: skip
    print(" floor-mcp: our client's tools/call answered with no checks)")
    if len(seeds) > 1:
        spreads = ", ".join(
            f"{kind} {workload} {(max(v) - min(v)) / min(v):.1%}"
            for (kind, workload), v in by_job.items()
        )
        print(f"spread between seeds (max/min - 1): {spreads}")


def check(args: argparse.Namespace) -> int:
    """The guard: count ours as the record was counted; 1 if it grew past the tolerance."""
    import uvloop

    from benchmarks import instruction_record as rec

    record = rec.load(args.record_file)
    print(f"instruction guard: ours against {args.record_file} ({record['date']})")
    differs = rec.mismatches(record, rec.environment())
    if differs:
        print(
            "  the record does not apply here (" + "; ".join(differs) + "): not compared. "
            f"Record the counts for this environment with `{rec.UPDATE}`"
            + (
                f", or count in one installed with `{CONSTRAINTS}` as constraints"
                if args.strict
                else ""
            )
        )
        return 1 if args.strict else 0
    settings = record["settings"]
    by_job = uvloop.run(
        count_all(
            ["ours"],
            rec.WORKLOADS,
            operations=settings["operations"],
            warmup=settings["warmup"],
            seeds=settings["seeds"],
            parallel=args.parallel,
            server_path=args.server_path,
        )
    )
    print_table(by_job, ["ours"], rec.WORKLOADS, settings["seeds"])
    counted = {w: sum(v) / len(v) for (_kind, w), v in by_job.items()}
    lines, failed = rec.compare(record, counted)
    print("\n".join(lines))
    return 1 if failed else 0


CONSTRAINTS = "python benchmarks/instructions.py --constraints"


def main(args: argparse.Namespace) -> int:
    from benchmarks import instruction_record as rec

    if args.constraints:
        record = rec.load(args.record_file)
        print(
            f"# the packages of {args.record_file.name}, counted on Python "
            f"{rec.python_minor(record)} ({record['environment']['implementation']})"
        )
        print("\n".join(rec.constraints(record)))
        return 0
    if args.strict and not args.check:
        raise SystemExit("--strict goes with --check")
    import uvloop

    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"needs {' and '.join(missing)} (Debian: apt-get install valgrind)")
    if args.server_path is not None:
        check_server_path(args.server_path)
    if args.check:
        return check(args)
    if args.record and ("ours" not in args.kinds or set(rec.WORKLOADS) - set(args.workloads)):
        raise SystemExit(f"--record needs ours with both workloads: {rec.UPDATE}")
    # A record is counted with the guard's smaller sizes, which the check repeats.
    operations = args.operations
    if operations is None:
        operations = rec.GUARD_OPERATIONS if args.record else 400
    warmup = args.warmup
    if warmup is None:
        warmup = rec.GUARD_WARMUP if args.record else 100
    by_job = uvloop.run(
        count_all(
            args.kinds,
            args.workloads,
            operations=operations,
            warmup=warmup,
            seeds=args.seeds,
            parallel=args.parallel,
            server_path=args.server_path,
        )
    )
    print_table(by_job, args.kinds, args.workloads, args.seeds)
    if args.record:
        record = rec.write(
            {w: by_job["ours", w] for w in rec.WORKLOADS},
            operations=operations,
            warmup=warmup,
            seeds=args.seeds,
            path=args.record_file,
        )
        print(f"recorded in {args.record_file}: {record['instructions']}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS + LEAN_KINDS, default=list(KINDS))
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument(
        "--operations", type=int, help="plain calls (flows: half); default 400, 100 to --record"
    )
    parser.add_argument("--warmup", type=int, help="default 100, 30 to --record")
    parser.add_argument("--parallel", type=int, default=2, help="servers counted at once")
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2], help="PYTHONHASHSEEDs, one run each"
    )
    parser.add_argument(
        "--server-path",
        type=Path,
        metavar="DIR",
        help="count the server with mrtr imported from DIR/src (another checkout); the "
        "client stays this one",
    )
    guard = parser.add_mutually_exclusive_group()
    guard.add_argument(
        "--record",
        action="store_true",
        help="write ours' counts (plain and flow) to benchmarks/instructions.json",
    )
    guard.add_argument(
        "--check",
        action="store_true",
        help="count ours as recorded; fail if a figure grew more than 5%% over the record",
    )
    guard.add_argument(
        "--constraints",
        action="store_true",
        help="print the record's packages as pins (name==version), for pip or uv -c",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="with --check: fail, not pass, when the record does not apply to this environment",
    )
    parser.add_argument(
        "--record-file",
        type=Path,
        metavar="PATH",
        default=Path(__file__).with_name("instructions.json"),
        help="the record --record writes and --check reads (default benchmarks/instructions.json)",
    )
    sys.exit(main(parser.parse_args()))
