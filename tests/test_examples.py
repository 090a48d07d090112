"""The programs of examples/ work as their READMEs say, against real transports.

* examples/file_organiser: over stdio, in both protocol eras; deleting asks with the exact list.
* examples/research_assistant: the three sampling rounds, in memory and over stdio.
* examples/fastapi_app: uvicorn on a free loopback port; the REST route and MCP share one store.
* examples/terminal_client: a subprocess fed the user's answers on its standard input.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import aiohttp
import pytest
import uvicorn

from helpers.loopback_process import free_port
from mrtr import (
    Client,
    ClientOptions,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    RoundInfo,
    TextContent,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ORGANISER = EXAMPLES / "file_organiser" / "server.py"
RESEARCH = EXAMPLES / "research_assistant" / "server.py"
FASTAPI_APP = EXAMPLES / "fastapi_app" / "app.py"
TERMINAL = EXAMPLES / "terminal_client" / "client.py"
SHOP = EXAMPLES / "shop.py"


def _load(path: Path) -> ModuleType:
    """A fresh copy of an example module (its module-level state starts empty)."""
    spec = importlib.util.spec_from_file_location(f"example_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


# --- file organiser -------------------------------------------------------------------------


Era = Literal["auto", "modern", "legacy"]


def _organiser(folder: Path, protocol: Era, answer: Any) -> Client:
    return Client.stdio(
        sys.executable,
        [str(ORGANISER), str(folder)],
        elicitation_handler=answer,
        options=ClientOptions(protocol=protocol),
    )


@pytest.mark.parametrize("protocol", ["modern", "legacy"])
async def test_organiser_deletes_only_after_the_user_confirms_the_exact_files(
    tmp_path: Path, protocol: Era
) -> None:
    for name in ("a.tmp", "b.tmp", "keep.txt"):
        (tmp_path / name).write_text(name)
    asked: list[str] = []

    def confirm(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async with _organiser(tmp_path, protocol, confirm) as client:
        result = await client.call_tool("delete_matching", {"pattern": "*.tmp"})
        assert client.era == protocol
    assert asked == ["Delete 2 file(s): a.tmp, b.tmp?"]
    assert _text(result) == "Deleted a.tmp, b.tmp."
    assert _names(tmp_path) == ["keep.txt"]


async def test_organiser_keeps_the_files_when_the_user_declines(tmp_path: Path) -> None:
    (tmp_path / "a.tmp").write_text("a")

    def decline(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async with _organiser(tmp_path, "auto", decline) as client:
        result = await client.call_tool("delete_matching", {"pattern": "*.tmp"})
    assert _text(result) == "Nothing deleted."
    assert (tmp_path / "a.tmp").exists()


async def test_organiser_tidies_and_refuses_paths_outside_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "downloads"
    folder.mkdir()
    for name in ("photo.PNG", "paper.pdf", "notes.xyz"):
        (folder / name).write_text(name)
    (tmp_path / "secret.txt").write_text("outside")
    async with _organiser(folder, "auto", None) as client:
        moved = await client.call_tool("tidy", {})
        escape = await client.call_tool("move", {"name": "../secret.txt", "folder": "documents"})
        listed = await client.call_tool("list_files", {})
    assert moved.structured_content == {"images": ["photo.PNG"], "documents": ["paper.pdf"]}
    assert escape.is_error and "outside the folder" in _text(escape)
    assert (tmp_path / "secret.txt").exists()
    assert listed.structured_content == {"result": ["notes.xyz"]}


# --- research assistant ---------------------------------------------------------------------


def _model(params: CreateMessageRequestParams) -> CreateMessageResult:
    """A deterministic stand-in for the client's LLM."""
    block = params.messages[0].content
    assert isinstance(block, TextContent)
    asked = block.text
    if asked.startswith("Split"):
        reply = "- What scatters light?\n- Why blue more than red?"
    elif asked.startswith("Answer"):
        reply = "Rayleigh scattering. " + str(asked.count("Q: ")) + " notes"
    else:
        reply = f"note on {asked}"
    return CreateMessageResult(role="assistant", content=TextContent(text=reply), model="stub")


