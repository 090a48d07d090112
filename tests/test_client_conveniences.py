"""Client conveniences against real servers: `result.data`, every page of a list, `mcp.json`.

Servers are real subprocesses: `mrtr serve` of `servers/conveniences_server.py` (two items a
page) over stdio and over HTTP on loopback, the official SDK's legacy server
(`servers/official_shop.py legacy`), and a hand-written server that breaks its promises
(`servers/lying_list_server.py`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from helpers.loopback_process import free_port
from mrtr import CallToolResult, Client, ClientGroup, ClientOptions, ElicitResult, McpError
from mrtr.client import HttpServerConfig, StdioServerConfig, load_config, tool_output
from mrtr.client.config import parse_config
from mrtr.protocol.errors import PROTOCOL_VIOLATION

ROOT = Path(__file__).resolve().parent.parent
SERVERS = Path(__file__).resolve().parent / "servers"
CONVENIENCES = f"{SERVERS / 'conveniences_server.py'}:server"
SERVE = ["-m", "mrtr.cli", "serve", CONVENIENCES]
OFFICIAL = [str(SERVERS / "official_shop.py"), "legacy"]
LIAR = str(SERVERS / "lying_list_server.py")


class Point(BaseModel):
    x: int
    y: int


def stdio_client(**kwargs: Any) -> Client:
    return Client.stdio(sys.executable, SERVE, **kwargs)


@pytest.fixture
def http_url() -> Iterator[str]:
    """`mrtr serve` of the conveniences server over HTTP on a free loopback port."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, *SERVE, "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        for _ in range(200):  # until it listens (bounded: 10 s)
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the HTTP server did not start listening")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- result.data -------------------------------------------------------------------------


async def test_data_reads_each_output_shape_once_the_tools_are_listed() -> None:
    async with stdio_client() as client:
        await client.all_tools()
        assert (await client.call_tool("add", {"a": 1, "b": 2})).data == 3  # unwrapped
        assert (await client.call_tool("evens", {"n": 3})).data == [0, 2, 4]
        point = await client.call_tool("point", {"x": 3, "y": 4})
        assert point.data == {"x": 3, "y": 4}  # an object output is as it is
        assert point.structured_content == {"x": 3, "y": 4}
        shout = await client.call_tool("shout", {"text": "hi"})
        assert shout.data is None and shout.content[0].text == "HI"  # type: ignore[union-attr]
        broken = await client.call_tool("broken", {})
        assert broken.is_error is True and broken.data is None


async def test_output_type_validates_into_the_type_given() -> None:
    async with stdio_client() as client:  # no tools/list: output_type alone decides
        point = await client.call_tool("point", {"x": 3, "y": 4}, output_type=Point)
        assert point.data == Point(x=3, y=4) and isinstance(point.data, Point)
        evens = await client.call_tool("evens", {"n": 2}, output_type=list[int])
        assert evens.data == [0, 2]
        added = await client.call_tool("add", {"a": 2, "b": 2}, output_type=int)
        assert added.data == 4
        with pytest.raises(McpError) as wrong:
            await client.call_tool("add", {"a": 1, "b": 2}, output_type=Point)
        with pytest.raises(McpError) as wrong_item:
            await client.call_tool("evens", {"n": 2}, output_type=list[str])
        with pytest.raises(McpError) as no_content:
            await client.call_tool("shout", {"text": "x"}, output_type=str)
    assert wrong.value.code == PROTOCOL_VIOLATION
    assert str(wrong.value) == (
        "tools/call 'add': structuredContent does not fit Point: x: Field required "
        "(and 1 more problem)"
    )
    assert wrong_item.value.code == PROTOCOL_VIOLATION
    assert "structuredContent does not fit list[str]: 0: Input should be a valid string" in str(
        wrong_item.value
    )
    assert str(no_content.value) == (
        "tools/call 'shout': there is no structuredContent to read as str"
    )


