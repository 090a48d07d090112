"""The client the MCP conformance suite drives, built only with the public API.

    MCP_CONFORMANCE_SCENARIO=tools_call python conformance/client.py http://127.0.0.1:P/mcp

The suite passes the scenario's server URL as the last argument, the scenario's name in
`MCP_CONFORMANCE_SCENARIO`, the protocol revision under test in
`MCP_CONFORMANCE_PROTOCOL_VERSION` and, for some scenarios, JSON context in
`MCP_CONFORMANCE_CONTEXT`. Under an `initialize`-based revision (2025-xx) the client opens a
legacy session from the start: those scenario servers answer any request, so a 2026-07-28
request could not tell their era.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from mrtr import (
    Client,
    ClientOptions,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    Root,
    TextContent,
)

logger = logging.getLogger("conformance.client")


def accept(params: ElicitRequestParams) -> ElicitResult:
    """Answers every question the way a consenting user would: taking each field's default
    when the schema offers one (SEP-1034), else the first allowed value, else a plain one."""
    properties = (params.requested_schema or {}).get("properties", {})
    content: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = schema.get("type")
        if "default" in schema:
            content[name] = schema["default"]
        elif schema.get("enum"):
            content[name] = schema["enum"][0]
        else:
            content[name] = (
                True if kind == "boolean" else 1 if kind in ("integer", "number") else "ok"
            )
    return ElicitResult(action="accept", content=content)


def sample(params: CreateMessageRequestParams) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant", content=TextContent(text="Hello!"), model="conformance-model"
    )


def roots(params: ListRootsRequestParams) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///conformance", name="conformance")])


def connect(url: str, version: str) -> Client:
    legacy = bool(version) and version < "2026"  # revisions are dates
    return Client.http(
        url,
        options=ClientOptions(protocol="legacy" if legacy else "auto"),
        elicitation_handler=accept,
        sampling_handler=sample,
        roots_handler=roots,
    )


async def initialize(client: Client, context: dict[str, Any]) -> None:
    # The session opens with the first request.
    await client.list_tools()


async def elicitation_defaults(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    result = await client.call_tool("test_client_elicitation_defaults", {})
    logger.info("test_client_elicitation_defaults -> %s", result.content)


async def sse_retry(client: Client, context: dict[str, Any]) -> None:
    # The server ends the call's stream after its priming event; the client resumes it.
    await client.list_tools()
    result = await client.call_tool("test_reconnection", {})
    logger.info("test_reconnection -> %s", result.content)


async def schema_preservation(client: Client, context: dict[str, Any]) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema = tools["json_schema_2020_12_tool"].input_schema
    await client.call_tool("json_schema_echo", {"schema": schema})


async def tools_call(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    result = await client.call_tool("add_numbers", {"a": 5, "b": 3})
    logger.info("add_numbers -> %s", result.content)


async def request_metadata(client: Client, context: dict[str, Any]) -> None:
    # The first answer is UnsupportedProtocolVersion; the client retries on its own.
    await client.discover()
    await client.list_tools()


async def request_state(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    # An unrelated call in flight beside an MRTR flow must carry none of its inputs or state.
    await asyncio.gather(
        client.call_tool("test_mrtr_echo_state", {}),
        client.call_tool("test_mrtr_unrelated", {}),
    )
    await client.call_tool("test_mrtr_no_state", {})
    await client.call_tool("test_mrtr_unrelated", {})
    await client.call_tool("test_mrtr_no_result_type", {})


async def standard_headers(client: Client, context: dict[str, Any]) -> None:
    await client.discover()
    for tool in (await client.list_tools()).tools:
        await client.call_tool(tool.name, {})
    for resource in (await client.list_resources()).resources:
        await client.read_resource(resource.uri)
    for prompt in (await client.list_prompts()).prompts:
        await client.get_prompt(prompt.name)


async def custom_headers(client: Client, context: dict[str, Any]) -> None:
    await client.list_tools()
    for call in context.get("toolCalls", []):
        await client.call_tool(call["name"], call.get("arguments") or {})


async def invalid_tool_headers(client: Client, context: dict[str, Any]) -> None:
    # Tools whose x-mcp-header annotations are invalid never reach the tool list.
    for tool in (await client.list_tools()).tools:
        await client.call_tool(tool.name, {"region": "us-west1"})


async def schema_ref_no_deref(client: Client, context: dict[str, Any]) -> None:
    tools = (await client.list_tools()).tools
    logger.info("tools: %s", [tool.name for tool in tools])


SCENARIOS: dict[str, Callable[[Client, dict[str, Any]], Awaitable[None]]] = {
    "initialize": initialize,
    "tools_call": tools_call,
    "elicitation-sep1034-client-defaults": elicitation_defaults,
    "sse-retry": sse_retry,
    "json-schema-2020-12-preservation": schema_preservation,
    "request-metadata": request_metadata,
    "sep-2322-client-request-state": request_state,
    "http-standard-headers": standard_headers,
    "http-custom-headers": custom_headers,
    "http-invalid-tool-headers": invalid_tool_headers,
    "json-schema-ref-no-deref": schema_ref_no_deref,
}


async def run(scenario: str, url: str, context: dict[str, Any], version: str) -> None:
    async with connect(url, version) as client:
        await SCENARIOS[scenario](client, context)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if scenario not in SCENARIOS or len(sys.argv) < 2:
        print(
            f"usage: MCP_CONFORMANCE_SCENARIO=<one of {sorted(SCENARIOS)}> "
            f"{sys.argv[0]} <server-url>",
            file=sys.stderr,
        )
        return 2
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "")
    asyncio.run(run(scenario, sys.argv[-1], context, version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
