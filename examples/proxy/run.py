"""Serve a stdio server over Streamable HTTP with `mrtr proxy`, then call its asking tool from
a 2026-07-28 client (which answers in rounds) and from a legacy one (asked live).

The backend is `examples/shop.py`, started by the proxy as a host would start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client.options import RoundInfo

SHOP = Path(__file__).resolve().parent.parent / "shop.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, proxy: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while proxy.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise SystemExit("the proxy did not start")


def answer(params: Any) -> ElicitResult:
    print(f"  the shop asks: {params.message!r}")
    return ElicitResult(action="accept", content={"region": "eu"})


async def call(url: str, era: str) -> None:
    rounds: list[RoundInfo] = []
    options = ClientOptions(protocol=era, on_round=rounds.append)  # type: ignore[arg-type]
    async with Client.http(url, options=options, elicitation_handler=answer) as client:
        result = await client.call_tool("order", {"item": "tea"})
    text = result.content[0].text  # type: ignore[union-attr]
    print(f"{era} client: {text} ({len(rounds)} input_required round(s))")


def main() -> None:
    port = free_port()
    command = [sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--port", str(port)]
    proxy = subprocess.Popen([*command, "--", sys.executable, str(SHOP)], stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proxy)
        url = f"http://127.0.0.1:{port}/mcp"
        print(f"mrtr proxy serves {SHOP.name} at {url}")
        asyncio.run(call(url, "modern"))
        asyncio.run(call(url, "legacy"))
    finally:
        proxy.terminate()
        proxy.wait(20)


if __name__ == "__main__":
    main()
