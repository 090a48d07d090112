"""A small, real OAuth 2.1 authorization server on loopback, for tests and examples.

Real HTTP (aiohttp.web) and real crypto (ES256-signed JWT access tokens, PKCE S256), with
every decision a test may want to steer as a plain attribute. It auto-approves `/authorize`
as `AuthorizationServer.user`, so no browser is involved.

Endpoints (relative to the issuer, which may carry a path such as ``/tenant1``):

* ``/.well-known/oauth-authorization-server[/<path>]`` (RFC 8414) and
  ``/.well-known/openid-configuration[/<path>]``: the metadata.
* ``/jwks``: the public signing keys.
* ``/register``: dynamic client registration (RFC 7591).
* ``/authorize``: auto-approves; redirects with ``code``, ``state`` and ``iss`` (RFC 9207).
* ``/token``: ``authorization_code`` (PKCE S256 required), ``refresh_token`` (rotated) and
  ``client_credentials``; ``resource`` (RFC 8707) becomes the token's ``aud``.
* ``/introspect``: RFC 7662, for registered clients authenticating with their secret.

A token request carrying a ``DPoP`` proof (RFC 9449: ES256, for this token endpoint) gets a
DPoP-bound token (``token_type`` ``DPoP``, claim ``cnf.jkt``); a refresh of a bound grant
needs a proof by the same key. `offer_dpop` advertises it in the metadata.

Use it as ``async with AuthorizationServer() as auth_server:`` inside a test, or run
``python3 tests/helpers/oauth_as.py --port 9000`` to keep one up for trying the examples.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
import socket
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, import_key

__all__ = ["AuthorizationServer", "RegisteredClient", "basic_auth", "pkce_pair"]

ALGORITHM = "ES256"


def pkce_pair() -> tuple[str, str]:
    """A fresh PKCE ``(code_verifier, code_challenge)`` for the S256 method."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def basic_auth(client_id: str, secret: str) -> str:
    """The ``Authorization`` header value for HTTP Basic client authentication (RFC 6749 2.3.1:
    both parts form-encoded first)."""
    raw = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(secret)}"
    return "Basic " + base64.b64encode(raw.encode("utf-8")).decode("ascii")


@dataclass
class RegisteredClient:
    """A client the server knows: registered dynamically or by a test with `register_client`."""

    client_id: str
    client_secret: str | None = None  # None: a public client (token_endpoint_auth_method none)
    redirect_uris: list[str] = field(default_factory=list)
    grant_types: list[str] = field(default_factory=lambda: ["authorization_code", "refresh_token"])
    scope: str | None = None  # the scopes it may ask for; None: any
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def auth_method(self) -> str:
        return "none" if self.client_secret is None else "client_secret_basic"


@dataclass
class _Grant:
    client_id: str
    subject: str
    scopes: list[str]
    resource: str | None
    redirect_uri: str | None = None
    code_challenge: str | None = None
    expires_at: float = 0.0
    refreshable: bool = True
    jkt: str | None = None  # the DPoP key the tokens are bound to


class _OAuthError(Exception):
    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


