"""Every example server starts the ways a host starts it, and answers a tool call.

* `mrtr serve FILE` over stdio, from `/`, configured by environment variables only (a host
  passes no arguments of its own);
* `python FILE` (with the folder argument where the example takes one), for the examples whose
  script serves stdio;
* the entry `mrtr install json FILE` writes, started with `env -i` from `/`.

`examples/long_running_task` also runs as an HTTP script (tests/test_example_long_running_task.py);
examples/authenticated_server, examples/fastapi_app and examples/two_instances/run.py are HTTP
programs with tests of their own.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mrtr import (
    CallToolResult,
    Client,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    TextContent,
)
from mrtr.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _sample(params: CreateMessageRequestParams) -> CreateMessageResult:
    """A stand-in for the host's model: one sub-question, then its notes, then the report."""
    block = params.messages[0].content
    assert isinstance(block, TextContent)
    reply = "- why?" if block.text.startswith("Split") else f"reply to {block.text[:6]}"
    return CreateMessageResult(role="assistant", content=TextContent(text=reply), model="stub")


def _elicit(params: ElicitRequestParams) -> ElicitResult:
    if "month" in params.message:
        return ElicitResult(action="accept", content={"month": "March"})
    return ElicitResult(action="accept", content={"include": False})


@dataclass(frozen=True)
class Example:
    """An example server, one tool call it answers, and how it takes its settings."""

    path: str
    tool: str
    arguments: dict[str, Any]
    answer: str  # the text of the result
    script: bool  # `python FILE` serves stdio
    folder: bool = False  # takes a folder: ORGANISE_ROOT, or the script's argument
    env: dict[str, str] = field(default_factory=dict)


ORGANISER = Example(
    "file_organiser/server.py", "list_files", {}, '["notes.txt"]', script=True, folder=True
)
EXAMPLE_SERVERS = [
    Example("shop.py", "price", {"item": "tea", "quantity": 2}, "9.0", script=True),
    ORGANISER,
    Example(
        "research_assistant/server.py",
        "research",
        {"question": "sky", "depth": 1},
        "reply to Answer",
        script=True,
    ),
    Example(
        "long_running_task/server.py",
        "monthly_report",
        {"team": "platform"},
        "Report for platform, March: 42 items (final figures only)",
        script=False,
    ),
    Example("two_instances/server.py", "whoami", {}, "", script=False),
]

MODES = ("serve", "script", "install")
CASES = [
    pytest.param(example, mode, id=f"{example.path}-{mode}")
    for example in EXAMPLE_SERVERS
    for mode in MODES
    if mode != "script" or example.script
]


def _text(result: CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _installed_entry(file: Path, env: dict[str, str]) -> dict[str, Any]:
    words = [f"--env={name}={value}" for name, value in env.items()]
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["install", "json", str(file), *words]) == 0
    (entry,) = json.loads(printed.getvalue()).values()
    return dict(entry)


def _client(example: Example, mode: str, folder: Path) -> Client:
    file = EXAMPLES / example.path
    env = {"ORGANISE_ROOT": str(folder)} if example.folder else {}
    handlers: dict[str, Callable[..., Any]] = {
        "sampling_handler": _sample,
        "elicitation_handler": _elicit,
    }
    if mode == "serve":
        return Client.stdio(
            sys.executable, ["-m", "mrtr", "serve", str(file)], env=env, cwd="/", **handlers
        )
    if mode == "script":
        args = [str(file), str(folder)] if example.folder else [str(file)]
        return Client.stdio(sys.executable, args, cwd="/", **handlers)
    entry = _installed_entry(file, env)
    pairs = [f"{name}={value}" for name, value in entry.get("env", {}).items()]
    return Client.stdio(
        "env", ["-i", *pairs, entry["command"], *entry["args"]], cwd="/", **handlers
    )


@pytest.mark.parametrize(("example", "mode"), CASES)
async def test_the_example_answers_a_tool_call_started_as_a_host_starts_it(
    example: Example, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORGANISE_ROOT", raising=False)
    (tmp_path / "notes.txt").write_text("tea")
    async with _client(example, mode, tmp_path) as client:
        result = await client.call_tool(example.tool, example.arguments)
    assert example.answer in _text(result)
