"""The limits `serve_http` puts on HTTP clients: slow, idle, endless and too many of them.

Each server is a real process (`Server.run(transport="http", ...)` or `mrtr serve`) on a
loopback port, with short timeouts so that the tests stay fast, run once with uvicorn's h11
protocol and once with httptools. Clients are raw sockets, so that a test can stop half-way
through a request, and responses are parsed by the standard library. What the server logs
goes to its stderr, which is collected for the tests that check it does not log in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.loopback_process import free_port, wait_listening
from mrtr import Server
from mrtr.cli import main
from mrtr.transport.http_limits import HTTPLimits, connection_cap
from mrtr.transport.http_serve import serve_http

ROOT = Path(__file__).resolve().parent.parent
GUARD = 10.0  # seconds: only ever reached when something is broken
TIMEOUT = 0.5  # the header, body and keep-alive timeouts of the test servers
SLACK = 2.5  # seconds a timeout may fire late on a busy machine (under uvicorn's own 5 s)
MAX_CONNECTIONS = 20
MAX_HEADER_SIZE = 8192  # below h11's own limit, so that both protocols apply this one

LAUNCHER = """\
import json
import sys

from mrtr import Server

server = Server("limits-test", version="1.0.0")


@server.tool()
async def add(a: int, b: int) -> int:
    return a + b


if __name__ == "__main__":
    options = {"log_level": "warning", **json.loads(sys.argv[2])}
    server.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), **options)
"""

# Runs the launcher (argv[1]) as __main__ with a lower limit on open files.
OPEN_FILES_WRAPPER = """\
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

LIMITS = {
    "header_timeout": TIMEOUT,
    "body_timeout": TIMEOUT,
    "keep_alive": TIMEOUT,
    "max_connections": MAX_CONNECTIONS,
    "max_header_size": MAX_HEADER_SIZE,
}


# --- a server process ---------------------------------------------------------------------


class ServerProcess:
    """A server in a child process, with its stderr collected line by line."""

    def __init__(self, command: list[str], port: int) -> None:
        self.port = port
        self.lines: list[str] = []
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()
        wait_listening(port, self.process, describe=self.stderr)

    def _collect(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def stderr(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(GUARD)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(GUARD)
            self._reader.join(GUARD)


@contextlib.contextmanager
def run_server(
    launcher: Path, options: dict[str, Any], limit_files: int | None = None
) -> Iterator[ServerProcess]:
    """The launcher's server with `options`; `limit_files` sets its soft and hard limits on open
    files before it starts."""
    port = free_port()
    command = [sys.executable, str(launcher), str(port), json.dumps(options)]
    if limit_files is not None:
        command[1:2] = ["-c", OPEN_FILES_WRAPPER % (limit_files, limit_files), str(launcher)]
    server = ServerProcess(command, port)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("limits") / "limits_server.py"
    path.write_text(LAUNCHER)
    return path


@pytest.fixture(scope="module", params=["h11", "httptools"])
def server(request: pytest.FixtureRequest, launcher: Path) -> Iterator[ServerProcess]:
    with run_server(launcher, {**LIMITS, "http": request.param}) as process:
        yield process


# --- raw HTTP ------------------------------------------------------------------------------


def request_bytes(size: int | None = None, declared: int | None = None) -> tuple[bytes, bytes]:
    """The head and the body of a `tools/call add` POST; the body is padded with spaces (valid
    JSON) to `size` bytes, and `Content-Length` says `declared` (default: the body's size)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "add",
            "arguments": {"a": 2, "b": 40},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    body = json.dumps(message).encode()
    if size is not None:
        body += b" " * (size - len(body))
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\n"
        "Mcp-Name: add\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Content-Length: {len(body) if declared is None else declared}\r\n\r\n"
    )
    return head.encode(), body


def connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), GUARD)
    sock.settimeout(GUARD)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """Status, headers and JSON body of the next response on `sock`."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = response.read()
    headers = {name.lower(): value for name, value in response.getheaders()}
    return response.status, headers, json.loads(body) if body else None


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes `sock` (after whatever it still sends), within the guard."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def call_add(server: ServerProcess) -> tuple[int, Any]:
    """A well-behaved client's request on a new connection: its status and JSON body."""
    with connect(server) as sock:
        head, body = request_bytes()
        sock.sendall(head + body)
        status, _, answer = read_response(sock)
        return status, answer


def served_again(server: ServerProcess) -> bool:
    """Whether a normal request is answered 200 (retried a bounded number of times: the
    server may still be closing what a test left behind)."""
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, answer = call_add(server)
            if status == 200:
                assert answer["result"]["structuredContent"] == {"result": 42}
                return True
        time.sleep(0.05)
    return False


def lines_since(server: ServerProcess, start: int) -> list[str]:
    return [line for line in server.lines[start:] if line.strip()]


# --- timeouts ------------------------------------------------------------------------------


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    server: ServerProcess,
) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        assert closed_by_server(sock)
        elapsed = time.monotonic() - started
    assert TIMEOUT * 0.8 <= elapsed < TIMEOUT + SLACK
    assert served_again(server)


def test_headers_sent_slowly_get_408_within_the_header_timeout(server: ServerProcess) -> None:
    head, _ = request_bytes()
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(head[:20])
        for index in range(20, 26):  # a byte now and then does not buy more time
            time.sleep(TIMEOUT / 10)
            sock.sendall(head[index : index + 1])
        status, headers, answer = read_response(sock)
        assert closed_by_server(sock)
        elapsed = time.monotonic() - started
    assert status == 408
    assert headers["connection"] == "close"
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"] == (
        f"Request Timeout: the request headers did not arrive within {TIMEOUT:g} s"
    )
    assert TIMEOUT * 0.8 <= elapsed < TIMEOUT + SLACK


