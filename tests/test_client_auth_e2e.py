"""The OAuth client end to end: a real authorization server (`oauth_as.py`), a protected mrtr
server under uvicorn, our `Client.http(auth=OAuth(...))`, a real loopback redirect listener and
a scripted "browser" that follows the redirects; and `mrtr call` as a subprocess, its browser
being a script named in `BROWSER`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from helpers.oauth_as import AuthorizationServer
from helpers.transport_flow import serve
from mrtr import AuthSettings, Client, ClientOptions, RequestContext, Server, ServerOptions
from mrtr.client.auth import FileTokenStore, LoopbackRedirectHandler, OAuth, Tokens
from mrtr.server.auth import JWTVerifier
from mrtr.transport.http_app import StreamableHTTPApp

KEY = b"e" * 32


class Site:
    """A protected MCP server on loopback and its authorization server."""

    def __init__(self, auth_server: AuthorizationServer, url: str) -> None:
        self.auth_server = auth_server
        self.url = url


@contextlib.asynccontextmanager
async def protected_site() -> AsyncIterator[Site]:
    holder: dict[str, Any] = {}

    async def late(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    async with AuthorizationServer() as auth_server, serve(late) as base:
        url = base + "/mcp"
        settings = AuthSettings(
            resource=url,
            authorization_servers=[auth_server.issuer],
            verifier=JWTVerifier(auth_server.issuer, url),
            scopes_supported=["mcp"],
        )
        server = Server(
            "guarded", version="1.0.0", options=ServerOptions(request_state_key=KEY, auth=settings)
        )

        @server.tool()
        async def whoami(ctx: RequestContext) -> str:
            """The caller, as the verified token names it."""
            assert ctx.auth is not None
            return ctx.auth.subject or "?"

        holder["app"] = StreamableHTTPApp(server)
        yield Site(auth_server, url)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with protected_site() as running:
        yield running


class Browser:
    """Follows the authorization URL through the authorization server's redirect to the
    loopback listener, as a browser would."""

    def __init__(self) -> None:
        self.visits = 0

    async def __call__(self, url: str) -> None:
        self.visits += 1
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            assert response.status == 200, await response.text()


def no_browser(url: str) -> None:
    raise AssertionError(f"no sign-in was expected, but the client opened {url}")


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def test_sign_in_once_then_reuse_the_saved_token(site: Site, tmp_path: Path) -> None:
    site.auth_server.user = "ada"
    store = FileTokenStore(tmp_path / "tokens.json")
    browser = Browser()
    redirect = LoopbackRedirectHandler(open_url=browser, timeout=10)
    async with Client.http(site.url, auth=OAuth(redirect, store=store)) as client:
        assert text_of(await client.call_tool("whoami", {})) == "ada"
        assert text_of(await client.call_tool("whoami", {})) == "ada"
    redirect.close()
    assert browser.visits == 1
    assert stat.S_IMODE(os.stat(tmp_path / "tokens.json").st_mode) == 0o600
    # A new process (a new OAuth on the same file) needs no sign-in.
    again = OAuth(LoopbackRedirectHandler(open_url=no_browser), store=FileTokenStore(store.path))
    async with Client.http(site.url, auth=again) as client:
        assert text_of(await client.call_tool("whoami", {})) == "ada"
    codes = [r for r in site.auth_server.token_requests if r["grant_type"] == "authorization_code"]
    assert len(codes) == 1
    assert codes[0]["resource"] == site.url  # RFC 8707, as the metadata publishes it


async def test_an_expired_token_is_refreshed_not_signed_in_again(site: Site) -> None:
    site.auth_server.access_token_ttl = 2  # stale (renewed ahead of its end) after 1.5 s
    browser = Browser()
    auth = OAuth(LoopbackRedirectHandler(open_url=browser, timeout=10))
    async with Client.http(site.url, auth=auth) as client:
        await client.call_tool("whoami", {})
        await asyncio.sleep(1.6)
        await client.call_tool("whoami", {})
    grants = [request["grant_type"] for request in site.auth_server.token_requests]
    assert grants[0] == "authorization_code" and "refresh_token" in grants[1:]
    assert browser.visits == 1


async def test_a_legacy_session_is_authorized_the_same_way(site: Site) -> None:
    site.auth_server.user = "grace"
    browser = Browser()
    auth = OAuth(LoopbackRedirectHandler(open_url=browser, timeout=10))
    options = ClientOptions(protocol="legacy", auth=auth)  # through the options, this time
    async with Client.http(site.url, options=options) as client:
        assert text_of(await client.call_tool("whoami", {})) == "grace"
        assert client.protocol_version < "2026"  # an initialize-based session
    assert browser.visits == 1


async def test_concurrent_requests_share_one_sign_in(site: Site) -> None:
    browser = Browser()
    auth = OAuth(LoopbackRedirectHandler(open_url=browser, timeout=10))
    options = ClientOptions(protocol="modern")  # no probe first: all three meet the 401
    async with Client.http(site.url, auth=auth, options=options) as client:
        results = await asyncio.gather(*(client.call_tool("whoami", {}) for _ in range(3)))
    assert [text_of(result) for result in results] == ["user-1"] * 3
    assert browser.visits == 1


BROWSER_SCRIPT = textwrap.dedent(
    """
    import sys, urllib.request
    with urllib.request.urlopen(sys.argv[1], timeout=10) as page:
        page.read()
    """
)


async def test_mrtr_call_signs_in_through_the_browser_once(site: Site, tmp_path: Path) -> None:
    site.auth_server.user = "linus"
    script = tmp_path / "browser.py"
    script.write_text(BROWSER_SCRIPT)
    tokens = tmp_path / "tokens.json"
    env = {**os.environ, "BROWSER": f"{sys.executable} {script} %s", "DISPLAY": ""}

    async def call() -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mrtr",
            "call",
            "--token-file",
            str(tokens),
            site.url,
            "whoami",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), 30)
        finally:
            if process.returncode is None:  # timed out: never leave it behind
                process.kill()
                await process.wait()
        return process.returncode or 0, out.decode(), err.decode()

    status, out, err = await call()
    assert status == 0, err
    assert out.strip() == "linus"
    assert "To authorize, open this URL" in err and "127.0.0.1" in err
    assert stat.S_IMODE(os.stat(tokens).st_mode) == 0o600
    # What the command saved serves the next one without a sign-in.
    again = OAuth(LoopbackRedirectHandler(open_url=no_browser), store=FileTokenStore(tokens))
    async with Client.http(site.url, auth=again) as client:
        assert text_of(await client.call_tool("whoami", {})) == "linus"


async def test_an_expired_saved_token_without_refresh_means_a_new_sign_in(
    site: Site, tmp_path: Path
) -> None:
    store = FileTokenStore(tmp_path / "tokens.json")
    old = Tokens("expired-token", expires_at=1.0, issuer=site.auth_server.issuer, resource=site.url)
    await store.save(f"tokens {site.url}", old.to_dict())
    browser = Browser()
    async with Client.http(
        site.url, auth=OAuth(LoopbackRedirectHandler(open_url=browser), store=store)
    ) as client:
        assert text_of(await client.call_tool("whoami", {})) == "user-1"
    assert browser.visits == 1
    saved = Tokens.from_dict(await store.load(f"tokens {site.url}") or {})
    assert saved is not None and saved.access_token != "expired-token"


COUNTING_BROWSER_SCRIPT = textwrap.dedent(
    """
    import sys, urllib.request
    with open(sys.argv[2], "a") as visits:
        visits.write("visit\\n")
    with urllib.request.urlopen(sys.argv[1], timeout=10) as page:
        page.read()
    """
)


async def test_mrtr_proxy_signs_in_to_its_url_backend_once(site: Site, tmp_path: Path) -> None:
    """`mrtr proxy URL` over stdio, its backend protected: the first run signs in through the
    browser (as `mrtr call` does) and the proxy's client gets the backend's answers as the
    signed-in user; the second run reuses the saved token, without a browser."""
    site.auth_server.user = "ada"
    script = tmp_path / "browser.py"
    script.write_text(COUNTING_BROWSER_SCRIPT)
    visits = tmp_path / "visits"
    tokens = tmp_path / "tokens.json"
    env = {**os.environ, "BROWSER": f"{sys.executable} {script} %s {visits}", "DISPLAY": ""}
    args = ["-m", "mrtr", "proxy", "--token-file", str(tokens), site.url]
    for _ in range(2):
        async with Client.stdio(sys.executable, args, env=env) as proxied:
            result = await asyncio.wait_for(proxied.call_tool("whoami", {}), 30)
            assert text_of(result) == "ada"
    assert visits.read_text().splitlines() == ["visit"]
    assert stat.S_IMODE(os.stat(tokens).st_mode) == 0o600


async def test_mrtr_proxy_refuses_sign_in_options_for_a_command_backend(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mrtr",
        "proxy",
        "--client-id",
        "abc",
        "--",
        sys.executable,
        "-c",
        "pass",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "--client-id: a URL backend's sign-in, not a command's" in err.decode()
