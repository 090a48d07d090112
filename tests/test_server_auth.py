"""The OAuth resource server (`ServerOptions(auth=...)`), end to end over real loopback HTTP.

A real authorization server (`oauth_as.py`: ES256 JWTs, PKCE, refresh, introspection) issues
the tokens; the MCP server runs under uvicorn on this loop with `JWTVerifier` (or
`IntrospectionVerifier`); requests go out with aiohttp or `mrtr.Client`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from joserfc.jwk import ECKey

from helpers.oauth_as import AuthorizationServer, pkce_pair
from helpers.protected_server import (
    KEY,
    AutoApprove,
    Protected,
    call,
    headers_for,
    protected,
)
from helpers.transport_flow import serve
from mrtr import (
    AccessToken,
    AuthSettings,
    Client,
    ElicitResult,
    RequestContext,
    Server,
    ServerOptions,
)
from mrtr.client.auth import (
    ClientCredentials,
    ClientCredentialsGrant,
    OAuth,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.auth import (
    DEFAULT_DPOP_ALGORITHMS,
    IntrospectionVerifier,
    JWTVerifier,
    VerifierUnavailable,
)
from mrtr.transport.http_app import StreamableHTTPApp


@pytest.fixture
async def site() -> AsyncIterator[Protected]:
    async with protected() as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# --- raw requests ------------------------------------------------------------------------------


class Reply:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = orjson.loads(body) if body else None

    @property
    def challenge(self) -> dict[str, str]:
        """The parameters of the `WWW-Authenticate: Bearer ...` header."""
        value = self.headers.get("WWW-Authenticate", "")
        assert value.startswith("Bearer "), value
        return dict(re.findall(r'(\w+)="([^"]*)"', value))


async def post(
    http: aiohttp.ClientSession,
    url: str,
    message: dict[str, Any],
    token: str | None,
    **headers: str,
) -> Reply:
    sent = {**headers_for(message, token), **headers}
    async with http.post(url, data=orjson.dumps(message), headers=sent) as response:
        return Reply(response.status, response.headers, await response.read())


def answer_first_round(reply: Reply) -> dict[str, Any]:
    """The retry params that accept every question of an `InputRequiredResult`."""
    assert reply.status == 200, reply.body
    result = reply.body["result"]
    assert result["resultType"] == "input_required", result
    responses = {key: {"action": "accept", "content": {}} for key in result["inputRequests"]}
    return {"inputResponses": responses, "requestState": result["requestState"]}


async def code_flow(
    http: aiohttp.ClientSession, auth_server: AuthorizationServer, resource: str, scope: str
) -> dict[str, Any]:
    """Dynamic registration, then an authorization-code grant with PKCE: the token response."""
    metadata_url = auth_server.base_url + "/.well-known/oauth-authorization-server"
    async with http.get(metadata_url) as response:
        metadata = await response.json()
    redirect = "http://127.0.0.1:9/callback"
    registration = {"redirect_uris": [redirect], "token_endpoint_auth_method": "none"}
    async with http.post(metadata["registration_endpoint"], json=registration) as response:
        assert response.status == 201
        client_id = (await response.json())["client_id"]
    verifier, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st",
        "scope": scope,
        "resource": resource,
    }
    async with http.get(
        metadata["authorization_endpoint"], params=query, allow_redirects=False
    ) as response:
        assert response.status == 302
        location = response.headers["Location"]
    back = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    assert back["state"] == "st" and back["iss"] == metadata["issuer"]
    form = {
        "grant_type": "authorization_code",
        "code": back["code"],
        "code_verifier": verifier,
        "redirect_uri": redirect,
        "client_id": client_id,
        "resource": resource,
    }
    async with http.post(metadata["token_endpoint"], data=form) as response:
        assert response.status == 200
        tokens: dict[str, Any] = await response.json()
    tokens["client_id"] = client_id
    return tokens


async def refresh(
    http: aiohttp.ClientSession, auth_server: AuthorizationServer, tokens: dict[str, Any]
) -> dict[str, Any]:
    form = {
        "grant_type": "refresh_token",
        "refresh_token": tokens["refresh_token"],
        "client_id": tokens["client_id"],
    }
    async with http.post(auth_server.token_endpoint, data=form) as response:
        assert response.status == 200
        fresh: dict[str, Any] = await response.json()
    fresh["client_id"] = tokens["client_id"]
    return fresh


# --- discovery and the happy path -----------------------------------------------------------


async def test_protected_resource_metadata_at_the_path_and_the_root(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        async with http.get(site.base + path) as response:
            assert response.status == 200
            assert response.headers["Access-Control-Allow-Origin"] == "*"
            document = await response.json()
        assert document == {
            "resource": site.url,
            "authorization_servers": [site.auth_server.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["mcp"],
            "dpop_signing_alg_values_supported": list(DEFAULT_DPOP_ALGORITHMS),
        }
    async with http.post(site.base + "/.well-known/oauth-protected-resource") as response:
        assert response.status == 405
    async with http.get(site.base + "/.well-known/oauth-protected-resource/other") as response:
        assert response.status == 404  # only the resource's own path, and the root


async def test_401_then_discovery_then_token_then_call(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    message = call("whoami", {})
    reply = await post(http, site.url, message, None)
    assert reply.status == 401
    challenge = reply.challenge
    assert "error" not in challenge  # no token was sent: nothing to call invalid
    assert "error" not in reply.body["error"]["data"]
    assert challenge["scope"] == "mcp"
    assert reply.body["error"]["data"]["resource_metadata"] == challenge["resource_metadata"]
    async with http.get(challenge["resource_metadata"]) as response:
        prm = await response.json()
    assert prm["resource"] == site.url
    [issuer] = prm["authorization_servers"]
    assert issuer == site.auth_server.issuer
    tokens = await code_flow(http, site.auth_server, prm["resource"], challenge["scope"])
    async with Client.http(
        site.url, headers={"Authorization": f"Bearer {tokens['access_token']}"}
    ) as client:
        result = await client.call_tool("whoami", {})
    assert result.structured_content == {
        "sub": "user-1",
        "client": tokens["client_id"],
        "scopes": ["mcp"],
    }


# --- scopes -------------------------------------------------------------------------------------


async def test_step_up_for_a_scoped_tool(site: Protected, http: aiohttp.ClientSession) -> None:
    narrow = site.token(scopes=["mcp"])
    message = call("purge", {"what": "cache"})
    reply = await post(http, site.url, message, narrow)
    assert reply.status == 403
    assert reply.challenge["error"] == "insufficient_scope"
    assert reply.challenge["scope"] == "admin"
    assert reply.challenge["resource_metadata"].endswith(
        "/.well-known/oauth-protected-resource/mcp"
    )
    error = reply.body["error"]
    assert reply.body["id"] == 1 and error["data"]["error"] == "insufficient_scope"
    assert "admin" in error["message"]
    # Other tools stay callable with the narrow token.
    assert (await post(http, site.url, call("whoami", {}), narrow)).status == 200
    wide = site.token(scopes=["mcp", "admin"])
    first = await post(http, site.url, message, wide)
    retry = call("purge", {"what": "cache"}, **answer_first_round(first))
    done = await post(http, site.url, retry, wide)
    assert done.status == 200
    assert done.body["result"]["content"] == [{"type": "text", "text": "purged cache"}]


async def test_a_scoped_tool_is_checked_again_on_a_later_round(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    wide = site.token(scopes=["mcp", "admin"])
    first = await post(http, site.url, call("purge", {"what": "db"}), wide)
    retry = call("purge", {"what": "db"}, **answer_first_round(first))
    narrow = site.token(scopes=["mcp"])  # same user, fewer scopes
    reply = await post(http, site.url, retry, narrow)
    assert reply.status == 403
    assert reply.challenge["scope"] == "admin"


async def test_required_scopes_and_scope_hierarchy(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    site.install(required_scopes=["mcp"], scope_hierarchy={"root": ["admin", "mcp"]})
    reply = await post(http, site.url, call("whoami", {}), site.token(scopes=["other"]))
    assert reply.status == 403
    assert reply.challenge == {
        "resource_metadata": site.base + "/.well-known/oauth-protected-resource/mcp",
        "scope": "mcp",
        "error": "insufficient_scope",
        "error_description": "the access token lacks scopes this server requires",
    }
    # One challenge names every scope the call needs: the server's and the tool's.
    reply = await post(http, site.url, call("purge", {"what": "x"}), site.token(scopes=["mcp"]))
    assert reply.status == 403 and reply.challenge["scope"] == "admin mcp"
    # "root" implies both.
    reply = await post(http, site.url, call("purge", {"what": "x"}), site.token(scopes=["root"]))
    assert reply.status == 200
    assert reply.body["result"]["resultType"] == "input_required"


# --- the caller binds the sealed state -----------------------------------------------------


async def test_state_minted_for_one_user_is_refused_for_another(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    site.auth_server.user = "alice"
    alice = await code_flow(http, site.auth_server, site.url, "mcp")
    first = await post(http, site.url, call("confirm", {"item": "book"}), alice["access_token"])
    retry = call("confirm", {"item": "book"}, **answer_first_round(first))

    site.auth_server.user = "bob"
    bob = await code_flow(http, site.auth_server, site.url, "mcp")
    stolen = await post(http, site.url, retry, bob["access_token"])
    assert stolen.status == 400
    assert stolen.body["error"]["code"] == -32602
    assert stolen.body["error"]["data"]["reason"] == "invalid_request_state"

    # Alice's token expires; the refreshed one is hers all the same.
    fresh = await refresh(http, site.auth_server, alice)
    assert fresh["access_token"] != alice["access_token"]
    done = await post(http, site.url, retry, fresh["access_token"])
    assert done.status == 200
    assert done.body["result"]["content"] == [{"type": "text", "text": "accept book"}]


async def test_an_explicit_principal_wins_over_the_token(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    server = site.install()
    # Every caller is the same principal here, so a state moves between users: the operator
    # said so.
    server.options.principal = lambda info: "everyone"
    first = await post(http, site.url, call("confirm", {"item": "pen"}), site.token(subject="a"))
    retry = call("confirm", {"item": "pen"}, **answer_first_round(first))
    done = await post(http, site.url, retry, site.token(subject="b"))
    assert done.status == 200, done.body


# --- refused tokens ---------------------------------------------------------------------------


async def test_bad_tokens_are_refused_with_the_right_status(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    stranger = ECKey.generate_key("P-256", parameters={"kid": site.auth_server._keys[-1].kid})
    invalid = {
        "expired": site.token(expires_in=-120),
        "forged": site.token(key=stranger),
        "wrong audience": site.token(audience="http://127.0.0.1:1/other"),
        "no audience": site.auth_server.issue_token(),
        "wrong issuer": site.token(issuer="http://127.0.0.1:1/evil"),
        "not yet valid": site.token(not_before=2**31),
        "garbage": "not-a-jwt",
        "alg none": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
        "too long": "a" * 20_000,
        "expired beyond leeway only": site.token(expires_in=-31),
    }
    message = call("whoami", {})
    for what, token in invalid.items():
        reply = await post(http, site.url, message, token)
        assert reply.status == 401, what
        assert reply.challenge["error"] == "invalid_token", what
        assert reply.body["error"]["data"]["error"] == "invalid_token", what
    malformed = {
        "Bearer": 400,  # no credentials
        "Bearer a b": 400,
        "Basic dXNlcjpwYXNz": 401,  # another scheme: as if none was sent
        "": 401,
    }
    for header, status in malformed.items():
        reply = await post(http, site.url, message, None, Authorization=header)
        assert reply.status == status, header
    # Within the verifier's leeway (30 s of clock skew) a just-expired token still works.
    assert (await post(http, site.url, message, site.token(expires_in=-10))).status == 200
    good = site.token()
    async with http.post(
        site.url + "?access_token=" + good,
        data=orjson.dumps(message),
        headers=headers_for(message, good),
    ) as response:
        assert response.status == 400
        body = await response.json()
    assert "query string" in body["error"]["message"]
    assert (await post(http, site.url, message, good)).status == 200


async def test_tokens_are_never_logged(
    site: Protected, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [site.token(expires_in=-60), site.token(), site.token(audience="http://x/y")]
    for token in tokens:
        await post(http, site.url, call("whoami", {}), token)
    logged = caplog.text
    assert "token refused" in logged  # the reasons are logged...
    for token in tokens:
        assert token not in logged and token.split(".")[2] not in logged  # ...never a token


async def test_two_authorization_headers_are_refused(site: Protected) -> None:
    message = call("whoami", {})
    raw = orjson.dumps(message)
    reader, writer = await asyncio.open_connection(
        *urllib.parse.urlsplit(site.base).netloc.split(":")
    )
    token = site.token()
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nMcp-Method: tools/call\r\nMcp-Name: whoami\r\n"
        f"MCP-Protocol-Version: {LATEST_PROTOCOL_VERSION}\r\n"
        f"Authorization: Bearer {token}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
    ).encode() + raw
    writer.write(request)
    status_line = await reader.readline()
    writer.close()
    assert status_line.split()[1] == b"400"


async def test_key_rotation_is_picked_up_and_unknown_keys_fetch_boundedly(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    message = call("whoami", {})
    assert (await post(http, site.url, message, site.token())).status == 200
    fetched = site.auth_server.jwks_requests
    assert fetched == 1
    site.auth_server.rotate_key()
    assert (await post(http, site.url, message, site.token())).status == 200
    assert site.auth_server.jwks_requests == 2  # the unknown kid made one refetch
    stranger = ECKey.generate_key("P-256", parameters={"kid": "made-up"})
    for _ in range(5):
        reply = await post(http, site.url, message, site.token(key=stranger))
        assert reply.status == 401
    # Within min_refresh_interval: no fetch for made-up key ids.
    assert site.auth_server.jwks_requests == 2


async def test_an_unreachable_authorization_server_is_503_not_401(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    token = site.token()
    await site.auth_server.stop()
    reply = await post(http, site.url, call("whoami", {}), token)
    assert reply.status == 503
    assert reply.headers["Retry-After"] == "5"
    assert reply.body["error"]["data"]["error"] == "temporarily_unavailable"


async def test_a_verifier_that_raises_is_a_bad_token_not_a_crash(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    class Broken:
        async def verify(self, token: str) -> AccessToken | None:
            raise RuntimeError("verifier bug")

    site.install(verifier=Broken())
    reply = await post(http, site.url, call("whoami", {}), "anything")
    assert reply.status == 401
    assert "verifier bug" not in str(reply.body)


# --- introspection ------------------------------------------------------------------------------


async def test_introspection_verifier_against_the_authorization_server(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    resource_server = site.auth_server.register_client(client_id="mcp-server")
    verifier = IntrospectionVerifier(
        site.auth_server.introspection_endpoint,
        client_id=resource_server.client_id,
        client_secret=resource_server.client_secret or "",
        audience=site.url,
        issuer=site.auth_server.issuer,
        cache_ttl=60,
    )
    site.install(verifier=verifier)
    token = site.token(subject="carol", scopes=["mcp", "admin"])
    message = call("whoami", {})
    for _ in range(3):
        reply = await post(http, site.url, message, token)
        assert reply.status == 200
    assert reply.body["result"]["structuredContent"]["sub"] == "carol"
    assert len(site.auth_server.introspections) == 1  # cached after the first
    # A token for another resource is active at the AS, but not for this server.
    other = site.token(audience="http://127.0.0.1:1/other")
    assert (await post(http, site.url, message, other)).status == 401
    # Without the cache, revocation takes effect at once.
    site.install(
        verifier=IntrospectionVerifier(
            site.auth_server.introspection_endpoint,
            client_id=resource_server.client_id,
            client_secret=resource_server.client_secret or "",
            audience=site.url,
            auth_method="client_secret_post",
            cache_ttl=0,
        )
    )
    assert (await post(http, site.url, message, token)).status == 200
    site.auth_server.revoke(token)
    assert (await post(http, site.url, message, token)).status == 401
    # Wrong credentials for the introspection endpoint: the server cannot decide (503).
    site.install(
        verifier=IntrospectionVerifier(
            site.auth_server.introspection_endpoint,
            client_id=resource_server.client_id,
            client_secret="wrong",
            audience=site.url,
        )
    )
    assert (await post(http, site.url, message, site.token())).status == 503


async def test_introspection_cache_is_bounded(site: Protected) -> None:
    resource_server = site.auth_server.register_client()
    verifier = IntrospectionVerifier(
        site.auth_server.introspection_endpoint,
        client_id=resource_server.client_id,
        client_secret=resource_server.client_secret or "",
        audience=site.url,
        cache_size=2,
    )
    tokens = [site.token(subject=f"u{i}") for i in range(4)]
    for token in tokens:
        verified = await verifier.verify(token)
        assert verified is not None and verified.subject is not None
    assert len(verifier._cache) == 2
    assert await verifier.verify("") is None
    assert await verifier.verify("x" * 20_000) is None


# --- the legacy era through the same gate -----------------------------------------------------


def legacy(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        message["id"] = id
    return message


async def legacy_post(
    http: aiohttp.ClientSession,
    url: str,
    message: dict[str, Any],
    token: str | None,
    session_id: str | None = None,
) -> Reply:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
        headers["MCP-Protocol-Version"] = "2025-11-25"
    async with http.post(url, data=orjson.dumps(message), headers=headers) as response:
        raw = await response.read()
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            data = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
            raw = data[-1].encode() if data and data[-1] else b""
        return Reply(response.status, response.headers, raw)


async def test_a_legacy_client_meets_the_same_protection(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    init = legacy(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "old", "version": "1"},
        },
    )
    refused = await legacy_post(http, site.url, init, None)
    assert refused.status == 401 and "resource_metadata" in refused.challenge
    alice = site.token(subject="alice", scopes=["mcp"])
    opened = await legacy_post(http, site.url, init, alice)
    assert opened.status == 200
    session_id = opened.headers["Mcp-Session-Id"]
    await legacy_post(
        http, site.url, legacy("notifications/initialized", id=None), alice, session_id
    )
    whoami = legacy("tools/call", {"name": "whoami", "arguments": {}}, id=2)
    reply = await legacy_post(http, site.url, whoami, alice, session_id)
    assert reply.status == 200
    assert reply.body["result"]["structuredContent"]["sub"] == "alice"
    purge = legacy("tools/call", {"name": "purge", "arguments": {"what": "x"}}, id=3)
    reply = await legacy_post(http, site.url, purge, alice, session_id)
    assert reply.status == 403 and reply.challenge["scope"] == "admin"
    # Without a token, even inside a session: 401.
    assert (await legacy_post(http, site.url, whoami, None, session_id)).status == 401
    # Bob, with a valid token of his own, cannot use Alice's session.
    bob = site.token(subject="bob", scopes=["mcp"])
    reply = await legacy_post(http, site.url, whoami, bob, session_id)
    assert reply.status == 404
    # Alice, with a refreshed token, still can.
    again = site.token(subject="alice", scopes=["mcp"])
    assert (await legacy_post(http, site.url, whoami, again, session_id)).status == 200


# --- configuration and the unprotected path ---------------------------------------------------


def test_settings_are_checked_when_built() -> None:
    verifier = JWTVerifier("https://as.example.com", "https://mcp.example.com/mcp")
    good = {
        "resource": "https://mcp.example.com/mcp",
        "authorization_servers": ["https://as.example.com"],
        "verifier": verifier,
    }
    AuthSettings(**good)  # type: ignore[arg-type]
    for change, words in [
        ({"resource": "mcp.example.com"}, "absolute URL"),
        ({"resource": "https://mcp.example.com/mcp#top"}, "fragment"),
        ({"authorization_servers": []}, "at least one issuer"),
        ({"verifier": object()}, "async def verify"),
        ({"required_scopes": "mcp"}, "list of scopes"),
    ]:
        with pytest.raises(ValueError, match=words):
            AuthSettings(**{**good, **change})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="asymmetric"):
        JWTVerifier("https://as.example.com", "https://x/mcp", algorithms=["HS256"])
    with pytest.raises(ValueError, match="auth must be"):
        ServerOptions(auth=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scope token"):
        Server("s").tool(scopes=['has"quote'])(lambda: None)
    settings = AuthSettings(**{**good, "resource": "HTTPS://MCP.example.com/mcp/"})  # type: ignore[arg-type]
    assert settings.metadata()["resource"] == "https://mcp.example.com/mcp"
    assert (
        settings.metadata_url == "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    )


async def test_without_auth_nothing_is_checked_and_ctx_auth_is_none() -> None:
    server = Server("open", options=ServerOptions(request_state_key=KEY))
    seen: list[AccessToken | None] = []

    @server.tool(scopes=["admin"])
    async def look(ctx: RequestContext) -> str:
        seen.append(ctx.auth)
        return "ok"

    assert StreamableHTTPApp(server)._auth is None
    assert server.options.principal is None
    async with serve(StreamableHTTPApp(server)) as base, Client.http(base + "/mcp") as client:
        result = await client.call_tool("look", {})
    assert result.content[0].text == "ok"  # type: ignore[union-attr]
    async with Client.in_memory(server) as client:
        await client.call_tool("look", {})
    assert seen == [None, None]


async def test_the_protected_server_works_with_the_mrtr_client(site: Protected) -> None:
    token = site.token(scopes=["mcp", "admin"])
    async with Client.http(
        site.url,
        headers={"Authorization": f"Bearer {token}"},
        elicitation_handler=lambda params: ElicitResult(action="accept", content={}),
    ) as client:
        result = await client.call_tool("purge", {"what": "logs"})
    assert result.content[0].text == "purged logs"  # type: ignore[union-attr]


# --- our client's OAuth, end to end -----------------------------------------------------------


async def test_our_client_authorizes_steps_up_and_keeps_its_state(site: Protected) -> None:
    site.auth_server.user = "erin"
    browser = AutoApprove()
    auth = OAuth(browser)
    async with Client.http(
        site.url,
        auth=auth,
        elicitation_handler=lambda params: ElicitResult(action="accept", content={}),
    ) as client:
        result = await client.call_tool("whoami", {})
        assert result.structured_content == {
            "sub": "erin",
            "client": result.structured_content["client"],  # type: ignore[index]
            "scopes": ["mcp"],
        }
        # 403 insufficient_scope -> a second authorization with the wider scope, then the
        # two MRTR rounds of the tool under it.
        result = await client.call_tool("purge", {"what": "cache"})
        assert result.content[0].text == "purged cache"  # type: ignore[union-attr]
    assert browser.scopes[0] == "mcp"
    assert set(browser.scopes[1].split()) == {"mcp", "admin"}


async def test_our_client_with_a_client_credentials_grant(site: Protected) -> None:
    machine = site.auth_server.register_client(grant_types=["client_credentials"])
    auth = OAuth(
        grant=ClientCredentialsGrant(),
        client=ClientCredentials(
            machine.client_id, machine.client_secret, issuer=site.auth_server.issuer
        ),
    )
    async with Client.http(site.url, auth=auth) as client:
        result = await client.call_tool("whoami", {})
    assert result.structured_content["sub"] == machine.client_id  # type: ignore[index]


async def test_jwt_verifier_remembers_tokens_it_verified_boundedly(site: Protected) -> None:
    verifier = JWTVerifier(site.auth_server.issuer, site.url, cache_size=2)
    tokens = [site.token(subject=f"u{i}") for i in range(3)]
    for token in tokens:
        verified = await verifier.verify(token)
        assert verified is not None and verified.principal
    assert len(verifier._cache) == 2
    # A remembered token is answered from the cache: even with its issuer's keys gone.
    await site.auth_server.stop()
    again = await verifier.verify(tokens[-1])
    assert again is not None and again.subject == "u2"
    uncached = JWTVerifier(site.auth_server.issuer, site.url, cache_ttl=0)
    with pytest.raises(VerifierUnavailable):
        await uncached.verify(tokens[-1])


async def test_only_access_tokens_are_accepted_by_their_typ(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    message = call("whoami", {})
    # Other JWTs the same issuer signs with the same keys and (here) the same claims.
    for typ in ("JWT", "jwt", "logout+jwt", "secevent+jwt", "oauth-id-jag+jwt", "dpop+jwt"):
        reply = await post(http, site.url, message, site.token(typ=typ))
        assert reply.status == 401, typ
        assert reply.challenge["error"] == "invalid_token", typ
        assert reply.body["error"]["data"]["error"] == "invalid_token", typ
    for typ in ("at+jwt", "application/at+jwt", "AT+JWT"):
        assert (await post(http, site.url, message, site.token(typ=typ))).status == 200, typ
    untyped = site.token(typ=None)
    assert (await post(http, site.url, message, untyped)).status == 401  # refused by default
    lenient = JWTVerifier(site.auth_server.issuer, site.url, accept_untyped=True)
    site.install(verifier=lenient)
    reply = await post(http, site.url, message, untyped)
    assert reply.status == 200, reply.body
    assert reply.body["result"]["structuredContent"]["sub"] == site.auth_server.user
    # accept_untyped admits a missing typ only, never another kind of token.
    assert (await post(http, site.url, message, site.token(typ="JWT"))).status == 401
    assert await lenient.verify(site.token(typ="logout+jwt")) is None


async def test_hostile_headers_and_metadata_methods(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    message = call("whoami", {})
    for header in ["Bearer tök€n", "Bearer " + "x" * 7000, "Bearer\tabc"]:
        reply = await post(http, site.url, message, None, Authorization=header)
        assert reply.status in (400, 401), header[:20]
    # The scheme is case-insensitive, and extra spaces before the token are tolerated.
    for header in ["BEARER " + site.token(), "bearer  " + site.token()]:
        reply = await post(http, site.url, message, None, Authorization=header)
        assert reply.status == 200, header[:10]
    metadata = site.base + "/.well-known/oauth-protected-resource/mcp"
    async with http.head(metadata) as response:
        assert response.status == 200 and await response.read() == b""
    async with http.options(metadata) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    # After all that, the server still serves.
    assert (await post(http, site.url, message, site.token())).status == 200


def test_importing_mrtr_does_not_load_the_jwt_library() -> None:
    code = (
        "import sys, mrtr, mrtr.server.auth\n"
        "assert 'joserfc' not in sys.modules, 'loaded eagerly'\n"
        "mrtr.server.auth.JWTVerifier\n"
        "assert 'joserfc' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