def test_a_body_sent_slowly_gets_408_within_the_body_timeout(server: ServerProcess) -> None:
    head, body = request_bytes()
    with connect(server) as sock:
        sock.sendall(head)
        started = time.monotonic()
        for index in range(6):  # a byte now and then does not buy more time
            sock.sendall(body[index : index + 1])
            time.sleep(TIMEOUT / 10)
        status, _, answer = read_response(sock)
        assert closed_by_server(sock)
        elapsed = time.monotonic() - started
    assert status == 408
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"] == (
        f"Request Timeout: the request body did not arrive within {TIMEOUT:g} s"
    )
    assert TIMEOUT * 0.8 <= elapsed < TIMEOUT + SLACK
    assert served_again(server)


def test_a_body_that_arrives_in_time_is_served(server: ServerProcess) -> None:
    head, body = request_bytes()
    with connect(server) as sock:
        sock.sendall(head)
        time.sleep(TIMEOUT / 5)
        sock.sendall(body)
        status, _, answer = read_response(sock)
    assert status == 200
    assert answer["result"]["structuredContent"] == {"result": 42}


def test_responses_name_no_server_software_and_carry_a_date(server: ServerProcess) -> None:
    """`serve_http` turns uvicorn's `Server: uvicorn` banner off; `Date` stays (RFC 9110)."""
    with connect(server) as sock:
        head, body = request_bytes()
        sock.sendall(head + body)
        status, headers, _ = read_response(sock)
    assert status == 200
    assert "server" not in headers
    assert headers["date"].endswith(" GMT")


def test_an_idle_keep_alive_connection_is_closed(server: ServerProcess) -> None:
    head, body = request_bytes()
    with connect(server) as sock:
        for _ in range(2):  # the connection is reused while it is busy
            sock.sendall(head + body)
            status, headers, _ = read_response(sock)
            assert status == 200
            assert headers.get("connection") != "close"
        started = time.monotonic()
        assert closed_by_server(sock)
        elapsed = time.monotonic() - started
    assert TIMEOUT * 0.8 <= elapsed < TIMEOUT + SLACK


def test_endless_headers_get_431(server: ServerProcess) -> None:
    head, _ = request_bytes()
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"y" * 100) for n in range(200))  # ~23 KB
    with connect(server) as sock:
        with contextlib.suppress(OSError):  # the server may close while this is being sent
            sock.sendall(head[:-2])
            for start in range(0, len(filler), 2048):
                sock.sendall(filler[start : start + 2048])
        status, headers, answer = read_response(sock)
        assert closed_by_server(sock)
    assert status == 431
    assert headers["connection"] == "close"
    assert answer["error"]["message"] == (
        "Request Header Fields Too Large: the start line and headers may be at most "
        f"{MAX_HEADER_SIZE} bytes here"
    )
    assert served_again(server)


def test_headers_within_the_limit_are_served_with_a_body_in_the_same_read(
    server: ServerProcess,
) -> None:
    head, body = request_bytes(6000)  # head and body together are past max_header_size
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"y" * 100) for n in range(60))  # ~6.6 KB
    assert len(head) + len(filler) < MAX_HEADER_SIZE < len(head) + len(filler) + len(body)
    with connect(server) as sock:
        sock.sendall(head[:-2] + filler + b"\r\n" + body)
        status, _, answer = read_response(sock)
    assert status == 200
    assert answer["result"]["structuredContent"] == {"result": 42}


