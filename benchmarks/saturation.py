"""Server CPU per request at saturation, driven by `wrk`: `python benchmarks/saturation.py`.

Every server runs in a process of its own (`xproc_server.py`: ours through `mrtr serve`'s
entry, the official `MCPServer` and low-level forms in JSON-response mode, the bare-ASGI
`floor`, `floor-mcp`, the least JSON-RPC work a `tools/call` needs; `ts_server.mjs`: the
TypeScript SDK v2 server). The load comes from `wrk` (`wrk -t1 -c16`, keep-alive), a load
generator written in C outside this project, with a Lua script that posts real requests:

* `plain`: a 2026-07-28 `tools/call` of `add(2, 3)`, the body and headers each SDK's own client
  sends (`_meta` with the protocol version, client info and capabilities; `Mcp-Method`,
  `Mcp-Name`, `MCP-Protocol-Version`); `floor` gets its fixed bare POST;
* `flow`: the two-round MRTR flow of `confirm`: the Lua `response()` hook reads the
  `input_required` result's `inputRequests` key and `requestState`, and a later `request()`
  sends the retry with the answer (on whichever connection asks next: the flow's state travels
  in the request, not in the connection);
* `legacy`: a 2025-11-25 session's plain call: `initialize` and `notifications/initialized`
  once, then every call with the session's `Mcp-Session-Id` (the TypeScript server's legacy
  fallback is stateless and gives none).

Every response is checked in Lua (2xx, and the tool's expected text): a server that fails
cannot post a fast figure, and any non-2xx, wrong answer or socket error fails the run after
the table is printed.

Server CPU per request = the server process's CPU time over the run (all threads, from
`/proc/PID/task/*/schedstat`; `/proc/PID/stat`'s utime + stime kept beside it) / the requests
wrk completed. Each row gets a one-second warm-up run, then `--rounds` runs of `--duration`
seconds, the rows alternating so that a busy stretch of the machine spreads over all of them;
ratios are taken within the one run. With the defaults the whole run takes about 2 minutes.

    python benchmarks/saturation.py                          # every row
    python benchmarks/saturation.py --only ours floor-mcp    # some servers
    python benchmarks/saturation.py --only floor-mcp-lean ours-lean  # on lean_http.py
    python benchmarks/saturation.py --workloads plain --json out.json

Needs `wrk` (Debian: `apt-get install wrk`; installed with apt-get when missing and running as
root) and, for the `ts` rows, Node 22 and the npm packages `xproc.ensure_inspector` installs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import xproc

SERVERS = ("floor", "floor-mcp", "ours", "mcpserver", "lowlevel", "ts")
#: Served by `lean_http.py` instead of uvicorn (`xproc_server.py`), with `--only` alone.
LEAN_SERVERS = ("floor-lean", "floor-mcp-lean", "ours-lean")
WORKLOADS = ("plain", "flow", "legacy")
Workload = Literal["plain", "flow", "legacy"]
REFERENCES = (("floor-mcp", "floor-mcp"), ("MCPServer", "mcpserver"), ("TS", "ts"))
"""The servers every row is compared with: (column label, server)."""

SERVES: dict[Workload, tuple[str, ...]] = {
    "plain": SERVERS + LEAN_SERVERS,
    # `floor-mcp` and the TypeScript server have no MRTR tool; the floor answers bare POSTs.
    "flow": ("ours", "ours-lean", "mcpserver", "lowlevel"),
    "legacy": ("floor-mcp", "ours", "mcpserver", "lowlevel", "ts"),
}

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
_META_KEYS = "io.modelcontextprotocol/"
# What each SDK's client puts in a 2026-07-28 request's `_meta` (as `xproc`'s clients send it).
OURS_META = {
    _META_KEYS + "protocolVersion": MODERN,
    _META_KEYS + "clientInfo": {"name": "mrtr-client", "version": "0.1.0"},
    _META_KEYS + "clientCapabilities": {
        "elicitation": {"form": {}},
        "extensions": {_META_KEYS + "tasks": {}},
    },
}
OFFICIAL_META = {
    _META_KEYS + "protocolVersion": MODERN,
    _META_KEYS + "clientInfo": {"name": "mcp", "version": "0.1.0"},
    _META_KEYS + "clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}
ACCEPT = "application/json, text/event-stream"
ANSWER = {"action": "accept", "content": {"ok": True}}
WARMUP_SECONDS = 1
_RESULT_LINE = re.compile(r"^SATURATION (\{.*\})$", re.MULTILINE)
_BAD_LINE = re.compile(r"^SATURATION-BAD (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Row:
    """One server under one workload."""

    workload: Workload
    server: str

    @property
    def name(self) -> str:
        return f"{self.workload}/{self.server}"


# --- the requests ------------------------------------------------------------------------------


def _official(server: str) -> bool:
    return server in ("mcpserver", "lowlevel")


def _body(params: Mapping[str, Any]) -> str:
    """A `tools/call` body whose `id` is the Lua variable `id`, marked `@@id@@`."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": "@@id@@", "method": "tools/call", "params": params},
        separators=(",", ":"),
    ).replace('"@@id@@"', "@@id@@")


