"""The official Python SDK's clients through `mrtr proxy`, to an mcp 1.30 FastMCP backend
whose tool asks twice. `mcp==2.3.0` over stdio: in `mode="auto"` it finds the proxy modern
and answers in MRTR rounds itself; in `mode="legacy"` it is asked live. `mcp==1.30.0` (legacy
only), over the proxy's stdio and Streamable HTTP. The TypeScript SDK 2.x client, modern
and legacy, over HTTP. Either way the backend's tool runs once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

import mrtr
from helpers.interop.peers import NODE, NODE_DIR, npm_package, venv_python
from helpers.loopback_process import free_port, listening

pytestmark = pytest.mark.timeout(120)

BACKEND = Path(__file__).resolve().parent / "servers" / "proxy_backend_mcp1.py"
#: The mrtr the test imports, for the proxy process too.
SRC = str(Path(mrtr.__file__).resolve().parent.parent)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_answers_a_backend_asking_twice(
    tmp_path: Path, mode: str
) -> None:
    ledger = tmp_path / "ledger"
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        content = {"size": "medium"} if params.message.startswith("Size") else {"ok": True}
        return mcp_types.ElicitResult(action="accept", content=content)

    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mrtr", "proxy", "--", str(venv_python("mcp1")), str(BACKEND)],
        env={**os.environ, "PYTHONPATH": SRC, "PROXY_LEDGER": str(ledger)},
    )
    async with mcp.Client(proxy, mode=mode, elicitation_callback=answer) as client:  # type: ignore[arg-type]
        result = await client.call_tool("book", {"item": "boat"})
    assert result.content[0].text == "booked a medium boat"  # type: ignore[union-attr]
    assert asked == ["Size of the boat?", "Book a medium boat?"]
    assert ledger.read_text().splitlines() == ["run boat"]


CLIENT_1_30 = Path(__file__).resolve().parent / "servers" / "proxy_mcp1_client.py"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_mcp_1_30_client_answers_a_backend_asking_twice(tmp_path: Path, transport: str) -> None:
    ledger = tmp_path / "ledger"
    mcp1 = str(venv_python("mcp1"))
    env = {**os.environ, "PYTHONPATH": SRC, "PROXY_LEDGER": str(ledger)}
    proxy = [sys.executable, "-m", "mrtr", "proxy"]
    backend = ["--", mcp1, str(BACKEND)]
    if transport == "stdio":
        done = subprocess.run(
            [mcp1, str(CLIENT_1_30), "stdio", *proxy, *backend],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip
    else:
        port = free_port()
        http = ["--transport", "http", "--port", str(port)]
        with listening([*proxy, *http, *backend], port, env=env, stderr=subprocess.DEVNULL):
            done = subprocess.run(
                [mcp1, str(CLIENT_1_30), "http", f"http://127.0.0.1:{port}/mcp"],
                capture_output=True, text=True, timeout=90, env=env,
            )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "asked: Size of the bike?",
        "asked: Book a tiny bike?",
        "result: booked a tiny bike",
    ]
    assert ledger.read_text().splitlines() == ["run bike"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_typescript_v2_client_answers_a_backend_asking_twice(tmp_path: Path, mode: str) -> None:
    ledger = tmp_path / "ledger"
    npm_package("@modelcontextprotocol/client")
    # Beside the npm peers, where its imports resolve (ESM has no NODE_PATH).
    driver = NODE_DIR / "drivers" / "proxy_ts2_client.mjs"
    driver.parent.mkdir(exist_ok=True)
    source = (Path(__file__).resolve().parent / "servers" / driver.name).read_bytes()
    if not driver.exists() or driver.read_bytes() != source:
        partial = driver.with_name(f".{driver.name}.{os.getpid()}")
        partial.write_bytes(source)
        os.replace(partial, driver)
    env = {**os.environ, "PYTHONPATH": SRC, "PROXY_LEDGER": str(ledger)}
    port = free_port()
    proxy = [sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--port", str(port)]
    backend = ["--", str(venv_python("mcp1")), str(BACKEND)]
    with listening([*proxy, *backend], port, env=env, stderr=subprocess.DEVNULL):
        done = subprocess.run(
            [str(NODE), str(driver), mode, f"http://127.0.0.1:{port}/mcp"],
            capture_output=True, text=True, timeout=90, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("version: 2026-07-28" if mode == "auto" else "version: 2025-11-25")
    assert lines[1:] == [
        "asked: Size of the ship?",
        "asked: Book a huge ship?",
        "result: booked a huge ship",
    ]
    assert ledger.read_text().splitlines() == ["run ship"]
