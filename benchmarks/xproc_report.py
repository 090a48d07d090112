"""Tables and targets for the cross-process workloads (`xproc.py`).

Each function takes the runner's `Workload` objects (anything with `official`, `ours` and
`reference` dicts of summaries) keyed as `run.py` files them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class XTarget:
    target: str
    measured: str
    met: bool


def _get(w: Any, name: str) -> dict[str, Any] | None:
    side, _, variant = name.partition("/")
    value: dict[str, Any] | None = getattr(w, side).get(variant)
    return value


def _cell(value: float | None, scale: float, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * scale:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            [
                cells[0].ljust(widths[0]),
                *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)),
            ]
        )

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def format_modern(results: Mapping[str, Any]) -> str:
    """The 2026-07-28 cross-process table (prefix `xproc_`)."""
    if "xproc_flow_latency" not in results:
        return ""
    columns = ("ours", "MCPServer", "low-level", "floor aiohttp", "floor httpx2")
    rate_plain = _rate(results.get("xproc_plain_cpu"))
    rate_flow = _rate(results.get("xproc_flow_cpu"))
    clients = _clients(results.get("xproc_concurrency"))
    specs = [
        ("two-round MRTR flow, 1 client, us", "xproc_flow_latency", "median_s", 1e6),
        ("  server CPU per flow, us", "xproc_flow_latency", "server_cpu_s", 1e6),
        ("plain tools/call, 1 client, us", "xproc_plain_latency", "median_s", 1e6),
        ("  server CPU per call, us", "xproc_plain_latency", "server_cpu_s", 1e6),
        (
            f"server CPU per call at {rate_plain} calls/s, us",
            "xproc_plain_cpu",
            "server_cpu_s",
            1e6,
        ),
        (f"server CPU per flow at {rate_flow} flows/s, us", "xproc_flow_cpu", "server_cpu_s", 1e6),
        (f"{clients} clients: flows/s", "xproc_concurrency", "ops_per_s", 1.0),
        (f"{clients} clients: p50, ms", "xproc_concurrency", "p50_s", 1e3),
        (f"{clients} clients: p99, ms", "xproc_concurrency", "p99_s", 1e3),
        (f"{clients} clients: server CPU per flow, us", "xproc_concurrency", "server_cpu_s", 1e6),
        (f"{clients} clients: server CPU use, cores", "xproc_concurrency", "server_cpu_share", 1.0),
    ]
    rows: list[list[str]] = []
    for label, key, fld, scale in specs:
        w = results.get(key)
        if w is None:
            continue
        posts = 2 if "flow" in key or key.endswith("concurrency") else 1
        names = ["ours/mrtr", "official/mcpserver", "official/lowlevel"]
        if key.endswith("_latency"):
            what = "2posts" if posts == 2 else "1post"
            names += [f"reference/floor_{what}_aiohttp", f"reference/floor_{what}_httpx2"]
        else:
            names += [f"reference/floor_{posts}post", "-"]
        cells = [label]
        for name in names:
            entry = _get(w, name) if name != "-" else None
            cells.append(_cell(entry.get(fld) if entry else None, scale))
        rows.append(cells)
    header = ["cross-process HTTP, 2026-07-28 client", *columns]
    return _table(header, rows)


def format_legacy(results: Mapping[str, Any]) -> str:
    """The 2025-11-25 (legacy session) cross-process table (prefix `xlegacy_`)."""
    if "xlegacy_plain_latency" not in results:
        return ""
    clients = _clients(results.get("xlegacy_concurrency"))
    specs = [
        ("plain tools/call, 1 client, us", "xlegacy_plain_latency", "median_s", 1e6, 1),
        ("  server CPU per call, us", "xlegacy_plain_latency", "server_cpu_s", 1e6, 1),
        ("live-question flow, 1 client, us", "xlegacy_live_latency", "median_s", 1e6, 2),
        ("  server CPU per flow, us", "xlegacy_live_latency", "server_cpu_s", 1e6, 2),
        (
            f"server CPU per call at {_rate(results.get('xlegacy_plain_cpu'))} calls/s, us",
            "xlegacy_plain_cpu",
            "server_cpu_s",
            1e6,
            1,
        ),
        (
            f"server CPU per flow at {_rate(results.get('xlegacy_live_cpu'))} flows/s, us",
            "xlegacy_live_cpu",
            "server_cpu_s",
            1e6,
            2,
        ),
        (f"{clients} clients: flows/s", "xlegacy_concurrency", "ops_per_s", 1.0, 0),
        (f"{clients} clients: p50, ms", "xlegacy_concurrency", "p50_s", 1e3, 0),
        (f"{clients} clients: p99, ms", "xlegacy_concurrency", "p99_s", 1e3, 0),
        (
            f"{clients} clients: server CPU per flow, us",
            "xlegacy_concurrency",
            "server_cpu_s",
            1e6,
            0,
        ),
    ]
    rows: list[list[str]] = []
    for label, key, fld, scale, posts in specs:
        w = results.get(key)
        if w is None:
            continue
        names = ["ours/mrtr", "official/mcpserver", "official/lowlevel"]
        names.append(f"reference/floor_{posts}post" if posts else "-")
        cells = [label]
        for name in names:
            entry = _get(w, name) if name != "-" else None
            cells.append(_cell(entry.get(fld) if entry else None, scale))
        rows.append(cells)
    header = ["cross-process HTTP, 2025-11-25 client", "ours", "MCPServer", "low-level", "floor"]
    return _table(header, rows) + (
        "\n(official servers: JSON mode for plain calls, SSE mode for live questions; the "
        "floor: 1 or 2 bare POSTs with aiohttp)"
    )


def format_inspector(results: Mapping[str, Any]) -> str:
    """MCP Inspector `--load` rows, one block per era."""
    blocks: list[str] = []
    for era in ("modern", "legacy"):
        w = results.get(f"inspector_{era}")
        if w is None:
            continue
        rows = []
        for name, label in (
            ("ours/mrtr", "ours"),
            ("official/mcpserver", "official MCPServer"),
            ("reference/ts_v2", "TypeScript SDK v2"),
        ):
            e = _get(w, name)
            if e is None:
                continue
            rows.append(
                [
                    label,
                    _cell(e["requests_per_s"], 1.0),
                    _cell(e["p50_s"], 1e3, 2),
                    _cell(e["p99_s"], 1e3, 2),
                    _cell(e["server_cpu_s"], 1e6),
                    str(e["requests"]),
                    str(e["errors"]),
                ]
            )
        conc = _get(w, "ours/mrtr")
        title = f"Inspector --load, {era} era, concurrency {conc['concurrency'] if conc else '?'}"
        header = [title, "req/s", "p50 ms", "p99 ms", "CPU us/req", "requests", "errors"]
        blocks.append(_table(header, rows))
    return "\n\n".join(blocks)


def _rate(w: Any) -> str:
    entry = _get(w, "ours/mrtr") if w is not None else None
    return "?" if entry is None else f"{entry['rate']:g}"


def _clients(w: Any) -> str:
    entry = _get(w, "ours/mrtr") if w is not None else None
    return "?" if entry is None else str(entry["clients"])


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


def _field(results: Mapping[str, Any], key: str, name: str, fld: str) -> float | None:
    w = results.get(key)
    entry = _get(w, name) if w is not None else None
    return None if entry is None else float(entry[fld])


def check(results: Mapping[str, Any]) -> list[XTarget]:
    """The cross-process targets, from this run's numbers."""
    out: list[XTarget] = []
    f = _field
    if "xproc_plain_cpu" in results:
        ours = f(results, "xproc_plain_cpu", "ours/mrtr", "server_cpu_s")
        floor = f(results, "xproc_plain_cpu", "reference/floor_1post", "server_cpu_s")
        mcp = f(results, "xproc_plain_cpu", "official/mcpserver", "server_cpu_s")
        r = _ratio(ours, floor)
        out.append(
            XTarget("server CPU per plain call <= 1.3x one floor POST", f"{r:.2f}x", r <= 1.3)
        )
        r = _ratio(mcp, ours)
        out.append(
            XTarget("server CPU per plain call >= 8x less than MCPServer", f"{r:.2f}x", r >= 8)
        )
    if "xproc_flow_cpu" in results:
        ours = f(results, "xproc_flow_cpu", "ours/mrtr", "server_cpu_s")
        floor = f(results, "xproc_flow_cpu", "reference/floor_2post", "server_cpu_s")
        r = _ratio(ours, floor)
        out.append(
            XTarget("server CPU per MRTR flow <= 1.5x two floor POSTs", f"{r:.2f}x", r <= 1.5)
        )
    if "xproc_flow_latency" in results:
        ours = f(results, "xproc_flow_latency", "ours/mrtr", "median_s")
        floor = f(results, "xproc_flow_latency", "reference/floor_2posts_aiohttp", "median_s")
        r = _ratio(ours, floor)
        out.append(XTarget("cross-process MRTR flow <= 1.3x two bare POSTs", f"{r:.2f}x", r <= 1.3))
    for era in ("modern", "legacy"):
        key = f"inspector_{era}"
        if key not in results:
            continue
        ours = f(results, key, "ours/mrtr", "requests_per_s")
        ts = f(results, key, "reference/ts_v2", "requests_per_s")
        r = _ratio(ours, ts)
        out.append(XTarget(f"Inspector {era}: req/s >= TypeScript v2's", f"{r:.2f}x", r >= 1))
        ours = f(results, key, "ours/mrtr", "server_cpu_s")
        mcp = f(results, key, "official/mcpserver", "server_cpu_s")
        r = _ratio(mcp, ours)
        out.append(
            XTarget(f"Inspector {era}: CPU/request <= 1/5 of MCPServer's", f"{r:.2f}x less", r >= 5)
        )
    return out
