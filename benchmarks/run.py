"""`python benchmarks/run.py`: mrtr against the official `mcp` SDK, side by side, in one run.

Every workload builds both SDKs' fixtures at once, warms each contender up,
sizes its batches to about the same wall time, then alternates their timed
repetitions (rotating who goes first) and reports medians. Everything runs on
uvloop; both SDKs' HTTP servers run under the same uvicorn settings on the
same loop as their clients, and both stdio servers are child processes.

    python benchmarks/run.py                    # full run (about 4.5 min on 2 cores)
    python benchmarks/run.py --json out.json    # also write every number as JSON
    python benchmarks/run.py --quick            # tiny counts: checks that everything runs
    python benchmarks/run.py --only inproc http # a subset of the workloads
    python benchmarks/run.py --only legacy      # legacy (initialize) sessions over HTTP
    python benchmarks/run.py --only xproc xlegacy inspector  # servers in their own processes
    python benchmarks/run.py --profile inproc   # cProfile of our flow, top entries by tottime
    python benchmarks/run.py --profile legacy   # ... of our legacy-session elicitation flow
    python benchmarks/run.py --profile xflow    # our server and client, each its own process

The cross-process workloads (`xproc.py`) run every server in a process of its own and read
its CPU time from /proc; `inspector` drives them with MCP Inspector's CLI `--load` (Node 22
from the conformance suite's cache, npm packages installed under `.cache/bench-node`).

Dependencies: the dev extras plus `benchmarks/requirements.txt` (the pinned
official SDK). When something that file provides is missing, the script installs
that file, and only that file, with pip, unless `--no-install` is given.

The heap built before timing (both SDKs, their servers and clients) is frozen
out of the garbage collector's reach (`--no-gc-freeze` to keep it in): see
`harness.frozen_heap` and benchmarks/RESULTS.md for why and what it changes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import importlib.metadata
import importlib.util
import io
import itertools
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "benchmarks" / "requirements.txt"
# Run by path, so make the repository root importable for `benchmarks.*`.
sys.path.insert(0, str(ROOT))

IN_THREAD = ("inproc", "http", "stdio", "plain", "legacy", "seal", "growth", "concurrency")
CROSS_PROCESS = ("xproc", "xlegacy", "inspector")
"""Servers in their own processes (`benchmarks/xproc.py`): 2026-07-28 clients, 2025-11-25
clients, and MCP Inspector's `--load` as an external load generator."""
WORKLOADS = IN_THREAD + CROSS_PROCESS


#: Modules the benchmark needs beyond `mrtr` itself; all come from the dev extras or
#: `benchmarks/requirements.txt`.
_NEEDED = ("mcp", "httpx2", "httpx", "aiohttp", "uvicorn", "uvloop", "httptools")
_PINNED_MCP = "2.3.0"


def ensure_requirements(allow_install: bool) -> None:
    """Install `benchmarks/requirements.txt` when something it provides is missing (and
    allowed); warn when the official SDK is not the pinned version."""
    missing = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        hint = f"pip install -r {REQUIREMENTS.relative_to(ROOT)}"
        if not allow_install:
            raise SystemExit(f"missing {', '.join(missing)}: {hint}")
        print(f"missing {', '.join(missing)}: {hint}", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)],
            check=True,
        )
        importlib.invalidate_caches()
    version = _version("mcp")
    if version != _PINNED_MCP:
        print(
            f"warning: mcp {version} is installed, the comparison is pinned to {_PINNED_MCP}",
            file=sys.stderr,
        )


# --- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How long and how often each contender is timed."""

    batch_seconds: float = 0.1
    """Target wall time of one timed batch (the op count is calibrated per contender)."""
    reps: int = 9
    """Timed batches per contender, interleaved with the other contenders' batches."""
    warmup_seconds: float = 0.1
    """Warm-up (and calibration) time per contender before timing."""
    min_warmup_ops: int = 3
    clients: int = 32
    """Concurrent clients per SDK in the concurrency workload."""
    concurrency_seconds: float = 9.0
    """Wall time each contender runs under concurrency, split into alternating segments."""
    concurrency_segments: int = 3
    growth_ks: tuple[int, ...] = tuple(range(1, 11))
    gc_freeze: bool = True
    """Freeze the heap built before timing (see `harness.frozen_heap`)."""


FULL = Settings()
QUICK = Settings(
    batch_seconds=0.002,
    reps=1,
    warmup_seconds=0.0,
    min_warmup_ops=1,
    clients=4,
    concurrency_seconds=0.2,
    concurrency_segments=1,
    growth_ks=(1, 2, 10),
)


# --- results ---------------------------------------------------------------------------------


@dataclass
class Workload:
    """One workload's numbers for both SDKs (and any reference point), as written to JSON."""

    title: str
    unit: str
    official: dict[str, Any] = field(default_factory=dict)
    ours: dict[str, Any] = field(default_factory=dict)
    reference: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _summary(sample: Any, batch: int) -> dict[str, Any]:
    out: dict[str, Any] = sample.summary()
    out["batch"] = batch
    out["ops_per_s"] = 1.0 / out["median_s"] if out["median_s"] > 0 else math.nan
    return out


async def timed(
    contenders: Mapping[str, Callable[[], Awaitable[object]]], s: Settings
) -> dict[str, dict[str, Any]]:
    """Warm up and calibrate each contender, then time them alternately; summaries by name."""
    from benchmarks import harness

    with harness.frozen_heap(s.gc_freeze):
        sizes = {
            name: await harness.calibrate(
                op,
                batch_seconds=s.batch_seconds,
                warmup_seconds=s.warmup_seconds,
                min_ops=s.min_warmup_ops,
            )
            for name, op in contenders.items()
        }
        samples = await harness.alternate(contenders, n=sizes, reps=s.reps, warmup=0)
    return {name: _summary(samples[name], sizes[name]) for name in contenders}


