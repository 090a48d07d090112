"""Several `mrtr serve --transport http` processes behind a real haproxy, for tests: the
helpers live in `benchmarks/cluster.py`, shared with the soak script."""

from __future__ import annotations

import sys
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
    "write_config",
]
