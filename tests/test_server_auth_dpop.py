"""DPoP-bound tokens (RFC 9449) at the resource server, and CORS preflights, over real HTTP.

The authorization server (`oauth_as.py`) binds a token to the key of the proof its token
request carries (`cnf.jkt`); the MCP server runs under uvicorn on loopback; requests go out
with `mrtr.Client` and `OAuth` (which binds tokens when the authorization server offers DPoP)
or, for what a well-behaved client never sends, with aiohttp and proofs signed here.
"""

from __future__ import annotations

import re
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OctKey, RSAKey

from helpers.protected_server import (
    KEY,
    AutoApprove,
    Protected,
    build_server,
    call,
    headers_for,
    protected,
)
from helpers.transport_flow import serve
from mrtr import Client, ElicitResult, ServerOptions
from mrtr.client.auth import OAuth
from mrtr.client.auth.jose import DPoPKey
from mrtr.server.auth import AuthSettings, DPoPSettings, IntrospectionVerifier, JWTVerifier
from mrtr.server.auth.dpop import MAX_PROOF_LENGTH, DPoPChecker, Proof, normal_url, token_hash
from mrtr.server.store import MemoryStore
from mrtr.transport.http_app import StreamableHTTPApp


@pytest.fixture
async def site() -> AsyncIterator[Protected]:
    async with protected() as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# --- helpers ------------------------------------------------------------------------------------


class Answer:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = orjson.loads(body) if body else None

    @property
    def challenges(self) -> list[tuple[str, dict[str, str]]]:
        """Each `WWW-Authenticate` header as (scheme, parameters), in order."""
        found = []
        for value in self.headers.getall("WWW-Authenticate", ()):
            scheme, _, rest = value.partition(" ")
            found.append((scheme, dict(re.findall(r'(\w+)="([^"]*)"', rest))))
        return found

    @property
    def error(self) -> str | None:
        """The OAuth error of the first challenge (the one a client acts on)."""
        return self.challenges[0][1].get("error") if self.challenges else None


def bound_token(site: Protected, key: ECKey | DPoPKey, **claims: Any) -> str:
    """A token for the site bound to `key` (`cnf.jkt`)."""
    jkt = _ec(key).thumbprint()
    return site.token(extra={"cnf": {"jkt": jkt}}, **claims)


def _ec(key: ECKey | DPoPKey) -> ECKey:
    return key._key if isinstance(key, DPoPKey) else key


def proof(
    key: Any,
    url: str,
    token: str | None,
    *,
    method: str = "POST",
    header: dict[str, Any] | None = None,
    **claims: Any,
) -> str:
    """A DPoP proof signed with `key`; `claims` (None drops one) and `header` override."""
    body: dict[str, Any] = {
        "jti": secrets.token_urlsafe(12),
        "htm": method,
        "htu": url,
        "iat": int(time.time()),
    }
    if token is not None:
        body["ath"] = token_hash(token)
    body.update(claims)
    head = {"typ": "dpop+jwt", "alg": "ES256", "jwk": key.as_dict(private=False)}
    head.update(header or {})
    return jwt.encode(
        {k: v for k, v in head.items() if v is not None},
        {k: v for k, v in body.items() if v is not None},
        key,
        algorithms=[head["alg"]],
    )


async def send(
    http: aiohttp.ClientSession,
    url: str,
    token: str | None,
    proofs: list[str] | str | None,
    *,
    scheme: str = "DPoP",
    message: dict[str, Any] | None = None,
) -> Answer:
    message = message or call("whoami", {})
    headers: Any = list(headers_for(message, None).items())
    if token is not None:
        headers.append(("Authorization", f"{scheme} {token}"))
    for value in [proofs] if isinstance(proofs, str) else proofs or []:
        headers.append(("DPoP", value))
    async with http.post(url, data=orjson.dumps(message), headers=headers) as response:
        return Answer(response.status, response.headers, await response.read())


def assert_refused(answer: Answer, error: str, status: int = 401) -> None:
    assert answer.status == status, answer.body
    scheme, params = answer.challenges[0]
    assert scheme == "DPoP" and params["error"] == error, answer.challenges
    assert params["algs"].split()[0] == "ES256"
    assert answer.challenges[1][0] == "Bearer" and "error" not in answer.challenges[1][1]
    assert answer.body["error"]["data"]["error"] == error


