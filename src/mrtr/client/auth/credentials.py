"""Who the client is at an authorization server, and how it proves it at the token endpoint.

`ClientCredentials` holds one registration: pre-registered by the application, obtained by
dynamic client registration (RFC 7591), or a Client ID Metadata Document URL used as the
client id. `apply_client_auth` adds the proof the token endpoint asks for:
`client_secret_basic`, `client_secret_post`, `private_key_jwt` (RFC 7523) or `none`, and
only at the token endpoint of the issuer the credentials belong to.
"""

from __future__ import annotations

import base64
from collections.abc import MutableMapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote_plus

from .discovery import AuthorizationFailed
from .jose import ASSERTION_TYPE, client_assertion
from .metadata import ServerMetadata

BASIC = "client_secret_basic"
POST = "client_secret_post"
NONE = "none"
PRIVATE_KEY_JWT = "private_key_jwt"


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """A client's registration at one authorization server.

    `auth_method` is how it authenticates at the token endpoint (None: the best the server
    offers for what the client has: a private key, a secret, or nothing). `issuer` is the
    authorization server the credentials belong to; None lets a pre-registered client be
    used with whichever server the MCP server names.
    """

    client_id: str
    client_secret: str | None = None
    auth_method: str | None = None
    private_key_pem: str | None = None
    signing_algorithm: str = "ES256"
    issuer: str | None = None

    def __post_init__(self) -> None:
        if self.issuer is None and (self.client_secret or self.private_key_pem):
            raise ValueError(
                "ClientCredentials with a client secret or private key need the issuer of the "
                "authorization server they were registered at, e.g. "
                "ClientCredentials(client_id, secret, issuer='https://auth.example.com'), "
                "written exactly as that server's metadata `issuer`: they are never sent "
                "to another server"
            )

    def __repr__(self) -> str:  # the secret and key stay out of logs and tracebacks
        return f"ClientCredentials(client_id={self.client_id!r}, issuer={self.issuer!r})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form, for a `TokenStore`."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientCredentials | None:
        """The credentials saved by `to_dict`, or None when the entry is not usable."""
        client_id = data.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            return None

        def text(name: str) -> str | None:
            value = data.get(name)
            return value if isinstance(value, str) and value else None

        try:
            return cls(
                client_id=client_id,
                client_secret=text("client_secret"),
                auth_method=text("auth_method"),
                private_key_pem=text("private_key_pem"),
                signing_algorithm=text("signing_algorithm") or "ES256",
                issuer=text("issuer"),
            )
        except ValueError:  # a secret saved without its issuer: bound to nothing, not used
            return None


def choose_auth_method(credentials: ClientCredentials, metadata: ServerMetadata) -> str:
    """How to authenticate at this server's token endpoint: the registered method, else the
    strongest the server lists that the client can do (RFC 8414's default list is
    `client_secret_basic` alone)."""
    if credentials.auth_method is not None:
        return credentials.auth_method
    offered = metadata.token_endpoint_auth_methods_supported or (BASIC,)
    if credentials.private_key_pem is not None and PRIVATE_KEY_JWT in offered:
        return PRIVATE_KEY_JWT
    if credentials.client_secret is not None:
        if BASIC in offered:
            return BASIC
        if POST in offered:
            return POST
        return BASIC if NONE not in offered else NONE
    return NONE


def apply_client_auth(
    form: MutableMapping[str, str],
    headers: MutableMapping[str, str],
    credentials: ClientCredentials,
    metadata: ServerMetadata,
) -> None:
    """Add the client's authentication to a token request's form and headers.

    Raises `AuthorizationFailed` (nothing added) when the credentials belong to another
    issuer than `metadata`'s: the last check before a secret, a key's assertion or a
    registration leaves the client."""
    if credentials.issuer is not None and credentials.issuer != metadata.issuer:
        raise AuthorizationFailed(
            f"the client's credentials are for the authorization server "
            f"{credentials.issuer!r}, not for {metadata.issuer[:200]!r}; they are not sent",
            {"expected": credentials.issuer, "issuer": metadata.issuer[:200]},
        )
    method = choose_auth_method(credentials, metadata)
    if method == BASIC and credentials.client_secret is not None:
        # RFC 6749 2.3.1: both parts form-encoded before they are joined.
        raw = f"{quote_plus(credentials.client_id)}:{quote_plus(credentials.client_secret)}"
        headers["Authorization"] = "Basic " + base64.b64encode(raw.encode()).decode("ascii")
    elif method == POST and credentials.client_secret is not None:
        form["client_id"] = credentials.client_id
        form["client_secret"] = credentials.client_secret
    elif method == PRIVATE_KEY_JWT and credentials.private_key_pem is not None:
        form["client_id"] = credentials.client_id
        form["client_assertion_type"] = ASSERTION_TYPE
        form["client_assertion"] = client_assertion(
            credentials.client_id,
            metadata.issuer,
            credentials.private_key_pem,
            credentials.signing_algorithm,
        )
    else:
        form["client_id"] = credentials.client_id


__all__ = ["ClientCredentials", "apply_client_auth", "choose_auth_method"]
