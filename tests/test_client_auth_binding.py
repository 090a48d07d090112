"""Credentials stay with their issuer: a pre-registered secret or key, and a JWT bearer
assertion, go to the token endpoint of the authorization server they were issued by and to
no server an MCP server names instead. A dynamic registration is bound to the server it was
made at. The servers are real aiohttp applications on loopback (`oauth_as.py` for the
authorization servers, `FakeMCP` for a resource that points where a test says)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from joserfc.jwk import ECKey

from helpers.auth_fakes import FakeMCP, FollowRedirect, fake, serving
from helpers.oauth_as import AuthorizationServer
from mrtr import Client
from mrtr.cli import main
from mrtr.cli.sign_in import command_line_oauth
from mrtr.client.auth import (
    ClientCredentials,
    ClientCredentialsGrant,
    IdJagGrant,
    JwtBearerGrant,
    OAuth,
)
from mrtr.client.auth.credentials import apply_client_auth
from mrtr.client.auth.discovery import AuthorizationFailed
from mrtr.client.auth.metadata import ServerMetadata
from mrtr.protocol.errors import AUTHORIZATION_FAILED, HTTP_ERROR, McpError

__all__ = ["fake"]  # the fixture, imported for the tests here

SECRET = "pre-registered-secret-8f2c"


@pytest.fixture
async def recorder_app() -> AsyncIterator[tuple[str, list[str]]]:
    """A server that answers 400 to everything and records each request's path and body."""
    received: list[str] = []

    async def record(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path} {await request.text()}")
        return web.json_response({"error": "invalid_request"}, status=400)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    async with serving(app) as base:
        yield base, received


ASSERTION = "workload-assertion-51de"


def test_a_secret_key_or_assertion_without_its_issuer_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match=r"issuer='https://auth\.example\.com'"):
        ClientCredentials("svc", SECRET)
    pem = ECKey.generate_key("P-256").as_pem(private=True).decode()
    with pytest.raises(ValueError, match="issuer="):
        ClientCredentials("svc", private_key_pem=pem, auth_method="private_key_jwt")
    with pytest.raises(ValueError, match=r"JwtBearerGrant\(token, issuer="):
        JwtBearerGrant(ASSERTION)
    # An id alone is no secret: a public client may be used wherever it is accepted.
    assert ClientCredentials("public-app").issuer is None
    # A secret saved without its issuer (by an older version) is not used.
    assert ClientCredentials.from_dict({"client_id": "c", "client_secret": SECRET}) is None
    with pytest.raises(ValueError, match="same authorization server"):
        OAuth(
            grant=JwtBearerGrant(ASSERTION, issuer="https://a.example"),
            client=ClientCredentials("c", SECRET, issuer="https://b.example"),
        )


def test_client_authentication_is_never_added_for_another_issuer() -> None:
    credentials = ClientCredentials("svc", SECRET, issuer="https://as.example")
    other = ServerMetadata("https://evil.example", None, "https://evil.example/token")
    form: dict[str, str] = {}
    headers: dict[str, str] = {}
    with pytest.raises(AuthorizationFailed, match="not sent"):
        apply_client_auth(form, headers, credentials, other)
    assert form == {} and headers == {}


async def test_a_pre_registered_secret_never_reaches_the_server_a_hostile_resource_names(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as trusted, AuthorizationServer() as hostile:
        machine = trusted.register_client(client_secret=SECRET, grant_types=["client_credentials"])
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [hostile.issuer]}
        auth = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials(machine.client_id, SECRET, issuer=trusted.issuer),
        )
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED
    assert hostile.issuer in caught.value.message and trusted.issuer in caught.value.message
    assert "nothing was sent" in caught.value.message
    # Nothing at all went to the hostile server: no metadata fetch, no registration, no token
    # request, so neither the secret nor the client id.
    assert hostile.received == []
    assert trusted.token_requests == []


async def test_a_jwt_bearer_assertion_never_reaches_the_server_a_hostile_resource_names(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as trusted, AuthorizationServer() as hostile:
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [hostile.issuer]}
        minted: list[str] = []

        def assertion() -> str:
            minted.append(ASSERTION)
            return ASSERTION

        auth = OAuth(
            grant=JwtBearerGrant(assertion, issuer=trusted.issuer),
            client=ClientCredentials("workload"),
        )
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED
    assert hostile.issuer in caught.value.message
    assert not any(ASSERTION in request for request in hostile.received)
    assert hostile.token_requests == [] and minted == []  # not even asked for


