"""Discovery: from a 401 to the authorization server's metadata.

`discover_resource` finds the Protected Resource Metadata (the challenge's `resource_metadata`
URL, else under the endpoint's path, else at the root) and checks that its `resource` speaks
for the server being called. `discover_server` walks an issuer's well-known URLs in the
spec's order and keeps the first document whose `issuer` is exactly the one asked for.
Every URL is first checked against the server's `Reach` (no other origin for its resource
metadata unless trusted, no internal hosts for a remote server), and no redirect is followed.
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
    origin,
    resource_covers,
    resource_metadata_urls,
    secure_enough,
    server_metadata_urls,
)
from .reach import Reach

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
    """GET a JSON document; None when it is not there (any status but 200 or a redirect, or
    not JSON). A redirect is not followed: it raises `AuthorizationFailed` naming its
    `Location`, since following it would fetch a URL no check has seen."""
    try:
        async with session.get(
            url, headers={"Accept": "application/json"}, allow_redirects=False
        ) as response:
            if 300 <= response.status < 400:
                location = response.headers.get("Location", "")[:200]
                raise AuthorizationFailed(
                    f"GET {url[:200]} answered HTTP {response.status}, a redirect to "
                    f"{location!r}; discovery documents must be served where they are named "
                    "(redirects are not followed), so nothing more was fetched",
                    {"url": url[:200], "status": response.status, "location": location},
                )
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
    reach: Reach | None = None,
) -> ResourceMetadata | None:
    """The Protected Resource Metadata of `server_url`, or None when it publishes none (a
    2025-03-26 server). Raises `AuthorizationFailed` when the challenge's URL is out of the
    server's `reach` (by default: its own origin only), or when the metadata found speaks
    for another resource."""
    reach = reach if reach is not None else Reach.of(server_url, allow_http=allow_http)
    candidates = resource_metadata_urls(server_url)
    if challenge_url is not None:
        if not reach.trusts(challenge_url):
            raise AuthorizationFailed(
                f"{server_url} names resource metadata on another origin "
                f"({challenge_url[:200]!r}); only its own origin ({origin(server_url)}) is "
                "used unless the application trusts that one (OAuth(trusted_metadata_origins="
                "[...])); nothing was fetched",
                {"server": server_url, "resource_metadata": challenge_url[:200]},
            )
        refusal = reach.refusal(challenge_url)
        if refusal is not None:
            raise AuthorizationFailed(
                f"the resource metadata URL {challenge_url[:200]!r} is refused: {refusal}"
            )
        candidates.insert(0, challenge_url)
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
    session: aiohttp.ClientSession,
    issuer: str,
    *,
    allow_http: bool = False,
    reach: Reach | None = None,
) -> ServerMetadata | None:
    """The metadata of the authorization server `issuer`, or None when it publishes none.
    Raises `AuthorizationFailed` for an issuer out of the MCP server's `reach` (by default,
    the issuer is taken as the server), for a document naming another issuer (it must not
    be used, RFC 8414 3.3), or with endpoints out of reach (not https, internal)."""
    if reach is None:  # no MCP server to judge by: the issuer speaks for itself, if secure
        if not secure_enough(issuer, allow_http):
            raise AuthorizationFailed(f"the authorization server {issuer!r} is not an https URL")
        reach = Reach.of(issuer, allow_http=allow_http)
    refusal = reach.refusal(issuer)
    if refusal is not None:
        raise AuthorizationFailed(
            f"the authorization server {issuer[:200]!r} named by {reach.server_url} is "
            f"refused: {refusal}; nothing was fetched from it",
            {"issuer": issuer[:200], "server": reach.server_url},
        )
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
            refusal = reach.refusal(endpoint, vouched_by=issuer) if endpoint else None
            if endpoint is not None and refusal is not None:
                raise AuthorizationFailed(
                    f"the authorization server {issuer} names the endpoint "
                    f"{endpoint[:200]!r}, which is refused: {refusal}; nothing was sent to it"
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
