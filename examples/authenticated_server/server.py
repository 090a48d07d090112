"""A notes server protected by OAuth 2.1: every request needs a bearer token from the
authorization server, and writing a note needs the `notes:write` scope.

    python3 tests/helpers/oauth_as.py --port 9000               # a test authorization server
    python3 examples/authenticated_server/server.py --port 8000 --issuer http://127.0.0.1:9000
    python3 examples/authenticated_server/client.py http://127.0.0.1:8000/mcp

Tokens are JWTs verified against the issuer's published keys (`JWTVerifier`); each caller sees
only their own notes (`ctx.auth.subject`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict

from mrtr import AuthSettings, RequestContext, Server, ServerOptions
from mrtr.server.auth import JWTVerifier
from mrtr.transport.http_serve import serve_http

NOTES: defaultdict[str, list[str]] = defaultdict(list)


def build(resource: str, issuer: str) -> Server:
    """The server, protected for `resource` (its own URL) by tokens of `issuer`."""
    auth = AuthSettings(
        resource=resource,
        authorization_servers=[issuer],
        verifier=JWTVerifier(issuer, audience=resource),
        scopes_supported=["notes:read"],
        required_scopes=["notes:read"],
        resource_name="Notes",
    )
    server = Server("notes", version="1.0.0", options=ServerOptions(auth=auth))

    @server.tool()
    async def whoami(ctx: RequestContext) -> str:
        """Who the access token says you are."""
        token = ctx.auth
        assert token is not None  # every request over HTTP carries a verified token
        return (
            f"{token.subject} (client {token.client_id}; scopes {' '.join(sorted(token.scopes))})"
        )

    @server.tool()
    async def notes(ctx: RequestContext) -> list[str]:
        """Your notes."""
        assert ctx.auth is not None
        return NOTES[ctx.auth.principal]

    @server.tool(scopes=["notes:write"])
    async def add_note(ctx: RequestContext, text: str) -> str:
        """Add a note, once you confirm it."""
        assert ctx.auth is not None
        answer = await ctx.elicit(f"Save the note {text!r}?", {"type": "object", "properties": {}})
        if answer.action != "accept":
            return "Not saved"
        mine = NOTES[ctx.auth.principal]
        mine.append(text)
        return f"Saved; you have {len(mine)} note(s)"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--issuer", default="http://127.0.0.1:9000")
    args = parser.parse_args()
    resource = f"http://127.0.0.1:{args.port}/mcp"
    print(f"serving {resource}, tokens from {args.issuer}", flush=True)
    asyncio.run(serve_http(build(resource, args.issuer), "127.0.0.1", args.port))


if __name__ == "__main__":
    main()
