"""Protocol revisions this SDK speaks.

The modern revisions carry the version on every request (`_meta`); the legacy ones negotiate
it once, in `initialize`, for a whole session. A dual-era server serves both.
"""

from __future__ import annotations

LATEST_PROTOCOL_VERSION = "2026-07-28"
"""The newest protocol revision this SDK speaks, and the one its clients ask for."""
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = (LATEST_PROTOCOL_VERSION,)
"""The modern (per-request, `_meta`-carried) revisions this SDK speaks."""

#: The `initialize`-based revisions a dual-era server negotiates, newest first.
LEGACY_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""The `initialize`-based revisions a dual-era server negotiates, newest first."""
LATEST_LEGACY_PROTOCOL_VERSION = LEGACY_PROTOCOL_VERSIONS[0]
