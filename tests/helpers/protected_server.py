"""A protected server behind the test authorization server, and the raw calls and headers the
authorization tests send it."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from helpers import wire
from helpers.oauth_as import AuthorizationServer
from helpers.transport_flow import serve
from mrtr import (
    AuthSettings,
    RequestContext,
    Server,
    ServerOptions,
)
from mrtr.client.auth import (
    AuthorizationResponse,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.auth import (
    JWTVerifier,
    TokenVerifier,
)
from mrtr.transport.http_app import StreamableHTTPApp

KEY = b"k" * 32


App = Callable[[Any, Any, Any], Awaitable[None]]


def build_server(options: ServerOptions) -> Server:
    server = Server("protected", version="1.0.0", options=options)

    @server.tool()
    async def whoami(ctx: RequestContext) -> dict[str, Any]:
        """Who the verified token says is calling."""
        token = ctx.auth
        assert token is not None
        return {"sub": token.subject, "client": token.client_id, "scopes": sorted(token.scopes)}

    @server.tool(scopes=["admin"])
    async def purge(ctx: RequestContext, what: str) -> str:
        """Purge something, after the user confirms (two MRTR rounds)."""
        answer = await ctx.elicit(f"Purge {what}?", {"type": "object", "properties": {}})
        return f"purged {what}" if answer.action == "accept" else "kept"

    @server.tool()
    async def confirm(ctx: RequestContext, item: str) -> str:
        """Ask once, then answer (two MRTR rounds, no extra scope)."""
        answer = await ctx.elicit(f"Order {item}?", {"type": "object", "properties": {}})
        return f"{answer.action} {item}"

    return server


class Protected:
    """An MCP server behind `AuthSettings`, served on loopback, and its authorization server."""

    def __init__(self, auth_server: AuthorizationServer, base: str, holder: dict[str, App]):
        self.auth_server = auth_server
        self.base = base
        self.url = base + "/mcp"
        self.holder = holder
        self.server: Server

    def install(self, verifier: TokenVerifier | None = None, **settings: Any) -> Server:
        """(Re)build the MCP server with `settings` and serve it at `url`."""
        auth = AuthSettings(
            resource=self.url,
            authorization_servers=[self.auth_server.issuer],
            verifier=verifier
            or JWTVerifier(self.auth_server.issuer, self.url, min_refresh_interval=60.0),
            scopes_supported=settings.pop("scopes_supported", ["mcp"]),
            **settings,
        )
        options = ServerOptions(request_state_key=KEY, auth=auth)
        self.server = build_server(options)
        self.holder["app"] = StreamableHTTPApp(self.server)
        return self.server

    def token(self, **claims: Any) -> str:
        claims.setdefault("audience", self.url)
        return self.auth_server.issue_token(**claims)


@contextlib.asynccontextmanager
async def protected() -> AsyncIterator[Protected]:
    holder: dict[str, App] = {}

    async def late(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    async with AuthorizationServer() as auth_server, serve(late) as base:
        site = Protected(auth_server, base, holder)
        site.install()
        yield site


def call(name: str, arguments: dict[str, Any], id: Any = 1, **params: Any) -> dict[str, Any]:
    return wire.request(
        "tools/call",
        {"name": name, "arguments": arguments, **params},
        id=id,
        client_info={"name": "raw", "version": "1"},
        caps={"elicitation": {}},
    )


def headers_for(message: dict[str, Any], token: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": message["method"],
    }
    if message["method"] == "tools/call":
        headers["Mcp-Name"] = message["params"]["name"]
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


class AutoApprove:
    """A `RedirectHandler` whose "browser" follows the authorization URL to the redirect."""

    redirect_uri = "http://127.0.0.1:9/callback"

    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def authorize(self, url: str) -> AuthorizationResponse:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        self.scopes.append(query.get("scope", ""))
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, allow_redirects=False) as response,
        ):
            return AuthorizationResponse.from_url(response.headers["Location"])
