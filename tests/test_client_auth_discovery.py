"""Discovery fetches only what the MCP server may name: its resource metadata on its own
origin (or one the application trusts), authorization servers over https, no loopback or
private address for a server that is not on loopback itself, and no redirects.

Everything runs on loopback. A "remote" server is modelled with names: the client's
`resolver` maps `mcp.example`, `as.example`... to 127.0.0.1, so a server addressed by such a
name is, to the client's rules, elsewhere on the network, while one addressed as 127.0.0.1 is
this machine. Hostile servers are real aiohttp applications that record what they receive."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from helpers.auth_fakes import FollowRedirect, serving
from helpers.oauth_as import AuthorizationServer
from mrtr import Client
from mrtr.client.auth import ClientCredentials, ClientCredentialsGrant, OAuth
from mrtr.client.auth.reach import Reach, is_internal
from mrtr.protocol.errors import AUTHORIZATION_FAILED, McpError

SECRET = "pre-registered-secret-3b7a"
PRM = "/.well-known/oauth-protected-resource"


class Names(AbstractResolver):
    """Resolves a few made-up host names to 127.0.0.1 (any other name is unknown)."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host not in self.names:
            raise OSError(f"unknown host {host}")
        return [
            ResolveResult(
                hostname=host,
                host="127.0.0.1",
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        return None


NAMES = Names("mcp.example", "as.example")


class Recorder:
    """A server that answers everything with `answer` (404 by default) and keeps, for each
    request, its method, path, headers and body."""

    def __init__(self) -> None:
        self.base = ""
        self.received: list[str] = []
        self.answer: dict[str, Any] | None = None
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.any)

    async def any(self, request: web.Request) -> web.Response:
        body = (await request.read()).decode("utf-8", "replace")
        headers = "".join(f"{k}: {v}\n" for k, v in request.headers.items())
        self.received.append(f"{request.method} {request.path}\n{headers}\n{body}")
        if self.answer is None:
            return web.Response(status=404)
        return web.json_response(self.answer)


class HostileMCP:
    """An MCP server that answers every POST with 401 and `challenge`, and serves `documents`:
    a path to a JSON document, or to `("redirect", url)`."""

    def __init__(self) -> None:
        self.base = ""
        self.challenge = "Bearer"
        self.documents: dict[str, Any] = {}
        self.app = web.Application()
        self.app.router.add_post("/mcp", self.mcp)
        self.app.router.add_get("/{tail:.*}", self.document)

    async def mcp(self, request: web.Request) -> web.Response:
        return web.Response(status=401, headers={"WWW-Authenticate": self.challenge})

    async def document(self, request: web.Request) -> web.Response:
        found = self.documents.get(request.path)
        if found is None:
            return web.Response(status=404)
        if isinstance(found, tuple):
            raise web.HTTPFound(found[1])
        return web.json_response(found)


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = Recorder()
    async with serving(server.app) as base:
        server.base = base
        yield server


@pytest.fixture
async def hostile() -> AsyncIterator[HostileMCP]:
    server = HostileMCP()
    async with serving(server.app) as base:
        server.base = base
        yield server


def remote(url: str) -> str:
    """`url` on 127.0.0.1 as the client sees it from afar: under the name `mcp.example`."""
    return url.replace("127.0.0.1", "mcp.example")


async def call_local(url: str, auth: OAuth) -> McpError:
    """A request to a loopback server through `Client.http`; the error it fails with."""
    async with Client.http(url, auth=auth) as client:
        with pytest.raises(McpError) as caught:
            await client.list_tools()
    return caught.value


async def call_remote(url: str, auth: OAuth) -> Any:
    """A POST to `url` (a made-up name) through the OAuth middleware, as the HTTP transport
    sends it: the error it raises, else the response status."""
    connector = aiohttp.TCPConnector(resolver=NAMES)
    async with aiohttp.ClientSession(connector=connector, middlewares=(auth.middleware,)) as http:
        try:
            async with http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}) as reply:
                return reply.status
        except McpError as error:
            return error


def prm(base: str, issuer: str) -> dict[str, Any]:
    """The resource metadata of the MCP endpoint at `base`, naming `issuer`."""
    return {"resource": base + "/mcp", "authorization_servers": [issuer]}


