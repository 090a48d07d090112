"""Protocol revisions this SDK speaks.

The modern revisions carry the version on every request (`_meta`); the legacy ones negotiate
it once, in `initialize`, for a whole session. A dual-era server serves both.
"""

from __future__ import annotations

LATEST_PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = (LATEST_PROTOCOL_VERSION,)

#: The `initialize`-based revisions a dual-era server negotiates, newest first.
LEGACY_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_LEGACY_PROTOCOL_VERSION = LEGACY_PROTOCOL_VERSIONS[0]
