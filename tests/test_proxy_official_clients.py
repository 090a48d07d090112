"""The official Python SDK's client (`mcp==2.3.0`) through `mrtr proxy` over stdio, to an
mcp 1.30 FastMCP backend whose tool asks twice: in `mode="auto"` it finds the proxy modern
and answers in MRTR rounds itself; in `mode="legacy"` it is asked live. Either way the
backend's tool runs once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

import mrtr
from interop.peers import venv_python

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
