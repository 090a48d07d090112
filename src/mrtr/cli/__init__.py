"""The `mrtr` command line: `serve`, `proxy`, `call`, `list`, `inspect`, `install` and `demo`.

Exit status: 0 on success, 1 when the call or the server failed (a tool result flagged
`isError`, an MCP error, an unreachable server), 2 for a usage error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..server.endpoint import LifespanError
from ..settings import LOG_LEVELS
from ..transport.http_limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_GRACE,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_INFLIGHT_BODY_BYTES,
    check_body_sizes,
)
from .install import HOSTS
from .proxy import PROXY_EPILOG as _PROXY_EPILOG
from .proxy import add_proxy_options
from .sign_in import add_sign_in_options, oauth_from_args

_CALL_USAGE = """\
mrtr call [options] URL TOOL [key=value ...]
       mrtr call [options] TOOL [key=value ...] -- COMMAND [ARG ...]"""

_CALL_EPILOG = """\
The server is either a Streamable HTTP endpoint (an http:// or https:// URL before the tool
name) or a command that speaks MCP over stdio, given after "--".

Arguments are key=value words. A value is read as JSON when it parses as JSON, and as a string
otherwise: n=3 gives 3, ok=true gives true, tags='["a","b"]' gives a list, name=bob gives
"bob" (quote it, name='"3"', to send the string "3").

When the server asks for something, you answer at the terminal (or through piped stdin):
  elicitation (form)  a form built from the requested schema; defaults in [brackets],
                      required fields marked *, bad answers explained and asked again
  elicitation (URL)   the URL and its host are shown; this command never opens it
  sampling            the conversation is shown and you type the model's reply
  roots               answered from --root, without asking (no --root: roots not offered)
Questions go to stderr and the result to stdout. End of input answers "cancel".