# --- our client against our server --------------------------------------------------------------


async def test_our_client_binds_its_tokens_and_our_server_accepts_them(site: Protected) -> None:
    site.auth_server.offer_dpop = True
    site.auth_server.user = "dora"
    auth = OAuth(AutoApprove())  # dpop=None: bound because the authorization server offers it
    async with Client.http(
        site.url,
        auth=auth,
        elicitation_handler=lambda params: ElicitResult(action="accept", content={}),
    ) as client:
        result = await client.call_tool("whoami", {})
        assert result.structured_content["sub"] == "dora"  # type: ignore[index]
        # A 403 under DPoP (DPoP challenge first) -> step-up -> both MRTR rounds, bound.
        result = await client.call_tool("purge", {"what": "cache"})
        assert result.content[0].text == "purged cache"  # type: ignore[union-attr]
    issued = list(site.auth_server._issued.values())
    assert len(issued) == 2 and all("jkt" in claims["cnf"] for claims in issued)
    assert all(
        form.get("grant_type") == "authorization_code" for form in site.auth_server.token_requests
    )


async def test_the_nonce_dance_with_our_client_and_by_hand(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    site.install(dpop=DPoPSettings(require_nonce=True))
    site.auth_server.offer_dpop = True
    async with Client.http(site.url, auth=OAuth(AutoApprove())) as client:
        result = await client.call_tool("whoami", {})
    assert result.structured_content["scopes"] == ["mcp"]  # type: ignore[index]

    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    first = await send(http, site.url, token, proof(key, site.url, token))
    assert_refused(first, "use_dpop_nonce")
    nonce = first.headers["DPoP-Nonce"]
    made_up = await send(http, site.url, token, proof(key, site.url, token, nonce="x" + nonce))
    assert_refused(made_up, "use_dpop_nonce")
    ok = await send(http, site.url, token, proof(key, site.url, token, nonce=nonce))
    assert ok.status == 200, ok.body
    assert ok.body["result"]["structuredContent"]["sub"] == "user-1"


async def test_introspected_bound_tokens(site: Protected, http: aiohttp.ClientSession) -> None:
    server_client = site.auth_server.register_client()
    verifier = IntrospectionVerifier(
        site.auth_server.introspection_endpoint,
        client_id=server_client.client_id,
        client_secret=server_client.client_secret or "",
        audience=site.url,
    )
    site.install(verifier)
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    assert (await send(http, site.url, token, proof(key, site.url, token))).status == 200
    stranger = ECKey.generate_key("P-256")
    assert_refused(
        await send(http, site.url, token, proof(stranger, site.url, token)), "invalid_token"
    )
    as_bearer = await send(http, site.url, token, None, scheme="Bearer")
    assert as_bearer.status == 401 and as_bearer.error == "invalid_token"


# --- what an attacker or a broken client sends ---------------------------------------------------


async def test_a_replayed_proof_is_refused(site: Protected, http: aiohttp.ClientSession) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    once = proof(key, site.url, token)
    assert (await send(http, site.url, token, once)).status == 200
    replay = await send(http, site.url, token, once)
    assert_refused(replay, "invalid_dpop_proof")
    assert "used before" in replay.body["error"]["message"]
    # A fresh proof of the same key goes through.
    assert (await send(http, site.url, token, proof(key, site.url, token))).status == 200


async def test_a_proof_for_another_request_is_refused(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    port = urllib.parse.urlsplit(site.url).port
    elsewhere = {
        "another path": site.base + "/other",
        "another port": f"http://127.0.0.1:{port + 1 if port != 65535 else 1}/mcp",
        "another host": site.url.replace("127.0.0.1", "evil.example"),
        "another scheme": site.url.replace("http:", "https:"),
        "not a URL": "mcp",
    }
    for what, url in elsewhere.items():
        answer = await send(http, site.url, token, proof(key, url, token))
        assert_refused(answer, "invalid_dpop_proof")
        assert "htu" in answer.body["error"]["message"], what
    for method in ("GET", "post", "DELETE"):
        answer = await send(http, site.url, token, proof(key, site.url, token, method=method))
        assert_refused(answer, "invalid_dpop_proof")
    # Query and fragment are no part of htu; case and default ports are normalized away.
    same = site.url.replace("http://", "HTTP://") + "?x=1#f"
    assert (await send(http, site.url, token, proof(key, same, token))).status == 200
    assert normal_url("https://A.example:443/mcp?q") == "https://a.example/mcp"


async def test_a_stolen_token_without_its_key_is_refused(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    victim = ECKey.generate_key("P-256")
    token = bound_token(site, victim)
    thief = ECKey.generate_key("P-256")
    answer = await send(http, site.url, token, proof(thief, site.url, token))
    assert_refused(answer, "invalid_token")
    assert "not bound to the key" in answer.body["error"]["message"]
    # The victim's proof for another token does not lend its key either (ath).
    other = bound_token(site, thief)
    answer = await send(http, site.url, other, proof(victim, site.url, token))
    assert_refused(answer, "invalid_dpop_proof")
    # An unbound token cannot be dressed up as a bound one.
    plain = site.token()
    assert_refused(
        await send(http, site.url, plain, proof(thief, site.url, plain)), "invalid_token"
    )


async def test_a_bound_token_sent_as_bearer_is_refused(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    answer = await send(http, site.url, token, None, scheme="Bearer")
    assert answer.status == 401
    assert answer.challenges[0] == (
        "Bearer",
        {
            "resource_metadata": site.base + "/.well-known/oauth-protected-resource/mcp",
            "scope": "mcp",
            "error": "invalid_token",
            "error_description": answer.challenges[0][1]["error_description"],
        },
    )
    assert "bound to a DPoP key" in answer.body["error"]["message"]
    # With a proof alongside it, still: the scheme says how the token is presented.
    answer = await send(http, site.url, token, proof(key, site.url, token), scheme="Bearer")
    assert answer.status == 401 and answer.error == "invalid_token"


async def test_malformed_proofs_are_refused_with_a_reason(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    url = site.url
    now = int(time.time())
    rsa = RSAKey.generate_key(2048)
    secret = OctKey.generate_key(256)
    k1 = ECKey.generate_key("secp256k1")
    bad: dict[str, Any] = {
        "no proof": None,
        "two proofs": [proof(key, url, token), proof(key, url, token)],
        "not a JWT": "garbage",
        "bad base64": "@@@.e30.sig",
        "too long": "a" * (MAX_PROOF_LENGTH + 1),
        "wrong typ": proof(key, url, token, header={"typ": "JWT"}),
        "no typ": proof(key, url, token, header={"typ": None}),
        "alg not allowed": proof(k1, url, token, header={"alg": "ES256K"}),
        "symmetric alg": proof(
            secret, url, token, header={"alg": "HS256", "jwk": secret.as_dict(private=False)}
        ),
        "no jwk": proof(key, url, token, header={"jwk": None}),
        "private jwk": proof(key, url, token, header={"jwk": key.as_dict(private=True)}),
        "jwk of another key": proof(
            key, url, token, header={"jwk": ECKey.generate_key("P-256").as_dict(private=False)}
        ),
        "jwk of another type": proof(key, url, token, header={"jwk": rsa.as_dict(private=False)}),
        "stale": proof(key, url, token, iat=now - 300),
        "from the future": proof(key, url, token, iat=now + 300),
        "no iat": proof(key, url, token, iat=None),
        "iat not a number": proof(key, url, token, iat="now"),
        "no jti": proof(key, url, token, jti=None),
        "no ath": proof(key, url, None),
        "ath of another token": proof(key, url, site.token()),
        "no htm": proof(key, url, token, htm=None),
    }
    for what, value in bad.items():
        answer = await send(http, url, token, value)
        assert answer.status == 401, what
        assert answer.error == "invalid_dpop_proof", (what, answer.challenges)
        assert answer.body["error"]["data"]["error_description"], what
    # A DPoP request without credentials is malformed, as a Bearer one is.
    async with http.post(
        url,
        data=b"{}",
        headers={"Authorization": "DPoP", "DPoP": proof(key, url, token)},
    ) as response:
        assert response.status == 400
    # An RSA key is accepted where its algorithm is allowed.
    rsa_token = bound_token(site, key)  # bound to the EC key: the RSA proof must not pass
    assert (
        await send(http, url, rsa_token, proof(rsa, url, rsa_token, header={"alg": "RS256"}))
    ).status == 401
    rsa_bound = site.token(extra={"cnf": {"jkt": rsa.thumbprint()}})
    rsa_proof = proof(rsa, url, rsa_bound, header={"alg": "PS256"})
    assert (await send(http, url, rsa_bound, rsa_proof)).status == 200
    # After all that, the server still serves.
    assert (await send(http, url, token, proof(key, url, token))).status == 200


# --- settings, proxies and several instances -----------------------------------------------------


async def test_behind_a_proxy_proofs_name_the_public_url_and_replays_are_shared(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    """Two instances with one store, both configured with the public URL (instance A's)."""
    store = MemoryStore()
    public = site.url

    def instance() -> StreamableHTTPApp:
        auth = AuthSettings(
            resource=public,
            authorization_servers=[site.auth_server.issuer],
            verifier=JWTVerifier(site.auth_server.issuer, public),
        )
        options = ServerOptions(request_state_key=KEY, auth=auth, store=store)
        return StreamableHTTPApp(build_server(options))

    site.holder["app"] = instance()
    async with serve(instance()) as other_base:
        behind = other_base + "/mcp"
        key = ECKey.generate_key("P-256")
        token = bound_token(site, key)
        # B is reached at its own address (as a proxy would), the proof names the public URL.
        once = proof(key, public, token)
        assert (await send(http, behind, token, once)).status == 200
        # The same proof at A: B's record is in the shared store.
        assert_refused(await send(http, public, token, once), "invalid_dpop_proof")
        # A proof naming B's own address is not for this resource.
        assert_refused(
            await send(http, behind, token, proof(key, behind, token)), "invalid_dpop_proof"
        )


async def test_dpop_off_and_dpop_required(site: Protected, http: aiohttp.ClientSession) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key)
    site.install(dpop=None)
    answer = await send(http, site.url, token, proof(key, site.url, token))
    assert answer.status == 401 and [s for s, _ in answer.challenges] == ["Bearer"]
    assert "error" not in answer.challenges[0][1]  # an unknown scheme: as if none was sent
    assert (await send(http, site.url, token, None, scheme="Bearer")).status == 401
    async with http.get(site.base + "/.well-known/oauth-protected-resource/mcp") as response:
        assert "dpop_signing_alg_values_supported" not in await response.json()

    site.install(dpop=DPoPSettings(required=True, algorithms=["ES256"]))
    plain = site.token()
    answer = await send(http, site.url, plain, None, scheme="Bearer")
    assert answer.status == 401 and answer.error == "invalid_token"
    assert "DPoP-bound tokens only" in answer.body["error"]["message"]
    assert answer.challenges[1] == (
        "DPoP",
        {
            "algs": "ES256",
            "resource_metadata": answer.challenges[0][1]["resource_metadata"],
            "scope": "mcp",
        },
    )
    assert (await send(http, site.url, token, proof(key, site.url, token))).status == 200
    async with http.get(site.base + "/.well-known/oauth-protected-resource/mcp") as response:
        document = await response.json()
    assert document["dpop_signing_alg_values_supported"] == ["ES256"]
    assert document["dpop_bound_access_tokens_required"] is True


def test_dpop_settings_are_checked_when_built() -> None:
    for algorithms in (["HS256"], ["none"], []):
        with pytest.raises(ValueError, match="asymmetric"):
            DPoPSettings(algorithms=algorithms)
    with pytest.raises(ValueError, match="proof_window"):
        DPoPSettings(proof_window=0)
    with pytest.raises(ValueError, match="32 bytes"):
        DPoPSettings(nonce_key=b"short")
    assert DPoPSettings(algorithms="ES256").algorithms == ("ES256",)
    with pytest.raises(ValueError, match="DPoPSettings or None"):
        AuthSettings(
            resource="https://mcp.example.com/mcp",
            authorization_servers=["https://auth.example.com"],
            verifier=JWTVerifier("https://auth.example.com", "https://mcp.example.com/mcp"),
            dpop=True,  # type: ignore[arg-type]
        )


# --- CORS preflight -------------------------------------------------------------------------------


async def test_a_preflight_is_answered_as_without_auth(
    site: Protected, http: aiohttp.ClientSession
) -> None:
    requests = [
        {
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, dpop, content-type",
        },
        {"Origin": "https://app.example", "Mcp-Session-Id": "abc"},
        {"Authorization": "Bearer not-a-token"},  # credentials on an OPTIONS change nothing
        {},
    ]

    async def answers() -> list[tuple[int, dict[str, str], bytes]]:
        found = []
        for headers in requests:
            async with http.options(site.url, headers=headers) as response:
                kept = {
                    k.lower(): v for k, v in response.headers.items() if k.lower() not in ("date",)
                }
                found.append((response.status, kept, await response.read()))
        return found

    protected_answers = await answers()
    assert all(status != 401 for status, _, _ in protected_answers)
    assert all("www-authenticate" not in headers for _, headers, _ in protected_answers)
    site.holder["app"] = StreamableHTTPApp(build_server(ServerOptions(request_state_key=KEY)))
    assert await answers() == protected_answers


# --- the legacy era -------------------------------------------------------------------------------


async def test_a_legacy_session_with_dpop(site: Protected, http: aiohttp.ClientSession) -> None:
    key = ECKey.generate_key("P-256")
    token = bound_token(site, key, subject="lee")

    async def request(method: str, message: dict[str, Any] | None, session: str | None) -> Any:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"DPoP {token}",
            "DPoP": proof(key, site.url, token, method=method),
        }
        if session is not None:
            headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
        body = orjson.dumps(message) if message is not None else None
        async with http.request(method, site.url, data=body, headers=headers) as response:
            raw = await response.read()
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                raw = [line for line in raw.splitlines() if line.startswith(b"data: ")][-1][6:]
            return response.status, response.headers, orjson.loads(raw) if raw else None

    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "old", "version": "1"},
        },
    }
    status, headers, _ = await request("POST", init, None)
    assert status == 200
    session = headers["Mcp-Session-Id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await request("POST", initialized, session))[0] == 202
    whoami = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    whoami["params"] = {"name": "whoami", "arguments": {}}
    status, _, body = await request("POST", whoami, session)
    assert status == 200 and body["result"]["structuredContent"]["sub"] == "lee"
    # Ending the session: a DELETE, with a proof for DELETE.
    assert (await request("DELETE", None, session))[0] in (200, 204)


# --- the checker's memory and nonces ------------------------------------------------------------


async def test_without_a_store_proofs_are_remembered_in_memory() -> None:
    checker = DPoPChecker(DPoPSettings(), "http://127.0.0.1:1/mcp", None)
    key = ECKey.generate_key("P-256")
    checked = checker.check(proof(key, "http://127.0.0.1:1/mcp", "t"), "POST", "/mcp", "t")
    assert checked.jkt == key.thumbprint()
    assert await checker.first_use(checked) is True
    assert await checker.first_use(checked) is False
    # Per key: the same jti under another key is another proof.
    other = Proof(ECKey.generate_key("P-256").thumbprint(), checked.jti, None)
    assert await checker.first_use(other) is True


def test_nonces_live_one_to_two_slots_and_follow_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr("mrtr.server.auth.dpop.time.time", lambda: now[0])
    settings = DPoPSettings(require_nonce=True, nonce_lifetime=100.0)
    checker = DPoPChecker(settings, "https://a.example/mcp", None, state_key=b"s" * 32)
    nonce = checker.nonce()
    assert checker.nonce_ok(nonce) and not checker.nonce_ok(None) and not checker.nonce_ok("")
    now[0] += 100.0
    assert checker.nonce_ok(nonce)  # the slot before: still good
    assert checker.nonce() != nonce
    now[0] += 100.0
    assert not checker.nonce_ok(nonce)  # two slots on: stale
    # Instances sharing the sealing key accept each other's nonces; others do not.
    twin = DPoPChecker(settings, "https://a.example/mcp", None, state_key=b"s" * 32)
    stranger = DPoPChecker(settings, "https://a.example/mcp", None, state_key=b"z" * 32)
    assert twin.nonce_ok(checker.nonce()) and not stranger.nonce_ok(checker.nonce())
