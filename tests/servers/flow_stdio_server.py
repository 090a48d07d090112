"""The transport flow's server (`tests/helpers/transport_flow.py`) on stdio.

Run as `python tests/servers/flow_stdio_server.py`; it finds the flow module by path.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, only this file's own directory is on sys.path; the flow lives one level up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.transport_flow import build_flow_server

if __name__ == "__main__":
    build_flow_server().run("stdio")