def client_credentials(issuer: str, client_id: str = "svc") -> OAuth:
    return OAuth(
        grant=ClientCredentialsGrant(),
        client=ClientCredentials(client_id, SECRET, issuer=issuer),
        allow_http=True,  # the names stand for remote hosts, but the test servers speak http
        resolver=NAMES,
    )


# --- which hosts are internal -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1/",  # the short forms the system resolver accepts
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost./",
        "http://api.localhost/",
        "http://169.254.169.254/latest/meta-data",  # a cloud's instance metadata
        "http://[fe80::1%25eth0]/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.0.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://0.0.0.0/",
    ],
)
def test_loopback_link_local_and_private_hosts_are_internal(url: str) -> None:
    assert is_internal(url)
    assert Reach.of("https://mcp.example.com/mcp", allow_http=True).refusal(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://as.example.com/",
        "https://8.8.8.8/",
        "https://10.example/",
        "https://[2001:4860::8888]/",
    ],
)
def test_public_hosts_are_not_internal(url: str) -> None:
    assert not is_internal(url)
    assert Reach.of("https://mcp.example.com/mcp").refusal(url) is None


def test_what_a_server_may_name_depends_on_where_it_is() -> None:
    remote_server = Reach.of("https://mcp.example.com/mcp", ["https://meta.example.org"])
    assert remote_server.trusts("https://MCP.example.com:443/.well-known/x")
    assert remote_server.trusts("https://meta.example.org/prm")
    assert not remote_server.trusts("https://other.example.com/prm")
    assert "not https" in (remote_server.refusal("http://as.example.com/") or "")
    assert "not https" in (remote_server.refusal("http://127.0.0.1:9000/") or "")
    assert remote_server.refusal("file:///etc/passwd") == "it is not an http(s) URL"
    local_server = Reach.of("http://127.0.0.1:8000/mcp")
    assert local_server.refusal("http://127.0.0.1:9000/") is None
    assert local_server.refusal("http://localhost:9000/") is None
    assert "not https" in (local_server.refusal("http://as.example.com/") or "")
    # A private server's own origin is its own; another private host is not.
    private_server = Reach.of("https://10.0.0.5/mcp")
    assert private_server.refusal("https://10.0.0.5/.well-known/x") is None
    assert private_server.refusal("https://10.0.0.6/") is not None
    assert (
        Reach.of("https://10.0.0.5/mcp", ["https://10.0.0.6"]).refusal("https://10.0.0.6/") is None
    )


# --- redirects --------------------------------------------------------------------------------


async def test_a_redirect_in_discovery_is_an_error_naming_its_location(
    hostile: HostileMCP, recorder: Recorder
) -> None:
    async with AuthorizationServer() as auth_server:
        recorder.answer = {
            "resource": hostile.base + "/mcp",
            "authorization_servers": [auth_server.issuer],
        }
        hostile.documents[PRM + "/mcp"] = ("redirect", recorder.base + "/elsewhere")
        error = await call_local(hostile.base + "/mcp", OAuth(grant=ClientCredentialsGrant()))
    assert error.code == AUTHORIZATION_FAILED
    assert recorder.base + "/elsewhere" in error.message and "HTTP 302" in error.message
    assert recorder.received == [] and auth_server.received == []


async def test_a_remote_servers_redirect_to_this_machine_is_not_followed(
    hostile: HostileMCP, recorder: Recorder
) -> None:
    async with AuthorizationServer(name="as.example") as auth_server:
        auth = client_credentials(auth_server.issuer)
        auth_server.register_client(client_id="svc", client_secret=SECRET)
        recorder.answer = prm(remote(hostile.base), auth_server.issuer)
        hostile.challenge = f'Bearer resource_metadata="{remote(hostile.base)}{PRM}"'
        hostile.documents[PRM] = ("redirect", recorder.base + PRM)
        error = await call_remote(remote(hostile.base) + "/mcp", auth)
    assert isinstance(error, McpError) and error.code == AUTHORIZATION_FAILED
    assert f"{recorder.base}{PRM}" in error.message and "redirect" in error.message
    assert recorder.received == [] and auth_server.received == []


# --- the resource metadata's origin --------------------------------------------------------------