--timeout SECONDS bounds the whole call (connecting, every question, a task the server runs
it as); past it the call stops with one line on stderr and exit status 1. Without it a task
is waited for an hour at most (the client's TaskOptions.max_wait).

What the server sends is shown with its control characters and bidi marks escaped (\x1b,
\u202e): it cannot rewrite the screen. A URL with a character outside printable ASCII is
declined; a form field that looks like a password or token is typed without echo, masked,
and sent only after "Send it? [y/N]" (servers must not ask for secrets in a form).

examples:
  mrtr call http://127.0.0.1:8000/mcp place_order item=tea quantity=2
  mrtr call --root . summarize path=README.md -- python my_server.py
  mrtr call --json add a=1 b=2 -- mrtr serve shop.py:server"""

_SERVE_EPILOG = """\
TARGET names a Server object: MODULE:ATTR (shop.app:server) or FILE.py:ATTR
(examples/shop.py:server). Without :ATTR the module's `server` is used, or its only Server.

With --transport http, every connection is bounded: the limits above (0 turns one off, but
for --keep-alive and --max-body-size) keep slow, idle or too many clients from holding the
server. In production, put a reverse proxy or load balancer in front (TLS, its own timeouts
and limits): see docs/guides/production.md.

examples:
  mrtr serve shop.py:server                       # stdio, for an MCP host to spawn
  mrtr serve shop.app:server --transport http --port 8000
  mrtr serve shop.app:server --transport http --max-connections 200 --body-timeout 10
  MRTR_REQUEST_STATE_KEY_FILE=key.txt mrtr serve shop.py:server --transport http --workers 4"""


def build_parser() -> argparse.ArgumentParser:
    """The parser for every command (its `--help` is the reference)."""
    return _build()[0]


_DESCRIBE = (
    ("list", "list a server's tools, prompts and resources",
     "Connect to a server of either protocol era and list what it offers."),
    ("inspect", "print a server's full description as JSON",
     "Connect to a server of either protocol era and print, as one JSON object, its identity, "
     "era, protocol version, capabilities, instructions, and every tool, prompt, resource and "
     "resource template as it lists them."),
)  # fmt: skip

_DESCRIBE_EPILOG = """\
The server is a Streamable HTTP endpoint (URL) or a command that speaks MCP over stdio,
given after "--".

examples:
  mrtr {name} http://127.0.0.1:8000/mcp
  mrtr {name} -- mrtr serve examples/shop.py:server
  mrtr {name} --protocol legacy -- python server.py"""

_INSTALL_EPILOG = """\
Where each host keeps its servers (--config PATH writes another file):
  claude-desktop  claude_desktop_config.json in ~/Library/Application Support/Claude
                  (macOS), %APPDATA%\\Claude (Windows) or ~/.config/Claude (Linux)
  claude-code     `claude mcp add-json` when claude is on PATH, else ./.mcp.json
  cursor          ~/.cursor/mcp.json, or ./.cursor/mcp.json with --project
  vscode          ./.vscode/mcp.json
  json            printed to stdout, for any other host

The entry runs this Python, which has mrtr, with `-m mrtr serve /abs/FILE.py:ATTR`; --with
and --with-editable packages are layered over it with `uv run --python THIS`. Other
entries are kept, the previous file is kept as FILE.bak, a symlinked file is written
through to its target, and an entry of the same name is replaced only with --force (which
through `claude mcp` keeps the old entry until the new one is added). With --proxy URL
the entry runs `-m mrtr proxy URL` instead, for a host that starts only stdio servers to
reach a remote one.

examples:
  mrtr install claude-desktop examples/shop.py:server
  mrtr install claude-desktop --proxy https://example.com/mcp --name remote-shop
  mrtr install vscode shop.py --with httpx --env API_KEY=... --name my-shop
  mrtr install json shop.py:server --env-file .env"""


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="mrtr",
        description="MCP (2026-07-28) with Multi Round-Trip Requests: serve a server, call a "
        "tool and answer its questions at the terminal, or watch the live demo.",
    )
    parser.add_argument("--version", action="version", version=f"mrtr {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers: dict[str, argparse.ArgumentParser] = {}

    serve = commands.add_parser(
        "serve",
        help="serve a Server over stdio or Streamable HTTP",
        description="Load a Server object and serve it until stopped.",
        epilog=_SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("target", metavar="TARGET", help="MODULE:ATTR or FILE.py:ATTR")
    _serving_options(serve)
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with http, N processes sharing the port (default 1); more than 1 needs a "
        "request-state key shared by all (MRTR_REQUEST_STATE_KEY or _FILE)",
    )

    proxy = commands.add_parser(
        "proxy",
        help="serve another MCP server (a URL or a stdio command) to clients of both eras",
        usage="mrtr proxy [options] URL\n       mrtr proxy [options] -- COMMAND [ARG ...]",
        description="Start (or connect to) a backend MCP server and serve it over stdio or "
        "Streamable HTTP, to 2026-07-28 and legacy clients alike; the backend's questions "
        "mid-call are relayed to the client.",
        epilog=_PROXY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument("url", nargs="?", metavar="URL", help="a backend's MCP endpoint")
    _serving_options(proxy)
    add_proxy_options(proxy)

    call = commands.add_parser(
        "call",
        help="call a tool, answering the server's questions at the terminal",
        usage=_CALL_USAGE,
        description="Call one tool and print its result.",
        epilog=_CALL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    call.add_argument(
        "words",
        nargs="+",
        metavar="[URL] TOOL [key=value ...]",
        help="the server's URL (for HTTP), the tool's name, and its arguments",
    )
    call.add_argument(
        "--json", action="store_true", help="print the raw result as JSON instead of text"
    )
    call.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop the whole call after SECONDS, tasks included (default: no bound of its own)",
    )
    call.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="PATH",
        help="offer PATH to the server as a root (file:// URI); repeatable",
    )
    call.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an HTTP header to send with every request (HTTP only); repeatable",
    )
    add_sign_in_options(
        call, "authorization (HTTP servers answering 401: sign in through the browser)"
    )

    for name, text, description in _DESCRIBE:
        describe = commands.add_parser(
            name,
            help=text,
            usage=f"mrtr {name} [options] URL\n       mrtr {name} [options] -- COMMAND [ARG ...]",
            description=description,
            epilog=_DESCRIBE_EPILOG.format(name=name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        describe.add_argument("url", nargs="?", metavar="URL", help="a Streamable HTTP endpoint")
        describe.add_argument(
            "--protocol",
            choices=("auto", "modern", "legacy"),
            default="auto",
            help="the protocol era to speak (default auto: find out)",
        )
        subparsers[name] = describe

    install = commands.add_parser(
        "install",
        help="add a server to an MCP host's configuration",
        description="Add a server to the configuration of an MCP host, keeping its other "
        "entries, so that the host starts it over stdio.",
        epilog=_INSTALL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    install.add_argument("host", choices=HOSTS, metavar="HOST", help=", ".join(HOSTS))
    install.add_argument("target", nargs="?", metavar="FILE.py[:ATTR]", help="the server to run")
    install.add_argument(
        "--proxy",
        metavar="URL",
        help="instead of a file, a remote server's URL, which the host reaches through "
        "`mrtr proxy URL` over stdio",
    )
    install.add_argument("--name", help="the entry's name (default: the Server's name)")
    install.add_argument(
        "--with",
        dest="with_packages",
        action="append",
        default=[],
        metavar="PKG",
        help="a package the server needs (through uv); repeatable",
    )
    install.add_argument(
        "--with-editable",
        action="append",
        default=[],
        metavar="DIR",
        help="a local project the server needs, installed editable (through uv); repeatable",
    )
    install.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server; repeatable",
    )
    install.add_argument(
        "--env-file", metavar="FILE", help="environment variables from a dotenv file"
    )
    install.add_argument(
        "--config", type=Path, metavar="PATH", help="the configuration file to write"
    )
    install.add_argument(
        "--project",
        action="store_true",
        help="cursor: the project's .cursor/mcp.json instead of ~/.cursor/mcp.json",
    )
    install.add_argument("--force", action="store_true", help="replace an entry of the same name")

    demo = commands.add_parser(
        "demo",
        help="run a live MRTR demo over loopback HTTP",
        description="Start the demo shop server on loopback HTTP and run a scripted client "
        "against it, printing every round: what was asked, what was answered, and the size "
        "of the sealed requestState; then call the same tool from a legacy (2025-11-25) "
        "client, whose questions the server asks live on its session.",
    )
    demo.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free port)"
    )
    subparsers.update(
        {"serve": serve, "proxy": proxy, "call": call, "install": install, "demo": demo}
    )
    return parser, subparsers


def _serving_options(parser: argparse.ArgumentParser) -> None:
    """The options of how a server is served (`serve` and `proxy`): transport, log level,
    address, HTTP+SSE, stdio's end-of-input grace and the HTTP limits."""
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        help="stdio (default) or http (Streamable HTTP at /mcp)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="log records at this level and above go to stderr (default warning)",
    )
    parser.add_argument("--host", help="address to listen on with http (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on with http (default 8000)")
    sse = parser.add_mutually_exclusive_group()
    sse.add_argument(
        "--sse-path",
        metavar="PATH",
        help="with http, where the 2024-11-05 HTTP+SSE transport is served beside Streamable "
        "HTTP, for older clients (default /sse; off with --workers above 1)",
    )
    sse.add_argument("--no-sse", action="store_true", help="with http, serve no HTTP+SSE transport")
    parser.add_argument(
        "--eof-grace",
        type=float,
        metavar="SECONDS",
        help="with stdio, how long requests in flight at end of input get to finish and be "
        "answered before they are cancelled (default 10; 0 cancels them at once)",
    )
    auth = parser.add_argument_group(
        "callers' authorization (with --transport http; also MRTR_AUTH_* variables)",
        "With --auth-issuer, every request needs a bearer token: a JWT access token of that "
        "issuer naming --auth-resource as its audience; without one a caller gets 401 "
        "pointing at this server's protected resource metadata.",
    )
    auth.add_argument(
        "--auth-issuer",
        metavar="URL",
        help="the authorization server whose access tokens callers must bring",
    )
    auth.add_argument(
        "--auth-resource",
        metavar="URL",
        help="this server's URL as clients reach it (https://mcp.example.com/mcp), which "
        "tokens must name as their audience; needed with --auth-issuer",
    )
    auth.add_argument(
        "--auth-jwks",
        metavar="URL",
        help="the issuer's signing keys (default: the jwks_uri of its metadata)",
    )
    auth.add_argument(
        "--auth-scope",
        action="append",
        metavar="SCOPE",
        help="a scope every request's token must hold; repeatable",
    )
    limits = parser.add_argument_group("HTTP limits (with --transport http)")
    for flag, seconds, default, text in _HTTP_LIMITS:
        limits.add_argument(
            flag,
            type=float if seconds else int,
            metavar="SECONDS" if seconds else "N",
            help=f"{text} (default {default:g})" if seconds else f"{text} (default {default})",
        )