async def test_without_a_listed_schema_or_type_data_is_the_content_as_sent() -> None:
    async with stdio_client() as client:
        result = await client.call_tool("add", {"a": 1, "b": 2})
    assert result.data == {"result": 3}  # nothing says it is a wrapper


@pytest.mark.parametrize("protocol", ["modern", "legacy"])
async def test_data_after_the_server_asked_a_question(protocol: str) -> None:
    def answer(params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"n": 7})

    options = ClientOptions(protocol=protocol)  # type: ignore[arg-type]
    async with stdio_client(options=options, elicitation_handler=answer) as client:
        await client.all_tools()
        result = await client.call_tool("count", {"item": "cups"})
        assert client.era == protocol
    assert result.data == 7


async def test_data_from_the_official_sdks_legacy_server() -> None:
    async with Client.stdio(sys.executable, OFFICIAL) as client:
        tools = {tool.name: tool for tool in await client.all_tools()}
        result = await client.call_tool("add", {"a": 20, "b": 22})
        assert client.era == "legacy"
    assert tools["add"].output_schema is not None
    assert result.structured_content == {"result": 42}
    assert result.data == 42


async def test_output_that_breaks_the_listed_schema_is_refused() -> None:
    async with Client.stdio(sys.executable, [LIAR, "loop"]) as client:
        await client.list_tools()
        liar_result = await client.call_tool("liar", {})  # checked when `data` is read
        silent_result = await client.call_tool("silent", {})
        with pytest.raises(McpError) as typed:
            await client.call_tool("liar", {}, output_type=dict[str, str])  # checked at once
    with pytest.raises(McpError) as liar:
        liar_result.data  # noqa: B018 - reading it is the check
    with pytest.raises(McpError) as silent:
        silent_result.data  # noqa: B018
    assert typed.value.code == PROTOCOL_VIOLATION
    assert "does not match the tool's outputSchema: at count:" in str(typed.value)
    assert liar.value.code == silent.value.code == PROTOCOL_VIOLATION
    assert str(liar.value) == (
        "tools/call 'liar': structuredContent does not match the tool's outputSchema: "
        "at count: 'many' is not of type 'integer'"
    )
    assert str(silent.value) == (
        "tools/call 'silent': the tool has an outputSchema but sent no structuredContent"
    )


# --- every page ----------------------------------------------------------------------------


async def test_every_list_follows_next_cursor_to_the_end(http_url: str) -> None:
    async with Client.http(http_url) as client:
        first = await client.list_tools()  # still one page
        tools = await client.all_tools()
        prompts = await client.all_prompts()
        resources = await client.all_resources()
        templates = await client.all_resource_templates()
        streamed = [tool.name async for tool in client.iter_tools()]
    assert [tool.name for tool in first.tools] == ["add", "point"] and first.next_cursor
    names = ["add", "point", "evens", "shout", "count", "broken"]
    assert [tool.name for tool in tools] == names and streamed == names
    assert [prompt.name for prompt in prompts] == [f"prompt-{n}" for n in range(5)]
    assert [resource.uri for resource in resources] == [f"file:///r{n}" for n in range(5)]
    assert [t.uri_template for t in templates] == [f"db://t{n}/{{id}}" for n in range(5)]


async def test_max_pages_bounds_a_list() -> None:
    async with stdio_client() as client:
        with pytest.raises(McpError) as error:
            await client.all_tools(max_pages=2)  # 6 tools, 2 a page: 3 pages
        assert len(await client.all_tools(max_pages=3)) == 6
        with pytest.raises(ValueError, match="max_pages must be at least 1"):
            await client.all_prompts(max_pages=0)
    assert error.value.code == PROTOCOL_VIOLATION
    assert str(error.value) == (
        "tools/list: the server still had more after 2 pages (max_pages); "
        "pass a larger max_pages to read further"
    )


