"""The handler-program server (`tests/helpers/replay_programs.py`) on stdio.

Run as `python tests/servers/replay_program_server.py`; it finds the programs module by path.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, only this file's own directory is on sys.path; the programs live one level up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.replay_programs import build_program_server

if __name__ == "__main__":
    build_program_server().run("stdio")
