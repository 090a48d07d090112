"""`OAuth`: MCP authorization for a client's HTTP transport (both protocol eras).

Plugged into `Client.http(url, auth=OAuth(...))`, it puts the access token on every request
(`Authorization: Bearer`, or `DPoP` with a fresh proof) and answers the server's challenges:

* 401: the Protected Resource Metadata is (re)discovered, its `resource` checked against the
  server's URL, the authorization server's metadata fetched (issuer checked exactly); then a
  refresh, if the token came from that same server, else the grant (a person signing in,
  client credentials...), with a client registration kept per authorization server. The
  request is sent again once. A server whose authorization server changed gets a new
  registration there: credentials never travel from one authorization server to another.
  Pre-registered credentials and a JWT bearer assertion are bound to their issuer: a server
  naming another authorization server gets an error, and they are not sent.
* 401 `use_dpop_nonce`: the request again with the server's nonce.
* 403 `insufficient_scope`: step-up: the union of the scopes asked for so far and the
  challenge's, at most `max_step_ups` times per request, and only while the union grows.

A flow that cannot finish raises `McpError(AUTHORIZATION_FAILED)` naming why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import replace

import aiohttp
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse
from aiohttp.abc import AbstractResolver

from .challenge import Challenge, auth_challenge
from .credentials import ClientCredentials
from .discovery import AuthorizationFailed, discover_resource, discover_server
from .grants import AuthorizationCodeGrant, Grant, GrantContext
from .jose import DPoPKey
from .metadata import (
    ResourceMetadata,
    ServerMetadata,
    canonical_resource,
    origin,
    resource_covers,
)
from .reach import Reach
from .redirect import RedirectHandler
from .registration import register, registration_request
from .store import MemoryTokenStore, TokenStore
from .token_endpoint import DPOP_NONCE, TokenError, request_token
from .tokens import Tokens

logger = logging.getLogger("mrtr.auth")

OFFLINE_ACCESS = "offline_access"


class OAuth:
    """OAuth 2.1 authorization for the MCP servers a client connects to over HTTP.

    `redirect`: how a person signs in (see `RedirectHandler`; `LoopbackRedirectHandler` for
    a local app); it selects the authorization code grant. `grant`: another way to get tokens
    (`ClientCredentialsGrant`, `JwtBearerGrant`, `IdJagGrant`). `client`: pre-registered
    credentials (bound to their `issuer`: used with no other authorization server); else a
    Client ID Metadata Document URL (`client_metadata_url`) where the authorization server
    accepts one, else dynamic registration as `client_name`. `scope`:
    always ask for these scopes (default: the challenge's, else the server's
    `scopes_supported`, else none). `store`: where tokens and registrations are kept (default:
    memory). `dpop`: bind tokens to a key (RFC 9449): True, False, or None to do it when the
    authorization server offers it. `allow_http`: accept plain-HTTP authorization servers
    that are not on loopback (never do this outside a test network).

    What a server's 401 makes the client fetch is limited (`mrtr.client.auth.reach`): its resource
    metadata only on its own origin, or on one of `trusted_metadata_origins`
    (`https://host[:port]`); https elsewhere; no loopback or private address unless the
    server is on loopback itself (or the origin is trusted); no redirects. `resolver`: how
    the authorization flow resolves host names (default: aiohttp's), e.g. to pin names or to
    refuse private addresses at resolve time as well.
    """

    def __init__(
        self,
        redirect: RedirectHandler | None = None,
        *,
        grant: Grant | None = None,
        client: ClientCredentials | None = None,
        client_metadata_url: str | None = None,
        client_name: str = "mrtr",
        scope: str | None = None,
        store: TokenStore | None = None,
        dpop: bool | None = None,
        max_step_ups: int = 2,
        timeout: float = 30.0,
        allow_http: bool = False,
        trusted_metadata_origins: Iterable[str] = (),
        resolver: AbstractResolver | None = None,
    ) -> None:
        if grant is None and redirect is not None:
            grant = AuthorizationCodeGrant(redirect)
        if grant is None:
            raise ValueError("OAuth needs a redirect handler (redirect=...) or a grant (grant=...)")
        if max_step_ups < 0:
            raise ValueError(f"max_step_ups must be 0 or more, not {max_step_ups}")
        grant_issuer = getattr(grant, "issuer", None)
        grant_issuer = grant_issuer if isinstance(grant_issuer, str) else None
        client_issuer = client.issuer if client is not None else None
        if grant_issuer and client_issuer and grant_issuer != client_issuer:
            raise ValueError(
                f"the grant is for the issuer {grant_issuer!r} but the client's credentials "
                f"are for {client_issuer!r}; they must name the same authorization server"
            )
        # The one authorization server this client may authenticate at, when it is bound.
        self.issuer: str | None = client_issuer or grant_issuer
        self.grant = grant
        self.client = client
        self.client_metadata_url = client_metadata_url
        self.client_name = client_name
        self.scope = scope
        self.store: TokenStore = store if store is not None else MemoryTokenStore()
        self.dpop = dpop
        self.max_step_ups = max_step_ups
        self.allow_http = allow_http
        self.trusted_metadata_origins = tuple(trusted_metadata_origins)
        self.resolver = resolver
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._tokens: dict[str, Tokens | None] = {}  # by canonical server URL; None: none yet
        self._servers: dict[str, ServerMetadata] = {}  # by issuer
        self._nonces: dict[str, str] = {}  # the latest DPoP nonce of each origin
        self._dpop_key: DPoPKey | None = None
        self._lock = asyncio.Lock()

    # --- the transport's side ----------------------------------------------------------------

    async def middleware(
        self, request: ClientRequest, handler: ClientHandlerType
    ) -> ClientResponse:
        """An aiohttp client middleware: authorize `request`, and answer the challenges of its
        response (sending it again) as the module docstring says."""
        url = str(request.url.with_query(None).with_fragment(None))
        key = canonical_resource(url)
        sent = await self._attach(request, key, url)
        response = await handler(request)
        reauthorized = nonce_retried = False
        step_ups = 0
        while response.status in (401, 403):
            challenge = auth_challenge(response.headers.getall("WWW-Authenticate", ()))
            nonce = response.headers.get(DPOP_NONCE)
            if nonce is not None:
                self._nonces[origin(url)] = nonce
            error = challenge.error if challenge is not None else None
            if challenge is None and "WWW-Authenticate" in response.headers:
                break  # another scheme (Basic, Negotiate...): not an OAuth server's to answer
            if response.status == 401:
                if error == "use_dpop_nonce" and nonce and sent is not None and sent.is_dpop:
                    if nonce_retried:
                        break
                    nonce_retried = True
                elif reauthorized:
                    break
                else:
                    reauthorized = True
                    await self._recover(key, url, challenge, sent)
            elif error == "insufficient_scope" and step_ups < self.max_step_ups:
                step_ups += 1
                if not await self._step_up(key, url, challenge, sent):
                    break
            else:
                break
            response.release()
            sent = await self._attach(request, key, url)
            response = await handler(request)
        return response

    async def _attach(self, request: ClientRequest, key: str, url: str) -> Tokens | None:
        """Put the current token (and DPoP proof) on `request`; the tokens used, if any."""
        tokens = await self._current(key)
        if tokens is not None and tokens.stale() and tokens.refresh_token:
            async with self._lock:
                tokens = await self._current(key)
                if tokens is not None and tokens.stale() and tokens.refresh_token:
                    tokens = await self._try_refresh(key, tokens) or tokens
        if tokens is None or tokens.expired():
            return None  # as the application built it (an Authorization of its own stays)
        if tokens.resource is not None and not resource_covers(tokens.resource, url):
            # Never: a token goes only to the resource it was issued for.
            logger.warning("not sending the token for %s to %s", tokens.resource, url)
            return None
        if tokens.is_dpop and tokens.dpop_key is not None:
            proof = self._key_for(tokens).proof(
                request.method,
                url,
                access_token=tokens.access_token,
                nonce=self._nonces.get(origin(url)),
            )
            request.headers["Authorization"] = f"DPoP {tokens.access_token}"
            request.headers["DPoP"] = proof
        else:
            request.headers["Authorization"] = f"Bearer {tokens.access_token}"
        return tokens

    def _key_for(self, tokens: Tokens) -> DPoPKey:
        key = self._dpop_key
        if key is None or key.private_jwk != tokens.dpop_key:
            key = self._dpop_key = DPoPKey(tokens.dpop_key)
        return key

    async def _current(self, key: str) -> Tokens | None:
        if key not in self._tokens:
            saved = await self.store.load(f"tokens {key}")
            self._tokens[key] = Tokens.from_dict(saved) if saved is not None else None
        return self._tokens[key]

    async def _keep(self, key: str, tokens: Tokens | None) -> None:
        self._tokens[key] = tokens
        await self.store.save(f"tokens {key}", tokens.to_dict() if tokens is not None else None)

    # --- 401 and 403 --------------------------------------------------------------------------

    async def _recover(
        self, key: str, url: str, challenge: Challenge | None, sent: Tokens | None
    ) -> None:
        """After a 401: a refreshed or new token, unless another request got one meanwhile."""
        async with self._lock:
            current = await self._current(key)
            if _renewed(current, sent):
                return
            async with self._session() as session:
                resource, metadata = await self._discover(session, url, challenge)
                if (
                    current is not None
                    and current.refresh_token
                    and current.issuer == metadata.issuer
                ):
                    refreshed = await self._refresh(session, key, current, metadata)
                    if refreshed is not None:
                        return
                scope = self._initial_scope(challenge, resource)
                await self._obtain(session, key, url, resource, metadata, scope)

    async def _step_up(
        self, key: str, url: str, challenge: Challenge | None, sent: Tokens | None
    ) -> bool:
        """After a 403 `insufficient_scope`: a token for the union of the scopes asked for so
        far and the challenge's. False when that union asks for nothing new (the server
        will not be satisfied by asking again)."""
        async with self._lock:
            current = await self._current(key)
            if _renewed(current, sent):
                return True
            previous = set((current.scope or "").split()) if current is not None else set()
            wanted = previous | set(((challenge.scope if challenge else None) or "").split())
            if wanted <= previous:
                logger.info("403 insufficient_scope for scopes already granted: not asking again")
                return False
            scope = " ".join(sorted(wanted))
            async with self._session() as session:
                resource, metadata = await self._discover(session, url, challenge)
                await self._obtain(session, key, url, resource, metadata, scope)
            return True

    # --- the flow ---------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(resolver=self.resolver) if self.resolver else None
        return aiohttp.ClientSession(timeout=self._timeout, connector=connector)

    def _reach(self, url: str) -> Reach:
        # The issuer the credentials are bound to was configured, like the trusted origins.
        trusted = (*self.trusted_metadata_origins, *([self.issuer] if self.issuer else []))
        return Reach.of(url, trusted, allow_http=self.allow_http)

    async def _discover(
        self, session: aiohttp.ClientSession, url: str, challenge: Challenge | None
    ) -> tuple[ResourceMetadata | None, ServerMetadata]:
        reach = self._reach(url)
        resource = await discover_resource(
            session,
            url,
            challenge.resource_metadata if challenge is not None else None,
            reach=reach,
        )
        # Without resource metadata (a 2025-03-26 server), the MCP server's origin is the
        # authorization server, at its metadata or else at the default endpoints.
        named = resource.authorization_servers if resource is not None else (origin(url),)
        issuer = self._issuer_among(url, named, resource is not None)
        metadata = await discover_server(session, issuer, reach=reach)
        if metadata is None:
            if resource is not None or issuer != origin(url):
                raise AuthorizationFailed(
                    f"the authorization server {issuer} publishes no metadata "
                    "(RFC 8414 or OpenID Connect Discovery)"
                )
            metadata = ServerMetadata.fallback(issuer)
        self._servers[metadata.issuer] = metadata
        return resource, metadata

    def _issuer_among(self, url: str, named: tuple[str, ...], published: bool) -> str:
        """The authorization server to use of those the MCP server names: the one the
        client is bound to, if any (an error when it is not named), else the first."""
        if self.issuer is None:
            return named[0]
        if self.issuer in named or not published:
            return self.issuer  # a server naming none leaves the choice to the client
        raise AuthorizationFailed(
            f"{url} names the authorization server {named[0][:200]!r}, but the client's "
            f"credentials are for {self.issuer!r}; nothing was sent (if the server moved, "
            "configure credentials registered at its new authorization server)",
            {"expected": self.issuer, "named": [server[:200] for server in named[:5]]},
        )

    def _initial_scope(
        self, challenge: Challenge | None, resource: ResourceMetadata | None
    ) -> str | None:
        if self.scope is not None:
            return self.scope
        if challenge is not None and challenge.scope:
            return challenge.scope
        if resource is not None and resource.scopes_supported:
            return " ".join(resource.scopes_supported)
        return None

    async def _obtain(
        self,
        session: aiohttp.ClientSession,
        key: str,
        url: str,
        resource: ResourceMetadata | None,
        metadata: ServerMetadata,
        scope: str | None,
    ) -> Tokens:
        if (
            scope
            and self.grant.refreshable
            and OFFLINE_ACCESS in (metadata.scopes_supported or ())
            and OFFLINE_ACCESS not in scope.split()
        ):
            scope = f"{scope} {OFFLINE_ACCESS}"  # a refresh token, where the server offers one
        credentials = await self._client_for(session, metadata, scope)
        context = GrantContext(
            session=session,
            metadata=metadata,
            credentials=credentials,
            resource=resource.resource if resource is not None else canonical_resource(url),
            scope=scope,
            dpop=self._dpop_for(metadata),
            nonces=self._nonces,
        )
        tokens = await self.grant.obtain(context)
        tokens = replace(tokens, resource=context.resource)
        await self._keep(key, tokens)
        logger.info("authorized at %s for %s (scope %s)", metadata.issuer, url, scope or "-")
        return tokens

    async def _refresh(
        self,
        session: aiohttp.ClientSession,
        key: str,
        tokens: Tokens,
        metadata: ServerMetadata,
    ) -> Tokens | None:
        """Renew with the refresh token (at the server that issued it); None when refused."""
        credentials = await self._client_for(session, metadata, tokens.scope, register_new=False)
        form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token or ""}
        if tokens.resource is not None:
            form["resource"] = tokens.resource
        dpop = self._key_for(tokens) if tokens.is_dpop and tokens.dpop_key else None
        try:
            fresh = await request_token(
                session,
                metadata,
                form,
                credentials,
                dpop=dpop,
                nonces=self._nonces,
                requested_scope=tokens.scope,
            )
        except TokenError as exc:
            logger.info("refresh refused (%s); authorizing afresh", exc.message)
            await self._keep(key, replace(tokens, refresh_token=None))
            return None
        renewed = replace(tokens.renewed(fresh), resource=tokens.resource)
        await self._keep(key, renewed)
        return renewed

    async def _try_refresh(self, key: str, tokens: Tokens) -> Tokens | None:
        """A refresh before use, for a token known to have expired; None when it fails."""
        issuer = tokens.issuer
        if issuer is None:
            return None
        try:
            async with self._session() as session:
                metadata = self._servers.get(issuer) or await discover_server(
                    session, issuer, reach=self._reach(key)
                )
                if metadata is None:
                    return None
                return await self._refresh(session, key, tokens, metadata)
        except AuthorizationFailed as exc:
            logger.info("could not refresh the token: %s", exc.message)
            return None

    async def _client_for(
        self,
        session: aiohttp.ClientSession,
        metadata: ServerMetadata,
        scope: str | None,
        *,
        register_new: bool = True,
    ) -> ClientCredentials | None:
        """The client's registration at this authorization server: pre-registered, a Client
        ID Metadata Document URL, one registered before, or a new dynamic registration."""
        issuer = metadata.issuer
        if self.client is not None:
            if self.client.issuer not in (None, issuer):
                raise AuthorizationFailed(
                    f"the client's credentials are for the authorization server "
                    f"{self.client.issuer!r}, not for {issuer[:200]!r}; they are not sent"
                )
            return self.client
        if self.client_metadata_url is not None and metadata.client_id_metadata_document_supported:
            return ClientCredentials(self.client_metadata_url, auth_method="none", issuer=issuer)
        saved = await self.store.load(f"client {issuer}")
        credentials = ClientCredentials.from_dict(saved) if saved is not None else None
        if credentials is not None and credentials.issuer == issuer:
            return credentials
        if not register_new or metadata.registration_endpoint is None:
            return None
        body = registration_request(
            metadata,
            client_name=self.client_name,
            redirect_uri=self.grant.redirect_uri,
            grant_types=list(self.grant.grant_types),
            scope=scope,
        )
        credentials = await register(session, metadata, body)
        await self.store.save(f"client {issuer}", credentials.to_dict())
        return credentials

    def _dpop_for(self, metadata: ServerMetadata) -> DPoPKey | None:
        offered = DPoPKey.algorithm in (metadata.dpop_signing_alg_values_supported or ())
        if self.dpop is False or (self.dpop is None and not offered):
            return None
        if self._dpop_key is None:
            self._dpop_key = DPoPKey()
        return self._dpop_key


def _renewed(current: Tokens | None, sent: Tokens | None) -> bool:
    """True when another request got a usable token after this one went out."""
    return current is not None and current is not sent and not current.expired()


__all__ = ["OAuth"]
