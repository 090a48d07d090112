"""The OAuth client's own rules, the ones the conformance suite does not pin: challenge parsing,
the resource and issuer checks, the token stores, DPoP proofs, step-up limits. Servers are
real aiohttp applications on loopback; the authorization server is `oauth_as.py`."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from joserfc import jwt
from joserfc.jwk import ECKey

from helpers.auth_fakes import FakeMCP, FollowRedirect, fake, serving
from helpers.oauth_as import AuthorizationServer
from mrtr import Client
from mrtr.client.auth import (
    AuthorizationResponse,
    Challenge,
    FileTokenStore,
    InvalidCallback,
    MemoryTokenStore,
    OAuth,
    Tokens,
    auth_challenge,
    parse_challenges,
)
from mrtr.client.auth.jose import DPoPKey
from mrtr.client.auth.metadata import canonical_resource, resource_covers, server_metadata_urls
from mrtr.protocol.errors import AUTHORIZATION_FAILED, HTTP_ERROR, McpError

__all__ = ["fake"]  # the fixture, imported for the tests here

# --- WWW-Authenticate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            'Bearer resource_metadata="https://h/.well-known/x", scope="a b"',
            [("bearer", {"resource_metadata": "https://h/.well-known/x", "scope": "a b"})],
        ),
        (  # several challenges in one header; unquoted values; case-folded names
            'Basic realm="x", Bearer Error=invalid_token, DPoP algs="ES256"',
            [
                ("basic", {"realm": "x"}),
                ("bearer", {"error": "invalid_token"}),
                ("dpop", {"algs": "ES256"}),
            ],
        ),
        (  # commas and escaped quotes inside a quoted string
            r'Bearer error_description="a \"b\", c", scope=x',
            [("bearer", {"error_description": 'a "b", c', "scope": "x"})],
        ),
        ("Negotiate abc==, Bearer", [("negotiate", {}), ("bearer", {})]),  # token68
        ('Bearer scope="first", scope="second"', [("bearer", {"scope": "first"})]),
        ("", []),
        (",,, ,", []),
    ],
)
def test_challenges_are_parsed(header: str, expected: list[tuple[str, dict[str, str]]]) -> None:
    parsed = parse_challenges(header)
    assert [(c.scheme, dict(c.params)) for c in parsed] == expected


def test_a_malformed_parameter_costs_only_itself() -> None:
    (bearer, *_) = parse_challenges('Bearer scope="ok", ===junk, resource_metadata="u"')
    assert bearer.scope == "ok"
    chosen = auth_challenge(['Basic realm="a"', 'Bearer ===, error="insufficient_scope"'])
    assert chosen is not None and chosen.scheme == "bearer"
    assert auth_challenge(['Basic realm="only basic"']) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('Bearer DPoP ,="\\ab=/:x\t')), max_size=80))
def test_parsing_never_raises(header: str) -> None:
    for challenge in parse_challenges(header):
        assert isinstance(challenge, Challenge)
        assert challenge.scheme == challenge.scheme.lower()


def test_a_huge_header_is_cut_not_parsed_whole() -> None:
    challenges = parse_challenges('Bearer scope="s", ' + "x=y, " * 100_000)
    assert challenges[0].scope == "s"
    assert sum(len(c.params) for c in challenges) < 5_000


# --- URLs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "server", "covered"),
    [
        ("https://h.example/mcp", "https://h.example/mcp", True),
        ("https://h.example", "https://h.example/mcp", True),
        ("https://H.EXAMPLE:443/", "https://h.example/mcp", True),
        ("https://h.example/mcp", "https://h.example/mcp/sub", True),
        ("https://h.example/mc", "https://h.example/mcp", False),  # not on a segment boundary
        ("https://h.example/other", "https://h.example/mcp", False),
        ("https://evil.example/mcp", "https://h.example/mcp", False),
        ("http://h.example/mcp", "https://h.example/mcp", False),
        ("https://h.example:8443/mcp", "https://h.example/mcp", False),
        ("https://h.example/mcp#frag", "https://h.example/mcp", False),
        ("h.example/mcp", "https://h.example/mcp", False),
    ],
)
def test_which_resources_cover_a_server(resource: str, server: str, covered: bool) -> None:
    assert resource_covers(resource, server) is covered


def test_canonical_resource_and_metadata_url_order() -> None:
    assert canonical_resource("HTTPS://Mcp.Example.com/mcp/?q=1#f") == "https://mcp.example.com/mcp"
    assert server_metadata_urls("https://a.example/tenant1") == [
        "https://a.example/.well-known/oauth-authorization-server/tenant1",
        "https://a.example/.well-known/openid-configuration/tenant1",
        "https://a.example/tenant1/.well-known/openid-configuration",
    ]


# --- loopback servers ---------------------------------------------------------------------------


async def test_a_401_without_auth_reports_status_and_challenge(fake: FakeMCP) -> None:
    async with Client.http(fake.base + "/mcp", options=None) as client:
        with pytest.raises(McpError) as caught:
            await client.list_tools()
    assert caught.value.code == HTTP_ERROR
    assert "HTTP 401" in caught.value.message and "WWW-Authenticate" in caught.value.message
    assert caught.value.data["status"] == 401
    assert "resource_metadata" in caught.value.data["wwwAuthenticate"]


async def test_metadata_for_another_resource_is_refused_before_any_authorization(
    fake: FakeMCP,
) -> None:
    async with AuthorizationServer() as auth_server:
        fake.metadata = {
            "resource": fake.base + "/other",
            "authorization_servers": [auth_server.issuer],
        }
        browser = FollowRedirect()
        async with Client.http(fake.base + "/mcp", auth=OAuth(browser)) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED
    assert "/other" in caught.value.message and "no token" in caught.value.message
    assert browser.urls == [] and auth_server.metadata_requests == []
    assert auth_server.token_requests == []


async def test_authorization_server_metadata_naming_another_issuer_is_not_used(
    fake: FakeMCP,
) -> None:
    issuer_app = web.Application()
    seen: list[str] = []

    async def metadata(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response(
            {
                "issuer": "https://attacker.example",
                "authorization_endpoint": "https://attacker.example/authorize",
                "token_endpoint": "https://attacker.example/token",
                "registration_endpoint": "https://attacker.example/register",
            }
        )

    issuer_app.router.add_get("/{tail:.*}", metadata)
    async with serving(issuer_app) as issuer:
        fake.metadata = {"resource": fake.base + "/mcp", "authorization_servers": [issuer]}
        browser = FollowRedirect()
        async with Client.http(fake.base + "/mcp", auth=OAuth(browser)) as client:
            with pytest.raises(McpError) as caught:
                await client.list_tools()
    assert caught.value.code == AUTHORIZATION_FAILED
    assert "attacker.example" in caught.value.message and "not used" in caught.value.message
    assert seen == ["/.well-known/oauth-authorization-server"]  # nothing after the refusal
    assert browser.urls == []


async def test_resource_metadata_is_looked_for_under_the_path_then_at_the_root(
    fake: FakeMCP,
) -> None:
    fake.challenge = "Bearer"  # no resource_metadata: the well-known URLs, in order
    async with AuthorizationServer(issuer_path="/tenant1") as auth_server:
        fake.metadata = {"resource": fake.base, "authorization_servers": [auth_server.issuer]}
        async with Client.http(fake.base + "/mcp", auth=OAuth(FollowRedirect())) as client:
            with pytest.raises(McpError):  # the fake never accepts a token
                await client.list_tools()
    assert fake.hits[:2] == [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ]
    assert auth_server.metadata_requests[0] == ("/.well-known/oauth-authorization-server/tenant1")


async def test_a_token_saved_for_another_resource_is_never_sent(
    fake: FakeMCP, tmp_path: Path
) -> None:
    store = FileTokenStore(tmp_path / "tokens.json")
    planted = Tokens("secret-token", resource="http://elsewhere.example/mcp")
    await store.save(f"tokens {canonical_resource(fake.base + '/mcp')}", planted.to_dict())
    async with Client.http(fake.base + "/mcp", auth=OAuth(FollowRedirect(), store=store)) as c:
        with pytest.raises(McpError):
            await c.list_tools()
    assert fake.posts and all("Authorization" not in sent for sent in fake.posts)


def test_a_callback_with_a_repeated_parameter_is_refused() -> None:
    with pytest.raises(InvalidCallback):
        AuthorizationResponse.from_url("http://127.0.0.1/cb?code=a&state=s&code=b")
    answer = AuthorizationResponse.from_url(
        "http://127.0.0.1/cb?code=a&state=s&iss=https%3A%2F%2Fx"
    )
    assert (answer.code, answer.state, answer.iss) == ("a", "s", "https://x")
    assert "a" not in repr(answer).replace("AuthorizationResponse", "").replace("state", "")


# --- token stores ------------------------------------------------------------------------------


async def test_token_stores_round_trip(tmp_path: Path) -> None:
    tokens = Tokens("at", "DPoP", "rt", 1234.5, "a b", "https://as.example", {"kty": "EC"})
    for store in (MemoryTokenStore(), FileTokenStore(tmp_path / "dir" / "tokens.json")):
        await store.save("tokens x", tokens.to_dict())
        assert Tokens.from_dict(await store.load("tokens x") or {}) == tokens
        assert await store.load("missing") is None
        await store.save("tokens x", None)
        assert await store.load("tokens x") is None


async def test_the_token_file_is_private_and_survives_the_process(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "tokens.json"
    await FileTokenStore(path).save("client https://as", {"client_id": "c", "client_secret": "s"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert await FileTokenStore(path).load("client https://as") == {
        "client_id": "c",
        "client_secret": "s",
    }
    path.write_text("{not json")
    assert await FileTokenStore(path).load("client https://as") is None  # unreadable: empty
    assert [p.name for p in path.parent.iterdir()] == ["tokens.json"]  # no temporary left


def test_unusable_saved_tokens_are_ignored() -> None:
    assert Tokens.from_dict({"token_type": "Bearer"}) is None
    assert Tokens.from_dict({"access_token": 3}) is None
    restored = Tokens.from_dict({"access_token": "a", "expires_at": "soon", "dpop_key": [1]})
    assert restored == Tokens("a")


# --- DPoP --------------------------------------------------------------------------------------


def test_dpop_proofs_are_fresh_and_bound_to_the_request() -> None:
    key = DPoPKey()
    first = key.proof("post", "https://mcp.example/mcp?x=1#f", access_token="tok", nonce="n1")
    second = key.proof("post", "https://mcp.example/mcp", access_token="tok")
    public = ECKey.import_key(key.private_jwk)
    decoded = jwt.decode(first, public)
    assert decoded.header["typ"] == "dpop+jwt" and "d" not in decoded.header["jwk"]
    claims = decoded.claims
    assert claims["htm"] == "POST" and claims["htu"] == "https://mcp.example/mcp"
    assert claims["nonce"] == "n1"
    assert jwt.decode(second, public).claims["jti"] != claims["jti"]
    # RFC 9449 7.1's own example of a token and its hash.
    example = key.proof("GET", "https://r.example/", access_token=RFC_9449_TOKEN)
    assert jwt.decode(example, public).claims["ath"] == RFC_9449_ATH


RFC_9449_TOKEN = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
RFC_9449_ATH = "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"


# --- step-up ------------------------------------------------------------------------------------


class ScopeHungry:
    """A resource that accepts any bearer token for nothing: each 403 asks for one more scope
    (`grow`), or always for the one scope the client already asked for."""

    def __init__(self, issuer: str, *, grow: bool) -> None:
        self.issuer = issuer
        self.grow = grow
        self.base = ""
        self.forbidden = 0
        self.app = web.Application()
        self.app.router.add_post("/mcp", self.mcp)
        self.app.router.add_get("/.well-known/oauth-protected-resource/mcp", self.metadata)

    async def metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"resource": self.base + "/mcp", "authorization_servers": [self.issuer]}
        )

    async def mcp(self, request: web.Request) -> web.Response:
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return web.Response(status=401, headers={"WWW-Authenticate": 'Bearer scope="mcp"'})
        self.forbidden += 1
        scope = f"extra{self.forbidden}" if self.grow else "mcp"
        challenge = f'Bearer error="insufficient_scope", scope="{scope}"'
        return web.Response(status=403, headers={"WWW-Authenticate": challenge})


def scope_of(url: str) -> set[str]:
    return set(parse_qs(urlsplit(url).query)["scope"][0].split())


@pytest.mark.parametrize(
    ("grow", "max_step_ups", "sign_ins"), [(True, 0, 1), (True, 2, 3), (False, 2, 1)]
)
async def test_step_ups_are_bounded_per_request(
    grow: bool, max_step_ups: int, sign_ins: int
) -> None:
    async with AuthorizationServer(scopes_supported=[]) as auth_server:
        resource = ScopeHungry(auth_server.issuer, grow=grow)
        async with serving(resource.app) as base:
            resource.base = base
            browser = FollowRedirect()
            auth = OAuth(browser, max_step_ups=max_step_ups)
            async with Client.http(base + "/mcp", auth=auth) as client:
                with pytest.raises(McpError) as caught:
                    await client.list_tools()
    # The last 403 reaches the caller as it is, challenge included.
    assert caught.value.code == HTTP_ERROR and caught.value.data["status"] == 403
    assert len(browser.urls) == sign_ins
    # Each step-up asks for the union of what was asked before and the challenge's scopes.
    assert [scope_of(url) for url in browser.urls] == [
        {"mcp", *(f"extra{n}" for n in range(1, k + 1))} for k in range(sign_ins)
    ]


def test_oauth_needs_a_way_to_get_tokens() -> None:
    with pytest.raises(ValueError, match="redirect"):
        OAuth()
    with pytest.raises(ValueError, match="max_step_ups"):
        OAuth(FollowRedirect(), max_step_ups=-1)


async def test_a_challenge_of_another_scheme_is_left_to_the_caller(fake: FakeMCP) -> None:
    fake.challenge = 'Basic realm="intranet"'
    browser = FollowRedirect()
    async with Client.http(fake.base + "/mcp", auth=OAuth(browser)) as client:
        with pytest.raises(McpError) as caught:
            await client.list_tools()
    assert caught.value.code == HTTP_ERROR and caught.value.data["status"] == 401
    assert "Basic" in caught.value.data["wwwAuthenticate"]
    assert fake.hits == [] and browser.urls == []  # no OAuth discovery at all


def test_secrets_stay_out_of_reprs() -> None:
    from mrtr.client.auth import ClientCredentials

    shown = repr(Tokens("access-secret", refresh_token="refresh-secret", dpop_key={"d": "key"}))
    shown += repr(
        ClientCredentials("id", "client-secret", private_key_pem="pem-secret", issuer="https://as")
    )
    shown += repr(AuthorizationResponse(code="code-secret", state="s"))
    for secret in ("access-secret", "refresh-secret", "key", "client-secret", "pem-secret"):
        assert secret not in shown
    assert "code-secret" not in shown
