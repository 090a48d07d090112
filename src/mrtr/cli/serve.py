"""`mrtr serve`: load a `Server` object from a module or a file and serve it.

A target is `MODULE:ATTR` (`shop.app:server`) or `PATH.py:ATTR` (`examples/shop.py:server`).
Without `:ATTR` the module's `server` attribute is used, or its only `Server` if it has exactly
one. `ATTR` may be dotted (`app:services.mcp`). The current directory is importable, as it is
for `python -m`, and a file's own directory is importable while it loads, as it is for
`python file.py`.

With `workers` above 1 (`--workers`, `MRTR_WORKERS`), uvicorn runs that many processes sharing
the port, each importing the target itself through `make_app` (the target travels in
`MRTR_TARGET`, the settings in the other `MRTR_*` variables). Rounds of one flow then land on
different processes, so every process must seal with the same key: without one configured
(code, `MRTR_REQUEST_STATE_KEY` or `MRTR_REQUEST_STATE_KEY_FILE`) the command refuses to start.
The same factory serves under uvicorn's own command line, connection limits included:

    MRTR_TARGET=shop.py:server MRTR_REQUEST_STATE_KEY_FILE=/run/secrets/mrtr-key \
      uvicorn mrtr.cli.serve:make_app --factory --workers 4 --ws none \
      --http mrtr.transport.http_serve:worker_protocol

Over HTTP, `--auth-issuer` and `--auth-resource` (or `MRTR_AUTH_ISSUER` and
`MRTR_AUTH_RESOURCE`, which worker processes read) require every caller's bearer token
(`settings.auth_settings`): they set `ServerOptions.auth` of a server whose code sets none,
and are refused beside one that does (which would win is a guess).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..server.server import Server
from ..settings import (
    AUTH_FLAGS,
    VARIABLES,
    auth_settings,
    configure_logging,
    http_options,
    log_level,
    serve_target,
)
from ..transport.http_limits import DEFAULT_DRAIN_TIMEOUT, DEFAULT_KEEP_ALIVE

if TYPE_CHECKING:
    from ..server.auth.settings import AuthSettings
    from ..transport.http_app import StreamableHTTPApp

KEY_HOWTO = (
    "set MRTR_REQUEST_STATE_KEY (secrets separated by commas, the first seals) or "
    "MRTR_REQUEST_STATE_KEY_FILE (a file of them, one a line), the same for every process, or "
    "give ServerOptions(request_state_key=...); make a secret with "
    "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
)


class TargetError(Exception):
    """A target that cannot name a `Server` (a usage error: exit status 2)."""


class TargetImportError(Exception):
    """The target's module raised while importing (its traceback is in the message)."""


def split_target(target: str) -> tuple[str, str | None]:
    """`"a.b:attr"` -> `("a.b", "attr")`; the attribute is None when not given."""
    # A Windows drive letter ("C:\\shop.py") is not an attribute separator.
    head, sep, attr = target.rpartition(":")
    if not sep or (len(head) == 1 and head.isalpha() and attr[:1] in ("\\", "/")):
        return target, None
    if not head:
        raise TargetError(f"{target!r}: nothing before ':' (expected MODULE:ATTR or FILE.py:ATTR)")
    if not attr:
        raise TargetError(f"{target!r}: nothing after ':' (expected MODULE:ATTR or FILE.py:ATTR)")
    return head, attr


def load_server(target: str) -> Server:
    """The `Server` that `target` names; raises `TargetError` or `TargetImportError`."""
    where, attr = split_target(target)
    module = _import(where)
    if attr is None:
        return _default_server(module, where)
    obj: Any = module
    walked = []
    for part in attr.split("."):
        walked.append(part)
        if not part.isidentifier():
            raise TargetError(f"{target!r}: {attr!r} is not an attribute name")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(
                f"{where!r} has no attribute {'.'.join(walked)!r}" + _suggest(module)
            ) from None
    if not isinstance(obj, Server):
        raise TargetError(
            f"{where}:{attr} is a {type(obj).__name__}, not an mrtr Server"
            " (expected an object created with mrtr.Server(...))"
        )
    return obj