def _lua_concat(template: str) -> str:
    """`template` as a Lua expression: its text in long brackets, `@@name@@` the variable."""
    parts = re.split(r"@@(\w+)@@", template)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"tostring({part})")
        elif part:
            if "]==]" in part:
                raise ValueError(f"request text cannot be a Lua long string: {part!r}")
            out.append(f"[==[{part}]==]")
    return " .. ".join(out)


def _lua_table(headers: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()) + "}"


@dataclass(frozen=True)
class Requests:
    """What a row's Lua script posts: the path, headers, first body and (flows) the retry."""

    path: str
    headers: dict[str, str]
    first: str
    expect: str
    """Text every final answer contains (the tool's result)."""
    retry: str | None = None
    """The flow's second round: `@@key@@` the input request's key, `@@state@@` its state."""
    retry_stateless: str | None = None
    """The same for a server whose `input_required` result carries no `requestState`."""


def requests_for(row: Row, session: str | None) -> Requests:
    """The requests `row`'s server gets from its own SDK's client (ours for `floor-mcp` and
    the TypeScript server, which `xproc` drives with ours or with Inspector)."""
    from benchmarks import official

    if xproc.base_kind(row.server) == "floor":
        body = official.FLOOR_REQUEST.decode().replace('"id":1', '"id":@@id@@')
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        return Requests("/", headers, body, expect='"text":"yes"')
    if row.workload == "legacy":
        headers = {"Content-Type": "application/json", "Accept": ACCEPT}
        headers["MCP-Protocol-Version"] = LEGACY
        if session is not None:
            headers["Mcp-Session-Id"] = session
        body = _body({"name": "add", "arguments": {"a": 2, "b": 3}})
        return Requests("/mcp", headers, body, expect='"text":"5"')
    meta = OFFICIAL_META if _official(row.server) else OURS_META
    tool = "confirm" if row.workload == "flow" else "add"
    headers = {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "Mcp-Method": "tools/call",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Name": tool,
    }
    if row.workload == "plain":
        body = _body({"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": meta})
        return Requests("/mcp", headers, body, expect='"text":"5"')
    first = _body({"name": "confirm", "arguments": {}, "_meta": meta})
    answered: dict[str, Any] = {
        "name": "confirm",
        "arguments": {},
        "inputResponses": {"@@key@@": ANSWER},
    }
    retry_stateless = _body({**answered, "_meta": meta})
    retry = _body({**answered, "requestState": "@@state@@", "_meta": meta})
    # The key and state are strings in the JSON: the markers sit inside quotes already.
    return Requests("/mcp", headers, first, '"text":"yes"', retry, retry_stateless)


