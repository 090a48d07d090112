"""Server instructions per request, counted by valgrind: `python benchmarks/instructions.py`.

The timed cross-process rows move with whatever else the machine runs (a busy hour doubled
every server's CPU per request, and ours more than the floor). Instruction counts do not: the
same code given the same requests executes the same instructions. Each server (the
`xproc_server.py` kinds: ours through `mrtr serve`'s own entry, the official `MCPServer`, the
bare-ASGI floor) runs in its own process under `valgrind --tool=callgrind`; its client (each
SDK's own, bare keep-alive POSTs for the floor) warms it up, the counters are zeroed
(`callgrind_control -z`), a fixed number of operations runs, and the counters are dumped
(`callgrind_control -d`). Instructions per operation = the dump's total / operations.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("floor", "floor-mcp", "ours", "mcpserver")
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

    if kind == "floor":
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
    kind: str, workload: str, operations: int, warmup: int, out_dir: Path, seed: int = 0
) -> float:
    """Server `kind`'s instructions per operation of `workload`, under hash seed `seed`."""
    from benchmarks import xproc

    out = out_dir / f"{kind}.{workload}.{seed}.callgrind"
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
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), STARTUP_SECONDS)
        if not line.startswith(b"READY "):
            raise RuntimeError(f"{kind} server failed to start under valgrind: {line!r}")
        url = f"http://127.0.0.1:{int(line.split()[1])}" + ("/" if kind == "floor" else "/mcp")
        async with _operation(kind, url, workload) as op:
            await asyncio.to_thread(_control, "-i", "on", str(proc.pid))
            for _ in range(warmup):
                await op()
            await asyncio.to_thread(_control, "-z", str(proc.pid))
            for _ in range(operations):
                await op()
            await asyncio.to_thread(_control, "-d", str(proc.pid))
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 120)
    # The dump asked for is the first numbered part; the end of the run writes the rest.
    return instructions_in(out.with_name(out.name + ".1")) / operations


async def main(args: argparse.Namespace) -> None:
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"needs {' and '.join(missing)} (Debian: apt-get install valgrind)")
    # `floor-mcp` answers plain calls only (it has no MRTR).
    jobs = [
        (kind, workload)
        for workload in args.workloads
        for kind in args.kinds
        if kind != "floor-mcp" or workload == "plain"
    ]
    slots = asyncio.Semaphore(args.parallel)
    with tempfile.TemporaryDirectory(prefix="mrtr-callgrind-") as tmp:

        async def one(kind: str, workload: str, seed: int) -> float:
            operations = args.operations if workload == "plain" else max(1, args.operations // 2)
            async with slots:
                return await count(kind, workload, operations, args.warmup, Path(tmp), seed)

        runs = [(job, seed) for job in jobs for seed in args.seeds]
        counts = await asyncio.gather(*(one(*job, seed) for job, seed in runs))
    by_job: dict[tuple[str, str], list[float]] = {}
    for (job, _seed), value in zip(runs, counts, strict=True):
        by_job.setdefault(job, []).append(value)
    per_op = {job: sum(values) / len(values) for job, values in by_job.items()}
    print("server instructions per operation (user space, callgrind; the same for the same code")
    print(f"and hash seed; mean of PYTHONHASHSEED {' '.join(map(str, args.seeds))})")
    header = ["workload", *args.kinds]
    if "floor" in args.kinds and "ours" in args.kinds:
        header.append("ours/floor")
    if "mcpserver" in args.kinds and "ours" in args.kinds:
        header.append("MCPServer/ours")
    rows = [header]
    for workload in args.workloads:
        row = [workload] + [
            f"{per_op[kind, workload]:,.0f}" if (kind, workload) in per_op else "-"
            for kind in args.kinds
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
    if len(args.seeds) > 1:
        spreads = ", ".join(
            f"{kind} {workload} {(max(v) - min(v)) / min(v):.1%}"
            for (kind, workload), v in by_job.items()
        )
        print(f"spread between seeds (max/min - 1): {spreads}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--operations", type=int, default=400, help="plain calls (flows: half)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=2, help="servers counted at once")
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2], help="PYTHONHASHSEEDs, one run each"
    )
    import uvloop

    uvloop.run(main(parser.parse_args()))