# flag, whether it is in seconds (else a count), default, help
_HTTP_LIMITS: list[tuple[str, bool, float | int, str]] = [
    ("--header-timeout", True, DEFAULT_HEADER_TIMEOUT,
     "seconds a client has to send a request's headers"),
    ("--body-timeout", True, DEFAULT_BODY_TIMEOUT,
     "seconds a client has to send a request's body, once its headers are in"),
    ("--keep-alive", True, DEFAULT_KEEP_ALIVE,
     "seconds an idle connection stays open between requests; more than 0"),
    ("--drain-grace", True, DEFAULT_DRAIN_GRACE,
     "on SIGTERM, seconds the health check fails while requests are still served, so a "
     "load balancer stops sending here first; 0 = none"),
    ("--drain-timeout", True, DEFAULT_DRAIN_TIMEOUT,
     "at shutdown, seconds requests in flight get to finish; 0 = no limit"),
    ("--max-connections", False, DEFAULT_MAX_CONNECTIONS,
     "connections open at once; more get 503 (kept below the open-files limit)"),
    ("--max-body-size", False, DEFAULT_MAX_BODY_SIZE,
     "bytes of one request body; larger ones get 413; more than 0"),
    ("--max-inflight-body-bytes", False, DEFAULT_MAX_INFLIGHT_BODY_BYTES,
     "bytes of request bodies in progress at once; past it, 503 with Retry-After"),
]  # fmt: skip