def lua_script(requests: Requests, first_id: int) -> str:
    """The wrk script: `request()` posts the next body, `response()` checks every answer (and
    queues a flow's retry), `done()` prints the counts on one `SATURATION {json}` line."""
    retry = "nil"
    if requests.retry is not None and requests.retry_stateless is not None:
        retry = (
            "function(id, key, state) if state then return "
            + _lua_concat(requests.retry)
            + " end return "
            + _lua_concat(requests.retry_stateless)
            + " end"
        )
    return f"""-- generated by benchmarks/saturation.py
local path = {json.dumps(requests.path)}
local headers = {_lua_table(requests.headers)}
local expect = {json.dumps(requests.expect)}
local first_body = function(id) return {_lua_concat(requests.first)} end
local retry_body = {retry}
local next_id = {first_id}
-- Retries waiting for a connection: a flow's state is in its request, so any connection may
-- send it. Globals below are read by `done()` through `thread:get`.
local queue, head, tail = {{}}, 1, 0
ok, non2xx, bad, asked = 0, 0, 0, 0
bad_sample = ""

request = function()
  next_id = next_id + 1
  local body
  if head <= tail then
    local item = queue[head]
    queue[head] = nil
    head = head + 1
    body = retry_body(next_id, item[1], item[2])
  else
    body = first_body(next_id)
  end
  return wrk.format("POST", path, headers, body)
end

local function fail(status, body)
  if bad_sample == "" then
    bad_sample = "HTTP " .. status .. ": " .. string.sub(string.gsub(body, "%s+", " "), 1, 500)
  end
end

response = function(status, hdrs, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    fail(status, body)
    return
  end
  if retry_body and string.find(body, '"input_required"', 1, true) then
    local key = string.match(body, '"inputRequests":{{"([^"]+)"')
    if not key then
      bad = bad + 1
      fail(status, body)
      return
    end
    tail = tail + 1
    queue[tail] = {{key, string.match(body, '"requestState":"([^"]*)"')}}
    asked = asked + 1
  elseif string.find(body, expect, 1, true)
      and not string.find(body, '"isError":true', 1, true) then
    ok = ok + 1
  else
    bad = bad + 1
    fail(status, body)
  end
end

local threads = {{}}
function setup(thread) table.insert(threads, thread) end

function done(summary, latency, requests)
  local ok, non2xx, bad, asked, sample = 0, 0, 0, 0, ""
  for _, t in ipairs(threads) do
    ok = ok + t:get("ok")
    non2xx = non2xx + t:get("non2xx")
    bad = bad + t:get("bad")
    asked = asked + t:get("asked")
    if sample == "" then sample = t:get("bad_sample") end
  end
  local e = summary.errors
  io.write(string.format(
    'SATURATION {{"requests":%d,"duration_us":%d,"ok":%d,"asked":%d,"non2xx":%d,"bad":%d,'
    .. '"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}}\\n',
    summary.requests, summary.duration, ok, asked, non2xx, bad,
    e.connect, e.read, e.write, e.timeout, latency:percentile(50), latency:percentile(99)))
  if sample ~= "" then io.write("SATURATION-BAD " .. sample .. "\\n") end
end
"""


# --- running wrk -------------------------------------------------------------------------------


@dataclass
class Tally:
    """A row's counts over its measured runs."""

    requests: int = 0
    ops: int = 0
    """Plain calls answered, or flows finished."""
    non2xx: int = 0
    bad: int = 0
    socket_errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    cpu_ticks_s: float = 0.0
    runs: list[dict[str, Any]] = field(default_factory=list)
    bad_sample: str = ""

    def add(self, run: Mapping[str, Any], cpu: tuple[float, float]) -> None:
        self.requests += run["requests"]
        self.ops += run["ok"]
        self.non2xx += run["non2xx"]
        self.bad += run["bad"]
        self.socket_errors += run["connect"] + run["read"] + run["write"] + run["timeout"]
        self.seconds += run["duration_us"] / 1e6
        self.cpu_s += cpu[0]
        self.cpu_ticks_s += cpu[1]
        self.runs.append({**run, "server_cpu_s": cpu[0], "server_cpu_ticks_s": cpu[1]})
        self.bad_sample = self.bad_sample or run.get("bad_sample", "")

    @property
    def failed(self) -> bool:
        return bool(self.non2xx or self.bad or self.socket_errors or not self.ops)

    def summary(self) -> dict[str, Any]:
        def per(x: float, n: float) -> float | None:
            return x / n if n else None

        return {
            "requests": self.requests,
            "ops": self.ops,
            "non2xx": self.non2xx,
            "bad": self.bad,
            "socket_errors": self.socket_errors,
            "seconds": self.seconds,
            "requests_per_s": per(self.requests, self.seconds),
            "ops_per_s": per(self.ops, self.seconds),
            "server_cpu_s_per_request": per(self.cpu_s, self.requests),
            "server_cpu_s_per_op": per(self.cpu_s, self.ops),
            "server_cpu_ticks_s_per_op": per(self.cpu_ticks_s, self.ops),
            "server_cpu_share": per(self.cpu_s, self.seconds),
            "runs": self.runs,
            "bad_sample": self.bad_sample,
        }


