"""Two `mrtr serve` instances sharing one Redis: any instance serves any request.

    python examples/two_instances/run.py

Starts a `redis-server` on a free loopback port (or uses `MRTR_STORE_URL` when it is set),
then two instances of `server.py` with the same `MRTR_REQUEST_STATE_KEY` and
`MRTR_STORE_URL`, and shows, with no load balancer in between, what a load balancer would do
to your clients:

1. a 2026-07-28 client's MRTR flow: round 1 on instance A, the retry with the answer on B;
2. a legacy (2025-11-25, `initialize`) session: opened on A, its `tools/call` sent to B,
   whose question (`elicitation/create`) the client answers with a POST to A; B finishes
   the call; `DELETE` on A ends the session on B too.

Everything it starts is stopped on exit. Exit status 0 when every step went as shown.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from mrtr import Client, ClientOptions, ElicitRequestParams, ElicitResult
from mrtr.client import InputRequiredConfig
from mrtr.client.client import InputRequiredError

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 20.0
LEGACY = "2025-11-25"
SSE = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start within {START_TIMEOUT:g} s")


@contextmanager
def redis_url() -> Iterator[str]:
    """`MRTR_STORE_URL` if set, else a throw-away redis-server on a free port."""
    given = os.environ.get("MRTR_STORE_URL")
    if given:
        yield given
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server), and "
                         "MRTR_STORE_URL is not set")  # fmt: skip
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, process, "redis-server")
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


@contextmanager
def instances(store_url: str, n: int = 2) -> Iterator[list[str]]:
    """`n` instances of server.py sharing a fresh key and `store_url`; their endpoints."""
    env = dict(
        os.environ,
        MRTR_REQUEST_STATE_KEY=secrets.token_urlsafe(32),
        MRTR_STORE_URL=store_url,
    )
    ports = [free_port() for _ in range(n)]
    serve = [sys.executable, "-m", "mrtr", "serve", f"{HERE / 'server.py'}:server"]
    processes = [
        subprocess.Popen(
            [*serve, "--transport", "http", "--host", "127.0.0.1", "--port", str(port)], env=env
        )
        for port in ports
    ]
    try:
        for name, port, process in zip("AB", ports, processes, strict=False):
            wait_for_port(port, process, f"the instance on port {port}")
            print(f"instance {name}: process {process.pid}, port {port}")
        yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)


def decline(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="decline")


async def modern_flow(a: str, b: str) -> str:
    """Round 1 on A; the retry, carrying the answer and the sealed requestState, on B."""
    # auto_fulfill=False: the flow stops at each question, so its rounds can go anywhere;
    # the handler only declares the elicitation capability.
    manual = ClientOptions(input_required=InputRequiredConfig(auto_fulfill=False))
    async with Client.http(a, options=manual, elicitation_handler=decline) as on_a:
        try:
            await on_a.call_tool("order", {"item": "tea"})
            raise SystemExit("expected the server to ask a question")
        except InputRequiredError as asked:
            question = asked.result
    (key,) = question.input_requests
    print(f"A asked: {question.input_requests[key].params['message']!r}")
    async with Client.http(b, options=manual, elicitation_handler=decline) as on_b:
        result = await on_b.call_tool(
            "order",
            {"item": "tea"},
            input_responses={key: {"action": "accept", "content": {"ok": True}}},
            request_state=question.request_state,
        )
    text: str = result.content[0].text  # type: ignore[union-attr]
    print(f"B finished: {text}")
    return text


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they come."""
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            body = "\n".join(data)
            data = []
            if body:  # the priming event carries no message
                yield json.loads(body)


async def legacy_session(a: str, b: str) -> str:
    """A legacy session opened on A, served on B, answered through A, ended on A."""
    async with aiohttp.ClientSession() as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "clientInfo": {"name": "example", "version": "1"},
            "capabilities": {"elicitation": {}}}}  # fmt: skip
        async with http.post(a, json=init, headers=SSE) as response:
            session_id = response.headers["Mcp-Session-Id"]
            print(f"A opened legacy session {session_id[:8]}...")
        headers = dict(SSE, **{"Mcp-Session-Id": session_id, "MCP-Protocol-Version": LEGACY})
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await (await http.post(b, json=initialized, headers=headers)).release()
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "order", "arguments": {"item": "cup"}}}  # fmt: skip
        text = ""
        async with http.post(b, json=call, headers=headers) as stream:
            async for message in events(stream):
                if message.get("method") == "elicitation/create":
                    print(f"B asked live: {message['params']['message']!r}; answering on A")
                    reply = {"jsonrpc": "2.0", "id": message["id"],
                             "result": {"action": "accept", "content": {"ok": True}}}  # fmt: skip
                    async with http.post(a, json=reply, headers=headers) as accepted:
                        assert accepted.status == 202, accepted.status
                elif message.get("id") == 2:
                    text = message["result"]["content"][0]["text"]
                    print(f"B finished: {text}")
                    break
        async with http.delete(a, headers=headers) as deleted:
            print(f"DELETE on A: {deleted.status}")
        async with http.post(b, json=call, headers=headers) as gone:
            print(f"the session on B afterwards: {gone.status}")
            if gone.status != 404:
                raise SystemExit("expected B to have forgotten the session")
        return text


def main() -> None:
    with redis_url() as url, instances(url) as (a, b):
        modern = asyncio.run(modern_flow(a, b))
        legacy = asyncio.run(legacy_session(a, b))
    if not (modern.startswith("ordered tea") and legacy.startswith("ordered cup")):
        raise SystemExit("a flow did not finish as expected")
    print("both flows crossed instances: OK")


if __name__ == "__main__":
    main()