async def test_a_server_repeating_or_inventing_cursors_cannot_loop_the_client() -> None:
    async with Client.stdio(sys.executable, [LIAR, "loop"]) as client:
        with pytest.raises(McpError) as repeated:
            await client.all_tools()
    async with Client.stdio(sys.executable, [LIAR, "endless"]) as client:
        with pytest.raises(McpError) as endless:
            await client.all_tools(max_pages=20)
    assert repeated.value.code == endless.value.code == PROTOCOL_VIOLATION
    assert "nextCursor it had already returned ('again')" in str(repeated.value)
    assert "still had more after 20 pages" in str(endless.value)


# --- mcp.json --------------------------------------------------------------------------------


def test_config_reads_the_host_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONV_TOKEN", "s3cret")
    monkeypatch.delenv("CONV_MISSING", raising=False)
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "local": {
                        "command": "python3",
                        "args": ["server.py", "--token=${CONV_TOKEN}"],
                        "env": {"TOKEN": "${env:CONV_TOKEN}", "MODE": "${CONV_MISSING:-dev}"},
                        "cwd": "work",
                    },
                    "remote": {
                        "type": "http",
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "Bearer ${CONV_TOKEN}"},
                    },
                    "plain-url": {"url": "http://127.0.0.1:9/mcp"},
                    "off": {"command": "nothing", "disabled": True},
                    "old": {"type": "sse", "url": "https://example.com/sse"},
                    "unset": {"command": "x", "args": ["${CONV_MISSING}"]},
                    "empty": {},
                }
            }
        )
    )
    servers, invalid = parse_config(path)
    assert servers == {
        "local": StdioServerConfig(
            name="local",
            command="python3",
            args=("server.py", "--token=s3cret"),
            env={"TOKEN": "s3cret", "MODE": "dev"},
            cwd=str(tmp_path / "work"),
        ),
        "remote": HttpServerConfig(
            name="remote",
            url="https://example.com/mcp",
            headers={"Authorization": "Bearer s3cret"},
        ),
        "plain-url": HttpServerConfig(name="plain-url", url="http://127.0.0.1:9/mcp"),
    }
    assert {name: str(error) for name, error in invalid.items()} == {
        "old": "server 'old': the HTTP+SSE transport (type \"sse\", protocol 2024-11-05) is not "
        "supported; point it at the server's Streamable HTTP endpoint instead",
        "unset": "server 'unset': args names the environment variable CONV_MISSING, which is "
        "not set",
        "empty": 'server \'empty\': needs "command" (a stdio server) or "url" (a Streamable '
        "HTTP server)",
    }
    with pytest.raises(ValueError, match="server 'old': the HTTP\\+SSE transport"):
        load_config(path)


def test_config_reads_vs_code_servers_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    vscode = {
        "servers": {
            "a": {"type": "stdio", "command": "node", "args": ["a.js"]},
            "b": {"type": "http", "url": "http://localhost:3000/mcp"},
        }
    }
    assert load_config(vscode) == {
        "a": StdioServerConfig(name="a", command="node", args=("a.js",)),
        "b": HttpServerConfig(name="b", url="http://localhost:3000/mcp"),
    }
    with pytest.raises(ValueError, match='needs an "mcpServers"'):
        load_config({"tools": {}})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_config(broken)
    with pytest.raises(ValueError, match="args must be a list of strings"):
        load_config({"mcpServers": {"x": {"command": "a", "args": "b c"}}})
    with pytest.raises(ValueError, match="is not an http\\(s\\) URL"):
        load_config({"mcpServers": {"x": {"url": "file:///etc/passwd"}}})
    with pytest.raises(ValueError, match="unknown transport type 'websocket'"):
        load_config({"mcpServers": {"x": {"type": "websocket", "url": "ws://h/"}}})


