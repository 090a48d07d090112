"""Dynamic client registration (RFC 7591): a client introduces itself to an authorization
server it has never met, and gets a client id (and maybe a secret) valid there only."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from .credentials import BASIC, NONE, POST, ClientCredentials
from .discovery import MAX_DOCUMENT, AuthorizationFailed, bounded_json
from .metadata import ServerMetadata, is_loopback


def registration_request(
    metadata: ServerMetadata,
    *,
    client_name: str,
    redirect_uri: str | None,
    grant_types: list[str],
    scope: str | None,
) -> dict[str, Any]:
    """The client metadata to register: a public client (PKCE, no secret) when the server
    allows one, else one with a secret sent the way the server prefers."""
    offered = metadata.token_endpoint_auth_methods_supported or (BASIC,)
    method = NONE if NONE in offered else BASIC if BASIC in offered else POST
    body: dict[str, Any] = {
        "client_name": client_name,
        "grant_types": grant_types,
        "token_endpoint_auth_method": method,
    }
    if redirect_uri is not None:
        body["redirect_uris"] = [redirect_uri]
        body["response_types"] = ["code"]
        # A loopback or private-scheme redirect is an app on the user's machine (RFC 8252).
        native = is_loopback(redirect_uri) or not redirect_uri.startswith(("http:", "https:"))
        body["application_type"] = "native" if native else "web"
    if scope:
        body["scope"] = scope
    return body


async def register(
    session: aiohttp.ClientSession, metadata: ServerMetadata, body: dict[str, Any]
) -> ClientCredentials:
    """Register at `metadata.registration_endpoint`; the credentials it issued, bound to its
    issuer. `AuthorizationFailed` when it refuses or answers nonsense."""
    endpoint = metadata.registration_endpoint
    if endpoint is None:
        raise AuthorizationFailed(
            f"the authorization server {metadata.issuer} offers no dynamic client registration; "
            "pass a pre-registered client (client=ClientCredentials(...))"
        )
    try:
        async with session.post(
            endpoint,
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            allow_redirects=False,
        ) as response:
            raw = await response.content.read(MAX_DOCUMENT + 1)
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthorizationFailed(f"client registration at {endpoint} failed: {exc}") from None
    answer = bounded_json(raw)
    if status not in (200, 201) or not isinstance(answer, dict):
        detail = ""
        if isinstance(answer, dict) and isinstance(answer.get("error"), str):
            detail = f": {answer['error']}"
            if isinstance(answer.get("error_description"), str):
                detail += f" ({answer['error_description'][:200]})"
        raise AuthorizationFailed(
            f"client registration at {endpoint} was refused (HTTP {status}){detail}",
            {"status": status},
        )
    client_id = answer.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise AuthorizationFailed(f"client registration at {endpoint} returned no client_id")
    secret = answer.get("client_secret")
    method = answer.get("token_endpoint_auth_method")
    return ClientCredentials(
        client_id=client_id,
        client_secret=secret if isinstance(secret, str) and secret else None,
        auth_method=method if isinstance(method, str) and method else None,
        issuer=metadata.issuer,
    )


__all__ = ["register", "registration_request"]
