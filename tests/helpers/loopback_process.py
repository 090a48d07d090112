"""Servers in child processes on loopback: a free port, waiting until one listens (bounded),
and a process that is always stopped, killed if it does not stop in time."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

GUARD = 20.0  # seconds: only ever reached when something is broken
#: Seconds a server may take to start listening: far above the second or so it takes, since a
#: Python process importing its dependencies on a machine with a load average of 20 has been
#: seen to take more than 10.
START_GUARD = 60.0


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(
    port: int,
    process: subprocess.Popen[Any],
    timeout: float = START_GUARD,
    describe: Callable[[], str] = lambda: "",
) -> None:
    """Return once 127.0.0.1:`port` accepts connections; fail if `process` exits first or
    `timeout` passes (`describe()` adds what the server said)."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, f"the server exited at start {describe()}".strip()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        assert time.monotonic() < deadline, f"the server never listened {describe()}".strip()
        time.sleep(0.05)


def stop(process: subprocess.Popen[Any], timeout: float = GUARD) -> None:
    """Terminate `process` and reap it, killing it if it does not end within `timeout`."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def listening(
    command: list[str], port: int, start_timeout: float = GUARD, **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """`command` (a server that will listen on `port`) in a child process, its output dropped
    unless `popen` says otherwise, until it listens (within `start_timeout` seconds); stopped
    at the end."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.DEVNULL)
    process = subprocess.Popen(command, **popen)
    try:
        wait_listening(port, process, start_timeout)
        yield process
    finally:
        stop(process)
