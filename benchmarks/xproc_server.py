"""One benchmark HTTP server in its own process: `python benchmarks/xproc_server.py KIND`.

KIND is `ours` (`mrtr`'s server, run as `mrtr serve benchmarks/ours_app.py:server --transport
http` runs it: `serve_http` with its connection limits, on uvloop and httptools), `mcpserver` or
`lowlevel` (the official SDK's two forms in JSON-response mode), `mcpserver-sse` or
`lowlevel-sse` (the same in the SDK's SSE mode, which legacy sessions need for a live
question), `floor` (a bare ASGI app answering a fixed JSON document), `floor-mcp` (the least
JSON-RPC work a `tools/call` needs, no checks: `official.floor_mcp_app`), or `floor-spin` /
`floor-ours` (the floor doing some of our work first, for `deployed_cost.py`), or `floor-lean`,
`floor-mcp-lean` and `ours-lean` (the floor, floor-mcp and our app served by `lean_http.py`
instead of uvicorn, to count what a leaner HTTP layer would save). Every kind has
its startup heap frozen out of the cycle collector (`gc.freeze`, as `serve_http` does); the
others run under the uvicorn configuration `serve_http` also uses (`harness.uvicorn_config`:
httptools, uvloop, access log off) on a loopback port the process binds itself. Once the server
is serving the process prints `READY <port>` on stdout. SIGTERM or SIGINT shuts it down. With
`--profile STATS_PATH`, SIGUSR1 starts cProfile (counting CPU time) and the stats are written
at exit.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.harness import LifespanMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = (
    "ours",
    "mcpserver",
    "lowlevel",
    "mcpserver-sse",
    "lowlevel-sse",
    "floor",
    "floor-mcp",
    "floor-spin",
    "floor-ours",
    # Served by `lean_http.py` instead of uvicorn: what a leaner HTTP layer would save.
    "floor-lean",
    "floor-mcp-lean",
    "ours-lean",
)
_LEAN = "-lean"


def build_app(kind: str) -> tuple[Any, LifespanMode]:
    """The ASGI app for `kind` (not `ours`) and the lifespan mode uvicorn must run it with."""
    if kind == "floor":
        from benchmarks import official

        return official.floor_app, "off"
    if kind == "floor-mcp":
        from benchmarks import official

        return official.floor_mcp_app, "off"
    if kind.startswith("floor-"):
        return _floor_after(kind), "off"
    from benchmarks import official

    form, _, mode = kind.partition("-")
    if form not in official.FORMS:
        raise SystemExit(f"unknown server kind {kind!r}; one of {', '.join(KINDS)}")
    # The SDK's session manager starts in the ASGI lifespan, so it must run.
    app = official.build_http_app(form, json_response=mode != "sse")
    return app, "on"


def _floor_after(kind: str) -> Any:
    """The floor app doing some work of ours first (`deployed_cost.py`): a pure-Python loop
    (`floor-spin`) or one plain call through our ASGI app in memory (`floor-ours`)."""
    import os

    from benchmarks import deployed_cost, official

    if kind == "floor-spin":
        iterations = int(os.environ[deployed_cost.SPIN_ENV])

        async def spin_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                deployed_cost.spin(iterations)
            await official.floor_app(scope, receive, send)

        return spin_app
    work: list[Any] = []

    async def ours_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await work[0]()
        await official.floor_app(scope, receive, send)

    async def prepare() -> None:
        work.append(await deployed_cost.ours_in_memory())

    ours_app.prepare = prepare  # type: ignore[attr-defined]
    return ours_app


async def serve(kind: str) -> None:
    import uvicorn

    from benchmarks.harness import _loopback_socket, uvicorn_config

    lean = kind.endswith(_LEAN)
    kind = kind.removesuffix(_LEAN)
    if kind == "ours":
        # The app `mrtr serve` serves, without the connection guard it adds to uvicorn's
        # protocol (about 12 k instructions a request): a lean layer would hold its own limits.
        from benchmarks.ours_app import server as ours_server

        app, lifespan = ours_server.asgi_app(), "on"
    else:
        app, lifespan = build_app(kind)
    prepare = getattr(app, "prepare", None)
    if prepare is not None:
        await prepare()  # before the heap is frozen, as a server's startup would be
    # Every kind alike: the startup heap (modules, the app) is frozen out of the cycle
    # collector, as `mrtr`'s `serve_http` does in production. Otherwise each full collection
    # walks it all (~100k objects, 60-90 ms here), which under 32 legacy sessions happened
    # every half second and set the p99 (see RESULTS.md).
    gc.collect()
    gc.freeze()
    sock = _loopback_socket()
    port = sock.getsockname()[1]
    if lean:
        from benchmarks import lean_http

        async with await lean_http.serve(app, sock, lifespan=lifespan == "on") as listening:
            print(f"READY {port}", flush=True)
            await listening.serve_forever()
        return
    server = uvicorn.Server(uvicorn_config(app, port, lifespan=lifespan))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise SystemExit("uvicorn exited during startup")
        await asyncio.sleep(0.005)
    print(f"READY {port}", flush=True)
    await task


def serve_ours() -> None:
    """Ours through `mrtr serve`'s own entry, on a free loopback port."""
    from benchmarks.harness import LOOPBACK
    from mrtr.cli.serve import serve as mrtr_serve

    # `mrtr serve` binds its port itself: take a free one, then say READY once it accepts.
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]

    def announce() -> None:
        # Generous: under valgrind (`instructions.py`) the imports alone take tens of seconds.
        # A parent waits only as long as it wants for the line.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                socket.create_connection((LOOPBACK, port), timeout=1).close()
            except OSError:
                time.sleep(0.01)
                continue
            print(f"READY {port}", flush=True)
            return

    threading.Thread(target=announce, daemon=True).start()
    mrtr_serve("benchmarks/ours_app.py:server", "http", LOOPBACK, port)


def run_kind(kind: str) -> None:
    if kind == "ours":
        serve_ours()
        return
    import uvloop

    uvloop.run(serve(kind))


def main() -> None:
    args = sys.argv[1:]
    dump = None
    if len(args) == 3 and args[1] == "--profile":
        dump = args.pop()
        args.pop()
    if len(args) != 1 or args[0] not in KINDS:
        raise SystemExit(f"usage: xproc_server.py {{{','.join(KINDS)}}} [--profile STATS_PATH]")
    if dump is None:
        run_kind(args[0])
        return
    # cProfile from SIGUSR1 to SIGTERM; `python -m pstats STATS_PATH` reads the stats.
    import cProfile
    import signal

    # uvicorn re-raises the SIGTERM it caught once it has shut down; with this handler that
    # no longer ends the process before the stats are written.
    signal.signal(signal.SIGTERM, lambda *_: None)
    # CPU time, not wall time: a server mostly waits, and what it costs is what it computes.
    profiler = cProfile.Profile(time.process_time)
    # Started by SIGUSR1 (after the caller's warm-up), so imports and startup stay out.
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    try:
        run_kind(args[0])
    finally:
        profiler.disable()
        profiler.dump_stats(dump)


if __name__ == "__main__":
    main()
