"""The README's Python examples run as written (all ```python blocks, in order, one namespace)."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

from mrtr import Client, ElicitResult, Server

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_namespace() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 4, "the README lost its runnable examples"
    namespace: dict[str, Any] = {"__name__": "readme"}
    # The README reads its sealing keys from the environment, as a deployment would.
    os.environ.setdefault(
        "SHOP_STATE_KEYS", f"{secrets.token_urlsafe(32)} {secrets.token_urlsafe(32)}"
    )
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    return namespace


async def test_readme_client_example_runs_its_assertions() -> None:
    namespace = _readme_namespace()
    await namespace["main"]()


async def test_readme_manual_style_handler_completes_after_one_round() -> None:
    namespace = _readme_namespace()
    server: Server = namespace["server"]
    asked: list[str] = []

    def answer(params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "b.txt"})

    async with Client.in_memory(server, elicitation_handler=answer) as client:
        result = await client.call_tool("rename", {"path": "a.txt"})
    assert asked == ["Rename a.txt to?"]
    assert result.content[0].text == "renamed a.txt to b.txt"  # type: ignore[union-attr]


async def test_readme_prompt_resource_and_template_examples_serve() -> None:
    namespace = _readme_namespace()
    async with Client.in_memory(namespace["server"]) as client:
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        static = await client.read_resource("file:///readme")
        row = await client.read_resource("db://rows/7")
    assert prompt.messages[0].content.text == "Say hello to Ada."  # type: ignore[union-attr]
    assert static.contents[0].text == "Read me first."  # type: ignore[union-attr]
    assert row.contents[0].text == '{"id":7}'  # type: ignore[union-attr]


def test_readme_options_examples_build_servers_and_clients() -> None:
    namespace = _readme_namespace()
    assert namespace["secure"].options.request_state_ttl == 300
    assert namespace["options"].input_required.max_rounds == 10
