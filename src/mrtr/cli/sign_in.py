"""How a command of the command line signs in to a protected HTTP server: its options and the
OAuth they describe.

A server answering 401 is authorized with OAuth: the authorization URL is printed (to stderr)
and opened in a browser, the redirect comes back to a listener on 127.0.0.1, and the tokens
are kept (mode 0600) in `~/.mrtr/tokens.json`, shared by every command, so a person signs in
once per server. `mrtr call` signs in to the server it calls, `mrtr proxy` to its URL backend.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..client.auth import OAuth

#: Where tokens and client registrations are kept (override: --token-file).
DEFAULT_TOKEN_FILE = Path("~/.mrtr/tokens.json")
#: The options' names as `argparse` stores them, to tell whether any was given.
OPTIONS = ("client_id", "client_secret", "issuer", "scope", "token_file")


def add_sign_in_options(parser: argparse.ArgumentParser, title: str) -> None:
    """The sign-in options, as a group named `title`."""
    group = parser.add_argument_group(title)
    group.add_argument("--client-id", help="a client id registered with the server's OAuth")
    group.add_argument("--client-secret", help="the secret of --client-id, if it has one")
    group.add_argument(
        "--issuer",
        metavar="URL",
        help="the authorization server --client-id is registered at, as its metadata names "
        "itself (needed with --client-secret: the secret is sent to that server only)",
    )
    group.add_argument("--scope", help="the scopes to ask for (default: what the server names)")
    group.add_argument(
        "--token-file",
        metavar="PATH",
        help="where tokens are kept (default ~/.mrtr/tokens.json, readable by you only)",
    )


def command_line_oauth(
    *,
    client_id: str | None = None,
    client_secret: str | None = None,
    issuer: str | None = None,
    scope: str | None = None,
    token_file: str | None = None,
    client_name: str = "mrtr call",
) -> OAuth:
    """A person signs in through the browser (the redirect comes back to 127.0.0.1), as a
    pre-registered client when given one (used at `issuer` only), else one registered
    dynamically as `client_name`; tokens live in `token_file` (default `~/.mrtr/tokens.json`,
    mode 0600)."""
    from ..client.auth import ClientCredentials, FileTokenStore, LoopbackRedirectHandler, OAuth

    path = Path(token_file) if token_file else DEFAULT_TOKEN_FILE
    client = ClientCredentials(client_id, client_secret, issuer=issuer) if client_id else None
    return OAuth(
        LoopbackRedirectHandler(),
        client=client,
        client_name=client_name,
        scope=scope,
        store=FileTokenStore(path.expanduser()),
    )


def oauth_from_args(args: argparse.Namespace, client_name: str) -> OAuth:
    """`command_line_oauth` of the sign-in options in `args`."""
    return command_line_oauth(
        client_id=args.client_id,
        client_secret=args.client_secret,
        issuer=args.issuer,
        scope=args.scope,
        token_file=args.token_file,
        client_name=client_name,
    )


__all__ = [
    "DEFAULT_TOKEN_FILE",
    "OPTIONS",
    "add_sign_in_options",
    "command_line_oauth",
    "oauth_from_args",
]