def timed_sync(
    contenders: Mapping[str, Callable[[], object]], s: Settings
) -> dict[str, dict[str, Any]]:
    """`timed` for synchronous ops."""
    from benchmarks import harness

    with harness.frozen_heap(s.gc_freeze):
        sizes = {
            name: harness.calibrate_sync(
                op,
                batch_seconds=s.batch_seconds,
                warmup_seconds=s.warmup_seconds,
                min_ops=s.min_warmup_ops,
            )
            for name, op in contenders.items()
        }
        samples = harness.alternate_sync(contenders, n=sizes, reps=s.reps, warmup=0)
    return {name: _summary(samples[name], sizes[name]) for name in contenders}


def _split(results: Mapping[str, Any], workload: Workload) -> Workload:
    """File `official/x`, `ours/x` and `reference/x` results under their side."""
    for name, value in results.items():
        side, _, variant = name.partition("/")
        getattr(workload, side)[variant] = value
    return workload


# --- workloads -------------------------------------------------------------------------------


async def run_inproc(s: Settings) -> dict[str, Workload]:
    from benchmarks import official, ours, tool_calls

    async with AsyncExitStack() as stack:
        mcp = await stack.enter_async_context(official.inproc_client("mcpserver"))
        low = await stack.enter_async_context(official.inproc_client("lowlevel"))
        our = await stack.enter_async_context(ours.inproc_client())
        results = await timed(
            {
                "official/mcpserver": partial(tool_calls.mrtr_flow_once, mcp),
                "official/lowlevel": partial(tool_calls.mrtr_flow_once, low),
                "ours/mrtr": partial(tool_calls.mrtr_flow_once, our),
            },
            s,
        )
        plain = await timed(
            {
                "official/mcpserver": partial(tool_calls.plain_call_once, mcp),
                "official/mcpserver_sync": partial(tool_calls.plain_sync_call_once, mcp),
                "ours/mrtr": partial(tool_calls.plain_call_once, our),
                "ours/mrtr_sync": partial(tool_calls.plain_sync_call_once, our),
            },
            s,
        )
    plain_workload = Workload(
        "In-process plain tools/call: an async tool, and the same as a sync `def` tool",
        "s/call",
        notes=[
            "the sync form runs in a worker thread in both SDKs (ours: ServerOptions.sync_workers; "
            "MCPServer: anyio.to_thread)",
        ],
    )
    workload = Workload(
        "In-process MRTR flow (one elicitation, two rounds)",
        "s/flow",
        notes=[
            "official: Client(server), direct in-process dispatch; MCPServer seals its state, "
            "the low-level form does not",
            "ours: Client.in_memory(server), JSON-encoded and decoded both ways, state sealed",
        ],
    )
    return {
        "inproc_mrtr_flow": _split(results, workload),
        "inproc_plain_call": _split(plain, plain_workload),
    }


async def run_http(s: Settings, which: Sequence[str]) -> dict[str, Workload]:
    """The HTTP MRTR flow with its two-POST floor, and the plain tools/call, on shared servers."""
    from benchmarks import official, ours, tool_calls

    out: dict[str, Workload] = {}
    async with AsyncExitStack() as stack:
        clients: dict[str, Any] = {}
        for form in official.FORMS:
            url = await stack.enter_async_context(official.http_server(form))
            clients[f"official/{form}"] = await stack.enter_async_context(official.http_client(url))
        url = await stack.enter_async_context(ours.http_server())
        clients["ours/mrtr"] = await stack.enter_async_context(ours.http_client(url))
        if "http" in which:
            floor_url = await stack.enter_async_context(official.floor_server())
            floors = {
                "reference/aiohttp_two_posts": await stack.enter_async_context(
                    official.aiohttp_floor(floor_url)
                ),
                "reference/httpx2_two_posts": await stack.enter_async_context(
                    official.httpx2_floor(floor_url)
                ),
            }
            flows = {
                name: partial(tool_calls.mrtr_flow_once, client) for name, client in clients.items()
            }
            results = await timed({**flows, **floors}, s)
            out["http_mrtr_flow"] = _split(
                results,
                Workload(
                    "Streamable HTTP MRTR flow on loopback (two POSTs)",
                    "s/flow",
                    notes=[
                        "same uvicorn settings (httptools, uvloop) for every server, on the "
                        "client's loop; official servers answer with JSON (json_response=True)",
                        "reference: two keep-alive POSTs to a bare ASGI app on the same uvicorn; "
                        "aiohttp is our client's library, httpx2 the official client's",
                    ],
                ),
            )
        if "plain" in which:
            calls = {
                name: partial(tool_calls.plain_call_once, client)
                for name, client in clients.items()
            }
            results = await timed(calls, s)
            out["http_plain_call"] = _split(
                results,
                Workload("Plain tools/call over Streamable HTTP (no MRTR round)", "s/call"),
            )
    return out