def _default_server(module: ModuleType, where: str) -> Server:
    named = getattr(module, "server", None)
    if isinstance(named, Server):
        return named
    found = [name for name, value in vars(module).items() if isinstance(value, Server)]
    if len(found) == 1:
        server: Server = getattr(module, found[0])
        return server
    if not found:
        raise TargetError(f"{where!r} defines no mrtr Server (name one with {where}:ATTR)")
    raise TargetError(
        f"{where!r} defines several Servers ({', '.join(sorted(found))}); "
        f"name one with {where}:ATTR"
    )


def _suggest(module: ModuleType) -> str:
    found = sorted(name for name, value in vars(module).items() if isinstance(value, Server))
    return f"; its Servers: {', '.join(found)}" if found else "; it defines no mrtr Server"


def _import(where: str) -> ModuleType:
    if where.endswith(".py") or os.sep in where or "/" in where:
        return _import_file(Path(where))
    if not all(part.isidentifier() for part in where.split(".")):
        raise TargetError(f"{where!r} is neither a module name nor a path to a .py file")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        # Only the target itself missing is a usage error; a missing dependency inside it is
        # the module's own failure and keeps its traceback.
        if exc.name is not None and (where == exc.name or where.startswith(exc.name + ".")):
            raise TargetError(f"no module named {where!r} (from {cwd})") from None
        raise TargetImportError(_failure(where)) from exc
    except Exception as exc:
        raise TargetImportError(_failure(where)) from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise TargetError(f"no such file: {path}")
    if path.suffix != ".py":
        raise TargetError(f"{path} is not a .py file")
    name = path.stem if path.stem.isidentifier() else "mrtr_target"
    if name in sys.modules:
        name = f"mrtr_target_{name}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it, so that pickling, dataclasses and pydantic can find it.
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TargetImportError(_failure(str(path))) from exc
    return module


def _failure(where: str) -> str:
    return f"importing {where} failed:\n{traceback.format_exc().rstrip()}"


class WorkersError(Exception):
    """Several worker processes asked for without a shared key (a usage error: exit status 2)."""


class AuthConflict(Exception):
    """Front-side auth given for a server whose code sets its own (a usage error: status 2)."""


def protect(server: Server, auth: AuthSettings) -> None:
    """Require callers' tokens as `auth` says, in front of `server`, which sets no
    `ServerOptions.auth` of its own (else `AuthConflict`)."""
    from ..server.auth.principal import token_principal

    options = server.options
    if options.auth is not None:
        raise AuthConflict(
            f"the server {server.name!r} sets ServerOptions.auth in its code, and the "
            "command line (--auth-*) or MRTR_AUTH_* names other authorization: keep one"
        )
    # What `ServerOptions` does with `auth` when built with it: states bind to the token.
    options.auth = auth
    if options.principal is None:
        options.principal = token_principal


def seals_with_ephemeral_key(server: Server) -> bool:
    """Whether `server` seals request states with a random per-process key (none configured)."""
    return server.seals_with_random_key


