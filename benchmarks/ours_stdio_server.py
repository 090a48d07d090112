"""Child process for the stdio workloads: serve `mrtr`'s benchmark server on stdin/stdout.

Usage: python ours_stdio_server.py
"""

from __future__ import annotations

import sys
from pathlib import Path

# Launched by path, so make the repository root importable for `benchmarks.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import run
from benchmarks.ours import build_server
from mrtr.transport.stdio_server import serve_stdio


def main() -> None:
    server = build_server()
    # Same event loop as the parent, the HTTP servers and the official stdio child.
    run(lambda: serve_stdio(server))


if __name__ == "__main__":
    main()