async def run_legacy(s: Settings) -> dict[str, Workload]:
    """Legacy (`initialize`-based) sessions over Streamable HTTP: a plain tools/call, and a
    call whose tool asks one question live, answered by the client's elicitation callback."""
    from benchmarks import official, ours, tool_calls

    async with AsyncExitStack() as stack:
        plain: dict[str, Callable[[], Awaitable[object]]] = {}
        live: dict[str, Callable[[], Awaitable[object]]] = {}
        for form in official.FORMS:
            # A legacy question needs a stream to travel on: in JSON-response mode the official
            # server refuses to send one, so the elicitation flow gets its SSE-mode server and
            # the plain call the cheaper JSON mode, as in the other HTTP workloads.
            json_url = await stack.enter_async_context(official.http_server(form))
            sse_url = await stack.enter_async_context(
                official.http_server(form, json_response=False)
            )
            json_client = await stack.enter_async_context(official.legacy_http_client(json_url))
            sse_client = await stack.enter_async_context(official.legacy_http_client(sse_url))
            plain[f"official/{form}"] = partial(tool_calls.plain_call_once, json_client)
            live[f"official/{form}"] = partial(tool_calls.live_flow_once, sse_client)
        url = await stack.enter_async_context(ours.http_server())
        our = await stack.enter_async_context(ours.legacy_http_client(url))
        plain["ours/mrtr"] = partial(tool_calls.plain_call_once, our)
        live["ours/mrtr"] = partial(tool_calls.live_flow_once, our)
        plain_results = await timed(plain, s)
        live_results = await timed(live, s)
    setup = (
        "each client opens its session (initialize, notifications/initialized, tools/list) "
        "before timing and keeps it; the same uvicorn settings for every server"
    )
    return {
        "legacy_plain_call": _split(
            plain_results,
            Workload(
                "Legacy session: plain tools/call over Streamable HTTP",
                "s/call",
                notes=[
                    setup,
                    "official: Client(url, mode='legacy') against the stateful server in "
                    "JSON-response mode; ours: Client.http(url, protocol='legacy') against "
                    "asgi_app(), which answers JSON",
                ],
            ),
        ),
        "legacy_elicit_flow": _split(
            live_results,
            Workload(
                "Legacy session: tools/call asking one question live over Streamable HTTP",
                "s/flow",
                notes=[
                    setup,
                    "one POST whose SSE stream carries elicitation/create, a second POST with "
                    "the answer, then the result on the first stream",
                    "official: MCPServer awaits ctx.elicit, the low-level form "
                    "ctx.session.elicit_form, on the stateful server in SSE mode (JSON mode "
                    "cannot send the question); ours: the same `await ctx.elicit` handler as "
                    "the MRTR flow",
                ],
            ),
        ),
    }


async def run_stdio(s: Settings) -> dict[str, Workload]:
    from benchmarks import official, ours, tool_calls

    async with AsyncExitStack() as stack:
        contenders: dict[str, Callable[[], Awaitable[object]]] = {}
        for form in official.FORMS:
            client = await stack.enter_async_context(official.stdio_client(form))
            contenders[f"official/{form}"] = partial(tool_calls.mrtr_flow_once, client)
        our = await stack.enter_async_context(ours.stdio_client())
        contenders["ours/mrtr"] = partial(tool_calls.mrtr_flow_once, our)
        results = await timed(contenders, s)
    workload = Workload(
        "stdio MRTR flow (server in a child process)",
        "s/flow",
        notes=["every child runs on uvloop, like the parent"],
    )
    return {"stdio_mrtr_flow": _split(results, workload)}


async def run_seal(s: Settings) -> dict[str, Workload]:
    from benchmarks import official, ours

    same_payload = official.one_question_state().encode()
    results = timed_sync(
        {
            "official/codec_seal_unseal": official.codec_seal_verify_op(),
            "ours/mint_verify": ours.seal_verify_op(same_payload),
        },
        s,
    )
    seal = _split(
        results,
        Workload(
            "Seal + verify one request state (same plaintext for both)",
            "s/op",
            notes=[
                "official: RequestStateSecurity.codec seal then unseal (AES-256-GCM, no claims)",
                "ours: mint_request_state then verify_request_state (AES-256-GCM, plus the "
                "keyed binding tag over method, tool, arguments and audience, and the round)",
            ],
        ),
    )

    ours_boundary = ours.boundary_op(ours.one_question_payload())

    async def ours_boundary_async() -> object:
        # Timed as a coroutine, like the official middleware, so both pay the same await.
        return ours_boundary()

    results = await timed(
        {
            "official/boundary": await official.boundary_seal_verify_op(),
            "ours/boundary": ours_boundary_async,
            "ours/handle_request_round": await ours.full_round_op(),
        },
        s,
    )
    boundary = _split(
        results,
        Workload(
            "Server-side state handling of one MRTR round (verify inbound, seal outbound)",
            "s/round",
            notes=[
                "official: one pass through RequestStateBoundary (unseal, check claims, seal a "
                "fresh claims envelope) around a handler that returns at once",
                "ours/boundary: bind, verify with expiry, decode the round state, encode, mint",
                "ours/handle_request_round: the whole Server.handle_request of round 2 of ask2 "
                "(verify, take the answer, replay the handler, ask, seal): more work than the "
                "official boundary pass",
            ],
        ),
    )
    return {"seal_verify": seal, "state_round": boundary}