async def test_from_config_starts_the_server_a_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONV_PYTHON", sys.executable)
    path = tmp_path / "mcp.json"
    entry = {"command": "${env:CONV_PYTHON}", "args": SERVE, "cwd": str(ROOT)}
    path.write_text(json.dumps({"mcpServers": {"conv": entry}}))
    async with Client.from_config(path) as client:
        result = await client.call_tool("add", {"a": 1, "b": 1}, output_type=int)
        assert client.era == "modern"
    assert result.data == 2

    two = {"mcpServers": {"a": entry, "b": entry}}
    with pytest.raises(ValueError, match="holds 2 servers \\('a', 'b'\\): pass name="):
        Client.from_config(two)
    with pytest.raises(ValueError, match="has no server 'c'"):
        Client.from_config(two, name="c")
    async with Client.from_config(two, name="b") as client:
        assert (await client.call_tool("evens", {"n": 1}, output_type=list[int])).data == [0]


# --- several servers -----------------------------------------------------------------------


async def test_a_group_opens_every_server_and_names_their_tools(http_url: str) -> None:
    config = {
        "mcpServers": {
            "conv": {"command": sys.executable, "args": SERVE, "cwd": str(ROOT)},
            "shop": {"command": sys.executable, "args": OFFICIAL},
            "web": {"type": "http", "url": http_url},
            "gone": {"command": str(ROOT / "no-such-server")},
            "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        }
    }
    async with ClientGroup.from_config(config) as group:
        assert group.names == ["conv", "shop", "web"]
        assert set(group.errors) == {"gone", "old"}
        assert group["shop"].era == "legacy" and group["conv"].era == "modern"
        tools = [tool.name for tool in await group.list_tools()]
        added = await group.call_tool("shop.add", {"a": 1, "b": 2})
        evens = await group.call_tool("web.evens", {"n": 2})
        point = await group.call_tool("conv.point", {"x": 1, "y": 2}, output_type=Point)
        with pytest.raises(ValueError, match="names no tool of an open server"):
            await group.call_tool("gone.add", {})
        with pytest.raises(KeyError, match="server 'gone' is not open"):
            group["gone"]
    assert "shop.add" in tools and "shop.order" in tools
    assert [name for name in tools if name.startswith("web.")] == [
        "web.add", "web.point", "web.evens", "web.shout", "web.count", "web.broken"
    ]  # fmt: skip
    assert added.data == 3 and evens.data == [0, 2] and point.data == Point(x=1, y=2)


async def test_a_server_failing_a_group_call_leaves_the_others_working() -> None:
    config = {
        "mcpServers": {
            "liar": {"command": sys.executable, "args": [LIAR, "loop"]},
            "conv": {"command": sys.executable, "args": SERVE, "cwd": str(ROOT)},
        }
    }
    async with ClientGroup.from_config(config, separator="__") as group:
        tools = [tool.name for tool in await group.list_tools()]
        assert isinstance(group.errors["liar"], McpError)
        assert group.split("conv__add") == ("conv", "add")
        result = await group.call_tool("conv__add", {"a": 2, "b": 3})
    names = ["add", "point", "evens", "shout", "count", "broken"]
    assert tools == [f"conv__{name}" for name in names]
    assert result.data == 5


def test_without_jsonschema_the_required_properties_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tool_output, "_jsonschema", lambda: None)
    known = tool_output.known_output(
        {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    )
    missing = CallToolResult(structured_content={"total": 1})
    tool_output.read_output("tally", missing, known, None)
    with pytest.raises(McpError, match="'tally': structuredContent lacks count"):
        missing.data  # noqa: B018 - reading it is the check
    present = CallToolResult(structured_content={"count": 2})
    tool_output.read_output("tally", present, known, None)
    assert present.data == {"count": 2}


def test_a_qualified_name_goes_to_the_longest_server_name_it_starts_with() -> None:
    clients = {name: stdio_client() for name in ("a", "a.b")}  # not started
    group = ClientGroup(clients)
    assert group.split("a.b.c") == ("a.b", "c")
    assert group.split("a.c.d") == ("a", "c.d")
    expected = "expected '<server>.<tool>' with a server among a, a.b"
    with pytest.raises(ValueError, match=re.escape(expected)):
        group.split("b.c")
    with pytest.raises(ValueError, match="separator must be a non-empty string"):
        ClientGroup(clients, separator="")
