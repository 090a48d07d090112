"""`examples/proxy/run.py` for real: `mrtr proxy` serving examples/shop.py over HTTP, its
asking tool called by a 2026-07-28 client (one round) and a legacy one (asked live)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mrtr

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "proxy" / "run.py"


def test_the_proxy_example_serves_the_shop_to_both_eras() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(mrtr.__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=100, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "modern client: Ordered 1 x tea, shipping to eu (1 input_required round(s))" in lines
    assert "legacy client: Ordered 1 x tea, shipping to eu (0 input_required round(s))" in lines
    assert lines.count("  the shop asks: 'Ship 1 x tea to which region?'") == 2