async def run_growth(s: Settings) -> dict[str, Workload]:
    from benchmarks import official, ours, tool_calls

    ks = s.growth_ks
    times: dict[str, dict[str, Any]] = {}
    sizes: dict[str, list[int]] = {}
    async with AsyncExitStack() as stack:
        mcp = await stack.enter_async_context(official.inproc_client("mcpserver"))
        low = await stack.enter_async_context(official.inproc_client("lowlevel"))
        our = await stack.enter_async_context(ours.inproc_client())
        # Every (k, contender) pair in one alternation, so that drift during the run lands
        # on all k alike and the k=10 / k=1 ratio compares batches timed side by side.
        contenders: dict[str, Callable[[], Awaitable[object]]] = {}
        for k in ks:
            contenders[f"official/mcpserver@{k}"] = partial(tool_calls.growth_flow_once, mcp, k)
            contenders[f"official/lowlevel@{k}"] = partial(tool_calls.growth_flow_once, low, k)
            contenders[f"ours/mrtr@{k}"] = partial(tool_calls.growth_flow_once, our, k)
        results = await timed(contenders, s)
        for key, summary in results.items():
            name, _, k_text = key.partition("@")
            times.setdefault(name, {})[f"k={k_text}"] = summary
        k_max = max(ks)
        sizes["official/mcpserver"] = await official.growth_state_sizes(mcp, k_max)
        sizes["official/lowlevel"] = await official.growth_state_sizes(low, k_max)
        sizes["ours/mrtr"] = await ours.growth_state_sizes(our, k_max)
    workload = Workload(
        f"Growth: k = {', '.join(map(str, ks))} questions asked one after another "
        "(k+1 rounds, in-process)",
        "s/flow",
        notes=[
            f"state_chars: requestState length after each input-required round of ask{max(ks)} "
            "(round r holds r-1 answers)",
            "official low-level: hand-rolled, unsealed state (a JSON list of booleans)",
        ],
    )
    for name, per_k in times.items():
        side, _, variant = name.partition("/")
        getattr(workload, side)[variant] = {"flows": per_k, "state_chars": sizes[name]}
    return {"growth": workload}


async def run_concurrency(s: Settings) -> dict[str, Workload]:
    from benchmarks import harness, official, ours, tool_calls

    segment = s.concurrency_seconds / s.concurrency_segments
    async with AsyncExitStack() as stack:
        fleets: dict[str, list[Callable[[], Awaitable[object]]]] = {}
        for form in official.FORMS:
            url = await stack.enter_async_context(official.http_server(form))
            fleets[f"official/{form}"] = [
                partial(
                    tool_calls.mrtr_flow_once,
                    await stack.enter_async_context(official.http_client(url)),
                )
                for _ in range(s.clients)
            ]
        url = await stack.enter_async_context(ours.http_server())
        fleets["ours/mrtr"] = [
            partial(
                tool_calls.mrtr_flow_once, await stack.enter_async_context(ours.http_client(url))
            )
            for _ in range(s.clients)
        ]
        for ops in fleets.values():  # warm every connection and code path up
            await asyncio.gather(*(op() for op in ops))
        names = list(fleets)
        runs: dict[str, list[Any]] = {name: [] for name in names}
        latencies: dict[str, list[float]] = {name: [] for name in names}
        with harness.frozen_heap(s.gc_freeze):
            for seg in range(s.concurrency_segments):
                shift = seg % len(names)
                for name in names[shift:] + names[:shift]:
                    runs[name].append(
                        await harness.run_concurrent(
                            fleets[name], duration=segment, latencies_out=latencies[name]
                        )
                    )
    results: dict[str, Any] = {}
    for name in names:
        done = runs[name]
        elapsed = sum(r.duration_s for r in done)
        flows = sum(r.ops for r in done)
        results[name] = {
            "clients": s.clients,
            "duration_s": elapsed,
            "flows": flows,
            "errors": sum(r.errors for r in done),
            "flows_per_s": flows / elapsed if elapsed > 0 else math.nan,
            "flows_per_s_segments": [r.ops_per_s for r in done],
            "p50_s": harness.percentile(latencies[name], 50),
            "p99_s": harness.percentile(latencies[name], 99),
        }
    workload = Workload(
        f"Throughput: {s.clients} concurrent clients running HTTP MRTR flows",
        "flows/s",
        notes=[
            f"each SDK runs {s.concurrency_seconds:g} s in {s.concurrency_segments} alternating "
            "segments; latencies pooled across segments",
            "server and clients share one uvloop loop (one core for the SDK, as in the other "
            "HTTP workloads)",
        ],
    )
    return {"concurrency": _split(results, workload)}


# --- cross-process workloads (servers in their own processes) -------------------------------


def xsettings(s: Settings) -> Any:
    """The cross-process sizes matching `s` (`--quick` shrinks both)."""
    from benchmarks import xproc

    x = xproc.QUICK if s is QUICK or s.reps == 1 else xproc.FULL
    return replace(x, gc_freeze=s.gc_freeze, reps=max(x.reps, s.reps), clients=s.clients)


def _xworkloads(
    prefix: str, results: Mapping[str, Mapping[str, Any]], titles: Mapping[str, tuple[str, str]]
) -> dict[str, Workload]:
    return {
        f"{prefix}_{key}": _split(results[key], Workload(*titles[key]))
        for key in titles
        if key in results
    }


async def run_xproc(x: Any) -> dict[str, Workload]:
    from benchmarks import xproc

    results = await xproc.run_modern(x)
    return _xworkloads(
        "xproc",
        results,
        {
            "flow_latency": ("Cross-process HTTP: two-round MRTR flow, one client", "s/flow"),
            "plain_latency": ("Cross-process HTTP: plain tools/call, one client", "s/call"),
            "plain_cpu": ("Cross-process HTTP: server CPU per plain call, fixed rate", "s/call"),
            "flow_cpu": ("Cross-process HTTP: server CPU per MRTR flow, fixed rate", "s/flow"),
            "concurrency": ("Cross-process HTTP: concurrent clients running flows", "flows/s"),
        },
    )