async def test_a_bound_client_uses_its_issuer_among_those_the_resource_names(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as trusted, AuthorizationServer() as other:
        machine = trusted.register_client(client_secret=SECRET, grant_types=["client_credentials"])
        fake.metadata = {
            "resource": fake.base + "/mcp",
            "authorization_servers": [other.issuer, trusted.issuer],
        }
        auth = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials(machine.client_id, SECRET, issuer=trusted.issuer),
        )
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError) as caught:  # the fake accepts no token
                await client.list_tools()
    assert caught.value.code == HTTP_ERROR and caught.value.data["status"] == 401
    assert [form["grant_type"] for form in trusted.token_requests] == ["client_credentials"]
    assert other.received == []
    # The token the trusted server issued was presented to the resource.
    assert fake.posts[-1]["Authorization"].startswith("Bearer ")


async def test_credentials_go_nowhere_when_their_issuers_metadata_names_another(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as trusted, AuthorizationServer() as hostile:
        machine = trusted.register_client(client_secret=SECRET, grant_types=["client_credentials"])
        # The trusted issuer's metadata is served by the hostile server's documents: another
        # issuer, endpoints there (RFC 8414 3.3: the document must not be used).
        trusted.metadata = hostile.metadata  # type: ignore[method-assign]
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [trusted.issuer]}
        auth = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials(machine.client_id, SECRET, issuer=trusted.issuer),
        )
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED and "not used" in caught.value.message
    assert hostile.received == [] and trusted.token_requests == []


async def test_a_dynamic_registration_stays_with_the_server_it_was_made_at(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as first, AuthorizationServer() as second:
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [first.issuer]}
        auth = OAuth(FollowRedirect())
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError):  # the fake accepts no token
                await client.list_tools()
            (registered,) = first.clients.values()
            fake.metadata["authorization_servers"] = [second.issuer]
            with pytest.raises(McpError):
                await client.list_tools()
    assert len(second.clients) == 1  # a registration of its own
    assert [form["client_id"] for form in second.token_requests] != []
    assert not any(registered.client_id in request for request in second.received)


def test_mrtr_call_binds_a_client_secret_to_the_issuer_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    words = ["call", "--client-id", "svc", "--client-secret", SECRET, "http://127.0.0.1:9/mcp"]
    assert main([*words, "whoami"]) == 2
    assert "--client-secret needs --issuer URL" in capsys.readouterr().err
    auth = command_line_oauth(
        client_id="svc", client_secret=SECRET, issuer="https://as.example", token_file="unused"
    )
    assert auth.issuer == "https://as.example"
    assert auth.client is not None and auth.client.issuer == "https://as.example"


async def test_an_id_jag_grant_with_an_issuer_is_asked_for_and_presented_there_only(
    fake: FakeMCP, recorder_app: tuple[str, list[str]]
) -> None:
    idp, idp_received = recorder_app
    async with AuthorizationServer() as trusted, AuthorizationServer() as hostile:
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [hostile.issuer]}
        grant = IdJagGrant(
            "the-users-id-token",
            idp_token_endpoint=idp + "/token",
            idp_client_id="app-at-idp",
            issuer=trusted.issuer,
        )
        auth = OAuth(grant=grant, client=ClientCredentials("mcp-app"))
        assert auth.issuer == trusted.issuer
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED and hostile.issuer in caught.value.message
    assert idp_received == [] and hostile.received == []


async def test_a_bound_client_of_a_server_without_resource_metadata_goes_to_its_issuer(
    fake: FakeMCP,
) -> None:
    fake.challenge = "Bearer"  # and no resource metadata anywhere (a 2025-03-26 server)
    async with AuthorizationServer() as trusted:
        machine = trusted.register_client(client_secret=SECRET, grant_types=["client_credentials"])
        auth = OAuth(
            grant=ClientCredentialsGrant(),
            client=ClientCredentials(machine.client_id, SECRET, issuer=trusted.issuer),
        )
        async with Client.http(fake.base + "/mcp", auth=auth) as client:
            with pytest.raises(McpError):  # the fake accepts no token
                await client.list_tools()
    assert [form["grant_type"] for form in trusted.token_requests] == ["client_credentials"]