def _check_port(parser: argparse.ArgumentParser, port: int | None) -> None:
    if port is not None and not 0 <= port <= 65535:
        parser.error(f"--port {port}: a port is a number from 0 to 65535")


def _serve(
    parser: argparse.ArgumentParser, args: argparse.Namespace, command: str = "serve"
) -> int:
    from ..settings import (
        SettingsError,
        auth_settings,
        http_options,
        log_level,
        request_state_key,
        serve_transport,
        serve_workers,
    )
    from .serve import AuthConflict, TargetError, TargetImportError, WorkersError, serve

    _check_port(parser, args.port)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: give a number of processes of at least 1")
    try:
        args.transport = args.transport or serve_transport() or "stdio"
        level = args.log_level or log_level() or "warning"
        from_env = http_options() if args.transport == "http" else {}
        request_state_key()  # a bad key or key file stops the command here, named
        workers = args.workers if args.workers is not None else serve_workers()
        given = {  # `auth_settings`'s fields
            "issuer": args.auth_issuer,
            "resource": args.auth_resource,
            "jwks": args.auth_jwks,
            "scopes": args.auth_scope,
        }
        if args.transport != "http" and any(value is not None for value in given.values()):
            parser.error("--auth-issuer, --auth-resource, --auth-jwks and --auth-scope apply "
                         "to --transport http only")  # fmt: skip
        auth = auth_settings(**given) if args.transport == "http" else None
    except SettingsError as exc:
        return _settings_error(command, exc)
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        parser.error("--host and --port apply to --transport http only")
    if args.transport == "stdio" and args.workers is not None and args.workers > 1:
        parser.error("--workers applies to --transport http only")
    stdio_options: dict[str, float] = {}
    if args.eof_grace is not None:
        if args.transport != "stdio":
            parser.error("--eof-grace applies to --transport stdio only")
        if not 0 <= args.eof_grace < math.inf:
            parser.error(f"--eof-grace {args.eof_grace}: give a number of seconds >= 0")
        stdio_options["eof_grace"] = args.eof_grace
    host = args.host if args.host is not None else from_env.pop("host", None)
    port = args.port if args.port is not None else from_env.pop("port", None)
    if args.transport == "http":
        refused = _unprotected(command, args, host, auth is not None)
        if refused is not None:
            print(refused, file=sys.stderr)
            return 2
    from_env.pop("host", None)
    from_env.pop("port", None)
    limits = from_env  # flags win over MRTR_* variables
    if args.sse_path is not None or args.no_sse:
        if args.transport != "http":
            parser.error("--sse-path and --no-sse apply to --transport http only")
        if args.sse_path is not None and not args.sse_path.startswith("/"):
            parser.error(f"--sse-path {args.sse_path}: give a path starting with /")
        if args.sse_path is not None and (workers or 1) > 1:
            parser.error(
                "--sse-path needs one process: with --workers the POSTs of an HTTP+SSE "
                "session could reach a worker other than the one holding its stream"
            )
        limits["sse_path"] = None if args.no_sse else args.sse_path
    for flag, *_ in _HTTP_LIMITS:
        name = flag[2:].replace("-", "_")
        value = getattr(args, name)
        if value is None:
            continue
        if args.transport != "http":
            parser.error(f"{flag} applies to --transport http only")
        positive = name in ("keep_alive", "max_body_size")  # these cannot be turned off
        if not 0 <= value < math.inf or (positive and not value > 0):
            least = "more than 0" if positive else ">= 0 (0 turns the limit off)"
            parser.error(f"{flag} {value}: give a number {least}")
        limits[name] = value
    try:
        check_body_sizes(
            limits.get("max_body_size", DEFAULT_MAX_BODY_SIZE),
            limits.get("max_inflight_body_bytes", DEFAULT_MAX_INFLIGHT_BODY_BYTES),
        )
    except ValueError as exc:
        parser.error(f"--max-body-size, --max-inflight-body-bytes: {exc}")
    try:
        # MRTR_WORKERS is for HTTP: on stdio (an MCP host spawning the server) it is moot.
        count = (workers or 1) if args.transport == "http" else 1
        serve(
            args.target,
            args.transport,
            host,
            port,
            level,
            count,
            auth=auth,
            auth_flags={field: value for field, value in given.items() if value is not None},
            **limits,
            **stdio_options,
        )
    except TargetError as exc:
        parser.error(str(exc))
    except (WorkersError, AuthConflict) as exc:
        print(f"mrtr {command}: {exc}", file=sys.stderr)
        return 2
    except TargetImportError as exc:
        print(f"mrtr {command}: {exc}", file=sys.stderr)
        return 1
    except LifespanError as exc:  # the server's lifespan failed: it did not start
        print(f"mrtr {command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a server is stopped: not a failure
    return 0


def _unprotected(
    command: str, args: argparse.Namespace, host: str | None, auth: bool
) -> str | None:
    """The refusal of a proxy listening beyond loopback with no front-side auth to a backend
    reached with credentials (None: it may start); the warning when told to start anyway."""
    from .proxy import is_loopback

    exposes: list[str] = getattr(args, "exposes", [])
    allowed = bool(getattr(args, "allow_unauthenticated", False))
    if auth and allowed:
        return (
            f"mrtr {command}: --allow-unauthenticated and front-side auth (--auth-issuer or "
            "MRTR_AUTH_ISSUER) contradict each other: give one"
        )
    if auth or not exposes or is_loopback(host or "127.0.0.1"):
        return None
    what = (
        f"listening on {host}, beyond this machine, with no authorization in front, every "
        f"caller that reaches it, without credentials, uses the backend as you: "
        f"{'; '.join(exposes)}"
    )
    if allowed:
        print(f"mrtr {command}: warning: {what} (--allow-unauthenticated)", file=sys.stderr)
        return None
    return (
        f"mrtr {command}: refusing to start: {what}. Require callers' tokens with "
        "--auth-issuer URL --auth-resource URL (or MRTR_AUTH_ISSUER and MRTR_AUTH_RESOURCE), "
        "listen on loopback (--host 127.0.0.1) behind your own gateway, or pass "
        "--allow-unauthenticated to start it anyway"
    )


def _proxy(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str]) -> int:
    from .call import is_url
    from .proxy import ProxyUsageError, forward_backend_stderr, proxy_from_args

    if args.url is not None and command:
        parser.error("give either a URL or '-- COMMAND', not both")
    if args.url is None and not command:
        parser.error("no backend: give a URL, or a command after '--'")
    if args.url is not None and not is_url(args.url):
        parser.error(f"{args.url!r} is not an http:// or https:// URL (a command goes after '--')")
    try:
        args.target = proxy_from_args(args, command)
    except ProxyUsageError as exc:
        parser.error(str(exc))
    if command:
        forward_backend_stderr()
    args.workers = 1  # held calls live in this process: one process serves them
    return _serve(parser, args, "proxy")