# --- connections ---------------------------------------------------------------------------


def test_connections_past_max_connections_get_503_and_the_server_recovers(
    server: ServerProcess,
) -> None:
    assert served_again(server)  # what earlier tests left is gone
    logged = len(server.lines)
    silent = [connect(server) for _ in range(MAX_CONNECTIONS + 10)]
    try:
        refused = 0
        for sock in silent[MAX_CONNECTIONS:]:
            status, headers, answer = read_response(sock)
            assert status == 503
            assert headers["retry-after"] == "1"
            assert answer["error"]["message"] == (
                "Service Unavailable: the server has as many connections open as it takes "
                f"({MAX_CONNECTIONS}); retry in a moment"
            )
            assert closed_by_server(sock)
            refused += 1
        assert refused == 10
        # The silent connections time out, after which a normal client is served.
        for sock in silent[:MAX_CONNECTIONS]:
            assert closed_by_server(sock)
        assert served_again(server)
    finally:
        for sock in silent:
            sock.close()
    # One warning for the refusals, not one per connection.
    assert len(lines_since(server, logged)) <= 2, server.stderr()


@pytest.mark.parametrize("protocol", ["h11", "httptools"])
def test_requests_past_max_connections_each_read_a_whole_503(launcher: Path, protocol: str) -> None:
    # A burst of clients that each send their request at once: refused connections that were
    # closed with the request unread used to be reset, and the client never saw the 503.
    options = {**LIMITS, "header_timeout": GUARD, "http": protocol}  # the held ones stay open
    extra = 30  # within what may linger at once for 20 connections (32)
    with run_server(launcher, options) as process:
        held = [connect(process) for _ in range(MAX_CONNECTIONS)]
        try:
            outcomes = asyncio.run(burst(process, extra))
        finally:
            for sock in held:
                sock.close()
        assert outcomes == [(503, "1", True)] * extra
        assert served_again(process)


async def burst(process: ServerProcess, count: int) -> list[tuple[int, str, bool]] | list[str]:
    """`count` POSTs at once from a real client (some with a body larger than a socket buffer
    holds): each one's status, Retry-After, and whether its body says which limit was hit."""
    url = f"http://127.0.0.1:{process.port}/mcp"
    head, _ = request_bytes()
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if ": " in line)
    del headers["Content-Length"]

    async def one(i: int, http: httpx.AsyncClient) -> tuple[int, str, bool] | str:
        _, body = request_bytes(size=256 * 1024 if i % 10 == 0 else None)
        try:
            response = await http.post(url, content=body, headers=headers)
        except httpx.TransportError as exc:
            return type(exc).__name__
        said = "as many connections open as it takes" in response.json()["error"]["message"]
        return response.status_code, response.headers.get("retry-after", ""), said

    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=GUARD, limits=limits) as http:
        return list(await asyncio.gather(*(one(i, http) for i in range(count))))


def test_the_open_files_limit_caps_connections_so_accept_never_fails(launcher: Path) -> None:
    files = 128  # the child's soft and hard limit on open files
    cap = connection_cap(1000, files)
    silent_count = files + 22
    with run_server(launcher, {"header_timeout": 1.0}, limit_files=files) as process:
        silent = [connect(process) for _ in range(silent_count)]
        try:
            statuses = []
            for sock in silent[cap:]:
                status, _, _ = read_response(sock)
                statuses.append(status)
            assert statuses == [503] * (silent_count - cap)
            for sock in silent[:cap]:
                assert closed_by_server(sock)
            assert served_again(process)
        finally:
            for sock in silent:
                sock.close()
        err = process.stderr()
    assert "Too many open files" not in err
    assert f"max_connections lowered from 1000 to {cap}" in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 3, err


def test_raise_open_files_limit_raises_the_soft_limit_toward_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from mrtr.transport.http_limits import raise_open_files_limit\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))\n"
        "print(raise_open_files_limit(4096), resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=GUARD
    )
    assert done.returncode == 0, done.stderr
    reported, soft, hard = (int(word) for word in done.stdout.split())
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    assert reported == soft == wanted


def test_connection_cap_keeps_descriptors_free() -> None:
    assert connection_cap(1000, None) == 1000
    assert connection_cap(1000, 65536) == 1000
    assert connection_cap(1000, 1024) == 1024 - 128
    assert connection_cap(0, 1024) == 1024 - 128  # "no limit" is the descriptors' limit
    assert connection_cap(10, 128) == 10
    assert connection_cap(1000, 128) == 64


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"header_timeout": -1}, "header_timeout must be a number of seconds >= 0"),
        ({"body_timeout": float("nan")}, "body_timeout must be a number of seconds >= 0"),
        ({"header_timeout": float("inf")}, "header_timeout must be a number of seconds >= 0"),
        ({"keep_alive": 0}, "keep_alive must be > 0"),
        ({"max_connections": -5}, "max_connections must be a whole number >= 0"),
        ({"max_header_size": 1.5}, "max_header_size must be a whole number >= 0"),
    ],
)
def test_limits_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HTTPLimits(**options)


