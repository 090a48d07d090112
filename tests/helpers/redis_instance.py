"""A real `redis-server` on a free loopback port, started and stopped by the tests.

`redis-server` missing is a failure, never a skip: `scripts/test.sh` installs it.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from helpers.loopback_process import free_port

START_GUARD = 10.0  # seconds: only ever reached when something is broken


class RedisInstance:
    """One redis-server process (no persistence unless `options` ask for it) that can be killed
    and restarted on its port."""

    def __init__(self, *options: str) -> None:
        """`options`: more redis-server arguments (`--maxmemory`, `--appendonly yes`...)."""
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed: apt-get install redis-server "
                "(scripts/test.sh does it when run as root)"
            )
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="mrtr-redis-")
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it answers PING."""
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, *self.options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_GUARD
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"redis-server exited with {self.process.returncode} at start")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Kill it (as a crash would) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=START_GUARD)
        self.process = None


@contextlib.contextmanager
def running_redis(*options: str) -> Iterator[RedisInstance]:
    """A started `RedisInstance` with `options`, stopped and cleaned up afterwards."""
    instance = RedisInstance(*options)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()
        shutil.rmtree(instance.dir, ignore_errors=True)


@pytest.fixture
def redis_instance() -> Iterator[RedisInstance]:
    with running_redis() as instance:
        yield instance
