"""Fetching the small JSON documents verifiers need (authorization server metadata, JWKS,
introspection responses), bounded in time and size, over aiohttp.

Every failure (network, status, not JSON, too large) is a `VerifierUnavailable`: the verifier
could not decide, which is not the same as a bad token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from .token import VerifierUnavailable

#: The largest document accepted; metadata, key sets and introspection answers are far smaller.
MAX_DOCUMENT_BYTES = 512 * 1024


async def fetch_json(
    url: str,
    *,
    form: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,  # noqa: ASYNC109 - one bound for connect, send and read
) -> dict[str, Any]:
    """GET `url` (or POST `form` to it, form-encoded) and return the JSON object it answers."""
    method = "GET" if form is None else "POST"
    request_headers = {"Accept": "application/json", **(headers or {})}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.request(
                method, url, data=form, headers=request_headers, allow_redirects=False
            ) as response,
        ):
            if response.status != 200:
                raise VerifierUnavailable(f"{method} {url} answered HTTP {response.status}")
            body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise VerifierUnavailable(f"{method} {url} failed: {type(exc).__name__}: {exc}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise VerifierUnavailable(f"{method} {url}: answer larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise VerifierUnavailable(f"{method} {url}: the answer is not JSON") from None
    if not isinstance(document, dict):
        raise VerifierUnavailable(f"{method} {url}: the answer is not a JSON object")
    return document


__all__ = ["MAX_DOCUMENT_BYTES", "fetch_json"]
