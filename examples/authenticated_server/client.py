"""A client of the notes server that gets its own token: the client-credentials grant.

    python3 examples/authenticated_server/client.py http://127.0.0.1:8000/mcp \
        --issuer http://127.0.0.1:9000 --client-id demo-client --client-secret demo-secret

`mrtr.client.auth.OAuth` does the rest: the first request is answered 401, the client reads
the server's Protected Resource Metadata, finds the authorization server, gets a token for
this server (`resource`) and sends the request again; `add_note` needs a wider scope, so its
403 makes the client get a token with it. The secret goes to the authorization server given
as `--issuer` only: a server naming another gets an error, not the secret.
"""

from __future__ import annotations

import argparse
import asyncio

from mrtr import Client, ElicitResult
from mrtr.client.auth import ClientCredentials, ClientCredentialsGrant, OAuth


def confirm(params: object) -> ElicitResult:
    # A real client shows the question to the user; this one says yes.
    return ElicitResult(action="accept", content={})


async def run(url: str, issuer: str, client_id: str, client_secret: str) -> None:
    auth = OAuth(
        grant=ClientCredentialsGrant(),
        client=ClientCredentials(client_id, client_secret, issuer=issuer),
    )
    async with Client.http(url, auth=auth, elicitation_handler=confirm) as client:
        for name, arguments in [("whoami", {}), ("add_note", {"text": "buy tea"}), ("notes", {})]:
            result = await client.call_tool(name, arguments)
            text = " ".join(getattr(block, "text", "") for block in result.content)
            print(f"{name}: {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Call the notes server with a token.")
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8000/mcp")
    parser.add_argument(
        "--issuer",
        default="http://127.0.0.1:9000",
        help="the authorization server the client is registered at (its metadata's issuer)",
    )
    parser.add_argument("--client-id", default="demo-client")
    parser.add_argument("--client-secret", default="demo-secret")
    args = parser.parse_args()
    asyncio.run(run(args.url, args.issuer, args.client_id, args.client_secret))


if __name__ == "__main__":
    main()
