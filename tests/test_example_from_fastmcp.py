"""examples/from_fastmcp: a FastMCP 2.x server ported by changing its imports only.

`original.py` is the server as written for FastMCP; `server.py` is the same file with the
imports changed. The test checks that the two differ in their imports alone, then starts
`server.py` as a host would (`mrtr serve` for a 2026-07-28 client, `python server.py` for a
legacy one) and calls every tool, the resource template and the prompt through `mrtr.Client`.

The FastMCP spellings it relies on (`ctx.request_context.lifespan_context`, `ctx.info`,
`Image(data=..., format="png")`, `@mcp.resource("file://{path}")` as a template) are ones
`mrtr` accepts as they are: every step must work.
"""

from __future__ import annotations

import ast
import base64
import os
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from mrtr import (
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
    ImageContent,
    McpError,
    TextContent,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "from_fastmcp"
ORIGINAL = EXAMPLE / "original.py"
PORTED = EXAMPLE / "server.py"
README_TEXT = "Read me first: notes live in SQLite.\n"
PNG_1PX = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
    b"\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef"
    b"\x00\x00\x00\x00IEND\xaeB`\x82"
)


# --- the port changes imports only -----------------------------------------------------------


def _split(path: Path) -> tuple[list[ast.stmt], list[str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    rest = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
    modules = [
        node.module or "" if isinstance(node, ast.ImportFrom) else node.names[0].name
        for node in imports
    ]
    return rest, modules


def test_the_port_changes_only_the_imports() -> None:
    original_body, original_modules = _split(ORIGINAL)
    ported_body, ported_modules = _split(PORTED)
    assert [ast.dump(node) for node in ported_body] == [ast.dump(node) for node in original_body]
    dropped = set(original_modules) - set(ported_modules)
    added = set(ported_modules) - set(original_modules)
    assert dropped == {"fastmcp", "fastmcp.exceptions", "fastmcp.utilities.types"}
    assert added == {"mrtr"}


# --- every tool, in both eras ----------------------------------------------------------------


@dataclass
class Seen:
    """What the client heard besides results."""

    asked: list[str] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)
    progress: list[tuple[float, float | None]] = field(default_factory=list)
    confirm: bool = True


Step = Callable[[Client, Seen], Awaitable[None]]


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def _ok(result: Any) -> Any:
    assert not result.is_error, _text(result)
    return result.structured_content


async def add_note(client: Client, seen: Seen) -> None:
    note = {"title": "Groceries", "body": "milk eggs bread", "tags": ["home"]}
    assert _ok(await client.call_tool("add_note", {"note": note})) == {"result": 1}
    assert any("stored note 1" in str(log.get("data")) for log in seen.logs), seen.logs


async def add_note_refuses_a_bad_note(client: Client, seen: Seen) -> None:
    result = await client.call_tool("add_note", {"note": {"title": "", "body": "x"}})
    assert result.is_error
    assert "note.title" in _text(result)


async def get_note(client: Client, seen: Seen) -> None:
    found = _ok(await client.call_tool("get_note", {"note_id": 1}))
    assert found == {"title": "Groceries", "body": "milk eggs bread", "tags": ["home"]}


async def get_note_raises_a_tool_error(client: Client, seen: Seen) -> None:
    result = await client.call_tool("get_note", {"note_id": 99})
    assert result.is_error
    assert _text(result) == "no note 99: find one with search_notes"


async def search_notes(client: Client, seen: Seen) -> None:
    assert _ok(await client.call_tool("search_notes", {"text": "milk"})) == {"result": [1]}


async def tag_note(client: Client, seen: Seen) -> None:
    tagged = _ok(await client.call_tool("tag_note", {"note_id": 1, "tags": ["food"]}))
    assert tagged["tags"] == ["food", "home"]


async def import_notes(client: Client, seen: Seen) -> None:
    def progress(value: float, total: float | None, message: str | None) -> None:
        seen.progress.append((value, total))

    result = await client.call_tool(
        "import_notes", {"titles": ["a", "b", "c"]}, progress_callback=progress
    )
    assert _ok(result) == {"result": 3}
    assert seen.progress == [(1, 3), (2, 3), (3, 3)]
    assert any(log.get("data") == "imported 3 notes" for log in seen.logs), seen.logs


async def count_words(client: Client, seen: Seen) -> None:
    assert _ok(await client.call_tool("count_words", {"path": "readme.txt"})) == {"result": 7}
    outside = await client.call_tool("count_words", {"path": "../secret.txt"})
    assert outside.is_error
    assert "outside the notes folder" in _text(outside)


async def divide(client: Client, seen: Seen) -> None:
    assert _ok(await client.call_tool("divide", {"a": 7, "b": 2})) == {"result": 3.5}
    by_zero = await client.call_tool("divide", {"a": 1, "b": 0})
    assert by_zero.is_error
    assert _text(by_zero) == "cannot divide by zero: pass a b other than 0"


async def note_chart(client: Client, seen: Seen) -> None:
    result = await client.call_tool("note_chart", {})
    assert not result.is_error, _text(result)
    block = result.content[0]
    assert isinstance(block, ImageContent)
    assert block.mime_type == "image/png"
    png = base64.b64decode(block.data)
    assert png.startswith(b"\x89PNG")
    assert struct.unpack(">I", png[16:20]) == (4,)  # one pixel per note


async def stats(client: Client, seen: Seen) -> None:
    assert _ok(await client.call_tool("stats", {})) == {"notes": 4, "tags": 2}


async def delete_note(client: Client, seen: Seen) -> None:
    seen.confirm = False
    assert _text(await client.call_tool("delete_note", {"note_id": 2})) == "Kept."
    seen.confirm = True
    assert _text(await client.call_tool("delete_note", {"note_id": 1})) == "Deleted note 1."
    assert seen.asked == ["Delete note 2 (a)?", "Delete note 1 (Groceries)?"]


async def read_file_template(client: Client, seen: Seen) -> None:
    result = await client.read_resource("file://readme.txt")
    assert result.contents[0].text == README_TEXT  # type: ignore[union-attr]


async def summarise_prompt(client: Client, seen: Seen) -> None:
    result = await client.get_prompt("summarise", {"note_id": "3"})
    content = result.messages[0].content
    assert isinstance(content, TextContent)
    assert content.text.startswith("Summarise note 3 in one sentence.")


#: Each step, in order (later steps read what earlier ones stored).
STEPS: list[Step] = [
    add_note,
    add_note_refuses_a_bad_note,
    get_note,
    get_note_raises_a_tool_error,
    search_notes,
    tag_note,
    import_notes,
    count_words,
    divide,
    note_chart,
    stats,
    delete_note,
    read_file_template,
    summarise_prompt,
]


def _client(era: Literal["modern", "legacy"], folder: Path, seen: Seen) -> Client:
    def answer(params: ElicitRequestParams) -> ElicitResult:
        seen.asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": seen.confirm})

    def log(params: Any) -> None:
        seen.logs.append(params)

    env = {**os.environ, "NOTES_DIR": str(folder), "NOTES_DB": str(folder / "notes.db")}
    # As a host starts it: `mrtr serve FILE:ATTR`, or the file itself (its `mcp.run()`).
    args = ["-m", "mrtr", "serve", f"{PORTED}:mcp"] if era == "modern" else [str(PORTED)]
    return Client.stdio(
        sys.executable,
        args,
        env=env,
        cwd=str(folder),
        elicitation_handler=answer,
        log_handler=log,
        log_level="info",
        options=ClientOptions(protocol=era),
    )


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_every_tool_of_the_ported_server_runs(
    tmp_path: Path, era: Literal["modern", "legacy"]
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text(README_TEXT, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("not for the model", encoding="utf-8")
    seen = Seen()
    failures: dict[str, str] = {}
    async with _client(era, folder, seen) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert client.era == era
        assert tools == {
            "add_note",
            "get_note",
            "search_notes",
            "tag_note",
            "delete_note",
            "import_notes",
            "count_words",
            "divide",
            "note_chart",
            "stats",
        }
        for step in STEPS:
            try:
                await step(client, seen)
            except (AssertionError, McpError) as error:
                failures[step.__name__] = f"{type(error).__name__}: {error}"
    assert failures == {}


def test_a_typed_answer_reads_as_data_as_in_fastmcp() -> None:
    from pydantic import BaseModel

    from mrtr import ElicitResultTyped

    class Confirm(BaseModel):
        confirm: bool

    answer = ElicitResultTyped[Confirm](action="accept", content=Confirm(confirm=True))
    assert answer.data == Confirm(confirm=True)
    assert ElicitResultTyped[Confirm](action="decline").data is None
