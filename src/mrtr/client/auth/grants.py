"""How the client gets its first access token for a server: the grants.

* `AuthorizationCodeGrant`: a person signs in (OAuth 2.1 authorization code with PKCE S256,
  RFC 8707 `resource`, RFC 9207 `iss` checked); what `OAuth(redirect=...)` uses.
* `ClientCredentialsGrant`: the client acts on its own behalf (a secret or a private key).
* `JwtBearerGrant`: a JWT the client already holds is the grant (RFC 7523 2.1), such as a
  workload identity token; a refusal is final (no retry, no other grant).
* `IdJagGrant`: enterprise-managed authorization: the user's ID token is exchanged at the
  enterprise identity provider for an ID-JAG (RFC 8693), which is the JWT bearer grant.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from .credentials import ClientCredentials
from .discovery import AuthorizationFailed
from .jose import DPoPKey
from .metadata import ServerMetadata
from .redirect import RedirectHandler
from .token_endpoint import post_form, request_token
from .tokens import Tokens

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"


@dataclass(slots=True)
class GrantContext:
    """What a grant works with: the authorization server, the client's registration there
    (None when it has none), the resource and scope to ask for, and the DPoP key, if any."""

    session: aiohttp.ClientSession
    metadata: ServerMetadata
    credentials: ClientCredentials | None
    resource: str | None
    scope: str | None
    dpop: DPoPKey | None
    nonces: dict[str, str]

    async def token(self, form: dict[str, str]) -> Tokens:
        """Ask the token endpoint, adding `resource` and `scope` to `form`."""
        if self.resource is not None:
            form["resource"] = self.resource
        if self.scope:
            form["scope"] = self.scope
        return await request_token(
            self.session,
            self.metadata,
            form,
            self.credentials,
            dpop=self.dpop,
            nonces=self.nonces,
            requested_scope=self.scope,
        )


@runtime_checkable
class Grant(Protocol):
    """A way of obtaining an access token. `redirect_uri` (None for grants without a
    browser) and `grant_types` go into a dynamic client registration; `refreshable` says
    whether asking for `offline_access` makes sense."""

    @property
    def redirect_uri(self) -> str | None:
        """The redirect URI to register, if the grant has one."""
        ...

    grant_types: tuple[str, ...]
    refreshable: bool

    async def obtain(self, context: GrantContext) -> Tokens:
        """Run the grant; its tokens, or `AuthorizationFailed`."""
        ...


def pkce_pair() -> tuple[str, str]:
    """A fresh `(code_verifier, code_challenge)` for PKCE S256 (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def with_query(url: str, params: dict[str, str]) -> str:
    """`url` with `params` added to whatever query it already has."""
    parts = urlsplit(url)
    query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


class AuthorizationCodeGrant:
    """A person signs in through `redirect` (see `RedirectHandler`)."""

    grant_types: tuple[str, ...] = ("authorization_code", "refresh_token")
    refreshable: bool = True

    def __init__(self, redirect: RedirectHandler) -> None:
        self.redirect = redirect

    @property
    def redirect_uri(self) -> str | None:
        """The redirect handler's URI."""
        return self.redirect.redirect_uri

    async def obtain(self, context: GrantContext) -> Tokens:
        """Send the person to the authorization endpoint, check the redirect back, and redeem
        the code."""
        metadata = context.metadata
        if context.credentials is None:
            raise AuthorizationFailed(f"no client registration at {metadata.issuer}")
        if metadata.authorization_endpoint is None:
            raise AuthorizationFailed(
                f"the authorization server {metadata.issuer} has no authorization endpoint"
            )
        methods = metadata.code_challenge_methods_supported
        if methods is not None and "S256" not in methods:
            raise AuthorizationFailed(
                f"the authorization server {metadata.issuer} does not support PKCE S256"
            )
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(32)
        redirect_uri = self.redirect.redirect_uri
        params = {
            "response_type": "code",
            "client_id": context.credentials.client_id,
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": state,
        }
        if context.scope:
            params["scope"] = context.scope
        if context.resource is not None:
            params["resource"] = context.resource
        answer = await self.redirect.authorize(with_query(metadata.authorization_endpoint, params))
        # RFC 9207 first: a response from another server is not read any further, its error
        # included (a mix-up attack would put words in the wrong server's mouth).
        if answer.iss is not None:
            if answer.iss != metadata.issuer:  # simple string comparison, no normalization
                raise AuthorizationFailed(
                    f"the authorization response comes from {answer.iss[:200]!r}, not from "
                    f"{metadata.issuer!r}; it is refused"
                )
        elif metadata.iss_parameter_supported:
            raise AuthorizationFailed(
                f"the authorization response has no `iss` although {metadata.issuer} "
                "promises one; it is refused"
            )
        if answer.state is None or not hmac.compare_digest(answer.state, state):
            raise AuthorizationFailed("the authorization response's state does not match")
        if answer.error is not None:
            detail = f": {answer.error_description[:300]}" if answer.error_description else ""
            raise AuthorizationFailed(f"authorization was refused: {answer.error[:100]}{detail}")
        if not answer.code:
            raise AuthorizationFailed("the authorization response carries no code")
        return await context.token(
            {
                "grant_type": "authorization_code",
                "code": answer.code,
                "redirect_uri": redirect_uri,
                "code_verifier": verifier,
            }
        )


class ClientCredentialsGrant:
    """The client's own access (OAuth 2.1 4.2): needs `OAuth(client=...)` with a secret or
    a private key."""

    redirect_uri: str | None = None
    grant_types: tuple[str, ...] = ("client_credentials",)
    refreshable: bool = False

    async def obtain(self, context: GrantContext) -> Tokens:
        """One token request authenticated with the client's credentials."""
        if context.credentials is None:
            raise AuthorizationFailed(
                "the client_credentials grant needs the client's credentials "
                "(client=ClientCredentials(...))"
            )
        return await context.token({"grant_type": "client_credentials"})


Assertion = str | Callable[[], str | Awaitable[str]]


async def _resolve(assertion: Assertion) -> str:
    value = assertion() if callable(assertion) else assertion
    if inspect.isawaitable(value):
        value = await value
    return value


class JwtBearerGrant:
    """A JWT is the grant (RFC 7523 2.1): `assertion` is the JWT, or a function returning a
    fresh one (a workload identity token, say). `issuer` is the authorization server it is
    for (required, exactly as its metadata's `issuer` reads): the assertion is presented
    there only, never to a server an MCP server names instead. The client authenticates as
    the server asks, or only names itself (`client_id`) when it is a public client."""

    redirect_uri: str | None = None
    grant_types: tuple[str, ...] = (JWT_BEARER,)
    refreshable: bool = False

    def __init__(self, assertion: Assertion, *, issuer: str | None = None) -> None:
        if not issuer:
            raise ValueError(
                "JwtBearerGrant needs the issuer of the authorization server the assertion is "
                "for, e.g. JwtBearerGrant(token, issuer='https://auth.example.com'), written "
                "exactly as that server's metadata `issuer`: it is presented nowhere else"
            )
        self.assertion = assertion
        self.issuer = issuer

    async def obtain(self, context: GrantContext) -> Tokens:
        """One token request presenting the assertion, at its issuer only."""
        if context.metadata.issuer != self.issuer:
            raise AuthorizationFailed(
                f"the JWT bearer assertion is for the authorization server {self.issuer!r}, "
                f"not for {context.metadata.issuer[:200]!r}; it is not sent",
                {"expected": self.issuer, "issuer": context.metadata.issuer[:200]},
            )
        return await context.token(
            {"grant_type": JWT_BEARER, "assertion": await _resolve(self.assertion)}
        )


class IdJagGrant:
    """Enterprise-managed authorization: the user's `id_token` from the enterprise identity
    provider is exchanged there (`idp_token_endpoint`, as `idp_client_id`) for an Identity
    Assertion JWT Authorization Grant, presented to the MCP server's authorization server
    as a JWT bearer grant. `issuer`: that authorization server, when known; the grant is then
    asked for and presented there only (a server naming another gets an error)."""

    redirect_uri: str | None = None
    grant_types: tuple[str, ...] = (JWT_BEARER,)
    refreshable: bool = False

    def __init__(
        self,
        id_token: Assertion,
        *,
        idp_token_endpoint: str,
        idp_client_id: str,
        idp_client_secret: str | None = None,
        issuer: str | None = None,
    ) -> None:
        self.issuer = issuer
        self.id_token = id_token
        self.idp_token_endpoint = idp_token_endpoint
        self.idp_client_id = idp_client_id
        self.idp_client_secret = idp_client_secret

    async def obtain(self, context: GrantContext) -> Tokens:
        """The token exchange at the identity provider, then the JWT bearer grant."""
        if self.issuer is not None and context.metadata.issuer != self.issuer:
            raise AuthorizationFailed(
                f"the ID-JAG grant is for the authorization server {self.issuer!r}, not for "
                f"{context.metadata.issuer[:200]!r}; it is neither asked for nor sent",
                {"expected": self.issuer, "issuer": context.metadata.issuer[:200]},
            )
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": await _resolve(self.id_token),
            "subject_token_type": ID_TOKEN_TYPE,
            "requested_token_type": ID_JAG_TYPE,
            "audience": context.metadata.issuer,
            "client_id": self.idp_client_id,
        }
        if self.idp_client_secret is not None:
            form["client_secret"] = self.idp_client_secret
        if context.resource is not None:
            form["resource"] = context.resource
        if context.scope:
            form["scope"] = context.scope
        status, answer, _ = await post_form(context.session, self.idp_token_endpoint, form, {})
        grant = answer.get("access_token") if isinstance(answer, dict) else None
        if status != 200 or not isinstance(grant, str) or not grant:
            error = answer.get("error") if isinstance(answer, dict) else None
            raise AuthorizationFailed(
                f"the identity provider's token exchange at {self.idp_token_endpoint} failed "
                f"(HTTP {status}" + (f", {str(error)[:100]})" if error else ")"),
                {"status": status, "error": error},
            )
        issued = answer.get("issued_token_type") if isinstance(answer, dict) else None
        if issued is not None and issued != ID_JAG_TYPE:
            raise AuthorizationFailed(
                f"the identity provider issued a {issued!r:.80}, not an ID-JAG"
            )
        return await context.token({"grant_type": JWT_BEARER, "assertion": grant})


__all__ = [
    "AuthorizationCodeGrant",
    "ClientCredentialsGrant",
    "Grant",
    "GrantContext",
    "IdJagGrant",
    "JwtBearerGrant",
    "pkce_pair",
]
