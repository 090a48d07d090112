"""Settings from the environment: `MRTR_*` variables.

Every variable is optional and is checked when it is read: an invalid value raises
`SettingsError`, whose message names the variable and says what it takes. An `MRTR_*` name
that is not one of these is most likely a typo, so it is warned about (once per process) on
the `mrtr` logger.

Where they apply:

* a `Server` built without `options=` takes its `ServerOptions` from `server_options()`;
  one built with explicit options still takes a missing `request_state_key` from
  `MRTR_REQUEST_STATE_KEY` or `MRTR_REQUEST_STATE_KEY_FILE` (so every worker of one deployment
  seals with the same key);
* `mrtr serve` and `Server.run(transport="http")` take their address and HTTP limits from
  `http_options()` (command-line flags and keyword arguments win);
* `MRTR_STORE_URL` (`redis://host:port/db`) makes `server_options()` use that Redis as the
  shared store and change broker (`mrtr.server.redis_store`), after checking that it answers:
  an unreachable one raises `SettingsError` at start-up;
* `mrtr serve` sets up logging from `MRTR_LOG_LEVEL` (`--log-level` wins) and runs
  `MRTR_WORKERS` processes (`--workers` wins); its worker processes load `MRTR_TARGET`;
* `mrtr serve` and `mrtr proxy` over HTTP require callers' OAuth bearer tokens when
  `MRTR_AUTH_ISSUER` is set (`auth_settings()`: `--auth-issuer` and the other `--auth-*`
  flags win), for a server whose code configures no `ServerOptions.auth`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from .server.options import InputRequiredConfig, ServerOptions
from .server.request_state import check_secrets

if TYPE_CHECKING:
    from .server.auth.settings import AuthSettings

logger = logging.getLogger("mrtr")

PREFIX = "MRTR_"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class SettingsError(ValueError):
    """An `MRTR_*` variable holds a value that cannot be used; the message names it."""


def _integer(least: int, most: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            value = least - 1
        if value < least or (most is not None and value > most):
            span = f"from {least} to {most}" if most is not None else f"of at least {least}"
            raise SettingsError(f"{name}={raw!r}: give a whole number {span}")
        return value

    return parse


def _seconds(meaning_of_zero: str, positive: bool = False) -> Callable[[str, str], float]:
    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = math.nan
        if not value >= 0 or (positive and value == 0):
            least = "more than 0" if positive else f">= 0 ({meaning_of_zero})"
            raise SettingsError(f"{name}={raw!r}: give a number of seconds {least}")
        return value

    return parse


def _limit_seconds(name: str, raw: str) -> float:
    value = _seconds("0 turns the limit off")(name, raw)
    if math.isinf(value):
        raise SettingsError(f"{name}={raw!r}: give a finite number (0 turns the limit off)")
    return value


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise SettingsError(f"{name}={raw!r}: give one of {', '.join(choices)}")
        return value

    return parse


def _switch(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise SettingsError(f"{name}={raw!r}: give 1 (on) or 0 (off)")
    return value in ("1", "true", "yes", "on")


def _text(name: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise SettingsError(f"{name} is set but empty: give a value or unset it")
    return value


def _words(name: str, raw: str) -> list[str]:
    words = raw.split()
    if not words:
        raise SettingsError(f"{name} is set but empty: give space-separated values or unset it")
    return words


_SEPARATORS = re.compile(r"[\s,]+")
_NEW_SECRET = "e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"


def _secrets(name: str, raw: str) -> list[str]:
    secrets = [secret for secret in _SEPARATORS.split(raw) if secret]
    if not secrets:
        raise SettingsError(
            f"{name} is set but empty: give one or more secrets separated by commas or spaces "
            f"(the first seals, all verify), {_NEW_SECRET}"
        )
    try:
        check_secrets(secrets)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{name}: {exc}") from None
    return secrets


def _secrets_file(name: str, raw: str) -> list[str]:
    """The ring a key file holds: one secret a line (the first seals), `#` starts a comment."""
    path = raw.strip()
    if not path:
        raise SettingsError(f"{name} is set but empty: give the path of a key file or unset it")
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            text = file.read()
    except FileNotFoundError:
        raise SettingsError(f"{name}={path!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{name}={path!r}: cannot be read ({exc})") from None
    if mode & stat.S_IROTH and f"{name}={path}" not in _warned:
        # Anyone on the machine could forge request states with it; the deployment may have
        # reasons (a read-only container image), so this is a warning, not a refusal.
        _warned.add(f"{name}={path}")
        logger.warning(
            "%s=%r is readable by every user of this machine: anyone who reads it can forge "
            "request states; restrict it (chmod 600 %s)",
            name,
            path,
            path,
        )
    lines = (line.strip() for line in text.splitlines())
    secrets = " ".join(line for line in lines if line and not line.startswith("#"))
    if not secrets:
        raise SettingsError(
            f"{name}={path!r} holds no secret: write one per line (the first seals, all "
            f"verify; lines starting with # are comments), {_NEW_SECRET}"
        )
    return _secrets(f"{name}={path!r}", secrets)


def _url(name: str, raw: str) -> str:
    from .server.auth.settings import canonical_resource

    url = raw.strip()
    try:
        canonical_resource(url)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: give an absolute http(s) URL ({exc})") from None
    return url


def _store_url(name: str, raw: str) -> str:
    url = raw.strip()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise SettingsError(
            f"{name}={raw!r}: give a Redis URL, redis://host:port/db (rediss:// for TLS, "
            "unix:///path.sock), or unset it for an in-memory store"
        )
    return url


@dataclass(frozen=True, slots=True)
class Variable:
    """One setting: its variable, where it goes, and how its value is read."""

    name: str
    #: "options" (a `ServerOptions` field), "input_required" (an `InputRequiredConfig` field),
    #: "http" (a `serve_http` keyword), "key" (the request-state key ring: `request_state_key`),
    #: "store" (`MRTR_STORE_URL`), "auth" (`auth_settings()`), "logging" or "serve" (the
    #: command line's own).
    target: str
    field: str
    parse: Callable[[str, str], Any]
    doc: str


VARIABLES: tuple[Variable, ...] = (
    Variable("MRTR_LOG_LEVEL", "logging", "level", _choice(*LOG_LEVELS),
             "log level of `mrtr serve` (logs go to stderr, never stdout)"),
    Variable("MRTR_TRANSPORT", "serve", "transport", _choice("stdio", "http"),
             "transport of `mrtr serve`"),
    Variable("MRTR_HOST", "http", "host", _text, "address to listen on over HTTP"),
    Variable("MRTR_PORT", "http", "port", _integer(0, 65535), "port to listen on over HTTP"),
    Variable("MRTR_TARGET", "serve", "target", _text,
             "the server `mrtr serve`'s worker processes load (MODULE:ATTR or FILE.py:ATTR)"),
    Variable("MRTR_WORKERS", "serve", "workers", _integer(1),
             "processes `mrtr serve --transport http` runs (more than 1 needs a shared key)"),
    Variable("MRTR_REQUEST_STATE_KEY", "key", "request_state_key", _secrets,
             "requestState secrets, separated by commas or spaces: the first seals, all verify"),
    Variable("MRTR_REQUEST_STATE_KEY_FILE", "key", "request_state_key", _secrets_file,
             "a file of requestState secrets, one a line (# comments): the first seals"),
    Variable("MRTR_REQUEST_STATE_VERIFY_KEYS", "options", "request_state_verify_keys",
             _secrets, "requestState secrets accepted but never sealed with, space-separated "
             "(key rotation)"),
    Variable("MRTR_REQUEST_STATE_TTL", "options", "request_state_ttl",
             _seconds("0 = never expires"), "seconds a sealed requestState stays valid"),
    Variable("MRTR_MAX_STATE_BYTES", "options", "max_state_bytes", _integer(1),
             "longest requestState accepted"),
    Variable("MRTR_PAGE_SIZE", "options", "page_size", _integer(1),
             "items per page of list results"),
    Variable("MRTR_SYNC_WORKERS", "options", "sync_workers", _integer(1),
             "threads that run sync (`def`) handlers"),
    Variable("MRTR_CHECK_REPLAY", "options", "check_replay", _switch,
             "watch the code a round replays and warn of effects there (slows replays)"),
    Variable("MRTR_MAX_ROUNDS", "input_required", "max_rounds", _integer(1),
             "rounds one request may go through"),
    Variable("MRTR_ROUND_TIMEOUT", "input_required", "round_timeout",
             _seconds("0 = no limit"), "seconds one round (or one live question) may take"),
    Variable("MRTR_MAX_RESPONSES", "input_required", "max_responses", _integer(1),
             "inputResponses one request may carry"),
    Variable("MRTR_MAX_RESPONSE_BYTES", "input_required", "max_response_bytes", _integer(1),
             "bytes of JSON those answers may take together"),
    Variable("MRTR_STORE_URL", "store", "url", _store_url,
             "Redis shared by every instance (redis://host:port/db); unset = in memory"),
    Variable("MRTR_HEADER_TIMEOUT", "http", "header_timeout", _limit_seconds,
             "seconds a client has to send a request's headers"),
    Variable("MRTR_BODY_TIMEOUT", "http", "body_timeout", _limit_seconds,
             "seconds a client has to send a request's body"),
    Variable("MRTR_KEEP_ALIVE", "http", "keep_alive", _seconds("", positive=True),
             "seconds an idle connection stays open"),
    Variable("MRTR_DRAIN_GRACE", "http", "drain_grace", _seconds("0 = none"),
             "seconds the health check fails on SIGTERM before new connections are refused"),
    Variable("MRTR_DRAIN_TIMEOUT", "http", "drain_timeout", _seconds("0 = no limit"),
             "seconds requests in flight get to finish at shutdown"),
    Variable("MRTR_MAX_CONNECTIONS", "http", "max_connections", _integer(0),
             "connections open at once (0 = no limit)"),
    Variable("MRTR_MAX_BODY_SIZE", "http", "max_body_size", _integer(1),
             "bytes of one request body"),
    Variable("MRTR_MAX_INFLIGHT_BODY_BYTES", "http", "max_inflight_body_bytes", _integer(0),
             "bytes of request bodies in progress at once (0 = no limit)"),
    Variable("MRTR_SESSION_IDLE_TIMEOUT", "http", "session_idle_timeout",
             _seconds("0 = never"), "seconds an idle legacy HTTP session is kept"),
    Variable("MRTR_MAX_SESSIONS", "http", "max_sessions", _integer(1),
             "legacy HTTP sessions open at once"),
    Variable("MRTR_ALLOWED_HOSTS", "http", "allowed_hosts", _words,
             "space-separated Host names accepted over HTTP"),
    Variable("MRTR_ALLOWED_ORIGINS", "http", "allowed_origins", _words,
             "space-separated Origin values accepted over HTTP"),
    Variable("MRTR_AUTH_ISSUER", "auth", "issuer", _url,
             "the authorization server whose JWT access tokens callers must bring over HTTP "
             "(`mrtr serve`, `mrtr proxy`)"),
    Variable("MRTR_AUTH_RESOURCE", "auth", "resource", _url,
             "this server's URL as clients reach it: the audience tokens must name"),
    Variable("MRTR_AUTH_JWKS", "auth", "jwks", _url,
             "the issuer's key set URL (default: its metadata's jwks_uri)"),
    Variable("MRTR_AUTH_SCOPES", "auth", "scopes", _words,
             "space-separated scopes every request's token must hold"),
)  # fmt: skip

_BY_NAME = {variable.name: variable for variable in VARIABLES}
_warned: set[str] = set()


def _read(environ: Mapping[str, str] | None, target: str) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    _warn_unknown(env)
    return {
        variable.field: variable.parse(variable.name, env[variable.name])
        for variable in VARIABLES
        if variable.target == target and variable.name in env
    }


def _warn_unknown(env: Mapping[str, str]) -> None:
    for name in env:
        if name.startswith(PREFIX) and name not in _BY_NAME and name not in _warned:
            _warned.add(name)
            close = [known for known in _BY_NAME if _near(name, known)]
            logger.warning(
                "%s is not an mrtr setting and is ignored%s",
                name,
                f" (did you mean {close[0]}?)" if close else "",
            )


def _near(a: str, b: str) -> bool:
    """Whether two names differ by a little (a typo), by their edit distance."""
    if abs(len(a) - len(b)) > 2:
        return False
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1] <= 2


def request_state_key(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The key ring of the environment, or None when neither variable is set.

    `MRTR_REQUEST_STATE_KEY` holds secrets separated by commas or whitespace;
    `MRTR_REQUEST_STATE_KEY_FILE` names a file holding one a line. The first seals, all
    verify. Setting both is an error: which one wins would be a guess.
    """
    env = os.environ if environ is None else environ
    given = [
        variable for variable in VARIABLES if variable.target == "key" and variable.name in env
    ]
    if len(given) > 1:
        raise SettingsError(
            f"{' and '.join(v.name for v in given)} are both set: give the key ring in one of "
            "them and unset the other"
        )
    return given[0].parse(given[0].name, env[given[0].name]) if given else None


