"""`mrtr proxy`: the options of a proxy and the `Server` they describe (`mrtr.proxy`).

The serving options are `mrtr serve`'s (transport, address, limits, and the `MRTR_*`
settings, auth included); these add the backend's: its headers and sign-in (a URL), how many
backend sessions, and the bounds of the calls held between rounds.

Rules:

1. Whoever calls the proxy uses its backend with the proxy's credentials: its `--header`s,
   credentials in its URL, its OAuth sign-in (saved tokens, or a sign-in when it answers
   401), secret-looking arguments of its command and variables of the environment it
   inherits (`exposures`). Over HTTP on an address beyond loopback (`is_loopback`: any of
   127.0.0.0/8, ::1 and localhost are loopback), with such credentials and no front-side
   auth (`--auth-issuer`), the proxy refuses to start, before it binds, saying what it would
   expose and the ways out; `--allow-unauthenticated` starts it anyway, with a warning on
   stderr saying the same.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from .sign_in import DEFAULT_TOKEN_FILE, add_sign_in_options, oauth_from_args
from .sign_in import OPTIONS as SIGN_IN_OPTIONS

if TYPE_CHECKING:
    from ..server.server import Server

PROXY_EPILOG = """\
The backend is a Streamable HTTP (or HTTP+SSE) endpoint of either protocol era, or a command
that speaks MCP over stdio, given after "--"; the proxy starts it, and starts it again (with
a growing backoff) when it exits. Its tools, prompts, resources and templates are served as
the proxy's own; a question it asks during a tools/call (elicitation, sampling, roots) goes
to the client: as inputRequests to a 2026-07-28 client, whose retry answers it (the backend
call is held in this process meanwhile, never run twice), and as a request to a legacy one.

Each tools/call has a backend session to itself while it runs, so the backend's questions
are routed to it: --sessions 1 (the default) keeps a stateful stdio server to one process,
its calls one at a time; more run that many calls at once. A call that finds every session
taken (by calls waiting for their clients' answers, say) for --session-wait seconds is
refused, saying the backend is busy, and may be sent again.

A URL backend answering 401 is signed in to with OAuth, as by `mrtr call`: the authorization
URL is printed to stderr and opened in a browser, and the tokens are kept in
~/.mrtr/tokens.json (shared with `mrtr call`), so a person signs in once per server. A
proxy started by a host signs in when it starts: sign in from a terminal first (`mrtr call`,
or this command) where the host cannot show the browser. An Authorization --header turns
sign-in off.

Whoever reaches the proxy uses the backend as you (your --header, your OAuth tokens, the
credentials of its command). Over HTTP beyond loopback (--host other than 127.x.x.x, ::1 or
localhost), with such credentials, the proxy refuses to start unless callers must bring
tokens (--auth-issuer URL --auth-resource URL) or --allow-unauthenticated is given.

examples:
  mrtr proxy -- npx -y @modelcontextprotocol/server-everything
  mrtr proxy --transport http --port 8000 -- uvx mcp-server-fetch
  mrtr proxy --transport http https://example.com/mcp --header "Authorization=Bearer $TOKEN\""""


class ProxyUsageError(Exception):
    """Options that do not make a proxy (a usage error)."""


def add_proxy_options(parser: argparse.ArgumentParser) -> None:
    """The backend's options, beside the serving ones."""
    group = parser.add_argument_group("the backend")
    group.add_argument("--name", help="the name clients are told (default: the backend's)")
    group.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an HTTP header sent to a URL backend with every request; repeatable",
    )
    group.add_argument(
        "--sessions",
        type=int,
        default=1,
        metavar="N",
        help="backend sessions, one per tools/call running at once (default 1)",
    )
    group.add_argument(
        "--session-wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a tools/call waits for a free backend session before it is refused "
        "(default 30)",
    )
    group.add_argument(
        "--hold-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a call waits for its client's answers before it is cancelled (default 600)",
    )
    group.add_argument(
        "--max-held",
        type=int,
        default=100,
        metavar="N",
        help="calls in flight at once, in all (default 100)",
    )
    group.add_argument(
        "--max-held-per-principal",
        type=int,
        default=10,
        metavar="N",
        help="calls in flight at once per caller (its principal, else its address; default 10)",
    )
    group.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="with http beyond loopback, start without front-side auth although every caller "
        "then uses the backend's credentials (warned about on stderr)",
    )
    add_sign_in_options(
        parser,
        "the backend's authorization (a URL backend answering 401: sign in through the "
        "browser, once)",
    )


