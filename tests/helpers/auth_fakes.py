"""For the OAuth client tests: a protected resource that always challenges, the loopback aiohttp
server it runs on, and a redirect handler that approves at once."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from mrtr.client.auth import (
    AuthorizationResponse,
)


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


class FakeMCP:
    """A protected resource that answers every POST with `status` and a challenge naming its
    metadata, and records what it was sent."""

    def __init__(self) -> None:
        self.base = ""
        self.metadata: dict[str, Any] | None = None
        self.posts: list[dict[str, str]] = []
        self.hits: list[str] = []
        self.challenge = 'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource"'
        self.app = web.Application()
        self.app.router.add_post("/mcp", self.mcp)
        self.app.router.add_get("/{tail:.*}", self.document)

    async def mcp(self, request: web.Request) -> web.Response:
        self.posts.append(dict(request.headers))
        return web.json_response(
            {"error": "invalid_token"},
            status=401,
            headers={"WWW-Authenticate": self.challenge.format(base=self.base)},
        )

    async def document(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        if request.path == "/.well-known/oauth-protected-resource" and self.metadata:
            return web.json_response(self.metadata)
        return web.Response(status=404)


@pytest.fixture
async def fake() -> AsyncIterator[FakeMCP]:
    server = FakeMCP()
    async with serving(server.app) as base:
        server.base = base
        yield server


class FollowRedirect:
    """A `RedirectHandler` whose "browser" asks the authorization endpoint, which approves at
    once, and reads the redirect back from its `Location`."""

    redirect_uri = "http://127.0.0.1:9/callback"

    def __init__(self) -> None:
        self.urls: list[str] = []

    async def authorize(self, url: str) -> AuthorizationResponse:
        self.urls.append(url)
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, allow_redirects=False) as response,
        ):
            return AuthorizationResponse.from_url(response.headers["Location"])