def request_state_verify_keys(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The verify-only secrets `MRTR_REQUEST_STATE_VERIFY_KEYS` holds, or None when unset."""
    env = os.environ if environ is None else environ
    raw = env.get("MRTR_REQUEST_STATE_VERIFY_KEYS")
    return None if raw is None else _secrets("MRTR_REQUEST_STATE_VERIFY_KEYS", raw)


def server_options(environ: Mapping[str, str] | None = None, **overrides: Any) -> ServerOptions:
    """`ServerOptions` from the `MRTR_*` variables; keyword arguments win over them.

    `Server(name, options=server_options(principal=caller))` keeps the environment's settings
    and adds what only code can give.
    """
    fields = _read(environ, "options")
    key = request_state_key(environ)
    if key is not None:
        fields["request_state_key"] = key
    limits = _read(environ, "input_required")
    if limits and "input_required" not in overrides:
        fields["input_required"] = InputRequiredConfig(**limits)
    url = _read(environ, "store").get("url")
    if url is not None and ("store" not in overrides or "broker" not in overrides):
        fields.update(_redis(url))
    fields.update(overrides)
    return ServerOptions(**fields)


def _redis(url: str) -> dict[str, Any]:
    """The Redis store and broker at `url`, once it answered a PING."""
    try:
        from .server.redis_store import RedisBroker, RedisStore, check_reachable
    except ImportError:
        raise SettingsError(
            'MRTR_STORE_URL needs the Redis client: pip install "mrtr[redis]"'
        ) from None
    try:
        check_reachable(url)
    except ConnectionError as exc:
        raise SettingsError(f"MRTR_STORE_URL: {exc}") from None
    return {"store": RedisStore(url), "broker": RedisBroker(url)}


def http_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`serve_http` keywords (`host`, `port` and the limits) from the `MRTR_*` variables."""
    from .transport.http_limits import (
        DEFAULT_MAX_BODY_SIZE,
        DEFAULT_MAX_INFLIGHT_BODY_BYTES,
        check_body_sizes,
    )

    options = _read(environ, "http")
    try:
        check_body_sizes(
            options.get("max_body_size", DEFAULT_MAX_BODY_SIZE),
            options.get("max_inflight_body_bytes", DEFAULT_MAX_INFLIGHT_BODY_BYTES),
        )
    except ValueError as exc:
        raise SettingsError(f"MRTR_MAX_BODY_SIZE, MRTR_MAX_INFLIGHT_BODY_BYTES: {exc}") from None
    return options


#: The command line's flag of each `MRTR_AUTH_*` field.
AUTH_FLAGS = {"issuer": "--auth-issuer", "resource": "--auth-resource", "jwks": "--auth-jwks",
              "scopes": "--auth-scope"}  # fmt: skip


def auth_settings(environ: Mapping[str, str] | None = None, **given: Any) -> AuthSettings | None:
    """The front-side authorization `MRTR_AUTH_*` (or `given`, the `--auth-*` flags' values
    by field, which win) describe, or None when no issuer is named.

    Callers must bring a JWT access token of `issuer` whose audience names `resource`,
    verified against the issuer's keys (`jwks`, else its metadata's `jwks_uri`), holding every
    one of `scopes`.
    """
    fields = {**_read(environ, "auth"), **{k: v for k, v in given.items() if v is not None}}
    for name, value in given.items():
        if isinstance(value, str):
            fields[name] = _url(AUTH_FLAGS[name], value)
    if "issuer" not in fields:
        if fields:
            named = ", ".join(_auth_name(name) for name in fields)
            raise SettingsError(f"{named}: give the issuer too ({_auth_name('issuer')})")
        return None
    if "resource" not in fields:
        raise SettingsError(
            f"{_auth_name('issuer')} needs {_auth_name('resource')}: the URL clients reach "
            "this server at (https://mcp.example.com/mcp), which their tokens must name as "
            "their audience"
        )
    try:
        from .server.auth.jwt_verifier import JWTVerifier
    except ImportError:
        raise SettingsError(
            f'{_auth_name("issuer")} needs the JWT verifier: pip install "mrtr[auth]"'
        ) from None
    from .server.auth.settings import AuthSettings

    scopes = list(fields.get("scopes") or ())
    try:
        verifier = JWTVerifier(fields["issuer"], fields["resource"], jwks_url=fields.get("jwks"))
        return AuthSettings(
            resource=fields["resource"],
            authorization_servers=[fields["issuer"]],
            verifier=verifier,
            scopes_supported=scopes or None,
            required_scopes=scopes,
        )
    except ValueError as exc:
        raise SettingsError(f"{_auth_name('issuer')}: {exc}") from None


def _auth_name(field: str) -> str:
    variable = next(v.name for v in VARIABLES if v.target == "auth" and v.field == field)
    return f"{AUTH_FLAGS[field]} ({variable})"


def serve_transport(environ: Mapping[str, str] | None = None) -> str | None:
    """The transport `MRTR_TRANSPORT` names, or None."""
    return _read(environ, "serve").get("transport")


def serve_workers(environ: Mapping[str, str] | None = None) -> int | None:
    """The number of processes `MRTR_WORKERS` asks `mrtr serve` for, or None."""
    return _read(environ, "serve").get("workers")


def serve_target(environ: Mapping[str, str] | None = None) -> str | None:
    """The target `MRTR_TARGET` names (what a worker process of `mrtr serve` loads), or None."""
    return _read(environ, "serve").get("target")


def log_level(environ: Mapping[str, str] | None = None) -> str | None:
    """The level `MRTR_LOG_LEVEL` names (lower case), or None."""
    return _read(environ, "logging").get("level")


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    """Send log records at `level` and above to `stream` (default stderr, never stdout: on
    stdio, stdout carries the protocol)."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


__all__ = [
    "AUTH_FLAGS",
    "LOG_LEVELS",
    "VARIABLES",
    "SettingsError",
    "Variable",
    "auth_settings",
    "configure_logging",
    "http_options",
    "log_level",
    "request_state_key",
    "serve_target",
    "serve_transport",
    "serve_workers",
    "server_options",
]
