"""Several `mrtr serve --transport http` processes behind a real haproxy, for tests: the
helpers live in `benchmarks/cluster.py`, shared with the soak script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cluster import (  # noqa: E402
    HAPROXY_CONFIG,
    STOP_TIMEOUT,
    Cluster,
    Instance,
    call_tool_once,
    free_port,
    haproxy_binary,
    instance_slots,
    write_config,
)

__all__ = [
    "HAPROXY_CONFIG",
    "ROOT",
    "STOP_TIMEOUT",
    "Cluster",
    "Instance",
    "call_tool_once",
    "free_port",
    "haproxy_binary",
    "instance_slots",
    "restart",
    "write_config",
]


def restart(
    cluster: Cluster,
    index: int,
    env: Mapping[str, str | None] | None = None,
    *,
    timeout: float = 30.0,
) -> int:
    """Replace instance `index` by a new process on the same port, as a rolling restart does:
    SIGTERM (requests in flight finish, haproxy sends new ones elsewhere), then start it with
    the cluster's environment updated by `env` (None removes a variable), and return its pid
    once a request sent through haproxy has reached it (haproxy's health check saw it up)."""
    old = cluster.instances[index]
    if old.process.poll() is None:
        old.process.send_signal(signal.SIGTERM)
        try:
            old.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(old.process.pid, signal.SIGKILL)
            old.process.wait(timeout=STOP_TIMEOUT)
    merged = dict(cluster.env)
    for name, value in (env or {}).items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    deadline = time.monotonic() + timeout
    with old.log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mrtr", "serve", cluster.target,
             "--transport", "http", "--host", "127.0.0.1", "--port", str(old.port)],
            stdout=out, stderr=subprocess.STDOUT, env=merged, cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
    instance = Instance(old.port, process, old.log)
    cluster.instances[index] = instance  # `Cluster.stop` ends it from now on
    while (pid := call_tool_once(old.port, "whoami", timeout=2.0)) is None:
        if process.poll() is not None:
            log = old.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"instance on port {old.port} exited ({process.returncode}): {log}")
        _check(deadline, f"instance on port {old.port} did not start")
        time.sleep(0.05)
    instance.pid = int(pid)
    # Other clients share haproxy's round-robin: a probe reaches it one time in n or so.
    while call_tool_once(cluster.port, "whoami") != instance.pid:
        _check(deadline, f"haproxy did not send a request to the instance on port {old.port}")
        time.sleep(0.05)
    return instance.pid


def _check(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} in time")
