"""The client in its default `auto` mode against real stdio servers of both eras: the official
MCP Python SDK (`mcp`) serving the `initialize` handshake only, and serving 2026-07-28; and
legacy servers that die, or write garbage, when the `server/discover` probe reaches them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mrtr import Client, ClientOptions, ElicitResult
from mrtr.protocol.errors import METHOD_NOT_FOUND, McpError
from mrtr.protocol.types import ElicitRequestParams

ROOT = Path(__file__).resolve().parent.parent
SERVERS = Path(__file__).parent / "servers"
OFFICIAL = str(SERVERS / "official_shop.py")
HOSTILE = str(SERVERS / "probe_hostile_server.py")
GUARD = 60.0  # seconds: only ever reached when something is broken


def region(params: ElicitRequestParams) -> ElicitResult:
    assert params.message == "Ship book to which region?"
    return ElicitResult(action="accept", content={"region": "eu"})


async def exercise(client: Client) -> dict[str, Any]:
    """The one client script both eras must pass, unchanged."""
    steps: list[float] = []
    ordered = await client.call_tool(
        "order", {"item": "book"}, progress_callback=lambda done, total, text: steps.append(done)
    )
    added = await client.call_tool("add", {"a": 2, "b": 3})
    tools = await client.list_tools()
    prompt = await client.get_prompt("greet", {"name": "Ada"})
    readme = await client.read_resource("file:///readme")
    info = await client.discover()
    await client.ping()
    return {
        "ordered": ordered.content[0].text,  # type: ignore[union-attr]
        "added": added.content[0].text,  # type: ignore[union-attr]
        "tools": sorted(t.name for t in tools.tools),
        "prompt": prompt.messages[0].content.text,  # type: ignore[union-attr]
        "readme": readme.contents[0].text,  # type: ignore[union-attr]
        "versions": info.supported_versions,
        "steps": steps,
    }


@pytest.mark.parametrize(
    ("era", "version", "steps"),
    [("legacy", "2025-11-25", [1, 2]), ("modern", "2026-07-28", [])],
)
async def test_one_client_script_passes_on_official_servers_of_both_eras(
    era: str, version: str, steps: list[float]
) -> None:
    async with Client.stdio(sys.executable, [OFFICIAL, era], elicitation_handler=region) as client:
        assert client.era is None
        seen = await exercise(client)
        assert client.era == era and client.protocol_version == version
    assert seen == {
        "ordered": "Ordered book, shipping to eu",
        "added": "5",
        "tools": ["add", "order"],
        "prompt": "Say hello to Ada.",
        "readme": "Read me first.",
        "versions": [version],
        # The legacy tool reports progress; the official MRTR tool does not.
        "steps": steps,
    }


async def test_a_legacy_elicitation_without_a_handler_fails_fast_not_by_timeout() -> None:
    started = time.monotonic()
    async with Client.stdio(sys.executable, [OFFICIAL, "legacy"]) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("order", {"item": "book"})
    # The official server passes on the -32601 the client answered its request with.
    assert raised.value.code == METHOD_NOT_FOUND
    assert "no elicitation handler is registered" in raised.value.message
    # A generous bound, yet a tenth of the request timeout a lost request would wait for.
    assert time.monotonic() - started < ClientOptions().request_timeout / 10


@pytest.mark.parametrize("behaviour", ["exit", "garbage"])
async def test_a_server_failing_the_probe_is_restarted_and_spoken_to_as_legacy(
    behaviour: str,
) -> None:
    # The failure itself decides, never the probe's timeout: the timeout only bounds a broken
    # run (a server starting on a loaded machine can take many seconds to read the probe).
    options = ClientOptions(probe_timeout=GUARD)
    async with Client.stdio(
        sys.executable, [HOSTILE, behaviour], options=options, elicitation_handler=region
    ) as client:
        first_pid = client.transport.pid  # type: ignore[attr-defined]
        result = await client.call_tool("order", {"item": "book"})
        assert client.era == "legacy"
        assert client.transport.pid != first_pid  # type: ignore[attr-defined]
    assert result.content[0].text == "Ordered book, shipping to eu"  # type: ignore[union-attr]


async def test_a_server_dying_of_the_probe_after_its_timeout_is_restarted_as_legacy() -> None:
    # Silent on the probe past its timeout, the server dies when `initialize` follows: it is
    # started afresh and spoken to as legacy, the first call included.
    options = ClientOptions(probe_timeout=0.2)
    async with Client.stdio(
        sys.executable, [HOSTILE, "late-exit"], options=options, elicitation_handler=region
    ) as client:
        first_pid = client.transport.pid  # type: ignore[attr-defined]
        result = await client.call_tool("order", {"item": "book"})
        assert client.era == "legacy"
        assert client.transport.pid != first_pid  # type: ignore[attr-defined]
    assert result.content[0].text == "Ordered book, shipping to eu"  # type: ignore[union-attr]


async def order_book(server_args: list[str]) -> tuple[str | None, str]:
    """The dual-era client of docs/concepts/eras.md: the code does not change with the era."""
    async with Client.stdio(sys.executable, server_args, elicitation_handler=region) as client:
        result = await client.call_tool("order", {"item": "book"})
        return client.era, result.content[0].text  # type: ignore[union-attr]


async def test_the_documented_dual_era_script_runs_unchanged_against_both_eras() -> None:
    assert await order_book([OFFICIAL, "legacy"]) == ("legacy", "Ordered book, shipping to eu")
    assert await order_book([OFFICIAL, "modern"]) == ("modern", "Ordered book, shipping to eu")


def test_mrtr_call_answers_a_legacy_servers_elicitation_at_the_terminal() -> None:
    root = Path(__file__).resolve().parents[1]
    server = [sys.executable, OFFICIAL, "legacy"]
    done = subprocess.run(
        [sys.executable, "-m", "mrtr.cli", "call", "order", "item=book", "--", *server],
        input="a\nasia\n",
        capture_output=True,
        text=True,
        timeout=GUARD,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Ordered book, shipping to asia"
    assert "asks:\n  Ship book to which region?" in done.stderr
    assert '(sending {"region": "asia"})' in done.stderr


async def test_a_modern_server_slow_to_answer_the_probe_is_still_spoken_to_as_modern() -> None:
    # No process starts within a millisecond: the probe goes unanswered past its timeout, as
    # it does for any server starting on a loaded machine, and `initialize` follows it. The
    # server answers both in order, so the late probe answer shows it modern.
    shop = ROOT / "examples" / "shop.py"
    options = ClientOptions(probe_timeout=0.001)
    command = ["-m", "mrtr", "serve", f"{shop}:server"]
    async with Client.stdio(sys.executable, command, options=options) as client:
        result = await client.call_tool("price", {"item": "tea", "quantity": 2})
        assert client.era == "modern" and client.protocol_version == "2026-07-28"
    assert not result.is_error
