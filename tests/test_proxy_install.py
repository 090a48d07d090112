"""`mrtr install HOST --proxy URL`: a host that starts only stdio servers reaches a remote
2026-07-28 server through `mrtr proxy`, questions included.

The remote server is `mrtr serve examples/shop.py:server --transport http`; the host is the
official SDK's client in the legacy era, running exactly the entry written, as Claude Desktop
does.
"""

from __future__ import annotations

import json
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
from helpers.loopback_process import free_port, listening
from mrtr.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"
#: The mrtr the test imports, for the processes too.
SRC = str(Path(mrtr.__file__).resolve().parent.parent)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_stdio_host_reaches_a_remote_server_through_the_installed_proxy(
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp_path / "claude_desktop_config.json"
    words = ["claude-desktop", "--proxy", url, "--config", str(config), "--name", "remote-shop"]
    status = main(["install", *words, "--env", f"PYTHONPATH={SRC}"])
    assert status == 0
    entry = json.loads(config.read_text())["mcpServers"]["remote-shop"]
    assert entry["command"] == sys.executable
    assert entry["args"] == ["-m", "mrtr", "proxy", url]

    asked: list[str] = []

    async def answer(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"region": "asia"})

    serve = [sys.executable, "-m", "mrtr", "serve", f"{SHOP}:server", "--transport", "http"]
    env = {**os.environ, "PYTHONPATH": SRC}
    with listening([*serve, "--port", str(port)], port, env=env, stderr=subprocess.DEVNULL):
        host = StdioServerParameters(
            command=entry["command"],
            args=entry["args"],
            env={**entry["env"], "PATH": os.environ["PATH"]},
            cwd=str(tmp_path),
        )
        async with mcp.Client(host, mode="legacy", elicitation_callback=answer) as client:
            assert client.session.protocol_version == "2025-11-25"
            order = await client.call_tool("order", {"item": "tea"})
            assert order.content[0].text == "Ordered 1 x tea, shipping to asia"  # type: ignore[union-attr]
    assert asked == ["Ship 1 x tea to which region?"]


def test_install_takes_a_file_or_a_proxy_url_not_both(tmp_path: Path) -> None:
    config = str(tmp_path / "c.json")
    assert main(["install", "json", "--config", config]) == 2
    assert main(["install", "json", f"{SHOP}:server", "--proxy", "https://h/mcp"]) == 2
    assert main(["install", "json", "--proxy", "ftp://h/mcp"]) == 2
