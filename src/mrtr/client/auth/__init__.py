"""MCP authorization, client side: OAuth 2.1 for servers behind an authorization server.

    from mrtr import Client
    from mrtr.client.auth import FileTokenStore, LoopbackRedirectHandler, OAuth

    auth = OAuth(LoopbackRedirectHandler(), store=FileTokenStore("~/.mrtr/tokens.json"))
    async with Client.http("https://mcp.example.com/mcp", auth=auth) as client:
        ...

See `OAuth` for what happens on a 401 or 403, and the grants for the ways of obtaining a
token without a person (`ClientCredentialsGrant`, `JwtBearerGrant`, `IdJagGrant`).
"""

from __future__ import annotations

from .challenge import Challenge, auth_challenge, parse_challenges
from .credentials import ClientCredentials
from .discovery import AuthorizationFailed
from .grants import (
    AuthorizationCodeGrant,
    ClientCredentialsGrant,
    Grant,
    GrantContext,
    IdJagGrant,
    JwtBearerGrant,
)
from .loopback import LoopbackRedirectHandler, open_in_browser
from .metadata import ResourceMetadata, ServerMetadata
from .oauth import OAuth
from .redirect import AuthorizationResponse, InvalidCallback, RedirectHandler
from .store import FileTokenStore, MemoryTokenStore, TokenStore
from .tokens import Tokens

__all__ = [
    "AuthorizationCodeGrant",
    "AuthorizationFailed",
    "AuthorizationResponse",
    "Challenge",
    "ClientCredentials",
    "ClientCredentialsGrant",
    "FileTokenStore",
    "Grant",
    "GrantContext",
    "IdJagGrant",
    "InvalidCallback",
    "JwtBearerGrant",
    "LoopbackRedirectHandler",
    "MemoryTokenStore",
    "OAuth",
    "RedirectHandler",
    "ResourceMetadata",
    "ServerMetadata",
    "TokenStore",
    "Tokens",
    "auth_challenge",
    "open_in_browser",
    "parse_challenges",
]