async def run_xlegacy(x: Any) -> dict[str, Workload]:
    from benchmarks import xproc

    results = await xproc.run_legacy(x)
    return _xworkloads(
        "xlegacy",
        results,
        {
            "plain_latency": ("Cross-process legacy session: plain tools/call", "s/call"),
            "live_latency": ("Cross-process legacy session: one live question", "s/flow"),
            "plain_cpu": ("Cross-process legacy: server CPU per plain call, fixed rate", "s/call"),
            "live_cpu": ("Cross-process legacy: server CPU per live flow, fixed rate", "s/flow"),
            "concurrency": ("Cross-process legacy: concurrent clients, live flows", "flows/s"),
        },
    )


async def run_inspector(x: Any) -> dict[str, Workload]:
    from benchmarks import xproc

    results = await xproc.run_inspector(x)
    names = {"ours": "ours/mrtr", "mcpserver": "official/mcpserver", "ts": "reference/ts_v2"}
    return {
        f"inspector_{era}": _split(
            {names[k]: v for k, v in per_server.items()},
            Workload(
                f"MCP Inspector CLI --load, {era} era: tools/call add(2, 3)",
                "requests/s",
                notes=[
                    "@modelcontextprotocol/inspector 2.12.0 (Node 22), one process per run",
                    "reference: @modelcontextprotocol/server 2.4.0 createMcpHandler on "
                    "@modelcontextprotocol/node 2.1.2 toNodeHandler (benchmarks/ts_server.mjs)",
                ],
            ),
        )
        for era, per_server in results.items()
    }


# --- table and targets -----------------------------------------------------------------------


def _median(w: Workload, side: str, variant: str) -> float | None:
    entry = getattr(w, side).get(variant)
    return None if entry is None else float(entry["median_s"])


def build_rows(results: Mapping[str, Workload]) -> list[Any]:
    from benchmarks.harness import Row

    rows: list[Row] = []

    def flow_rows(key: str, label: str) -> None:
        w = results.get(key)
        if w is None:
            return
        for form, name in (("mcpserver", "MCPServer"), ("lowlevel", "low-level")):
            rows.append(
                Row(f"{label} vs {name}", _median(w, "official", form), _median(w, "ours", "mrtr"))
            )

    flow_rows("inproc_mrtr_flow", "in-process MRTR flow")
    if "inproc_plain_call" in results:
        w = results["inproc_plain_call"]
        for variant, label in (("", "async tool"), ("_sync", "sync tool in a thread")):
            rows.append(
                Row(
                    f"in-process plain call, {label} vs MCPServer",
                    _median(w, "official", "mcpserver" + variant),
                    _median(w, "ours", "mrtr" + variant),
                )
            )
    flow_rows("http_mrtr_flow", "HTTP MRTR flow")
    if "http_mrtr_flow" in results:
        w = results["http_mrtr_flow"]
        rows.append(
            Row(
                "HTTP floor, 2 bare POSTs: httpx2 | aiohttp",
                _median(w, "reference", "httpx2_two_posts"),
                _median(w, "reference", "aiohttp_two_posts"),
            )
        )
    flow_rows("stdio_mrtr_flow", "stdio MRTR flow")
    flow_rows("http_plain_call", "HTTP plain tools/call")
    flow_rows("legacy_plain_call", "legacy HTTP plain tools/call")
    flow_rows("legacy_elicit_flow", "legacy HTTP elicitation flow")
    if "seal_verify" in results:
        w = results["seal_verify"]
        off = _median(w, "official", "codec_seal_unseal")
        our = _median(w, "ours", "mint_verify")
        rows.append(
            Row(
                "seal + verify a state",
                1 / off if off else None,
                1 / our if our else None,
                unit="ops/s",
                higher_is_better=True,
            )
        )
    if "state_round" in results:
        w = results["state_round"]
        off = _median(w, "official", "boundary")
        rows.append(Row("one round's state handling", off, _median(w, "ours", "boundary")))
        rows.append(
            Row(
                "  ... ours: whole handle_request round",
                off,
                _median(w, "ours", "handle_request_round"),
            )
        )
    if "growth" in results:
        w = results["growth"]
        ks = sorted(int(k[2:]) for k in w.ours["mrtr"]["flows"])
        for k in (ks[0], ks[-1]):
            for form, name in (("mcpserver", "MCPServer"), ("lowlevel", "low-level")):
                rows.append(
                    Row(
                        f"growth k={k} flow vs {name}",
                        w.official[form]["flows"][f"k={k}"]["median_s"],
                        w.ours["mrtr"]["flows"][f"k={k}"]["median_s"],
                    )
                )
        for r in (1, ks[-1]):
            rows.append(
                Row(
                    f"growth state after round {r} vs MCPServer",
                    w.official["mcpserver"]["state_chars"][r - 1],
                    w.ours["mrtr"]["state_chars"][r - 1],
                    unit="chars",
                )
            )
    if "concurrency" in results:
        w = results["concurrency"]
        our = w.ours["mrtr"]
        for form, name in (("mcpserver", "MCPServer"), ("lowlevel", "low-level")):
            off = w.official[form]
            rows.append(
                Row(
                    f"{our['clients']} clients: flows/s vs {name}",
                    off["flows_per_s"],
                    our["flows_per_s"],
                    unit="flows/s",
                    higher_is_better=True,
                )
            )
            rows.append(Row(f"{our['clients']} clients: p50 vs {name}", off["p50_s"], our["p50_s"]))
            rows.append(Row(f"{our['clients']} clients: p99 vs {name}", off["p99_s"], our["p99_s"]))
    return rows


@dataclass
class Target:
    """One of the issue's targets, checked against this run's numbers."""

    target: str
    measured: str
    met: bool


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else math.nan


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares line through (xs, ys): slope, intercept and R^2."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx if sxx else 0.0
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return slope, intercept, 1 - ss_res / ss_tot if ss_tot else 1.0