def _settings_error(command: str, exc: Exception) -> int:
    print(f"mrtr {command}: {exc}", file=sys.stderr)
    return 2


def _describe(
    parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str], as_json: bool
) -> int:
    from .call import forward_server_stderr, is_url
    from .listing import ServerTarget, run_listing

    if args.url is not None and command:
        parser.error("give either a URL or '-- COMMAND', not both")
    if args.url is None and not command:
        parser.error("no server: give a URL, or a command after '--'")
    if args.url is not None and not is_url(args.url):
        parser.error(f"{args.url!r} is not an http:// or https:// URL (a command goes after '--')")
    if command:
        forward_server_stderr()
    target = ServerTarget(url=args.url, command=command, protocol=args.protocol)
    return asyncio.run(run_listing(target, as_json))


def _install(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .install import InstallCommand, InstallError, parse_env_file, parse_env_pairs
    from .serve import TargetError

    if (args.target is None) == (args.proxy is None):
        parser.error("give the server as FILE.py[:ATTR], or a remote one with --proxy URL")
    if args.proxy is not None:
        from .call import is_url

        if not is_url(args.proxy):
            parser.error(f"--proxy {args.proxy}: give an http:// or https:// URL")
        if args.with_packages or args.with_editable:
            parser.error("--with and --with-editable apply to a FILE.py target only")
    try:
        env = parse_env_file(args.env_file) if args.env_file else {}
        env.update(parse_env_pairs(args.env))  # --env wins over the file
        if args.name is not None and not args.name.strip():
            parser.error("--name is empty")
        command = InstallCommand(
            host=args.host,
            target=args.target or "",
            proxy=args.proxy,
            name=args.name,
            with_packages=args.with_packages,
            with_editable=args.with_editable,
            env=env,
            config=args.config,
            project=args.project,
            force=args.force,
        )
        return command.run()
    except TargetError as exc:
        parser.error(str(exc))
    except InstallError as exc:
        print(f"mrtr install: {exc}", file=sys.stderr)
        return 1


def _call(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str]) -> int:
    from .call import CallCommand, forward_server_stderr, is_url, parse_arguments, parse_headers
    from .responder import roots_from_paths

    words: list[str] = args.words
    url = words[0] if is_url(words[0]) else None
    if url is not None:
        words = words[1:]
        if command:
            parser.error("give either a URL or '-- COMMAND', not both")
    elif not command:
        parser.error(
            "no server: give a URL before the tool name, or a command after '--' "
            "(mrtr call TOOL key=value -- python server.py)"
        )
    if not words:
        parser.error("the tool name is missing")
    tool, *pairs = words
    if "=" in tool:
        parser.error(f"{tool!r} looks like an argument; the tool name comes first")
    if args.header and url is None:
        parser.error("--header applies to an HTTP server (a URL) only")
    if args.timeout is not None and not 0 < args.timeout < math.inf:
        parser.error(f"--timeout {args.timeout:g}: give a positive number of seconds")
    if url is None and (
        args.client_id or args.client_secret or args.issuer or args.scope or args.token_file
    ):
        parser.error(
            "--client-id, --client-secret, --issuer, --scope and --token-file apply to a URL only"
        )
    if args.client_secret and not args.issuer:
        parser.error(
            "--client-secret needs --issuer URL: the authorization server the client is "
            "registered at (its secret is sent to no other)"
        )
    try:
        call = CallCommand(
            tool=tool,
            arguments=parse_arguments(pairs),
            url=url,
            command=command,
            headers=parse_headers(args.header),
            roots=roots_from_paths(args.root),
            raw_json=args.json,
            timeout=args.timeout,
        )
    except ValueError as exc:
        parser.error(str(exc))
    # OAuth only steps in on a 401, and not at all for a caller who brings its own token.
    if url is not None and "authorization" not in {name.lower() for name in call.headers}:
        call.auth = oauth_from_args(args, "mrtr call")
    if command:
        forward_server_stderr()
    return asyncio.run(call.run())


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .demo import demo_main

    _check_port(parser, args.port)
    return demo_main(args.port)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `mrtr` command line with `argv` (default `sys.argv[1:]`); returns the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser, subparsers = _build()
    try:
        name = words[0] if words else None
        if name is None or name not in subparsers:
            parser.parse_args(words)  # --help, --version, or a usage error: exits
            parser.print_help(sys.stderr)
            return 2
        sub = subparsers[name]
        rest, command = words[1:], []
        if name in ("call", "list", "inspect", "proxy") and "--" in rest:
            cut = rest.index("--")
            rest, command = rest[:cut], rest[cut + 1 :]
        # Intermixed, so that options may come after the key=value words.
        args = sub.parse_intermixed_args(rest)
        if name == "serve":
            return _serve(sub, args)
        if name == "proxy":
            return _proxy(sub, args, command)
        if name == "call":
            return _call(sub, args, command)
        if name in ("list", "inspect"):
            return _describe(sub, args, command, as_json=name == "inspect")
        if name == "install":
            return _install(sub, args)
        return _demo(sub, args)
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        print("\nmrtr: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Whoever read our output stopped reading (`mrtr demo | head`). Point stdout at the
        # null device so that the interpreter's final flush does not fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


__all__ = ["build_parser", "main"]