async def run_wrk(
    url: str, script: str, *, seconds: int, connections: int, pid: int
) -> tuple[dict[str, Any], tuple[float, float]]:
    """One wrk run; its counts (from the script's `done()`) and the server's CPU over it."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="saturation-") as f:
        f.write(script)
        f.flush()
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s"]
        meter = xproc.CpuMeter(pid)
        meter.start()
        proc = await asyncio.create_subprocess_exec(
            *argv, "-s", f.name, url, stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT
        )
        out, _ = await asyncio.wait_for(proc.communicate(), seconds + 60)
        cpu = meter.stop()
    text = out.decode(errors="replace")
    found = _RESULT_LINE.search(text)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"wrk against {url} failed ({proc.returncode}):\n{text[-3000:]}")
    run: dict[str, Any] = json.loads(found.group(1))
    bad = _BAD_LINE.search(text)
    if bad is not None:
        run["bad_sample"] = bad.group(1)
    return run, cpu


async def open_session(url: str, server: str) -> str | None:
    """A 2025-11-25 session on `url` (`initialize`, then `notifications/initialized`), as the
    server's own SDK's client opens it; its `Mcp-Session-Id`, if the server gives one."""
    import aiohttp

    name = "mcp" if _official(server) else "mrtr-client"
    elicitation: dict[str, Any] = {"form": {}, "url": {}} if _official(server) else {"form": {}}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": elicitation},
            "clientInfo": {"name": name, "version": "0.1.0"},
        },
    }
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=initialize, headers=headers) as r:
            text = await r.text()
            if r.status != 200 or '"protocolVersion"' not in text:
                raise RuntimeError(f"{server}: initialize answered {r.status}: {text[:500]}")
            session = r.headers.get("Mcp-Session-Id")
        headers["MCP-Protocol-Version"] = LEGACY
        if session is not None:
            headers["Mcp-Session-Id"] = session
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(url, json=note, headers=headers) as r:
            if r.status >= 300:
                raise RuntimeError(f"{server}: notifications/initialized answered {r.status}")
    return session


def ensure_wrk() -> None:
    """Install wrk with apt-get when it is missing and this runs as root; else say how."""
    if shutil.which("wrk") is not None:
        return
    if os.geteuid() == 0 and shutil.which("apt-get") is not None:
        print("installing wrk (apt-get install wrk)", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wrk"]
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, check=True)
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk, the HTTP load generator: apt-get install wrk (as root)")


async def measure(
    rows: Sequence[Row], *, seconds: int, rounds: int, connections: int
) -> dict[Row, Tally]:
    """Start every server the rows need, warm each row up, then run the rows alternating."""
    kinds = list(dict.fromkeys(row.server for row in rows))
    tallies = {row: Tally() for row in rows}
    async with AsyncExitStack() as stack:
        procs = {k: await stack.enter_async_context(xproc.server_process(k)) for k in kinds}
        requests = {}
        for row in rows:
            url = procs[row.server].url
            # `floor-mcp` keeps no session (nor checks one): its legacy row posts calls alone.
            legacy = row.workload == "legacy" and row.server != "floor-mcp"
            session = await open_session(url, row.server) if legacy else None
            requests[row] = requests_for(row, session)
        next_id = 0
        for rnd in range(-1, rounds):  # round -1: the warm-up, checked but not counted
            shift = max(rnd, 0) % len(rows)
            for row in [*rows[shift:], *rows[:shift]]:
                server = procs[row.server]
                url = server.url.rsplit("/", 1)[0] + requests[row].path
                next_id += 10_000_000  # ids stay unique within a legacy session
                run, cpu = await run_wrk(
                    url,
                    lua_script(requests[row], next_id),
                    seconds=WARMUP_SECONDS if rnd < 0 else seconds,
                    connections=connections,
                    pid=server.pid,
                )
                if rnd >= 0:
                    tallies[row].add(run, cpu)
                elif run["non2xx"] or run["bad"] or not run["ok"]:
                    raise SystemExit(
                        f"{row.name}: the server does not answer the benchmark's request "
                        f"({run['ok']} good answers, {run['non2xx']} non-2xx, {run['bad']} "
                        f"wrong): {run.get('bad_sample', '')}"
                    )
    return tallies


# --- the report --------------------------------------------------------------------------------

_TITLES: dict[Workload, str] = {
    "plain": f"plain tools/call, {MODERN} (us per call)",
    "flow": f"two-round MRTR flow, {MODERN} (us per flow: two requests)",
    "legacy": f"plain tools/call in a {LEGACY} session (us per call)",
}


def format_report(tallies: Mapping[Row, Tally], connections: int) -> str:
    """Per workload: requests/s, server CPU per op and its share of a core, failures, and the
    ratios to floor-mcp (row / floor-mcp), MCPServer and TS (reference / row)."""
    lines = [
        f"server CPU at saturation: wrk -t1 -c{connections}, keep-alive; CPU = the server "
        "process's own, all threads"
    ]
    for workload in WORKLOADS:
        rows = [row for row in tallies if row.workload == workload]
        if not rows:
            continue
        cpu = {
            row.server: tallies[row].cpu_s / tallies[row].ops if tallies[row].ops else None
            for row in rows
        }
        header = ["server", "requests/s", "ops/s", "CPU us/request", "CPU us/op", "CPU share"]
        header += ["non-2xx", "errors"]
        refs = [(label, ref) for label, ref in REFERENCES if cpu.get(ref)]
        header += [f"/ {label}" if ref == "floor-mcp" else f"{label} /" for label, ref in refs]
        table = [header]
        for row in rows:
            t = tallies[row]
            mine = cpu[row.server]
            cells = [
                row.server,
                f"{t.requests / t.seconds:,.0f}" if t.seconds else "-",
                f"{t.ops / t.seconds:,.0f}" if t.seconds else "-",
                f"{t.cpu_s / t.requests * 1e6:,.1f}" if t.requests else "-",
                f"{mine * 1e6:,.1f}" if mine else "-",
                f"{t.cpu_s / t.seconds:.0%}" if t.seconds else "-",
                str(t.non2xx),
                str(t.bad + t.socket_errors),
            ]
            for _label, ref in refs:
                other = cpu[ref]
                if not mine or not other:
                    cells.append("-")
                else:
                    cells.append(f"{(mine / other if ref == 'floor-mcp' else other / mine):.2f}x")
            table.append(cells)
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        lines += ["", _TITLES[workload]]
        lines += [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
            for r in table
        ]
    lines += [
        "",
        "op: a plain call, or a whole flow; CPU share: server CPU / wall time (a core = 100%);",
        "errors: wrong answers and socket errors; '/ floor-mcp': this row's CPU per op over",
        "floor-mcp's; 'MCPServer /', 'TS /': theirs over this row's (this row's ops per server",
        "core against theirs)",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    ensure_wrk()
    if "ts" in args.only:
        xproc.ensure_inspector(allow_install=True)
    rows = [
        Row(workload, server)
        for workload in args.workloads
        for server in SERVES[workload]
        if server in args.only
    ]
    if not rows:
        raise SystemExit("no row: --only names no server that serves --workloads")
    import uvloop

    from benchmarks.run import machine

    info = machine()
    tallies = uvloop.run(
        measure(rows, seconds=args.duration, rounds=args.rounds, connections=args.connections)
    )
    info["loadavg_end"] = os.getloadavg()
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright ...": the name and version.
    info["wrk"] = " ".join((wrk_version.stdout or wrk_version.stderr).split()[:2])
    print(
        f"{info['date']}  |  {info['cores']} cores, {info['cpu']}  |  Python {info['python']}  |  "
        f"load avg {' '.join(f'{x:.2f}' for x in info['loadavg_start'])} -> "
        f"{' '.join(f'{x:.2f}' for x in info['loadavg_end'])}  |  {info['wrk']}"
    )
    print(format_report(tallies, args.connections))
    if args.json:
        settings = {k: getattr(args, k) for k in ("duration", "rounds", "connections")}
        payload = {
            "machine": info,
            "settings": settings,
            "rows": {row.name: tallies[row].summary() for row in rows},
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    failed = [row for row in rows if tallies[row].failed]
    for row in failed:
        t = tallies[row]
        print(
            f"FAILED {row.name}: {t.ops} good answers, {t.non2xx} non-2xx, {t.bad} wrong, "
            f"{t.socket_errors} socket errors; first bad answer: {t.bad_sample or '-'}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--duration", type=int, default=4, help="seconds of each measured wrk run (default 4)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="measured runs per row, alternating (default 2)"
    )
    parser.add_argument("--connections", type=int, default=16, help="wrk -c (default 16)")
    parser.add_argument("--only", nargs="+", choices=SERVERS + LEAN_SERVERS, default=list(SERVERS))
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    sys.exit(main(parser.parse_args()))