_STATE_BLOCK_CHARS = 86
"""One 64-byte block of sealed state, in base64url characters (rounded up)."""


def check_targets(results: Mapping[str, Workload]) -> list[Target]:
    out: list[Target] = []

    def speedup(key: str, form: str, at_least: float, label: str) -> None:
        w = results.get(key)
        if w is None:
            return
        r = _ratio(_median(w, "official", form), _median(w, "ours", "mrtr"))
        out.append(Target(f"{label} >= {at_least:g}x faster", f"{r:.2f}x", r >= at_least))

    speedup("inproc_mrtr_flow", "mcpserver", 20, "in-process MRTR flow vs MCPServer")
    speedup("inproc_mrtr_flow", "lowlevel", 3, "in-process MRTR flow vs low-level")
    speedup("http_mrtr_flow", "mcpserver", 10, "HTTP MRTR flow vs MCPServer")
    speedup("http_mrtr_flow", "lowlevel", 10, "HTTP MRTR flow vs low-level")
    if "http_mrtr_flow" in results:
        w = results["http_mrtr_flow"]
        r = _ratio(_median(w, "ours", "mrtr"), _median(w, "reference", "aiohttp_two_posts"))
        out.append(Target("HTTP MRTR flow within 2x of the two-POST floor", f"{r:.2f}x", r <= 2))
    speedup("stdio_mrtr_flow", "mcpserver", 5, "stdio MRTR flow vs MCPServer")
    speedup("stdio_mrtr_flow", "lowlevel", 5, "stdio MRTR flow vs low-level")
    speedup("http_plain_call", "mcpserver", 5, "HTTP plain tools/call vs MCPServer")
    speedup("http_plain_call", "lowlevel", 5, "HTTP plain tools/call vs low-level")
    if "growth" in results:
        w = results["growth"]
        flows = w.ours["mrtr"]["flows"]
        ks = sorted(int(k[2:]) for k in flows)
        lo, hi = ks[0], ks[-1]
        r = flows[f"k={hi}"]["median_s"] / flows[f"k={lo}"]["median_s"]
        out.append(Target(f"growth: time(k={hi}) <= 15x time(k={lo})", f"{r:.2f}x", r <= 15))
        sizes = w.ours["mrtr"]["state_chars"]
        held = list(range(len(sizes)))  # answers held after round r: r - 1
        slope, intercept, r2 = linear_fit(held, sizes)
        steps = [b - a for a, b in itertools.pairwise(sizes)]
        # "Linear in the answers held": the plaintext is padded to whole 64-byte blocks, so
        # an answer adds one block or, when it straddles a boundary, two; the sizes are then
        # a straight line quantised to blocks, and each stays within one block (86 base64
        # chars) of the least-squares line. Growth faster than linear leaves that band.
        worst = max(abs(y - (intercept + slope * x)) for x, y in zip(held, sizes, strict=True))
        linear = len(sizes) > 2 and worst <= _STATE_BLOCK_CHARS
        out.append(
            Target(
                "growth: state size linear in the answers held",
                f"{slope:.1f} chars/answer (fit, R^2 {r2:.2f}, worst residual {worst:.0f} chars "
                f"<= {_STATE_BLOCK_CHARS}); steps {steps}",
                linear,
            )
        )
    if "concurrency" in results:
        w = results["concurrency"]
        our = w.ours["mrtr"]
        for form, name in (("mcpserver", "MCPServer"), ("lowlevel", "low-level")):
            r = _ratio(our["flows_per_s"], w.official[form]["flows_per_s"])
            out.append(Target(f"concurrency: >= 5x {name}'s flows/s", f"{r:.2f}x", r >= 5))
        r = _ratio(our["p99_s"], our["p50_s"])
        out.append(Target("concurrency: ours p99 < 4x p50", f"{r:.2f}x", r < 4))
    from benchmarks import xproc_report

    out += [Target(t.target, t.measured, t.met) for t in xproc_report.check(results)]
    return out


def format_targets(targets: Sequence[Target]) -> str:
    width = max((len(t.target) for t in targets), default=0)
    return "\n".join(
        f"{'met   ' if t.met else 'MISSED'}  {t.target.ljust(width)}  {t.measured}" for t in targets
    )


def format_growth(w: Workload) -> str:
    """Per-k flow times and per-round state sizes, one column per contender."""
    ks = sorted(int(k[2:]) for k in w.ours["mrtr"]["flows"])
    cols = [
        ("official/mcpserver", w.official["mcpserver"]),
        ("official/lowlevel", w.official["lowlevel"]),
        ("ours", w.ours["mrtr"]),
    ]
    lines = ["k   " + "".join(f"{name + ' us':>24}" for name, _ in cols) + f"{'ours k/k=1':>12}"]
    base = w.ours["mrtr"]["flows"][f"k={ks[0]}"]["median_s"]
    for k in ks:
        cells = "".join(f"{c['flows'][f'k={k}']['median_s'] * 1e6:>24,.1f}" for _, c in cols)
        mine = w.ours["mrtr"]["flows"][f"k={k}"]["median_s"]
        lines.append(f"{k:<4}{cells}{mine / base:>11.2f}x")
    lines.append("")
    lines.append(f"requestState chars after each round of ask{ks[-1]}:")
    for name, c in cols:
        lines.append(f"  {name:<20} {c['state_chars']}")
    return "\n".join(lines)


# --- machine ---------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cores_available": affinity,
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "packages": {
            name: _version(name)
            for name in (
                "mrtr",
                "mcp",
                "aiohttp",
                "httpx2",
                "uvicorn",
                "uvloop",
                "httptools",
                "orjson",
                "pydantic",
                "cryptography",
            )
        },
    }