class AuthorizationServer:
    """The server. Attributes a test may change at any time:

    * `user`: the subject `/authorize` approves as;
    * `access_token_ttl` (seconds), `issue_refresh_tokens`;
    * `include_iss` (send ``iss`` in authorization responses) and `advertise_iss`
      (``authorization_response_iss_parameter_supported`` in the metadata);
    * `allow_dynamic_registration`, `scopes_supported` (advertised; also the grantable set
      when `restrict_scopes` is true);
    * `default_resource`: the audience when a request names no ``resource``;
    * `offer_dpop`: advertise DPoP (``dpop_signing_alg_values_supported``); a token request
      with a proof gets a bound token either way.

    What happened is recorded in `token_requests` (the form of each ``/token`` call),
    `authorize_requests`, `introspections`, `metadata_requests` (paths requested) and
    `jwks_requests` (a count); `received` holds every request whole (method, path, headers
    and body as text), for asserting that something never arrived.

    `name`: the host its URLs (issuer, endpoints) use, when not `host` itself: a test whose
    client resolves that name to `host` can have it look like a server elsewhere.
    """

    def __init__(
        self,
        *,
        issuer_path: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        user: str = "user-1",
        scopes_supported: Iterable[str] = ("mcp", "tools:read", "tools:write", "admin"),
        name: str | None = None,
    ) -> None:
        self.host = host
        self.name = name or host
        self.port = port
        self.issuer_path = issuer_path.rstrip("/")
        self.user = user
        self.scopes_supported = list(scopes_supported)
        self.restrict_scopes = False
        self.access_token_ttl = 300
        self.refresh_token_ttl = 3600
        self.issue_refresh_tokens = True
        self.include_iss = True
        self.advertise_iss = True
        self.allow_dynamic_registration = True
        self.default_resource: str | None = None
        self.offer_dpop = False
        self.clients: dict[str, RegisteredClient] = {}
        self.token_requests: list[dict[str, str]] = []
        self.authorize_requests: list[dict[str, str]] = []
        self.introspections: list[dict[str, str]] = []
        self.metadata_requests: list[str] = []
        self.jwks_requests = 0
        self.received: list[str] = []
        self._keys: list[ECKey] = []
        self._codes: dict[str, _Grant] = {}
        self._refresh: dict[str, _Grant] = {}
        self._issued: dict[str, dict[str, Any]] = {}  # access token -> claims
        self._revoked: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.rotate_key()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.name}:{self.port}"

    @property
    def issuer(self) -> str:
        return self.base_url + self.issuer_path

    @property
    def jwks_uri(self) -> str:
        return self.issuer + "/jwks"

    @property
    def token_endpoint(self) -> str:
        return self.issuer + "/token"

    @property
    def introspection_endpoint(self) -> str:
        return self.issuer + "/introspect"

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record])
        path = self.issuer_path
        app.router.add_get("/.well-known/oauth-authorization-server" + path, self._metadata)
        app.router.add_get("/.well-known/openid-configuration" + path, self._metadata)
        if path:
            app.router.add_get(path + "/.well-known/openid-configuration", self._metadata)
        app.router.add_get(path + "/jwks", self._jwks)
        app.router.add_post(path + "/register", self._register)
        app.router.add_get(path + "/authorize", self._authorize)
        app.router.add_post(path + "/token", self._token)
        app.router.add_post(path + "/introspect", self._introspect)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> AuthorizationServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what a test drives directly --------------------------------------------------------

    def rotate_key(self, *, keep_old: bool = True) -> str:
        """Sign from now on with a new key (its kid is returned); the JWKS keeps the old
        ones unless `keep_old` is false."""
        kid = f"key-{len(self._keys) + 1}-{secrets.token_hex(4)}"
        key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": ALGORITHM})
        self._keys = [*self._keys, key] if keep_old else [key]
        return kid

    def register_client(
        self,
        *,
        client_id: str | None = None,
        confidential: bool = True,
        client_secret: str | None = None,
        redirect_uris: Iterable[str] = (),
        grant_types: Iterable[str] = ("authorization_code", "refresh_token", "client_credentials"),
        scope: str | None = None,
    ) -> RegisteredClient:
        """Pre-register a client (`client_secret`, or a generated one when `confidential`)."""
        if confidential and client_secret is None:
            client_secret = secrets.token_urlsafe(24)
        client = RegisteredClient(
            client_id=client_id or "client-" + secrets.token_hex(6),
            client_secret=client_secret if confidential else None,
            redirect_uris=list(redirect_uris),
            grant_types=list(grant_types),
            scope=scope,
        )
        self.clients[client.client_id] = client
        return client

    def issue_token(
        self,
        *,
        subject: str | None = None,
        client_id: str = "test-client",
        scopes: Iterable[str] = ("mcp",),
        audience: str | list[str] | None = None,
        expires_in: int | None = None,
        not_before: int | None = None,
        issuer: str | None = None,
        extra: dict[str, Any] | None = None,
        key: ECKey | None = None,
        typ: str | None = "at+jwt",
    ) -> str:
        """Mint an access token directly (no grant), e.g. an expired or wrong-audience one.

        `key` signs it instead of the current key (a key the JWKS does not hold forges it);
        `typ` is the header's (None leaves it out, as some issuers do)."""
        now = int(time.time())
        ttl = self.access_token_ttl if expires_in is None else expires_in
        claims: dict[str, Any] = {
            "iss": self.issuer if issuer is None else issuer,
            "sub": self.user if subject is None else subject,
            "client_id": client_id,
            "scope": " ".join(scopes),
            "iat": now,
            "exp": now + ttl,
            "jti": secrets.token_hex(8),
        }
        aud = audience if audience is not None else self.default_resource
        if aud is not None:
            claims["aud"] = aud
        if not_before is not None:
            claims["nbf"] = not_before
        claims.update(extra or {})
        signer = key or self._keys[-1]
        if typ is None:  # jwt.encode would add typ JWT: sign the claims as they are
            header = {"alg": ALGORITHM, "kid": signer.kid}
            payload = json.dumps(claims).encode()
            token = jws.serialize_compact(header, payload, signer)
        else:
            token = jwt.encode({"alg": ALGORITHM, "kid": signer.kid, "typ": typ}, claims, signer)
        self._issued[token] = claims
        return token

    def revoke(self, token: str) -> None:
        """Make `token` inactive at the introspection endpoint."""
        self._revoked.add(token)

    async def client_credentials_token(
        self, client: RegisteredClient, *, scope: str | None = None, resource: str | None = None
    ) -> dict[str, Any]:
        """The token response a client-credentials grant gives `client` (over real HTTP)."""
        import aiohttp

        form = {"grant_type": "client_credentials"}
        if scope is not None:
            form["scope"] = scope
        if resource is not None:
            form["resource"] = resource
        headers = {"Authorization": basic_auth(client.client_id, client.client_secret or "")}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.token_endpoint, data=form, headers=headers) as response,
        ):
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                raise RuntimeError(f"token request failed: {response.status} {body}")
            return body

    # -- endpoints -------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()  # kept by aiohttp: the handler reads it again
        headers = "".join(f"{key}: {value}\n" for key, value in request.headers.items())
        self.received.append(
            f"{request.method} {request.path_qs}\n{headers}\n{body.decode('utf-8', 'replace')}"
        )
        response: web.StreamResponse = await handler(request)
        return response

    def metadata(self) -> dict[str, Any]:
        """The RFC 8414 document."""
        issuer = self.issuer
        document: dict[str, Any] = {
            "issuer": issuer,
            "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token",
            "jwks_uri": issuer + "/jwks",
            "introspection_endpoint": issuer + "/introspect",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
                "none",
            ],
            "introspection_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
            ],
            "scopes_supported": self.scopes_supported,
            "authorization_response_iss_parameter_supported": self.advertise_iss,
        }
        if self.allow_dynamic_registration:
            document["registration_endpoint"] = issuer + "/register"
        if self.offer_dpop:
            document["dpop_signing_alg_values_supported"] = [ALGORITHM]
        return document

    async def _metadata(self, request: web.Request) -> web.Response:
        self.metadata_requests.append(request.path)
        return web.json_response(self.metadata())

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_requests += 1
        return web.json_response({"keys": [key.as_dict(private=False) for key in self._keys]})

    async def _register(self, request: web.Request) -> web.Response:
        if not self.allow_dynamic_registration:
            return _error("access_denied", "dynamic registration is disabled", 403)
        try:
            body = await request.json()
        except ValueError:
            return _error("invalid_client_metadata", "the body is not JSON")
        if not isinstance(body, dict):
            return _error("invalid_client_metadata", "the body is not a JSON object")
        redirect_uris = body.get("redirect_uris", [])
        if not isinstance(redirect_uris, list) or not all(
            isinstance(u, str) for u in redirect_uris
        ):
            return _error("invalid_redirect_uri", "redirect_uris must be a list of strings")
        method = body.get("token_endpoint_auth_method", "client_secret_basic")
        grant_types = body.get("grant_types", ["authorization_code", "refresh_token"])
        if not isinstance(grant_types, list):
            return _error("invalid_client_metadata", "grant_types must be a list")
        client = RegisteredClient(
            client_id="dyn-" + secrets.token_hex(8),
            client_secret=None if method == "none" else secrets.token_urlsafe(24),
            redirect_uris=redirect_uris,
            grant_types=[str(g) for g in grant_types],
            # Kept as metadata only: a step-up asks for more than the client first registered.
            scope=None,
            metadata=body,
        )
        self.clients[client.client_id] = client
        answer = dict(body)
        answer.update(
            client_id=client.client_id,
            client_id_issued_at=int(time.time()),
            token_endpoint_auth_method=method,
            redirect_uris=client.redirect_uris,
            grant_types=client.grant_types,
        )
        if client.client_secret is not None:
            answer["client_secret"] = client.client_secret
            answer["client_secret_expires_at"] = 0
        return web.json_response(answer, status=201)

    async def _authorize(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.authorize_requests.append(query)
        client = self.clients.get(query.get("client_id", ""))
        redirect_uri = query.get("redirect_uri", "")
        # Errors before the redirect URI is trusted are shown, never redirected (open redirect).
        if client is None:
            return _error("invalid_request", "unknown client_id")
        if redirect_uri not in client.redirect_uris:
            return _error("invalid_request", "redirect_uri is not registered for this client")
        state = query.get("state")
        try:
            if query.get("response_type") != "code":
                raise _OAuthError("unsupported_response_type", "response_type must be code")
            if not query.get("code_challenge"):
                raise _OAuthError("invalid_request", "code_challenge is required (PKCE)")
            if query.get("code_challenge_method") != "S256":
                raise _OAuthError("invalid_request", "code_challenge_method must be S256")
            scopes = self._grantable(client, query.get("scope"))
        except _OAuthError as error:
            return self._redirect(
                redirect_uri, state, error=error.error, error_description=error.description
            )
        code = secrets.token_urlsafe(24)
        self._codes[code] = _Grant(
            client_id=client.client_id,
            subject=self.user,
            scopes=scopes,
            resource=query.get("resource"),
            redirect_uri=redirect_uri,
            code_challenge=query["code_challenge"],
            expires_at=time.time() + 60,
        )
        return self._redirect(redirect_uri, state, code=code)

    def _redirect(self, redirect_uri: str, state: str | None, **params: str) -> web.Response:
        if state is not None:
            params["state"] = state
        if self.include_iss:
            params["iss"] = self.issuer
        separator = "&" if urllib.parse.urlsplit(redirect_uri).query else "?"
        location = redirect_uri + separator + urllib.parse.urlencode(params)
        return web.Response(status=302, headers={"Location": location})

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        self.token_requests.append(form)
        try:
            client = self._authenticate(request, form)
            jkt = self._dpop_key(request)
            grant_type = form.get("grant_type")
            if grant_type not in client.grant_types:
                raise _OAuthError("unauthorized_client", f"{grant_type!r} is not allowed")
            if grant_type == "authorization_code":
                grant = self._redeem_code(client, form)
            elif grant_type == "refresh_token":
                grant = self._redeem_refresh(client, form)
            elif grant_type == "client_credentials":
                grant = _Grant(
                    client_id=client.client_id,
                    subject=client.client_id,
                    scopes=self._grantable(client, form.get("scope")),
                    resource=form.get("resource"),
                    refreshable=False,  # RFC 6749 4.4.3
                )
            else:
                raise _OAuthError("unsupported_grant_type", f"unknown grant_type {grant_type!r}")
            if grant.jkt is not None and grant.jkt != jkt:
                raise _OAuthError("invalid_dpop_proof", "a bound grant needs a proof by its key")
            grant.jkt = jkt
        except _OAuthError as error:
            return _error(error.error, error.description, error.status)
        return web.json_response(self._token_response(grant), headers={"Cache-Control": "no-store"})

    def _dpop_key(self, request: web.Request) -> str | None:
        """The thumbprint of the key of the request's DPoP proof (None without one)."""
        proofs = request.headers.getall("DPoP", [])
        if not proofs:
            return None
        try:
            if len(proofs) != 1:
                raise ValueError("one DPoP header")
            header = jws.extract_compact(proofs[0].encode("ascii")).headers()
            if header.get("typ") != "dpop+jwt" or "d" in header["jwk"]:
                raise ValueError("not a DPoP proof")
            key = import_key(header["jwk"])
            body = jwt.decode(proofs[0], key, algorithms=[ALGORITHM]).claims
            if body.get("htm") != "POST" or body.get("htu") != self.token_endpoint:
                raise ValueError("a proof for another request")
            if abs(time.time() - body.get("iat", 0)) > 60 or not body.get("jti"):
                raise ValueError("a stale proof")
        except (JoseError, ValueError, KeyError, TypeError) as exc:
            raise _OAuthError("invalid_dpop_proof", f"the DPoP proof is invalid: {exc}") from None
        return str(key.thumbprint())

    def _authenticate(self, request: web.Request, form: dict[str, str]) -> RegisteredClient:
        header = request.headers.get("Authorization", "")
        if header[:6].lower() == "basic ":
            try:
                decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
                login, _, password = decoded.partition(":")
            except ValueError as exc:
                raise _OAuthError("invalid_client", "malformed Basic credentials", 401) from exc
            client_id = urllib.parse.unquote_plus(login)
            secret: str | None = urllib.parse.unquote_plus(password)
        else:
            client_id = form.get("client_id", "")
            secret = form.get("client_secret")
        client = self.clients.get(client_id)
        if client is None:
            raise _OAuthError("invalid_client", "unknown client", 401)
        if client.client_secret is not None and (
            secret is None or not secrets.compare_digest(secret, client.client_secret)
        ):
            raise _OAuthError("invalid_client", "client authentication failed", 401)
        return client

    def _grantable(self, client: RegisteredClient, requested: str | None) -> list[str]:
        scopes = (requested or "").split()
        allowed = set(client.scope.split()) if client.scope is not None else None
        if self.restrict_scopes:
            supported = set(self.scopes_supported)
            allowed = supported if allowed is None else allowed & supported
        if allowed is not None and not set(scopes) <= allowed:
            raise _OAuthError("invalid_scope", "a requested scope is not allowed")
        return scopes

    def _redeem_code(self, client: RegisteredClient, form: dict[str, str]) -> _Grant:
        grant = self._codes.pop(form.get("code", ""), None)  # single use
        if grant is None or grant.expires_at < time.time() or grant.client_id != client.client_id:
            raise _OAuthError("invalid_grant", "the code is unknown, used or expired")
        if form.get("redirect_uri") != grant.redirect_uri:
            raise _OAuthError("invalid_grant", "redirect_uri does not match the authorization")
        verifier = form.get("code_verifier", "")
        digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
        challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        if not verifier or not secrets.compare_digest(challenge, grant.code_challenge or ""):
            raise _OAuthError("invalid_grant", "PKCE verification failed")
        resource = form.get("resource")
        if resource is not None and grant.resource is not None and resource != grant.resource:
            raise _OAuthError("invalid_target", "resource differs from the authorization request")
        grant.resource = resource or grant.resource
        return grant

    def _redeem_refresh(self, client: RegisteredClient, form: dict[str, str]) -> _Grant:
        grant = self._refresh.pop(form.get("refresh_token", ""), None)  # rotated: single use
        if grant is None or grant.expires_at < time.time() or grant.client_id != client.client_id:
            raise _OAuthError("invalid_grant", "the refresh token is unknown, used or expired")
        requested = form.get("scope")
        scopes = grant.scopes
        if requested is not None:
            scopes = requested.split()
            if not set(scopes) <= set(grant.scopes):
                raise _OAuthError("invalid_scope", "a refresh cannot widen the scope")
        resource = form.get("resource") or grant.resource
        return _Grant(client.client_id, grant.subject, scopes, resource, jkt=grant.jkt)

    def _token_response(self, grant: _Grant) -> dict[str, Any]:
        token = self.issue_token(
            subject=grant.subject,
            client_id=grant.client_id,
            scopes=grant.scopes,
            audience=grant.resource,
            extra=None if grant.jkt is None else {"cnf": {"jkt": grant.jkt}},
        )
        body: dict[str, Any] = {
            "access_token": token,
            "token_type": "Bearer" if grant.jkt is None else "DPoP",
            "expires_in": self.access_token_ttl,
            "scope": " ".join(grant.scopes),
        }
        client = self.clients[grant.client_id]
        if (
            self.issue_refresh_tokens
            and grant.refreshable
            and "refresh_token" in client.grant_types
        ):
            refresh = secrets.token_urlsafe(32)
            self._refresh[refresh] = _Grant(
                grant.client_id,
                grant.subject,
                grant.scopes,
                grant.resource,
                expires_at=time.time() + self.refresh_token_ttl,
                jkt=grant.jkt,
            )
            body["refresh_token"] = refresh
        return body

    async def _introspect(self, request: web.Request) -> web.Response:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        self.introspections.append({k: v for k, v in form.items() if k != "client_secret"})
        try:
            client = self._authenticate(request, form)
        except _OAuthError as error:
            return _error(error.error, error.description, error.status)
        if client.client_secret is None:
            return _error("invalid_client", "public clients may not introspect", 401)
        token = form.get("token", "")
        claims = self._issued.get(token)
        if claims is None or token in self._revoked or claims["exp"] <= time.time():
            return web.json_response({"active": False})
        return web.json_response({"active": True, "token_type": "Bearer", **claims})


def _error(error: str, description: str, status: int = 400) -> web.Response:
    return web.json_response(
        {"error": error, "error_description": description},
        status=status,
        headers={"Cache-Control": "no-store"},
    )


async def _serve_forever(port: int, user: str) -> None:
    auth_server = AuthorizationServer(port=port, user=user)
    client = auth_server.register_client(
        client_id="demo-client", grant_types=["client_credentials"]
    )
    client.client_secret = "demo-secret"
    async with auth_server:
        print(f"issuer: {auth_server.issuer}")
        print("client_credentials client: demo-client / demo-secret")
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="A test OAuth 2.1 authorization server.")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--user", default="user-1", help="the subject /authorize approves as")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port, args.user))


if __name__ == "__main__":
    main()