def serve(
    target: str | Server,
    transport: str,
    host: str | None,
    port: int | None,
    log_level: str = "warning",
    workers: int = 1,
    *,
    auth: AuthSettings | None = None,
    auth_flags: dict[str, Any] | None = None,
    **http_options: Any,
) -> None:
    """Load `target` (or take the `Server` given) and serve it until stopped (stdio: until
    stdin closes).

    Logs at `log_level` and above go to stderr (never stdout, which carries the protocol on
    stdio). `http_options` go to `serve_http` (its limits: `header_timeout=`,
    `max_connections=`...); with stdio, its one option `eof_grace=` goes to `serve_stdio`.
    `workers` above 1 (HTTP only) runs that many uvicorn worker processes; it raises
    `WorkersError` when the server has no configured key. `auth` (HTTP only) requires callers'
    tokens (`protect`); `auth_flags`, the `--auth-*` values it was read from by
    `auth_settings` field, are handed down to worker processes.
    """
    configure_logging(log_level)
    server = target if isinstance(target, Server) else load_server(target)
    if auth is not None and transport == "http":
        protect(server, auth)
    if workers > 1 and seals_with_ephemeral_key(server):
        raise WorkersError(
            f"--workers {workers} needs a request-state key shared by every worker (a round "
            f"sealed by one worker is retried on another): {KEY_HOWTO}"
        )
    if transport == "http":
        host = host or "127.0.0.1"
        port = 8000 if port is None else port
        http_options.setdefault("log_level", log_level)  # uvicorn's own loggers too
        shown = f"[{host}]" if ":" in host else host
        sse_path = http_options.get("sse_path", "/sse") if workers == 1 else None
        print(
            f"mrtr: serving {server.name!r} over Streamable HTTP at http://{shown}:{port}/mcp"
            + (f" (HTTP+SSE at {sse_path})" if sse_path else "")
            + (f" with {workers} worker processes" if workers > 1 else ""),
            file=sys.stderr,
            flush=True,
        )
        if workers > 1 and isinstance(target, str):
            _run_workers(target, host, port, workers, log_level, http_options, auth_flags or {})
        else:
            server.run(transport="http", host=host, port=port, **http_options)
    else:
        # Logged, not printed: a host shows a stdio server's stderr, so only on request.
        logging.getLogger("mrtr.cli").info("serving %r over stdio", server.name)
        server.run(transport="stdio", **http_options)


def _run_workers(
    target: str,
    host: str,
    port: int,
    workers: int,
    level: str,
    options: dict[str, Any],
    auth_flags: dict[str, Any],
) -> None:
    import uvicorn

    # Each worker is a fresh interpreter that reads its settings from the environment it
    # inherits: the command line's values are handed down as the variables they stand for.
    where, attr = split_target(target)
    if where.endswith(".py") or os.sep in where or "/" in where:
        where = str(Path(where).resolve())  # a worker need not resolve it from the same place
    os.environ["MRTR_TARGET"] = where if attr is None else f"{where}:{attr}"
    os.environ["MRTR_LOG_LEVEL"] = level
    by_field = {v.field: v.name for v in VARIABLES if v.target == "http"}
    for name, value in options.items():
        if name in by_field:
            text = " ".join(value) if isinstance(value, list | tuple) else str(value)
            os.environ[by_field[name]] = text
    by_auth = {v.field: v.name for v in VARIABLES if v.target == "auth"}
    for field, value in auth_flags.items():
        if field in AUTH_FLAGS:
            os.environ[by_auth[field]] = " ".join(value) if isinstance(value, list) else value
    uvicorn.run(
        "mrtr.cli.serve:make_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        http="mrtr.transport.http_serve:worker_protocol",
        ws="none",
        lifespan="on",
        access_log=False,
        server_header=False,  # as `serve_http`: no software banner
        log_level=level,
        timeout_keep_alive=options.get("keep_alive", DEFAULT_KEEP_ALIVE),
        timeout_graceful_shutdown=options.get("drain_timeout", DEFAULT_DRAIN_TIMEOUT) or None,
    )


def make_app() -> StreamableHTTPApp:
    """The app of one worker process: the server `MRTR_TARGET` names, with the settings and
    connection limits of the `MRTR_*` variables (an app factory for uvicorn's `--factory`)."""
    from ..transport.http_serve import worker_app

    configure_logging(log_level() or "warning")
    target = serve_target()
    if target is None:
        raise TargetError(
            "MRTR_TARGET is not set: name the server to serve (MODULE:ATTR or FILE.py:ATTR)"
        )
    server = load_server(target)
    auth = auth_settings()
    if auth is not None:
        protect(server, auth)
    options = http_options()
    options.pop("host", None)
    options.pop("port", None)
    # uvicorn's supervisor stops its workers itself (its graceful timeout is the drain's).
    options.pop("drain_grace", None)
    options.pop("drain_timeout", None)
    return worker_app(server, **options)


__all__ = [
    "KEY_HOWTO",
    "AuthConflict",
    "TargetError",
    "TargetImportError",
    "WorkersError",
    "load_server",
    "make_app",
    "protect",
    "seals_with_ephemeral_key",
    "serve",
    "split_target",
]
