"""The benchmark's server as a module-level `Server`, so that the cross-process benchmark can
serve it exactly as a user would: `mrtr serve benchmarks/ours_app.py:server --transport http`."""

from __future__ import annotations

from benchmarks.ours import build_server

server = build_server()