async def test_resource_metadata_on_another_origin_is_not_fetched(
    hostile: HostileMCP, recorder: Recorder
) -> None:
    async with AuthorizationServer() as auth_server:
        recorder.answer = {
            "resource": hostile.base + "/mcp",
            "authorization_servers": [auth_server.issuer],
        }
        hostile.challenge = f'Bearer resource_metadata="{recorder.base}{PRM}"'
        error = await call_local(hostile.base + "/mcp", OAuth(grant=ClientCredentialsGrant()))
    assert error.code == AUTHORIZATION_FAILED
    assert "another origin" in error.message and "trusted_metadata_origins" in error.message
    assert recorder.received == [] and auth_server.received == []


async def test_a_trusted_origin_may_hold_the_resource_metadata(
    hostile: HostileMCP, recorder: Recorder
) -> None:
    async with AuthorizationServer() as auth_server:
        machine = auth_server.register_client(client_secret=SECRET)
        recorder.answer = {
            "resource": hostile.base + "/mcp",
            "authorization_servers": [auth_server.issuer],
        }
        hostile.challenge = f'Bearer resource_metadata="{recorder.base}{PRM}"'
        auth = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials(machine.client_id, SECRET, issuer=auth_server.issuer),
            trusted_metadata_origins=[recorder.base],
        )
        with pytest.raises(McpError):  # the hostile server accepts no token
            async with Client.http(hostile.base + "/mcp", auth=auth) as client:
                await client.list_tools()
    assert [line.split("\n")[0] for line in recorder.received] == [f"GET {PRM}"]
    assert [form["grant_type"] for form in auth_server.token_requests] == ["client_credentials"]


# --- a remote server naming this machine -------------------------------------------------------


async def test_a_remote_server_reaches_an_authorization_server_elsewhere(
    hostile: HostileMCP,
) -> None:
    # The control for the tests below: names resolved to loopback do stand for remote hosts.
    async with AuthorizationServer(name="as.example") as auth_server:
        auth_server.register_client(client_id="svc", client_secret=SECRET)
        hostile.documents[PRM + "/mcp"] = prm(remote(hostile.base), auth_server.issuer)
        status = await call_remote(
            remote(hostile.base) + "/mcp", client_credentials(auth_server.issuer)
        )
    assert status == 401  # a token was obtained and sent; this server accepts none
    assert [form["grant_type"] for form in auth_server.token_requests] == ["client_credentials"]


@pytest.mark.parametrize(("allow_http", "reason"), [(False, "not https"), (True, "loopback")])
async def test_a_remote_server_cannot_name_an_authorization_server_on_this_machine(
    hostile: HostileMCP, allow_http: bool, reason: str
) -> None:
    async with AuthorizationServer() as auth_server:  # at 127.0.0.1
        hostile.documents[PRM + "/mcp"] = prm(remote(hostile.base), auth_server.issuer)
        # A client that would register anywhere: the server alone chooses where it goes.
        auth = OAuth(FollowRedirect(), allow_http=allow_http, resolver=NAMES)
        error = await call_remote(remote(hostile.base) + "/mcp", auth)
        refused_flow_sent = list(auth_server.received)
        # Credentials bound to that issuer are the application's choice, not the server's.
        bound = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials("svc", SECRET, issuer=auth_server.issuer),
            resolver=NAMES,
        )
        auth_server.register_client(client_id="svc", client_secret=SECRET)
        status = await call_remote(remote(hostile.base) + "/mcp", bound)
    assert isinstance(error, McpError) and error.code == AUTHORIZATION_FAILED
    assert auth_server.issuer in error.message and reason in error.message
    assert "nothing was fetched" in error.message
    assert refused_flow_sent == []
    assert status == 401 and len(auth_server.token_requests) == 1  # only the bound client's


async def test_a_remote_authorization_server_cannot_send_the_secret_to_this_machine(
    hostile: HostileMCP, recorder: Recorder
) -> None:
    async with AuthorizationServer(name="as.example") as auth_server:
        auth_server.register_client(client_id="svc", client_secret=SECRET)
        document = auth_server.metadata()
        document["token_endpoint"] = recorder.base + "/token"  # 127.0.0.1
        auth_server.metadata = lambda: document  # type: ignore[method-assign]
        hostile.documents[PRM + "/mcp"] = prm(remote(hostile.base), auth_server.issuer)
        error = await call_remote(
            remote(hostile.base) + "/mcp", client_credentials(auth_server.issuer)
        )
    assert isinstance(error, McpError) and error.code == AUTHORIZATION_FAILED
    assert recorder.base + "/token" in error.message and "loopback" in error.message
    assert recorder.received == [] and auth_server.token_requests == []
