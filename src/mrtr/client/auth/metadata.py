"""The two discovery documents and the URL rules around them.

`ResourceMetadata` is OAuth 2.0 Protected Resource Metadata (RFC 9728): which authorization
servers guard an MCP server. `ServerMetadata` is Authorization Server Metadata (RFC 8414, or
OpenID Connect Discovery): where to send a person, where to get tokens. Both are parsed
defensively: a member of the wrong type is treated as absent, and a document without what a
client cannot do without is refused with a `ValueError` saying what is missing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class ResourceMetadata:
    """What an MCP server publishes about itself as an OAuth protected resource."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, document: Any) -> ResourceMetadata:
        """The metadata in a decoded JSON document; `ValueError` when it is unusable."""
        if not isinstance(document, dict):
            raise ValueError("the protected resource metadata is not a JSON object")
        resource = document.get("resource")
        if not isinstance(resource, str) or not resource:
            raise ValueError("the protected resource metadata has no `resource`")
        servers = _strings(document.get("authorization_servers")) or ()
        if not servers:
            raise ValueError("the protected resource metadata names no authorization server")
        return cls(resource, servers, _strings(document.get("scopes_supported")))


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """What an authorization server publishes about its endpoints and abilities."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] | None = None
    grant_types_supported: tuple[str, ...] | None = None
    token_endpoint_auth_methods_supported: tuple[str, ...] | None = None
    code_challenge_methods_supported: tuple[str, ...] | None = None
    iss_parameter_supported: bool = False
    client_id_metadata_document_supported: bool = False
    dpop_signing_alg_values_supported: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, document: Any) -> ServerMetadata:
        """The metadata in a decoded JSON document; `ValueError` when it is unusable."""
        if not isinstance(document, dict):
            raise ValueError("the authorization server metadata is not a JSON object")
        issuer = document.get("issuer")
        token_endpoint = document.get("token_endpoint")
        if not isinstance(issuer, str) or not issuer:
            raise ValueError("the authorization server metadata has no `issuer`")
        if not isinstance(token_endpoint, str) or not token_endpoint:
            raise ValueError("the authorization server metadata has no `token_endpoint`")
        return cls(
            issuer=issuer,
            authorization_endpoint=_string(document.get("authorization_endpoint")),
            token_endpoint=token_endpoint,
            registration_endpoint=_string(document.get("registration_endpoint")),
            scopes_supported=_strings(document.get("scopes_supported")),
            grant_types_supported=_strings(document.get("grant_types_supported")),
            token_endpoint_auth_methods_supported=_strings(
                document.get("token_endpoint_auth_methods_supported")
            ),
            code_challenge_methods_supported=_strings(
                document.get("code_challenge_methods_supported")
            ),
            iss_parameter_supported=document.get("authorization_response_iss_parameter_supported")
            is True,
            client_id_metadata_document_supported=document.get(
                "client_id_metadata_document_supported"
            )
            is True,
            dpop_signing_alg_values_supported=_strings(
                document.get("dpop_signing_alg_values_supported")
            ),
        )

    @classmethod
    def fallback(cls, issuer: str) -> ServerMetadata:
        """The default endpoints of a 2025-03-26 server that publishes no metadata: at the
        root of the MCP server's origin."""
        return cls(
            issuer=issuer,
            authorization_endpoint=f"{issuer}/authorize",
            token_endpoint=f"{issuer}/token",
            registration_endpoint=f"{issuer}/register",
        )


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(item for item in value if isinstance(item, str))


# --- URLs ----------------------------------------------------------------------------------------


def origin(url: str) -> str:
    """`scheme://host[:port]` of a URL, as written (no trailing slash)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def resource_metadata_urls(server_url: str) -> list[str]:
    """Where RFC 9728 metadata may be when the challenge names no URL, in the order to try:
    under the MCP endpoint's path, then at the root."""
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    base = origin(server_url)
    urls = [f"{base}/.well-known/oauth-protected-resource{path}"] if path else []
    urls.append(f"{base}/.well-known/oauth-protected-resource")
    return urls


def server_metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order the spec sets: RFC 8414 with the path
    inserted, then OpenID Connect Discovery inserted, then appended (without a path: RFC 8414,
    then OpenID Connect)."""
    path = urlsplit(issuer).path.rstrip("/")
    base = origin(issuer)
    if not path:
        return [
            f"{base}/.well-known/oauth-authorization-server",
            f"{base}/.well-known/openid-configuration",
        ]
    return [
        f"{base}/.well-known/oauth-authorization-server{path}",
        f"{base}/.well-known/openid-configuration{path}",
        f"{base}{path}/.well-known/openid-configuration",
    ]


def canonical_resource(url: str) -> str:
    """The canonical URI of an MCP server (RFC 8707): lower-case scheme and host, no
    fragment or query, no trailing slash."""
    parts = urlsplit(url)
    netloc = parts.netloc.lower()
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def resource_covers(resource: str, server_url: str) -> bool:
    """True when a protected resource identifier covers the MCP server at `server_url`: the
    same origin (scheme and host compared case-insensitively, default ports made explicit)
    and a path that is the server's or one of its parents, segment by segment. A client sends
    its token to no server the metadata does not speak for."""
    r, s = urlsplit(resource), urlsplit(server_url)
    if r.fragment or not r.scheme or not r.hostname:
        return False
    if (r.scheme.lower(), r.hostname.lower(), _port(r.scheme, r.port)) != (
        s.scheme.lower(),
        (s.hostname or "").lower(),
        _port(s.scheme, s.port),
    ):
        return False
    prefix = r.path.rstrip("/")
    return not prefix or s.path == prefix or s.path.startswith(prefix + "/")


def _port(scheme: str, port: int | None) -> int | None:
    return port if port is not None else _DEFAULT_PORTS.get(scheme.lower())


def is_loopback(url: str) -> bool:
    """True for a URL whose host is this machine (`localhost`, 127.0.0.0/8, `::1`)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_enough(url: str, allow_http: bool, *, server_url: str | None = None) -> bool:
    """True for an `https` URL, or an `http` one on loopback (or anywhere, when allowed).
    With `server_url` (the MCP server that named `url`), loopback http is accepted only when
    that server is on loopback too: a remote server cannot point the client at this machine."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "https":
        return True
    local = is_loopback(url) and (server_url is None or is_loopback(server_url))
    return scheme == "http" and (allow_http or local)


__all__ = [
    "ResourceMetadata",
    "ServerMetadata",
    "canonical_resource",
    "is_loopback",
    "origin",
    "resource_covers",
    "resource_metadata_urls",
    "secure_enough",
    "server_metadata_urls",
]
