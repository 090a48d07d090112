"""`Server.run`'s event loop: what a server logs when uvloop is not installed.

The server runs in a child process whose launcher hides uvloop (`sys.modules["uvloop"] = None`
makes `import uvloop` raise ImportError, as on Windows or PyPy, where uvloop is not installed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30.0  # seconds: only ever reached when something is broken

LAUNCHER = """\
import sys

sys.modules["uvloop"] = None  # as if uvloop were not installed

from mrtr import Server

server = Server("fragile")


@server.resource("file:///broken")
def broken() -> str:
    raise RuntimeError("the disk is on fire")


server.run(transport="stdio")
"""


def test_handler_traceback_is_not_chained_to_the_missing_uvloop(tmp_path: Path) -> None:
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {
            "uri": "file:///broken",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, str(launcher)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert process.stdin and process.stdout and process.stderr
    try:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        # End of input would cancel the request: stdin stays open until the answer is in.
        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(process.stdout.readline)
            try:
                line = reading.result(timeout=TIMEOUT)
            except FutureTimeout:
                process.kill()
                raise
    finally:
        process.stdin.close()
        process.wait(timeout=TIMEOUT)
        err = process.stderr.read()
    assert json.loads(line)["error"]["code"] == -32603, line
    # The handler's failure is logged with its traceback, and with nothing else.
    assert "RuntimeError: the disk is on fire" in err, err
    assert "Traceback" in err, err
    assert "uvloop" not in err, err
    assert "During handling of the above exception" not in err, err
