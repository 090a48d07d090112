"""One benchmark HTTP server in its own process: `python benchmarks/xproc_server.py KIND`.

KIND is `ours` (`mrtr`'s `asgi_app()`), `mcpserver` or `lowlevel` (the official SDK's two
forms in JSON-response mode), `mcpserver-sse` or `lowlevel-sse` (the same in the SDK's SSE
mode, which legacy sessions need for a live question), or `floor` (a bare ASGI app answering a
fixed JSON document). Every kind has its startup heap frozen out of the cycle collector
(`gc.freeze`, as `mrtr`'s `serve_http` does) and runs under the one uvicorn configuration
(`harness.uvicorn_config`: httptools, uvloop, access log off) on a loopback port the process
binds itself; once uvicorn is serving it prints `READY <port>` on stdout. SIGTERM or SIGINT
shuts it down. With `--profile STATS_PATH`, SIGUSR1 starts cProfile (counting CPU time) and
the stats are written at exit.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.harness import LifespanMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("ours", "mcpserver", "lowlevel", "mcpserver-sse", "lowlevel-sse", "floor")


def build_app(kind: str) -> tuple[Any, LifespanMode]:
    """The ASGI app for `kind` and the lifespan mode uvicorn must run it with."""
    if kind == "ours":
        from benchmarks import ours

        return ours.build_server().asgi_app(), "auto"
    if kind == "floor":
        from benchmarks import official

        return official.floor_app, "off"
    from benchmarks import official

    form, _, mode = kind.partition("-")
    if form not in official.FORMS:
        raise SystemExit(f"unknown server kind {kind!r}; one of {', '.join(KINDS)}")
    # The SDK's session manager starts in the ASGI lifespan, so it must run.
    app = official.build_http_app(form, json_response=mode != "sse")
    return app, "on"


async def serve(kind: str) -> None:
    import uvicorn

    from benchmarks.harness import _loopback_socket, uvicorn_config

    app, lifespan = build_app(kind)
    # Every kind alike: the startup heap (modules, the app) is frozen out of the cycle
    # collector, as `mrtr`'s `serve_http` does in production. Otherwise each full collection
    # walks it all (~100k objects, 60-90 ms here), which under 32 legacy sessions happened
    # every half second and set the p99 (see RESULTS.md).
    gc.collect()
    gc.freeze()
    sock = _loopback_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, port, lifespan=lifespan))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise SystemExit("uvicorn exited during startup")
        await asyncio.sleep(0.005)
    print(f"READY {port}", flush=True)
    await task


def main() -> None:
    args = sys.argv[1:]
    dump = None
    if len(args) == 3 and args[1] == "--profile":
        dump = args.pop()
        args.pop()
    if len(args) != 1 or args[0] not in KINDS:
        raise SystemExit(f"usage: xproc_server.py {{{','.join(KINDS)}}} [--profile STATS_PATH]")
    import uvloop

    if dump is None:
        uvloop.run(serve(args[0]))
        return
    # cProfile from SIGUSR1 to SIGTERM; `python -m pstats STATS_PATH` reads the stats.
    import cProfile
    import signal
    import time

    # uvicorn re-raises the SIGTERM it caught once it has shut down; with this handler that
    # no longer ends the process before the stats are written.
    signal.signal(signal.SIGTERM, lambda *_: None)
    # CPU time, not wall time: a server mostly waits, and what it costs is what it computes.
    profiler = cProfile.Profile(time.process_time)
    # Started by SIGUSR1 (after the caller's warm-up), so imports and startup stay out.
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    try:
        uvloop.run(serve(args[0]))
    finally:
        profiler.disable()
        profiler.dump_stats(dump)


if __name__ == "__main__":
    main()