async def test_research_plans_investigates_in_one_round_then_writes_up() -> None:
    research = _load(RESEARCH)
    rounds: list[RoundInfo] = []
    options = ClientOptions(on_round=rounds.append)
    async with Client.in_memory(research.server, sampling_handler=_model, options=options) as c:
        result = await c.call_tool("research", {"question": "Why is the sky blue?"})
    assert _text(result) == "Rayleigh scattering. 2 notes"
    assert [info.keys for info in rounds] == [("plan",), ("note-1", "note-2"), ("report",)]


async def test_research_without_a_sampling_client_is_a_clear_error_over_stdio() -> None:
    async with Client.stdio(sys.executable, [str(RESEARCH)]) as client:
        with pytest.raises(Exception, match="sampling"):
            await client.call_tool("research", {"question": "q"})


# --- FastAPI app ----------------------------------------------------------------------------


@pytest.fixture
async def fastapi_url() -> AsyncIterator[str]:
    module = _load(FASTAPI_APP)
    port = free_port()
    config = uvicorn.Config(module.app, host="127.0.0.1", port=port, log_level="warning")
    http = uvicorn.Server(config)
    serving = asyncio.create_task(http.serve())
    try:
        for _ in range(500):  # uvicorn has no event for it: poll, for 5 s at most
            if http.started:
                break
            await asyncio.sleep(0.01)
        assert http.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        http.should_exit = True
        await serving


@pytest.mark.parametrize("protocol", ["modern", "legacy"])
async def test_fastapi_app_serves_its_routes_and_mcp_from_one_store(
    fastapi_url: str, protocol: Era
) -> None:
    def accept(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={})

    options = ClientOptions(protocol=protocol)
    async with Client.http(
        f"{fastapi_url}/mcp", elicitation_handler=accept, options=options
    ) as client:
        added = await client.call_tool("add_note", {"text": "buy tea"})
        await client.call_tool("add_note", {"text": "call Ada"})
        deleted = await client.call_tool("delete_note", {"id": 1})
        assert client.era == protocol
    assert added.structured_content == {"id": 1, "text": "buy tea"}
    assert _text(deleted) == "Deleted note 1."
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fastapi_url}/notes") as response:
            assert response.status == 200
            assert await response.json() == [{"id": 2, "text": "call Ada"}]
        async with http.get(f"{fastapi_url}/notes/1") as response:
            assert response.status == 404


# --- terminal client ------------------------------------------------------------------------


def _terminal(args: list[str], typed: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TERMINAL), *args],
        input=typed,
        capture_output=True,
        text=True,
        timeout=20,
        cwd=ROOT,
    )


def test_terminal_client_fills_in_a_form_for_the_server() -> None:
    done = _terminal(["--call", "order", "item=tea", "--", sys.executable, str(SHOP)], "a\neu\n")
    assert done.returncode == 0, done.stderr
    assert "Connected (modern, 2026-07-28)" in done.stdout
    assert "The server asks: Ship 1 x tea to which region?" in done.stdout
    assert "Ordered 1 x tea, shipping to eu" in done.stdout


def test_terminal_client_declines_and_the_tool_is_told() -> None:
    done = _terminal(["--call", "order", "item=cup", "--", sys.executable, str(SHOP)], "d\n")
    assert done.returncode == 0, done.stderr
    assert "Order cancelled" in done.stdout


def test_terminal_client_types_the_models_replies() -> None:
    typed = "What is light?\nIt is a wave.\nLight scatters.\n"
    done = _terminal(
        ["--call", "research", "question=sky", "depth=1", "--", sys.executable, str(RESEARCH)],
        typed,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("The server asks for a completion of:") == 3
    assert done.stdout.rstrip().endswith("Light scatters.")


def test_terminal_client_refuses_a_missing_server() -> None:
    done = _terminal([], "")
    assert done.returncode == 2
    assert "give a URL, or a command after --" in done.stderr
