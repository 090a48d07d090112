"""What `mrtr serve` holds for a client that writes requests over stdio and reads no answers.

Writes N `tools/call` requests (each padded with PAD bytes of argument) to a real
`mrtr serve tests/servers/eof_server.py:server` on a blocking thread, never reads its stdout,
waits until the writing ends or stops making progress, and prints how many were written,
whether the writer is blocked, and the server's resident memory (VmRSS; Linux only):

    python benchmarks/stdio_unread.py 50000
    python benchmarks/stdio_unread.py 5000 --pad 10000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

SERVER = str(Path(__file__).resolve().parent.parent / "tests/servers/eof_server.py") + ":server"
SETTLED = 2.0  # seconds without progress (written, memory) that end the wait
LIMIT = 120.0  # seconds the wait may take at most


def call(request_id: int, pad: int) -> bytes:
    meta = {meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION, meta_keys.CLIENT_CAPABILITIES: {}}
    arguments = {"pad": "x" * pad} if pad else {}
    params = {"name": "quick", "arguments": arguments, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return orjson.dumps(message) + b"\n"


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, help="requests to write")
    parser.add_argument("--pad", type=int, default=0, help="bytes of padding per request")
    args = parser.parse_args()
    env = {**os.environ, "MRTR_REQUEST_STATE_KEY": "stdio-unread-key-" + "k" * 32}
    server = subprocess.Popen(
        [sys.executable, "-m", "mrtr", "serve", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert server.stdin is not None
    fd = server.stdin.fileno()
    written = 0

    def write() -> None:
        nonlocal written
        try:
            for request_id in range(args.count):
                view = memoryview(call(request_id, args.pad))
                while view:
                    view = view[os.write(fd, view) :]
                written += 1
        except BrokenPipeError:
            return  # the server was ended while this was blocked

    writer = threading.Thread(target=write, daemon=True)
    try:
        writer.start()
        started = time.monotonic()
        last, still = (-1, -1), 0.0
        while still < SETTLED and time.monotonic() - started < LIMIT:
            time.sleep(0.25)
            now = (written, rss_mib(server.pid))
            still = still + 0.25 if now == last else 0.0
            last = now
        print(
            f"{args.count} requests, pad {args.pad}: written {written}, "
            f"writer blocked: {writer.is_alive()}, server VmRSS {rss_mib(server.pid)} MiB"
        )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
