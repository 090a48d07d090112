"""`examples/authenticated_server/` runs as its README says: the test authorization server,
the protected server and the client-credentials client, as three real processes on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from helpers.loopback_process import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "authenticated_server"


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"process exited early: {process.stdout.read() if process.stdout else ''!r}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def running(*args: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


def test_the_example_runs_as_its_readme_says() -> None:
    as_port, mcp_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    with (
        running("tests/helpers/oauth_as.py", "--port", str(as_port)) as auth_server,
        running(str(EXAMPLE / "server.py"), "--port", str(mcp_port), "--issuer", issuer) as server,
    ):
        wait_for_port(as_port, auth_server)
        wait_for_port(mcp_port, server)
        client = subprocess.run(
            [
                sys.executable,
                str(EXAMPLE / "client.py"),
                f"http://127.0.0.1:{mcp_port}/mcp",
                "--issuer",
                issuer,
                "--client-id",
                "demo-client",
                "--client-secret",
                "demo-secret",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == [
        "whoami: demo-client (client demo-client; scopes notes:read)",
        "add_note: Saved; you have 1 note(s)",
        'notes: ["buy tea"]',
    ]
    # The README shows the same lines.
    assert "\n".join(client.stdout.splitlines()) in (EXAMPLE / "README.md").read_text()
