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

import aiohttp

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
from mrtr.client.auth import (
    AuthorizationResponse,
    ClientCredentials,
    ClientCredentialsGrant,
    IdJagGrant,
    JwtBearerGrant,
    OAuth,
    auth_challenge,
)
from mrtr.client.auth.discovery import discover_resource
from mrtr.client.auth.metadata import origin

logger = logging.getLogger("conformance.client")

#: The Client ID Metadata Document URL the suite's authorization servers expect (SEP-991).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


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


class HeadlessRedirect:
    """Stands in for the browser: the suite's authorization servers approve at once, so the
    redirect back is read from the authorization endpoint's `Location` header."""

    redirect_uri = "http://localhost:3000/callback"

    async def authorize(self, url: str) -> AuthorizationResponse:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, allow_redirects=False) as response,
        ):
            location = response.headers.get("Location")
        if location is None:
            raise RuntimeError(
                f"the authorization endpoint did not redirect (HTTP {response.status})"
            )
        return AuthorizationResponse.from_url(location)


async def scenario_issuer(url: str, context: dict[str, Any]) -> str:
    """The authorization server pre-registered credentials are bound to. A real application
    is configured with it; the suite passes it for some scenarios only, so this harness
    otherwise asks the server under test (a client must never trust an unknown server so)."""
    if isinstance(context.get("issuer"), str):
        return str(context["issuer"])
    ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=ping, allow_redirects=False) as response:
            challenge = auth_challenge(response.headers.getall("WWW-Authenticate", ()))
        named = challenge.resource_metadata if challenge is not None else None
        resource = await discover_resource(session, url, named, allow_http=True)
    return resource.authorization_servers[0] if resource is not None else origin(url)


async def oauth_for(scenario: str, url: str, context: dict[str, Any]) -> OAuth | None:
    """How the client authorizes in an `auth/*` scenario, from the data the suite passes."""
    if not scenario.startswith("auth/"):
        return None
    name = scenario.removeprefix("auth/")
    if name == "pre-registration":
        client = ClientCredentials(
            context["client_id"],
            context["client_secret"],
            issuer=await scenario_issuer(url, context),
        )
        return OAuth(HeadlessRedirect(), client=client)
    if name == "client-credentials-jwt":
        client = ClientCredentials(
            context["client_id"],
            private_key_pem=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
            auth_method="private_key_jwt",
            issuer=await scenario_issuer(url, context),
        )
        return OAuth(grant=ClientCredentialsGrant(), client=client)
    if name == "client-credentials-basic":
        client = ClientCredentials(
            context["client_id"],
            context["client_secret"],
            issuer=await scenario_issuer(url, context),
        )
        return OAuth(grant=ClientCredentialsGrant(), client=client)
    if name == "enterprise-managed-authorization":
        grant = IdJagGrant(
            context["idp_id_token"],
            idp_token_endpoint=context["idp_token_endpoint"],
            idp_client_id=context["idp_client_id"],
        )
        client = ClientCredentials(
            context["client_id"],
            context["client_secret"],
            issuer=await scenario_issuer(url, context),
        )
        return OAuth(grant=grant, client=client)
    if name == "wif-jwt-bearer":
        client = ClientCredentials(context["client_id"], auth_method="none")
        bearer = JwtBearerGrant(context["valid_jwt"], issuer=await scenario_issuer(url, context))
        return OAuth(grant=bearer, client=client)
    return OAuth(HeadlessRedirect(), client_metadata_url=CLIENT_METADATA_URL)


async def authorized_calls(client: Client, context: dict[str, Any]) -> None:
    # Every request carries the token; tools/call may need more scope than tools/list.
    tools = (await client.list_tools()).tools
    for tool in tools:
        result = await client.call_tool(tool.name, {})
        logger.info("%s -> %s", tool.name, result.content)


def connect(url: str, version: str, auth: OAuth | None = None) -> Client:
    legacy = bool(version) and version < "2026"  # revisions are dates
    return Client.http(
        url,
        auth=auth,
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
    action = SCENARIOS.get(scenario, authorized_calls)
    async with connect(url, version, await oauth_for(scenario, url, context)) as client:
        await action(client, context)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if (scenario not in SCENARIOS and not scenario.startswith("auth/")) or len(sys.argv) < 2:
        print(
            f"usage: MCP_CONFORMANCE_SCENARIO=<auth/... or one of {sorted(SCENARIOS)}> "
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
