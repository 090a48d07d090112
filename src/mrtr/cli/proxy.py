"""`mrtr proxy`: the options of a proxy and the `Server` they describe (`mrtr.proxy`).

The serving options are `mrtr serve`'s (transport, address, limits, and the `MRTR_*`
settings, auth included); these add the backend's: its headers and sign-in (a URL), how many
backend sessions, and the bounds of the calls held between rounds.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from .sign_in import OPTIONS as SIGN_IN_OPTIONS
from .sign_in import add_sign_in_options, oauth_from_args

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
    backend = ProxyBackend(
        target,
        sessions=args.sessions,
        max_held=args.max_held,
        max_held_per_principal=args.max_held_per_principal,
        hold_timeout=args.hold_timeout,
        session_wait=args.session_wait,
    )
    return proxy_server(backend, name=args.name)


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
