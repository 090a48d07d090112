"""`BearerGuard`: the OAuth resource-server check of the Streamable HTTP endpoint.

Both protocol eras pass it, before they part: the endpoint calls `admit` for every HTTP
request and `refuse_call` for every JSON-RPC request it reads. Rules:

1. `GET` of the Protected Resource Metadata (RFC 9728: `/.well-known/oauth-protected-resource`
   followed by the resource's path, and the same at the root) is answered here, to anyone,
   with CORS open (browser clients read it before they have a token).
2. Every other request to the endpoint needs `Authorization: Bearer <token>`. None (or
   another scheme): 401 with `WWW-Authenticate: Bearer resource_metadata="...", scope="..."`.
   A token that does not verify: 401 with `error="invalid_token"`. A malformed header, or a
   token in the query string (which the spec forbids): 400 `invalid_request`. The verifier
   unable to decide (`VerifierUnavailable`): 503 with `Retry-After`.
3. A token without `AuthSettings.required_scopes` (under `scope_hierarchy`): 403
   `insufficient_scope`. A `tools/call` of a tool declared with `scopes=` the token lacks: 403
   naming every scope the call needs, in one challenge. Each MRTR round is a new request, so a
   later round is checked like the first.
4. `Authorization: DPoP <token>` with one `DPoP` proof (RFC 9449, unless `AuthSettings.dpop`
   is None): the proof is checked (`dpop.py`), the token verified, and the token's `cnf.jkt`
   must be the proof key's thumbprint. A bad proof, or a proof seen before: 401
   `invalid_dpop_proof`; a token not bound to that key: 401 `invalid_token`; with
   `require_nonce`, a proof without a fresh server nonce: 401 `use_dpop_nonce` and a
   `DPoP-Nonce` header. A DPoP-bound token sent as `Bearer` is refused (RFC 9449 7.1).
   Every 401 and 403 then carries two challenges, `Bearer` and `DPoP algs="..."`, the scheme
   the request used first with the error.
5. An `OPTIONS` request (a CORS preflight, which carries no credentials by design) is not
   checked: the endpoint answers it as it does without `auth`.
6. A verified token goes into the ASGI scope (`principal.SCOPE_KEY`), for `ctx.auth` and the
   default `ServerOptions.principal`, which also makes a legacy session belong to the caller
   that opened it (the session layer answers another caller's `Mcp-Session-Id` 404, as an
   unknown one). Every refusal carries a JSON-RPC error whose `data` has the OAuth `error`
   and `error_description`. The token itself is never logged.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Collection, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import jsonrpc
from ...protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from ..store import is_store_refusal
from .principal import SCOPE_KEY
from .settings import WELL_KNOWN, AuthSettings, expand_scopes
from .token import AccessToken, VerifierUnavailable, bound_key

if TYPE_CHECKING:
    from ..endpoint import ServerEndpoint
    from .dpop import DPoPChecker

logger = logging.getLogger("mrtr.auth")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

_AUTHORIZATION = b"authorization"
_DPOP = b"dpop"
_EXPIRY_LEEWAY = 60.0  # seconds past `expires_at` a verifier's answer is still taken
_CORS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"GET, OPTIONS"),
    (b"access-control-allow-headers", b"mcp-protocol-version"),
]


class BearerGuard:
    """The resource-server check of one endpoint (see the module rules)."""

    def __init__(self, settings: AuthSettings, server: ServerEndpoint) -> None:
        self.settings = settings
        self.server = server
        self._metadata = orjson.dumps(settings.metadata())
        self._metadata_paths = frozenset((settings.metadata_path, WELL_KNOWN))
        self._hierarchy = settings.scope_hierarchy
        self._required = frozenset(settings.required_scopes)
        challenge_scopes = settings.required_scopes or settings.scopes_supported or ()
        self._challenge = f'Bearer resource_metadata="{settings.metadata_url}"'
        if challenge_scopes:
            self._challenge += f', scope="{" ".join(challenge_scopes)}"'
        # The DPoP challenge (RFC 9449 7.1): the same parameters, and the proof algorithms.
        self._dpop_algs = None if settings.dpop is None else " ".join(settings.dpop.algorithms)
        self._dpop_checker: DPoPChecker | None = None  # built on the first DPoP request

    # --- every HTTP request (rules 1, 2) ------------------------------------------------

    async def admit(self, scope: Scope, send: Send, route: str, endpoint: str | None) -> bool:
        """Check one HTTP request; False once it has been answered here."""
        if route in self._metadata_paths:
            await self._serve_metadata(scope, send)
            return False
        if endpoint is not None and route != endpoint:
            return True  # not the endpoint: the app's own 404
        if scope["method"] == "OPTIONS":
            # A CORS preflight never carries credentials: the endpoint answers it exactly as
            # without auth (405: it takes POST), and no token is looked at or recorded.
            return True
        if _token_in_query(scope.get("query_string", b"")):
            await self._refuse(
                send,
                400,
                "invalid_request",
                "an access token may not be sent in the URL query string; send it in the "
                "Authorization header",
            )
            return False
        found = [value for name, value in scope["headers"] if name == _AUTHORIZATION]
        if not found:
            await self._refuse(send, 401, None, "this server needs an OAuth access token")
            return False
        if len(found) > 1:
            await self._refuse(send, 400, "invalid_request", "send one Authorization header")
            return False
        scheme, _, raw = found[0].decode("latin-1").strip().partition(" ")
        scheme = scheme.lower()
        dpop = scheme == "dpop" and self._dpop_algs is not None
        if scheme != "bearer" and not dpop:
            await self._refuse(
                send, 401, None, "this server takes OAuth bearer tokens (Authorization: Bearer)"
            )
            return False
        used = "DPoP" if dpop else "Bearer"
        credential = raw.strip()
        if not credential or any(c.isspace() for c in credential):
            await self._refuse(
                send, 400, "invalid_request", f"the {used} credentials are malformed"
            )
            return False
        if dpop:
            token = await self._admit_dpop(scope, send, credential)
        else:
            dpop_settings = self.settings.dpop
            if dpop_settings is not None and dpop_settings.required:
                await self._refuse(
                    send,
                    401,
                    "invalid_token",
                    "this server takes DPoP-bound tokens only (Authorization: DPoP, with a "
                    "DPoP proof)",
                )
                return False
            token = await self._verify(send, credential)
            if token is not None and bound_key(token) is not None:
                # RFC 9449 7.1: a bound token without its proof is what a thief would send.
                await self._refuse(
                    send,
                    401,
                    "invalid_token",
                    "the access token is bound to a DPoP key: send it as Authorization: DPoP, "
                    "with a DPoP proof",
                )
                return False
        if token is None:
            return False
        if self._required and not self._required <= self._held(token):
            await self._refuse(
                send,
                403,
                "insufficient_scope",
                "the access token lacks scopes this server requires",
                self._required,
                scheme=used,
            )
            return False
        scope[SCOPE_KEY] = token
        return True

    async def _admit_dpop(self, scope: Scope, send: Send, credential: str) -> AccessToken | None:
        """The token of a `DPoP` request whose proof, binding and freshness hold; None once
        the request has been answered."""
        from .dpop import DPoPError

        checker = self._dpop()
        proofs = [value for name, value in scope["headers"] if name == _DPOP]
        if len(proofs) != 1:
            await self._refuse(
                send,
                401,
                "invalid_dpop_proof",
                "send exactly one DPoP header with the DPoP proof of this request",
                scheme="DPoP",
            )
            return None
        try:
            proof = checker.check(
                proofs[0].decode("latin-1"), scope["method"], scope["path"], credential
            )
        except DPoPError as exc:
            logger.debug("DPoP proof refused: %s", exc.description)
            await self._refuse(send, 401, exc.error, exc.description, scheme="DPoP")
            return None
        if checker.settings.require_nonce and not checker.nonce_ok(proof.nonce):
            await self._refuse(
                send,
                401,
                "use_dpop_nonce",
                "the DPoP proof must carry the nonce of the DPoP-Nonce header",
                scheme="DPoP",
                nonce=checker.nonce(),
            )
            return None
        token = await self._verify(send, credential, scheme="DPoP")
        if token is None:
            return None
        jkt = bound_key(token)
        if jkt is None or not hmac.compare_digest(jkt, proof.jkt):
            await self._refuse(
                send,
                401,
                "invalid_token",
                "the access token is not bound to the key that signed the DPoP proof",
                scheme="DPoP",
            )
            return None
        # Last, so that only a proof with a valid bound token takes a place in the store.
        try:
            first = await checker.first_use(proof)
        except Exception as exc:
            if isinstance(exc, McpError) and is_store_refusal(exc):
                # Down or full: the store logs that itself (throttled), not once per request.
                logger.debug("could not record a DPoP proof (%s); refused", exc.message)
            else:
                logger.exception("could not record a DPoP proof; the request is refused")
            await self._refuse(
                send,
                503,
                "temporarily_unavailable",
                "the server cannot check DPoP proofs right now; retry shortly",
                retry=True,
            )
            return None
        if not first:
            await self._refuse(
                send,
                401,
                "invalid_dpop_proof",
                "this DPoP proof was used before; make a fresh proof for each request",
                scheme="DPoP",
            )
            return None
        return token

    def _dpop(self) -> DPoPChecker:
        checker = self._dpop_checker
        if checker is None:
            # Imported here: a server whose clients never use DPoP never loads the JOSE library.
            from .dpop import DPoPChecker

            assert self.settings.dpop is not None
            options = self.server.options
            checker = self._dpop_checker = DPoPChecker(
                self.settings.dpop,
                self.settings.resource,
                options.store,
                _first_secret(options.request_state_key),
            )
        return checker

    async def _verify(
        self, send: Send, credential: str, scheme: str = "Bearer"
    ) -> AccessToken | None:
        try:
            token = await self.settings.verifier.verify(credential)
        except VerifierUnavailable as exc:
            logger.error("could not verify an access token: %s", exc)
            await self._refuse(
                send,
                503,
                "temporarily_unavailable",
                "the server cannot verify access tokens right now; retry shortly",
                retry=True,
            )
            return None
        except Exception:
            # A verifier's bug must not take the request down with a 500 or show its cause.
            logger.exception("the token verifier raised; the token is treated as invalid")
            token = None
        # The verifier decides, with its own clock-skew leeway; this only catches a verifier
        # that forgot to look at the expiry.
        if token is None or token.expired(leeway=_EXPIRY_LEEWAY):
            await self._refuse(
                send,
                401,
                "invalid_token",
                "the access token is invalid, expired, or not issued for this server; get a "
                "new one from the authorization server",
                scheme=scheme,
            )
            return None
        return token

    # --- every JSON-RPC request (rule 3) ---------------------------------------------------

    async def refuse_call(self, message: dict[str, Any], scope: Scope, send: Send) -> bool:
        """Whether a request was refused for the scopes of the tool it calls (then answered)."""
        if message["method"] != "tools/call":
            return False
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        needed = self.server.tool_scopes(name) if isinstance(name, str) else frozenset()
        if not needed:
            return False
        token = scope.get(SCOPE_KEY)
        if isinstance(token, AccessToken) and needed <= self._held(token):
            return False
        await self._refuse(
            send,
            403,
            "insufficient_scope",
            f"tool {name!r} needs the scopes {' '.join(sorted(needed))}",
            self._required | needed,
            message.get("id"),
            scheme="DPoP" if isinstance(token, AccessToken) and bound_key(token) else "Bearer",
        )
        return True

    def _held(self, token: AccessToken) -> frozenset[str]:
        return expand_scopes(token.scopes, self._hierarchy)

    # --- answers -----------------------------------------------------------------------------

    async def _serve_metadata(self, scope: Scope, send: Send) -> None:
        method = scope["method"]
        if method == "OPTIONS":
            await _send(send, 204, b"", _CORS)
        elif method in ("GET", "HEAD"):
            headers = [(b"content-type", b"application/json"), *_CORS]
            body = self._metadata if method == "GET" else b""
            await _send(send, 200, body, headers, len(self._metadata))
        else:
            await _send(send, 405, b"", [(b"allow", b"GET, OPTIONS")])

    async def _refuse(
        self,
        send: Send,
        status: int,
        error: str | None,
        description: str,
        scopes: Collection[str] | None = None,
        request_id: Any = None,
        retry: bool = False,
        scheme: str = "Bearer",
        nonce: str | None = None,
    ) -> None:
        if scopes is None:
            challenge = self._challenge
        else:
            challenge = (
                f'Bearer resource_metadata="{self.settings.metadata_url}", '
                f'scope="{" ".join(sorted(scopes))}"'
            )
        headers = [(b"content-type", b"application/json")]
        if status in (401, 403):
            # The scheme the request used comes first, with the error: a client acts on the
            # first challenge it knows.
            bearer, dpop = challenge, None
            if self._dpop_algs is not None:
                dpop = f'DPoP algs="{self._dpop_algs}", {challenge[len("Bearer ") :]}'
            if error is not None:
                error_params = f', error="{error}", error_description="{description}"'
                if scheme == "DPoP" and dpop is not None:
                    dpop += error_params
                else:
                    bearer += error_params
            ordered = [dpop, bearer] if scheme == "DPoP" else [bearer, dpop]
            for value in ordered:
                if value is not None:
                    headers.append((b"www-authenticate", value.encode("latin-1")))
        if nonce is not None:
            headers.append((b"dpop-nonce", nonce.encode("ascii")))
        if retry:
            headers.append((b"retry-after", b"5"))
        titles = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}
        title = titles.get(status, "Service Unavailable")
        # No `error` when no token was sent (RFC 6750 3.1): there is nothing to call invalid.
        data = {"error_description": description}
        if error is not None:
            data["error"] = error
        if status in (401, 403):
            data["resource_metadata"] = self.settings.metadata_url
        code = INTERNAL_ERROR if status == 503 else INVALID_REQUEST
        body = orjson.dumps(
            jsonrpc.error_response(
                request_id if jsonrpc.is_valid_id(request_id) else None,
                McpError(code, f"{title}: {description}", data),
            )
        )
        await _send(send, status, body, headers)


def _first_secret(key: str | bytes | Sequence[str | bytes] | None) -> bytes | None:
    # The sealing secret (the first of a rotation list), which DPoP nonces are derived from.
    if key is None:
        return None
    if not isinstance(key, str | bytes):
        key = key[0] if key else None
        if key is None:
            return None
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _token_in_query(query: bytes) -> bool:
    # RFC 6750 2.3's `access_token` parameter, which MCP forbids.
    pairs = query.split(b"&") if query else ()
    return any(pair.partition(b"=")[0].lower() == b"access_token" for pair in pairs)


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], length: int = -1
) -> None:
    size = len(body) if length < 0 else length
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", b"%d" % size)],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = ["BearerGuard"]