# --- request bodies in flight --------------------------------------------------------------

BIG = 1_000_000


def test_bodies_past_the_inflight_budget_get_503_while_others_are_served(launcher: Path) -> None:
    options = {"max_body_size": BIG, "max_inflight_body_bytes": 2 * BIG + 50_000}
    with run_server(launcher, options) as process:
        head, body = request_bytes(BIG)
        holders = [connect(process) for _ in range(2)]
        try:
            for sock in holders:  # two big bodies, still arriving: the budget is spoken for
                sock.sendall(head + body[:1000])

            def big_request() -> tuple[int, dict[str, str], Any]:
                with connect(process) as sock:
                    sock.sendall(head)
                    with contextlib.suppress(OSError):  # the answer may come before the body
                        sock.sendall(body)
                    return read_response(sock)

            deadline = time.monotonic() + GUARD
            while True:  # until both holders are counted (bounded)
                status, headers, answer = big_request()
                if status == 503 or time.monotonic() > deadline:
                    break
            assert status == 503
            assert headers["retry-after"] == "1"
            assert answer["error"]["message"] == (
                "Service Unavailable: the server is receiving as many request bodies as it "
                f"holds at once ({2 * BIG + 50_000} bytes); retry in a moment"
            )
            # Small requests still fit, and several big ones at once are all refused.
            status, answer = call_add(process)
            assert status == 200
            assert answer["result"]["structuredContent"] == {"result": 42}
            with ThreadPoolExecutor(4) as pool:
                statuses = [result[0] for result in pool.map(lambda _: big_request(), range(4))]
            assert statuses == [503] * 4
        finally:
            for sock in holders:
                sock.close()
        # Once the holders are gone their bytes are free again.
        deadline = time.monotonic() + GUARD
        while big_request()[0] != 200:
            assert time.monotonic() < deadline, "the budget was never given back"
            time.sleep(0.05)


# --- the command line ----------------------------------------------------------------------


def test_mrtr_serve_passes_the_limits_on(launcher: Path) -> None:
    port = free_port()
    command = [
        sys.executable, "-m", "mrtr.cli", "serve", f"{launcher}:server", "--transport", "http",
        "--port", str(port), "--header-timeout", str(TIMEOUT), "--max-connections", "3",
        "--keep-alive", "30", "--body-timeout", "30",
    ]  # fmt: skip
    process = ServerProcess(command, port)
    try:
        with connect(process) as sock:
            started = time.monotonic()
            assert closed_by_server(sock)
            assert TIMEOUT * 0.8 <= time.monotonic() - started < TIMEOUT + SLACK
        assert served_again(process)
        silent = [connect(process) for _ in range(4)]
        try:
            assert read_response(silent[3])[0] == 503
        finally:
            for sock in silent:
                sock.close()
    finally:
        process.stop()
    assert process.process.returncode == 0, process.stderr()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-connections", "5"], "--max-connections applies to --transport http only"),
        (["--transport", "http", "--keep-alive", "0"], "--keep-alive 0.0: give a number more"),
        (["--transport", "http", "--body-timeout", "-1"], "--body-timeout -1.0: give a number >="),
        (["--transport", "http", "--max-body-size", "0"], "--max-body-size 0: give a number more"),
        (
            ["--transport", "http", "--max-body-size", "2000", "--max-inflight-body-bytes", "1000"],
            "max_body_size (2000) is larger than max_inflight_body_bytes (1000)",
        ),
    ],
)
def test_mrtr_serve_checks_the_limits(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "tests/servers/cli_server.py:server", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"timeout_keep_alive": 5}, TypeError, "pass keep_alive=..., not timeout_keep_alive"),
        ({"ws": "websockets"}, ValueError, "serves no WebSockets"),
        ({"http": "no-such-protocol"}, ValueError, "uvicorn's HTTP/1.1 protocols only"),
        ({"keep_alive": 0}, ValueError, "keep_alive must be > 0"),
        ({"max_inflight_body_bytes": 10}, ValueError, "no body that size could ever be received"),
    ],
)
async def test_serve_http_refuses_what_it_cannot_enforce(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await serve_http(Server("refused"), port=free_port(), **options)