def proxy_from_args(args: argparse.Namespace, command: list[str]) -> Server:
    """The proxy `Server` the options describe; `ProxyUsageError` naming a bad option."""
    # Not on every command's path.
    from ..client.options import ClientOptions
    from ..proxy import BackendTarget, ProxyBackend, proxy_server

    headers: dict[str, str] = {}
    for pair in args.header:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ProxyUsageError(f"--header {pair!r}: give NAME=VALUE")
        headers[name.strip()] = value
    if headers and args.url is None:
        raise ProxyUsageError("--header applies to a URL backend only")
    signs_in = [name for name in SIGN_IN_OPTIONS if getattr(args, name) is not None]
    if signs_in and args.url is None:
        given = ", ".join("--" + name.replace("_", "-") for name in signs_in)
        raise ProxyUsageError(f"{given}: a URL backend's sign-in, not a command's")
    if args.sessions < 1:
        raise ProxyUsageError(f"--sessions {args.sessions}: give at least 1")
    if not args.session_wait > 0:
        raise ProxyUsageError(f"--session-wait {args.session_wait}: give seconds above 0")
    if not args.hold_timeout > 0:
        raise ProxyUsageError(f"--hold-timeout {args.hold_timeout}: give seconds above 0")
    if args.max_held < 1 or args.max_held_per_principal < 1:
        raise ProxyUsageError("--max-held and --max-held-per-principal: give at least 1")
    if args.url is not None:
        # OAuth only steps in on a 401, and not at all for a backend given its own token.
        options = None
        if "authorization" not in {name.lower() for name in headers}:
            options = ClientOptions(auth=oauth_from_args(args, "mrtr proxy"))
        target = BackendTarget(url=args.url, headers=headers or None, options=options)
    else:
        target = BackendTarget(command=command[0], args=tuple(command[1:]))
    args.exposes = exposures(args, headers, command)
    backend = ProxyBackend(
        target,
        sessions=args.sessions,
        max_held=args.max_held,
        max_held_per_principal=args.max_held_per_principal,
        hold_timeout=args.hold_timeout,
        session_wait=args.session_wait,
    )
    return proxy_server(backend, name=args.name)


def is_loopback(host: str) -> bool:
    """Whether listening on `host` reaches this machine only (rule 1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name may resolve to anything


def exposures(args: argparse.Namespace, headers: dict[str, str], command: list[str]) -> list[str]:
    """The credentials a caller of the proxy would use the backend with (rule 1), named
    without their values."""
    from ..proxy.incident import looks_secret

    found: list[str] = []
    words = [args.url] if args.url is not None else command
    for word in words:
        parts = urlsplit(word) if "://" in word else None
        if parts is not None and parts.username is not None:
            found.append("the user and password in the backend's URL")
        if parts is not None:
            secret = [
                k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if looks_secret(k)
            ]
            if secret:
                found.append(f"the URL's query parameters {', '.join(secret)}")
    if args.url is not None:
        found.extend(f"the --header {name}" for name in headers)
        if "authorization" not in {name.lower() for name in headers}:
            path = args.token_file or str(DEFAULT_TOKEN_FILE)
            found.append(
                f"your OAuth sign-in to the backend (the tokens kept in {path}, or a sign-in "
                "when it answers 401)"
            )
        return found
    flags = [
        w.partition("=")[0]
        for w in command[1:]
        if w.startswith("-") and looks_secret(w.partition("=")[0])
    ]
    if flags:
        found.append(f"the command's arguments {', '.join(dict.fromkeys(flags))}")
    inherited = sorted(
        name for name in os.environ if looks_secret(name) and not name.startswith("MRTR_")
    )
    if inherited:
        found.append(f"the environment variables it inherits {', '.join(inherited)}")
    return found


def forward_backend_stderr() -> None:
    """Show a stdio backend's stderr lines (logged by the transport) prefixed `backend: `."""
    log = logging.getLogger("mrtr.stdio.server")
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("backend: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
