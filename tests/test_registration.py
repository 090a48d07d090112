"""Registration: bare and called decorators, duplicates (`on_duplicate`), components added and
removed at run time, tags enabled and disabled; each change announced to a modern listener and
to a legacy session of the official client over real stdio."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

from mrtr import Client, McpError, Server, ServerOptions, TextContent
from mrtr.protocol import errors

SCRIPT = Path(__file__).resolve().parent / "servers" / "author_server.py"
SERVE = ["-m", "mrtr", "serve", f"{SCRIPT}:server"]
GUARD = 10.0


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def tool_names(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


async def test_a_bare_decorator_registers_and_keeps_the_function() -> None:
    server = Server("s")

    @server.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @server.prompt
    def greet(name: str) -> str:
        return f"Hello {name}"

    assert add(1, 2) == 3  # the name still means the function
    assert greet("Bob") == "Hello Bob"
    async with Client.in_memory(server) as client:
        assert await tool_names(client) == ["add"]
        assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
        prompts = await client.list_prompts()
    assert [p.name for p in prompts.prompts] == ["greet"]


def test_a_bare_resource_decorator_says_it_needs_a_uri() -> None:
    server = Server("s")
    with pytest.raises(TypeError, match=r"@server.resource needs its URI: @server.resource\(uri\)"):
        server.resource(lambda: "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"@server.resource_template needs its URI"):
        server.resource_template(lambda: "x")  # type: ignore[arg-type]


async def test_a_duplicate_warns_and_replaces_by_default(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("s")
    server.add_tool(lambda: "first", name="pick")
    with caplog.at_level(logging.WARNING, "mrtr.server"):
        server.add_tool(lambda: "second", name="pick")
    assert any("tool 'pick' registered again" in r.getMessage() for r in caplog.records)
    async with Client.in_memory(server) as client:
        assert text_of(await client.call_tool("pick")) == "second"


@pytest.mark.parametrize("kind", ["tool", "prompt", "resource", "resource template"])
def test_on_duplicate_error_refuses_and_keeps_the_first(kind: str) -> None:
    server = Server("s", options=ServerOptions(on_duplicate="error"))

    def register(fn: Any) -> None:
        if kind == "tool":
            server.add_tool(fn, name="x")
        elif kind == "prompt":
            server.add_prompt(fn, name="x")
        elif kind == "resource":
            server.add_resource(fn, "file:///x")
        else:
            server.add_resource_template(fn, "db://{id}")

    def first(id: str = "") -> str:
        return "first"

    def second(id: str = "") -> str:
        return "second"

    register(first)
    with pytest.raises(ValueError, match=f"{kind} .* is already registered"):
        register(second)


async def test_on_duplicate_replace_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("s", options=ServerOptions(on_duplicate="replace"))
    with caplog.at_level(logging.WARNING, "mrtr.server"):
        server.add_resource_template(lambda id: f"a{id}", "db://{id}", name="a")
        server.add_resource_template(lambda id: f"b{id}", "db://{id}", name="b")
    assert caplog.records == []
    async with Client.in_memory(server) as client:
        templates = await client.list_resource_templates()
        read = await client.read_resource("db://7")
    assert [t.name for t in templates.resource_templates] == ["b"]
    assert read.contents[0].text == "b7"  # type: ignore[union-attr]


def test_on_duplicate_must_be_a_known_policy() -> None:
    with pytest.raises(ValueError, match="on_duplicate must be 'warn', 'error' or 'replace'"):
        ServerOptions(on_duplicate="ignore")  # type: ignore[arg-type]


async def test_components_added_and_removed_at_run_time_are_announced() -> None:
    server = Server("s")
    server.add_tool(lambda: "kept", name="kept")
    server.add_prompt(lambda: "hi", name="hello")
    server.add_resource(lambda: "r", "file:///r")
    server.add_resource_template(lambda id: id, "db://{id}")
    async with Client.in_memory(server) as client, client.listen(tools=True) as changes:
        server.add_tool(lambda: "new", name="fresh")
        change = await asyncio.wait_for(anext(aiter(changes)), GUARD)
        assert change.kind == "tools"
        assert await tool_names(client) == ["kept", "fresh"]
        server.remove_tool("fresh")
        change = await asyncio.wait_for(anext(aiter(changes)), GUARD)
        assert change.kind == "tools"
        assert await tool_names(client) == ["kept"]
        with pytest.raises(McpError) as raised:
            await client.call_tool("fresh")
        assert raised.value.code == errors.INVALID_PARAMS
        server.remove_prompt("hello")
        server.remove_resource("file:///r")
        server.remove_resource("db://{id}")
        assert (await client.list_prompts()).prompts == []
        assert (await client.list_resources()).resources == []
        assert (await client.list_resource_templates()).resource_templates == []
    for remove, key in (
        (server.remove_tool, "fresh"),
        (server.remove_prompt, "hello"),
        (server.remove_resource, "file:///r"),
    ):
        with pytest.raises(KeyError, match="no "):
            remove(key)


async def test_disabled_tags_hide_components_until_enabled() -> None:
    server = Server("s")
    server.add_tool(lambda: "a", name="always")
    server.add_tool(lambda: "b", name="beta_tool", tags={"beta"})
    server.add_tool(lambda: "c", name="admin_tool", tags=["admin", "beta"])
    server.add_prompt(lambda: "p", name="beta_prompt", tags={"beta"})
    server.add_resource(lambda: "r", "file:///beta", tags={"beta"})
    server.add_resource_template(lambda id: id, "beta://{id}", tags="beta")
    async with Client.in_memory(server) as client, client.listen(tools=True) as changes:
        server.disable("beta")
        change = await asyncio.wait_for(anext(aiter(changes)), GUARD)
        assert change.kind == "tools"
        assert await tool_names(client) == ["always"]
        assert (await client.list_prompts()).prompts == []
        assert (await client.list_resources()).resources == []
        assert (await client.list_resource_templates()).resource_templates == []
        for call in (
            client.call_tool("beta_tool"),
            client.get_prompt("beta_prompt"),
            client.read_resource("file:///beta"),
            client.read_resource("beta://1"),
        ):
            with pytest.raises(McpError) as raised:
                await call
            assert raised.value.code == errors.INVALID_PARAMS
        server.disable("admin")
        server.enable("beta")
        assert await tool_names(client) == ["always", "beta_tool"]  # admin still hides one
        assert text_of(await client.call_tool("beta_tool")) == "b"
        assert (await client.read_resource("beta://1")).contents[0].text == "1"  # type: ignore[union-attr]


async def test_a_legacy_session_of_the_official_client_hears_runtime_changes() -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            changed.set()

    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=SERVE),
        mode="legacy",
        message_handler=on_message,
    ) as official:
        names = [t.name for t in (await official.list_tools()).tools]
        assert "experiment" in names and "leak" in names  # bare decorators registered
        await official.call_tool("toggle_beta", {"on": False})
        await asyncio.wait_for(changed.wait(), GUARD)
        names = [t.name for t in (await official.list_tools()).tools]
        assert "experiment" not in names
        with pytest.raises(mcp.MCPError, match="Unknown tool: 'experiment'"):
            await official.call_tool("experiment", {})
        changed.clear()
        await official.call_tool("toggle_beta", {"on": True})
        await asyncio.wait_for(changed.wait(), GUARD)
        shown = await official.call_tool("experiment", {})
    assert shown.content[0].text == "experimental"  # type: ignore[union-attr]
