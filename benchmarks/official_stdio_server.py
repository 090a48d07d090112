"""Child process for the stdio workloads: serve one official-SDK form on stdin/stdout.

Usage: python official_stdio_server.py {mcpserver|lowlevel}
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

# Launched by path, so make the repository root importable for `benchmarks.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.official import build_lowlevel, build_mcpserver


async def _serve(form: str) -> None:
    if form == "mcpserver":
        await build_mcpserver().run_stdio_async()
        return
    from mcp.server.stdio import stdio_server

    server = build_lowlevel()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    form = sys.argv[1] if len(sys.argv) > 1 else "mcpserver"
    if form not in ("mcpserver", "lowlevel"):
        raise SystemExit(f"unknown form {form!r}")
    # Same event loop as the parent and the HTTP servers.
    anyio.run(_serve, form, backend_options={"use_uvloop": True})


if __name__ == "__main__":
    main()