# --- profiling -------------------------------------------------------------------------------


async def _spin(kind: str, seconds: float, profiler: cProfile.Profile | None) -> tuple[int, float]:
    """Run our MRTR flow (`inproc`, `http`) or legacy-session elicitation flow over HTTP
    (`legacy`) back to back for `seconds` (profiled when `profiler` is given, setup and
    warm-up excluded); returns the number of flows and the seconds they took."""
    from benchmarks import harness, ours, tool_calls

    flow = tool_calls.live_flow_once if kind == "legacy" else tool_calls.mrtr_flow_once
    async with AsyncExitStack() as stack:
        if kind == "inproc":
            client = await stack.enter_async_context(ours.inproc_client())
        else:
            url = await stack.enter_async_context(ours.http_server())
            connect = ours.legacy_http_client if kind == "legacy" else ours.http_client
            client = await stack.enter_async_context(connect(url))
        for _ in range(200):
            await flow(client)
        count = 0
        with harness.frozen_heap():
            if profiler is not None:
                profiler.enable()
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline and count < 10_000_000:
                await flow(client)
                count += 1
                if count % 100 == 0:
                    # Let the loop turn now and then, as it does between batches: an in-memory
                    # flow never suspends, and what waits for the next turn (cancelled timer
                    # handles) would otherwise pile up for the whole run and skew the profile.
                    await asyncio.sleep(0)
            elapsed = time.perf_counter() - start
            if profiler is not None:
                profiler.disable()
        return count, elapsed


_PACKAGES = ("mrtr", "aiohttp", "uvicorn", "pydantic", "asyncio", "yarl", "multidict", "benchmarks")


def _package(filename: str) -> str:
    """Which package a profiled function belongs to, from its file name."""
    if filename == "~":
        return "C builtins"
    parts = Path(filename).parts
    for name in _PACKAGES:
        if name in parts:
            return name
    return "other"


