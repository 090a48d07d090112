"""Several `mrtr serve --transport http` processes behind a real haproxy, for tests: the
helpers live in `benchmarks/cluster.py`, shared with the soak script. Also a bounded wait for a
file one of them writes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from helpers.transport_flow import GUARD

ROOT = Path(__file__).resolve().parents[2]
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
    restart,
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
    "wait_for_file",
    "write_config",
]


def wait_for_file(path: Path, what: str) -> None:
    """Return once `path` exists; fail after `GUARD` seconds."""
    deadline = time.monotonic() + GUARD
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.exists(), f"{what}: no {path.name} after {GUARD} s"
