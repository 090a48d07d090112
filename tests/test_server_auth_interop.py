"""The official MCP Python SDK client (`mcp==2.3.0`), with its own OAuth support, against our
protected server: 401, discovery (RFC 9728, RFC 8414), dynamic registration, the
authorization-code grant with PKCE and `resource`, then calls; and a step-up on 403.

Nothing is mocked: the SDK talks to our server under uvicorn and to the test authorization
server (`oauth_as.py`) over loopback HTTP. Its "browser" is an aiohttp GET of the authorization
URL, which the test server approves at once with a redirect carrying the code.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import mcp
import mcp_types
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from helpers.oauth_as import AuthorizationServer
from helpers.transport_flow import serve
from mrtr import AuthSettings, RequestContext, Server, ServerOptions
from mrtr.server.auth import JWTVerifier
from mrtr.transport.http_app import StreamableHTTPApp

REDIRECT = "http://127.0.0.1:9/callback"


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Follows the authorization URL like a user agent would, up to the redirect back."""

    def __init__(self) -> None:
        self.visited: list[dict[str, str]] = []
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        self.visited.append(query)
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, allow_redirects=False) as response,
        ):
            assert response.status == 302, await response.text()
            location = response.headers["Location"]
        assert location.startswith(REDIRECT)
        assert "code=" in location, location
        back = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        self._result = AuthorizationCodeResult(
            code=back["code"], state=back.get("state"), iss=back.get("iss")
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self._result is not None
        return self._result


def build_server(url: str, issuer: str) -> Server:
    auth = AuthSettings(
        resource=url,
        authorization_servers=[issuer],
        verifier=JWTVerifier(issuer, url),
        scopes_supported=["mcp"],
    )
    server = Server("protected", version="1.0.0", options=ServerOptions(auth=auth))

    @server.tool()
    async def whoami(ctx: RequestContext) -> str:
        """Who is calling."""
        assert ctx.auth is not None
        return f"{ctx.auth.subject} with {' '.join(sorted(ctx.auth.scopes))}"

    @server.tool(scopes=["admin"])
    async def purge(ctx: RequestContext) -> str:
        """Needs the admin scope, and a confirmation."""
        answer = await ctx.elicit("Purge?", {"type": "object", "properties": {}})
        return f"purge {answer.action}"

    return server


@contextlib.asynccontextmanager
async def protected() -> AsyncIterator[tuple[str, AuthorizationServer]]:
    holder: dict[str, Any] = {}

    async def late(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    async with AuthorizationServer(user="dana") as auth_server, serve(late) as base:
        url = base + "/mcp"
        holder["app"] = StreamableHTTPApp(build_server(url, auth_server.issuer))
        yield url, auth_server


async def accept(context: Any, params: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_official_client_authorizes_and_steps_up(mode: str) -> None:
    async with protected() as (url, auth_server):
        browser = Browser()
        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                redirect_uris=[REDIRECT],  # type: ignore[list-item]
                client_name="official-sdk",
                grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="none",
            ),
            storage=storage,
            redirect_handler=browser.redirect,
            callback_handler=browser.callback,
        )
        async with (
            httpx2.AsyncClient(auth=provider, timeout=10) as http,
            mcp.Client(
                streamable_http_client(url, http_client=http),
                mode=mode,  # type: ignore[arg-type]
                elicitation_callback=accept,
            ) as client,
        ):
            result = await client.call_tool("whoami", {})
            assert result.content[0].text == "dana with mcp"  # type: ignore[union-attr]
            # The scoped tool: 403 insufficient_scope, the SDK re-authorizes with "admin".
            result = await client.call_tool("purge", {})
            assert result.content[0].text == "purge accept"  # type: ignore[union-attr]
        first, step_up = browser.visited
        assert first["resource"] == url and first["scope"] == "mcp"
        assert set(step_up["scope"].split()) == {"mcp", "admin"}
        assert storage.tokens is not None
        assert set((storage.tokens.scope or "").split()) == {"mcp", "admin"}
        # The authorization server saw the resource on every token request (RFC 8707).
        grants = [t for t in auth_server.token_requests if t["grant_type"] == "authorization_code"]
        assert len(grants) == 2 and all(t["resource"] == url for t in grants)
