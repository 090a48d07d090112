"""The upstream HTTP API of the realistic benchmark: `python benchmarks/realistic_upstream.py
PORT DELAY_MS` serves `GET /price/<item>` on loopback, answering `{"item": ..., "price": ...}`
after `DELAY_MS` milliseconds (an API that takes a few ms), keep-alive. It prints `READY` once
it listens; SIGTERM stops it.

Rules: the price is `price_of(item)`, so a client can check that the answer really came from
here.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import zlib

from aiohttp import web


def price_of(item: str) -> int:
    """The price the upstream gives `item` (a checksum, so every item has its own)."""
    return zlib.crc32(item.encode()) % 1000


async def serve(port: int, delay: float) -> None:
    async def price(request: web.Request) -> web.Response:
        item = request.match_info["item"]
        await asyncio.sleep(delay)
        return web.json_response({"item": item, "price": price_of(item)})

    app = web.Application()
    app.router.add_get("/price/{item}", price)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("READY", flush=True)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: realistic_upstream.py PORT DELAY_MS")
    import uvloop

    uvloop.run(serve(int(sys.argv[1]), float(sys.argv[2]) / 1000))


if __name__ == "__main__":
    main()
