"""Discovery: from a 401 to the authorization server's metadata.

`discover_resource` finds the Protected Resource Metadata (the challenge's `resource_metadata`
URL, else under the endpoint's path, else at the root) and checks that its `resource` speaks
for the server being called. `discover_server` walks an issuer's well-known URLs in the
spec's order and keeps the first document whose `issuer` is exactly the one asked for.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson

from ...protocol.errors import AUTHORIZATION_FAILED, McpError
from .metadata import (
    ResourceMetadata,
    ServerMetadata,
    resource_covers,
    resource_metadata_urls,
    secure_enough,
    server_metadata_urls,
)

logger = logging.getLogger("mrtr.auth")

MAX_DOCUMENT = 256 * 1024  # bytes: metadata documents are small; a huge one is refused


class AuthorizationFailed(McpError):
    """The client could not obtain an access token, or refused to use what it was given."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(AUTHORIZATION_FAILED, message, data)


def bounded_json(raw: bytes) -> Any:
    """The JSON value of a body read up to `MAX_DOCUMENT` + 1 bytes; None when it is larger
    than `MAX_DOCUMENT` or not JSON."""
    if len(raw) > MAX_DOCUMENT:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


async def fetch_json(session: aiohttp.ClientSession, url: str) -> Any:
    """GET a JSON document; None when it is not there (any status but 200, or not JSON)."""
    try:
        async with session.get(url, headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                logger.debug("GET %s: HTTP %d", url, response.status)
                return None
            body = await response.content.read(MAX_DOCUMENT + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.debug("GET %s failed: %s", url, exc)
        return None
    if len(body) > MAX_DOCUMENT:
        logger.info("GET %s: the document is larger than %d bytes; ignored", url, MAX_DOCUMENT)
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        logger.debug("GET %s: not JSON", url)
        return None


async def discover_resource(
    session: aiohttp.ClientSession,
    server_url: str,
    challenge_url: str | None,
    *,
    allow_http: bool = False,
) -> ResourceMetadata | None:
    """The Protected Resource Metadata of `server_url`, or None when it publishes none (a
    2025-03-26 server). Raises `AuthorizationFailed` when the metadata found speaks for
    another resource."""
    candidates = resource_metadata_urls(server_url)
    if challenge_url is not None:
        if secure_enough(challenge_url, allow_http):
            candidates.insert(0, challenge_url)
        else:
            logger.warning("ignoring resource_metadata %r: not https", challenge_url[:200])
    problems: list[str] = []
    for url in candidates:
        document = await fetch_json(session, url)
        if document is None:
            continue
        try:
            metadata = ResourceMetadata.parse(document)
        except ValueError as exc:
            problems.append(f"{url}: {exc}")
            continue
        if not resource_covers(metadata.resource, server_url):
            raise AuthorizationFailed(
                f"the protected resource metadata at {url} is for {metadata.resource!r}, not "
                f"for {server_url}; no token will be requested or sent for it",
                {"resource": metadata.resource, "server": server_url},
            )
        return metadata
    if problems:
        raise AuthorizationFailed("unusable protected resource metadata: " + "; ".join(problems))
    return None


async def discover_server(
    session: aiohttp.ClientSession, issuer: str, *, allow_http: bool = False
) -> ServerMetadata | None:
    """The metadata of the authorization server `issuer`, or None when it publishes none.
    Raises `AuthorizationFailed` for a document naming another issuer (it must not be used,
    RFC 8414 3.3) or with endpoints that are not https."""
    if not secure_enough(issuer, allow_http):
        raise AuthorizationFailed(f"the authorization server {issuer!r} is not an https URL")
    for url in server_metadata_urls(issuer):
        document = await fetch_json(session, url)
        if document is None:
            continue
        try:
            metadata = ServerMetadata.parse(document)
        except ValueError as exc:
            logger.info("%s: %s", url, exc)
            continue
        if metadata.issuer != issuer:
            raise AuthorizationFailed(
                f"the authorization server metadata at {url} names the issuer "
                f"{metadata.issuer[:200]!r}, not {issuer!r}; it is not used",
                {"expected": issuer, "issuer": metadata.issuer[:200]},
            )
        for endpoint in (
            metadata.authorization_endpoint,
            metadata.token_endpoint,
            metadata.registration_endpoint,
        ):
            if endpoint is not None and not secure_enough(endpoint, allow_http):
                raise AuthorizationFailed(
                    f"the authorization server {issuer} names an endpoint that is not https: "
                    f"{endpoint[:200]!r}"
                )
        return metadata
    return None


__all__ = [
    "AuthorizationFailed",
    "bounded_json",
    "discover_resource",
    "discover_server",
    "fetch_json",
]