def package_shares(stats: pstats.Stats) -> dict[str, float]:
    """Share of profiled time per package; a C builtin's time goes to the package calling it,
    and the asyncio runner's own time is the event loop itself (uvloop's C code: polling,
    socket reads and writes, callbacks), which the profiler cannot see into."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, tt, _ct, callers) in raw.items():
        if filename == "~" and callers:
            for (c_file, _c_line, _c_func), edge in callers.items():
                key = _package(c_file)
                shares[key] = shares.get(key, 0.0) + edge[2]
            continue
        key = _package(filename)
        if key == "asyncio" and func == "run" and filename.endswith("runners.py"):
            key = "event loop (uvloop C, I/O)"
        shares[key] = shares.get(key, 0.0) + tt
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def profile_cross_process(what: str, seconds: float, top: int, dump: str | None) -> None:
    """Profile our server (its own process) and our client (this one) separately while the
    client runs `what` (`plain` calls or MRTR `flow`s) against the server over loopback."""
    import tempfile

    from benchmarks import harness, xproc

    client = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        server_stats = dump or str(Path(tmp) / "server.prof")
        ops, elapsed = harness.run(
            lambda: xproc.profile_cross_process(what, seconds, server_stats, client)
        )
        print(
            f"our cross-process {what}: {ops} ops in {elapsed:.1f} s, "
            f"{elapsed / max(ops, 1) * 1e6:.1f} us/op (both sides under cProfile)"
        )
        for label, stats in (
            ("server process", pstats.Stats(server_stats)),
            ("client process", pstats.Stats(client)),
        ):
            text = io.StringIO()
            stats.stream = text  # type: ignore[attr-defined]
            shares = package_shares(stats)
            print(
                f"\n== {label}: time by package: "
                + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
            )
            stats.strip_dirs().sort_stats("tottime").print_stats(top)
            print(text.getvalue())


def profile(kind: str, seconds: float, top: int, use_cprofile: bool, dump: str | None) -> None:
    """Profile one of our flows (`inproc`, `http` or `legacy`) and print where the time goes."""
    from benchmarks import harness

    if kind in ("xplain", "xflow"):
        profile_cross_process(kind[1:], seconds, top, dump)
        return

    profiler = cProfile.Profile() if use_cprofile else None
    flows, elapsed = harness.run(lambda: _spin(kind, seconds, profiler))
    per_flow = elapsed / flows * 1e6 if flows else math.nan
    label = "legacy-session elicitation flow" if kind == "legacy" else f"{kind} MRTR flow"
    print(f"our {label}: {flows} flows in {elapsed:.1f} s, {per_flow:.1f} us/flow")
    if profiler is None:  # run for an external sampler: py-spy record -- python run.py ...
        return
    if dump:
        profiler.dump_stats(dump)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.strip_dirs()
    shares = package_shares(pstats.Stats(profiler))
    print("(under cProfile, which inflates Python-heavy code; shares are of profiled time)")
    print("time by package: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    stats.sort_stats("tottime").print_stats(top)
    print(text.getvalue())


# --- main ------------------------------------------------------------------------------------


async def run_all(s: Settings, which: Sequence[str]) -> dict[str, Workload]:
    results: dict[str, Workload] = {}
    steps: list[tuple[str, Callable[[], Awaitable[dict[str, Workload]]]]] = []
    if "inproc" in which:
        steps.append(("in-process MRTR flow", lambda: run_inproc(s)))
    if "http" in which or "plain" in which:
        steps.append(("HTTP MRTR flow / plain call", lambda: run_http(s, which)))
    if "stdio" in which:
        steps.append(("stdio MRTR flow", lambda: run_stdio(s)))
    if "legacy" in which:
        steps.append(("legacy sessions over HTTP", lambda: run_legacy(s)))
    if "seal" in which:
        steps.append(("request-state sealing", lambda: run_seal(s)))
    if "growth" in which:
        steps.append(("growth", lambda: run_growth(s)))
    if "concurrency" in which:
        steps.append(("concurrency", lambda: run_concurrency(s)))
    x = xsettings(s)
    if "xproc" in which:
        steps.append(("cross-process HTTP, 2026-07-28 clients", lambda: run_xproc(x)))
    if "xlegacy" in which:
        steps.append(("cross-process HTTP, 2025-11-25 clients", lambda: run_xlegacy(x)))
    if "inspector" in which:
        steps.append(("MCP Inspector --load", lambda: run_inspector(x)))
    for i, (label, step) in enumerate(steps, 1):
        started = time.perf_counter()
        print(f"[{i}/{len(steps)}] {label} ...", end="", file=sys.stderr, flush=True)
        results.update(await step())
        print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return results


def _load(avg: Sequence[float] | None) -> str:
    return "?" if avg is None else " ".join(f"{x:.2f}" for x in avg)


def report(results: Mapping[str, Workload], info: Mapping[str, Any], s: Settings) -> str:
    from benchmarks.harness import format_table

    lines = [
        f"mrtr vs mcp {info['packages'].get('mcp')}  |  {info['date']}  |  "
        f"{info['cores']} cores ({info['cores_available']} available), {info['cpu']}  |  "
        f"Python {info['python']}  |  load avg {_load(info.get('loadavg_start'))} -> "
        f"{_load(info.get('loadavg_end'))}",
        f"medians of {s.reps} alternating batches of ~{s.batch_seconds * 1e3:g} ms per contender; "
        f"uvloop everywhere; heap built before timing {'frozen' if s.gc_freeze else 'not frozen'}",
        *(
            ["QUICK MODE: one tiny batch per contender; the numbers only show that it runs"]
            if s is QUICK or s.reps == 1
            else []
        ),
        "",
        format_table(build_rows(results)),
        "ratio = official/ours for times and sizes, ours/official for rates: above 1 means ours "
        "is better. Floor row: two POSTs to a bare ASGI app, with httpx2 (the official client's "
        "library) | aiohttp (ours)",
    ]
    if "growth" in results:
        lines += ["", format_growth(results["growth"])]
    if "concurrency" in results:
        w = results["concurrency"]
        lines.append("")
        for side, variants in (("official", w.official), ("ours", w.ours)):
            for variant, r in variants.items():
                segments = [round(x) for x in r["flows_per_s_segments"]]
                lines.append(
                    f"concurrency {side}/{variant}: {r['flows']} flows in {r['duration_s']:.1f} s, "
                    f"{r['errors']} errors, flows/s per segment {segments}"
                )
    from benchmarks import xproc_report

    for block in (
        xproc_report.format_modern(results),
        xproc_report.format_legacy(results),
        xproc_report.format_inspector(results),
    ):
        if block:
            lines += ["", block]
    targets = check_targets(results)
    if targets:
        lines += ["", "targets:", format_targets(targets)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    parser.add_argument("--quick", action="store_true", help="tiny counts (seconds, not minutes)")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, help="run only these workloads")
    parser.add_argument("--reps", type=int, help="timed batches per contender")
    parser.add_argument("--batch-ms", type=float, help="target wall time of one batch")
    parser.add_argument("--clients", type=int, help="concurrent clients per SDK")
    parser.add_argument("--concurrency-seconds", type=float, help="run time per SDK")
    parser.add_argument("--no-install", action="store_true", help="never pip install anything")
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the heap built before timing to the collector (see harness.frozen_heap)",
    )
    parser.add_argument(
        "--profile",
        choices=("inproc", "http", "legacy", "xplain", "xflow"),
        help="profile one of our flows (legacy: the legacy-session elicitation flow over HTTP; "
        "xplain / xflow: plain calls / MRTR flows with the server in its own process, each "
        "side profiled separately) instead of comparing",
    )
    parser.add_argument("--profile-seconds", type=float, default=5.0)
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-dump", metavar="PATH", help="write the cProfile stats here")
    parser.add_argument(
        "--no-cprofile", action="store_true", help="with --profile: just run (for py-spy)"
    )
    args = parser.parse_args(argv)

    if args.profile:
        profile(
            args.profile,
            args.profile_seconds,
            args.profile_top,
            not args.no_cprofile,
            args.profile_dump,
        )
        return 0

    ensure_requirements(not args.no_install)
    from benchmarks import harness

    s = QUICK if args.quick else FULL
    if args.reps:
        s = replace(s, reps=args.reps)
    if args.batch_ms:
        s = replace(s, batch_seconds=args.batch_ms / 1e3)
    if args.clients:
        s = replace(s, clients=args.clients)
    if args.concurrency_seconds:
        s = replace(s, concurrency_seconds=args.concurrency_seconds)
    if args.no_gc_freeze:
        s = replace(s, gc_freeze=False)
    which = tuple(args.only or WORKLOADS)
    if "inspector" in which:
        from benchmarks import xproc

        xproc.ensure_inspector(not args.no_install)

    info = machine()
    started = time.perf_counter()
    results = harness.run(lambda: run_all(s, which))
    info["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    info["wall_s"] = round(time.perf_counter() - started, 1)
    print(report(results, info, s))
    if args.json:
        rows = build_rows(results)
        harness.dump_json(
            args.json,
            {
                "machine": info,
                "settings": asdict(s),
                "workloads": {key: asdict(w) for key, w in results.items()},
                "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
                "targets": [asdict(t) for t in check_targets(results)],
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
