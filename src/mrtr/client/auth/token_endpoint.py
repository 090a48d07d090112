"""One token request (RFC 6749 3.2): the form, the client's authentication, a DPoP proof when
the token is to be bound to a key, and the one retry a `use_dpop_nonce` answer asks for."""

from __future__ import annotations

from typing import Any

import aiohttp

from .credentials import ClientCredentials, apply_client_auth
from .discovery import MAX_DOCUMENT, AuthorizationFailed, bounded_json
from .jose import DPoPKey
from .metadata import ServerMetadata, origin
from .tokens import Tokens, parse_token_response

DPOP_NONCE = "DPoP-Nonce"


class TokenError(AuthorizationFailed):
    """The token endpoint refused the request (`error` is its OAuth error code)."""

    def __init__(self, message: str, error: str | None, status: int) -> None:
        super().__init__(message, {"error": error, "status": status})
        self.error = error
        self.status = status


async def request_token(
    session: aiohttp.ClientSession,
    metadata: ServerMetadata,
    form: dict[str, str],
    credentials: ClientCredentials | None,
    *,
    dpop: DPoPKey | None,
    nonces: dict[str, str],
    requested_scope: str | None,
    endpoint: str | None = None,
) -> Tokens:
    """POST `form` to the token endpoint (or `endpoint`), authenticated as `credentials`; the
    tokens it grants. `nonces` holds the latest DPoP nonce of each origin, and is updated."""
    url = endpoint or metadata.token_endpoint
    if credentials is not None and url != metadata.token_endpoint:
        # The client authenticates only where its issuer's own metadata says to.
        raise AuthorizationFailed(
            f"{url[:200]!r} is not the token endpoint of {metadata.issuer!r} "
            f"({metadata.token_endpoint[:200]!r}); the client's credentials are not sent there"
        )
    for attempt in range(2):
        body = dict(form)
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        }
        if credentials is not None:
            apply_client_auth(body, headers, credentials, metadata)
        if dpop is not None:
            headers["DPoP"] = dpop.proof("POST", url, nonce=nonces.get(origin(url)))
        status, answer, nonce = await post_form(session, url, body, headers)
        if nonce is not None:
            nonces[origin(url)] = nonce
        if status == 200:
            try:
                return parse_token_response(
                    answer,
                    requested_scope=requested_scope,
                    issuer=metadata.issuer,
                    dpop_key=dpop.private_jwk if dpop is not None else None,
                )
            except ValueError as exc:
                raise AuthorizationFailed(f"the token endpoint {url}: {exc}") from None
        error = answer.get("error") if isinstance(answer, dict) else None
        if error == "use_dpop_nonce" and dpop is not None and nonce is not None and attempt == 0:
            continue  # RFC 9449 8: the same request again, with the server's nonce
        description = answer.get("error_description") if isinstance(answer, dict) else None
        message = f"the token endpoint {url} refused the {form.get('grant_type')} request"
        message += f" (HTTP {status})"
        if isinstance(error, str):
            message += f": {error[:100]}"
        if isinstance(description, str):
            message += f": {description[:300]}"
        raise TokenError(message, error if isinstance(error, str) else None, status)
    raise AssertionError("unreachable")  # pragma: no cover


async def post_form(
    session: aiohttp.ClientSession, url: str, form: dict[str, str], headers: dict[str, str]
) -> tuple[int, Any, str | None]:
    """POST a form to an OAuth endpoint: the status, the decoded JSON answer (None when it is
    not JSON) and the `DPoP-Nonce` the server sent, if any."""
    headers = {"Accept": "application/json", **headers}
    try:
        async with session.post(url, data=form, headers=headers, allow_redirects=False) as reply:
            raw = await reply.content.read(MAX_DOCUMENT + 1)
            status, nonce = reply.status, reply.headers.get(DPOP_NONCE)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthorizationFailed(f"the token request to {url} failed: {exc}") from None
    answer = bounded_json(raw)
    return status, answer, nonce


__all__ = ["DPOP_NONCE", "TokenError", "post_form", "request_token"]
