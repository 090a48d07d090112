"""Errors raised by handlers: masked by default (the text in the server log under a short id
the client is given), `ToolError` messages and `McpError`s shown, `mask_errors=False` sends
the text; for tools, prompts and resources, on both eras (the official client drives a legacy
session over real stdio)."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

from mrtr import Client, McpError, RequestContext, Server, ServerOptions, TextContent, ToolError
from mrtr.protocol import errors

SCRIPT = Path(__file__).resolve().parent / "servers" / "author_server.py"
SERVE = ["-m", "mrtr", "serve", f"{SCRIPT}:server"]
SECRET = "postgres://admin:hunter2@db.internal/prod"
MASKED = re.compile(
    r"Error executing tool 'leak': an internal error occurred \(logged on the server as "
    r"([0-9a-f]{8})\)"
)


def text_of(result: Any) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def failing_server(options: ServerOptions | None = None) -> Server:
    server = Server("errors", options=options)

    @server.tool()
    async def leak(query: str) -> str:
        raise RuntimeError(f"cannot run {query!r} on {SECRET}")

    @server.tool()
    def leak_sync() -> str:
        raise KeyError(SECRET)

    @server.tool()
    async def refuse(city: str) -> str:
        raise ToolError(f"No flights to {city} today")

    @server.tool()
    async def refuse_twice() -> str:
        async def no(city: str) -> None:
            raise ToolError(f"no {city}")

        async with asyncio.TaskGroup() as group:
            group.create_task(no("Oslo"))
            group.create_task(no("Rome"))
        return "never"

    @server.tool()
    async def mixed() -> str:
        async def secret() -> None:
            raise ValueError(SECRET)

        async def shown() -> None:
            raise ToolError("shown")

        async with asyncio.TaskGroup() as group:
            group.create_task(secret())
            group.create_task(shown())
        return "never"

    @server.tool()
    async def protocol() -> str:
        raise McpError(errors.INVALID_PARAMS, "the date must be in the future")

    @server.prompt()
    def secret_prompt() -> str:
        raise OSError("cannot read /etc/app/secret.key")

    @server.prompt()
    def told_prompt() -> str:
        raise ToolError("this prompt needs a project open")

    @server.resource("file:///conf")
    def conf() -> str:
        raise PermissionError("/etc/app/conf.yaml: permission denied")

    @server.resource_template("db://rows/{id}")
    async def row(id: int) -> str:
        raise LookupError(f"SELECT * FROM rows WHERE id={id} -- {SECRET}")

    return server


async def test_an_exception_is_masked_and_its_id_names_the_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, "mrtr.server")
    async with Client.in_memory(failing_server()) as client:
        result = await client.call_tool("leak", {"query": "drop"})
    assert result.is_error is True
    text = text_of(result)
    found = MASKED.fullmatch(text)
    assert found is not None, text
    assert SECRET not in text
    records = [r for r in caplog.records if found.group(1) in r.getMessage()]
    assert len(records) == 1
    assert records[0].getMessage() == f"tool 'leak' failed [{found.group(1)}]"
    assert records[0].exc_info is not None and SECRET in str(records[0].exc_info[1])


async def test_each_failure_gets_its_own_id() -> None:
    async with Client.in_memory(failing_server()) as client:
        first = text_of(await client.call_tool("leak", {"query": "a"}))
        second = text_of(await client.call_tool("leak", {"query": "a"}))
    one, two = MASKED.fullmatch(first), MASKED.fullmatch(second)
    assert one is not None and two is not None and one.group(1) != two.group(1)


async def test_a_sync_tool_and_an_exception_without_text_are_masked_too() -> None:
    async with Client.in_memory(failing_server()) as client:
        result = await client.call_tool("leak_sync")
    assert result.is_error is True
    assert SECRET not in text_of(result)
    assert "an internal error occurred (logged on the server as " in text_of(result)


async def test_a_tool_error_message_goes_to_the_model_as_it_is() -> None:
    async with Client.in_memory(failing_server()) as client:
        result = await client.call_tool("refuse", {"city": "Oslo"})
        both = await client.call_tool("refuse_twice")
    assert result.is_error is True
    assert text_of(result) == "No flights to Oslo today"
    assert both.is_error is True
    assert sorted(text_of(both).split("; ")) == ["no Oslo", "no Rome"]


async def test_a_group_mixing_a_tool_error_and_another_error_is_masked() -> None:
    async with Client.in_memory(failing_server()) as client:
        result = await client.call_tool("mixed")
    assert result.is_error is True
    assert SECRET not in text_of(result) and "an internal error occurred" in text_of(result)


async def test_an_mcp_error_raised_by_a_tool_is_not_masked() -> None:
    async with Client.in_memory(failing_server()) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("protocol")
    assert raised.value.code == errors.INVALID_PARAMS
    assert raised.value.message == "the date must be in the future"


async def test_mask_errors_false_sends_the_exception_text(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "mrtr.server")
    async with Client.in_memory(failing_server(ServerOptions(mask_errors=False))) as client:
        result = await client.call_tool("leak", {"query": "drop"})
        prompt = None
        with pytest.raises(McpError) as raised:
            prompt = await client.get_prompt("secret_prompt")
    assert prompt is None
    assert text_of(result) == f"Error executing tool 'leak': cannot run 'drop' on {SECRET}"
    assert raised.value.message == "prompt 'secret_prompt' failed: cannot read /etc/app/secret.key"
    assert any(r.getMessage() == "tool 'leak' failed" and r.exc_info for r in caplog.records)


async def test_prompt_and_resource_failures_are_masked_internal_errors() -> None:
    async with Client.in_memory(failing_server()) as client:
        failures = []
        for call in (
            client.get_prompt("secret_prompt"),
            client.read_resource("file:///conf"),
            client.read_resource("db://rows/7"),
        ):
            with pytest.raises(McpError) as raised:
                await call
            failures.append(raised.value)
    for failure, what in zip(
        failures,
        ("prompt 'secret_prompt'", "resource 'file:///conf'", "resource 'db://rows/7'"),
        strict=True,
    ):
        assert failure.code == errors.INTERNAL_ERROR
        assert re.fullmatch(
            re.escape(what) + r" failed: an internal error occurred \(logged on the server as "
            r"[0-9a-f]{8}\)",
            failure.message,
        ), failure.message
        assert "/etc/" not in failure.message and SECRET not in failure.message


async def test_a_tool_error_raised_by_a_prompt_is_its_error_message() -> None:
    async with Client.in_memory(failing_server()) as client:
        with pytest.raises(McpError) as raised:
            await client.get_prompt("told_prompt")
    assert raised.value.code == errors.INTERNAL_ERROR
    assert raised.value.message == "this prompt needs a project open"


async def test_a_failure_does_not_disturb_a_concurrent_request() -> None:
    server = failing_server()
    release = asyncio.Event()

    @server.tool()
    async def waits(ctx: RequestContext) -> str:
        await release.wait()
        return "fine"

    async with Client.in_memory(server) as client:
        waiting = asyncio.create_task(client.call_tool("waits"))
        failed = await client.call_tool("leak", {"query": "x"})
        release.set()
        done = await asyncio.wait_for(waiting, 5)
    assert failed.is_error is True
    assert text_of(done) == "fine" and not done.is_error


async def test_both_eras_over_stdio_mask_and_show_alike() -> None:
    """The official client on a legacy session and mrtr's on 2026-07-28, one real server."""
    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=SERVE), mode="legacy"
    ) as official:
        leaked = await official.call_tool("leak", {"query": "drop"})
        refused = await official.call_tool("refuse", {"city": "Oslo"})
        with pytest.raises(mcp.MCPError) as prompt_error:
            await official.get_prompt("broken_prompt")
    assert leaked.is_error is True
    legacy_text = leaked.content[0].text  # type: ignore[union-attr]
    assert MASKED.fullmatch(legacy_text) and SECRET not in legacy_text
    assert refused.content[0].text == "No flights to Oslo today; try tomorrow"  # type: ignore[union-attr]
    assert "secret.key" not in str(prompt_error.value)
    assert "prompt 'broken_prompt' failed: an internal error occurred" in str(prompt_error.value)

    async with Client.stdio(sys.executable, SERVE) as modern:
        leaked_modern = await modern.call_tool("leak", {"query": "drop"})
        refused_modern = await modern.call_tool("refuse", {"city": "Oslo"})
        assert modern.era == "modern"
    assert MASKED.fullmatch(text_of(leaked_modern)) and SECRET not in text_of(leaked_modern)
    assert text_of(refused_modern) == "No flights to Oslo today; try tomorrow"
