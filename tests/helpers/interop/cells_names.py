"""The names of the matrix's checks, shared by the cells and the known failures."""

from __future__ import annotations

CLIENT_CHECKS = [
    "initialize",
    "tools/list",
    "tools/call",
    "elicit once (accept)",
    "elicit once (decline)",
    "elicit once (cancel)",
    "elicit twice",
    "sampling",
    "roots",
    "logging/setLevel",
    "progress and logs",
    "prompt",
    "resource",
    "template",
    "unknown tool",
    "call after unknown tool",
    "bad arguments",
    "call after bad arguments",
    "unknown resource",
    "read after unknown resource",
    "unknown method",
    "call after unknown method",
]
"""What a peer client checks against our matrix server (tests/interop/drivers), in order."""

ERROR_PATH_CHECKS = CLIENT_CHECKS[CLIENT_CHECKS.index("unknown tool") :]
"""The error paths, each followed by a call that must still work."""
