"""What a microsecond of our own code costs a deployed server: `python benchmarks/deployed_cost.py`.

The cross-process rows show ours spending more server CPU per request over the bare-ASGI floor
than our whole ASGI app takes in a warm tight loop. This script measures that conversion. Three
servers run in their own processes under the same uvicorn settings (`xproc_server.py`) and get
the same paced load of bare keep-alive POSTs (4 clients, 200 requests/s, alternating segments):

* `floor`: the bare ASGI app;
* `floor-spin`: the floor that first runs a pure-Python loop (`spin`, sized here to take about
  `--spin-us` in a tight loop);
* `floor-ours`: the floor that first runs our ASGI app on one plain `tools/call` against
  in-memory receive/send (`ours_in_memory`): the code of a real request, without its bytes.

Each one's extra server CPU per request over the floor is divided by the same work's tight-loop
time, measured in this process: the factor by which a microsecond saved in a tight loop counts
when deployed.

Two more servers get the same load, every POST a real 2026-07-28 `tools/call` of `add` with the
headers our client sends (`Mcp-Method`, `Mcp-Name`, `MCP-Protocol-Version`):

* `floor-mcp`: the least JSON-RPC work that call needs, with no checks
  (`official.floor_mcp_app`);
* `ours`: our server as `mrtr serve` runs it.

Their ratios to the floor say how much of a target set against the floor is left for the MCP
work a server must do beyond the least (validation, the dispatcher, the engine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPIN_ENV = "MRTR_BENCH_SPIN"
"""Iterations of `spin` the `floor-spin` server runs per request."""

_CALL = (
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":2,'
    b'"b":3},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    b'"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"},'
    b'"io.modelcontextprotocol/clientCapabilities":{}}}}'
)
_HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"content-type", b"application/json"),
    (b"accept", b"application/json, text/event-stream"),
    (b"mcp-method", b"tools/call"),
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"mcp-name", b"add"),
    (b"content-length", b"%d" % len(_CALL)),
]


def spin(n: int) -> int:
    """Pure-Python work: `n` additions."""
    total = 0
    for i in range(n):
        total += i
    return total


async def ours_in_memory() -> Callable[[], Awaitable[None]]:
    """One plain `tools/call` through our ASGI app (lifespan started) with in-memory
    receive/send; raises if the answer is not the tool's result."""
    from benchmarks import ours

    app = ours.build_server().asgi_app()
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    events.put_nowait({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def lifespan_send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    lifespan = asyncio.ensure_future(app({"type": "lifespan"}, events.get, lifespan_send))
    await started.wait()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": _HEADERS,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    request = {"type": "http.request", "body": _CALL, "more_body": False}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return request

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def once() -> None:
        sent.clear()
        await app(dict(scope), receive, send)
        if b'"text":"5"' not in sent[-1].get("body", b""):
            raise AssertionError(f"unexpected answer: {sent!r}")

    once.lifespan = lifespan  # type: ignore[attr-defined]  # kept alive with the app
    return once


def _tight(op: Callable[[], Any], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            op()
        best = min(best, (time.perf_counter() - started) / n)
    return best


async def _tight_async(op: Callable[[], Awaitable[None]], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            await op()
        best = min(best, (time.perf_counter() - started) / n)
    return best


async def main(args: argparse.Namespace) -> None:
    import aiohttp

    from benchmarks import official, xproc

    # Tight loops first, in this process: the spin size for the wanted time, and our app.
    per_iteration = _tight(lambda: spin(1000), 2000) / 1000
    iterations = max(1, round(args.spin_us * 1e-6 / per_iteration))
    spin_tight = _tight(lambda: spin(iterations), 2000)
    once = await ours_in_memory()
    for _ in range(2000):
        await once()
    ours_tight = await _tight_async(once, 5000)
    os.environ[SPIN_ENV] = str(iterations)
    bare = {"content-type": "application/json", "accept": "application/json"}
    # What our client sends for `add(2, 3)`, byte for byte but the Host and the length.
    call_headers = {
        k.decode(): v.decode() for k, v in _HEADERS if k not in (b"host", b"content-length")
    }
    async with AsyncExitStack() as stack:
        kinds = ("floor", "floor-spin", "floor-ours", "floor-mcp", "ours")
        procs = {k: await stack.enter_async_context(xproc.server_process(k)) for k in kinds}
        fleets = {}
        for kind, proc in procs.items():
            session = await stack.enter_async_context(aiohttp.ClientSession())
            call = kind in ("floor-mcp", "ours")
            body, headers = (_CALL, call_headers) if call else (official.FLOOR_REQUEST, bare)

            async def post(
                url: str = proc.url,
                session: Any = session,
                body: bytes = body,
                headers: dict[str, str] = headers,
                call: bool = call,
            ) -> None:
                async with session.post(url, data=body, headers=headers) as r:
                    if r.status != 200:
                        raise AssertionError(f"{url}: HTTP {r.status}")
                    answer = await r.read()
                    if call and b'"text":"5"' not in answer:
                        raise AssertionError(f"{url}: unexpected answer {answer[:200]!r}")

            fleets[kind] = ([post] * 4, proc.pid)
        loads = await xproc.alternate_loads(
            fleets, seconds=args.seconds, segments=args.segments, rate=args.rate, gc_freeze=True
        )
    floor = loads["floor"]["server_cpu_s"]
    print(
        f"server CPU per request at {args.rate:g} requests/s (4 clients, {args.segments} "
        f"alternating segments of {args.seconds / args.segments:.1f} s); "
        f"load avg {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    rows = [("server", "tight loop, us", "CPU/request, us", "extra, us", "extra / tight")]
    rows.append(("floor", "-", f"{floor * 1e6:.1f}", "-", "-"))
    for kind, tight in (("floor-spin", spin_tight), ("floor-ours", ours_tight)):
        cost = loads[kind]["server_cpu_s"]
        extra = cost - floor
        rows.append(
            (kind, f"{tight * 1e6:.1f}", f"{cost * 1e6:.1f}", f"{extra * 1e6:.1f}",
             f"{extra / tight:.2f}x")
        )  # fmt: skip
    _print_table(rows)
    print()
    print("the same load, each POST our client's tools/call of add(2, 3) with its headers:")
    rows = [("server", "CPU/request, us", "extra, us", "/ floor")]
    for kind in ("floor-mcp", "ours"):
        cost = loads[kind]["server_cpu_s"]
        rows.append(
            (kind, f"{cost * 1e6:.1f}", f"{(cost - floor) * 1e6:.1f}", f"{cost / floor:.2f}x")
        )
    _print_table(rows)
    failed = sum(r["errors"] for r in loads.values())
    if failed:
        raise SystemExit(f"{failed} requests failed")


def _print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spin-us", type=float, default=30.0, help="tight-loop size of spin")
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s per server")
    parser.add_argument("--seconds", type=float, default=9.0, help="per server, all segments")
    parser.add_argument("--segments", type=int, default=3)
    import uvloop

    uvloop.run(main(parser.parse_args()))
