"""Server configuration (seed: `ServerOptions`, `ServerOptions::InputRequiredConfig`).

Options are checked when they are built, so a mistake shows at start-up with a message that
says how to fix it, not later as a refused request: impossible values raise `ValueError`,
risky ones are logged as warnings on the `mrtr.server` logger.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .budgets import Budgets
from .request_state import check_secrets
from .store import Broker, MemoryStore, Store
from .worker_threads import default_workers

if TYPE_CHECKING:
    from .auth.settings import AuthSettings
    from .request_state import StateBinding, VerifiedState

logger = logging.getLogger("mrtr.server")

Secret = str | bytes

#: What registering under a name already taken does (`ServerOptions.on_duplicate`).
DuplicatePolicy = Literal["warn", "error", "replace"]

#: Replaces built-in verification: `(token, binding) -> VerifiedState`, raising on any failure.
RequestStateVerifier = Callable[[str, "StateBinding"], "VerifiedState | Awaitable[VerifiedState]"]

#: Called with every state that passed verification, before any handler runs:
#: `(state, binding) -> None`, sync or async; raising refuses the state (see `ServerOptions`).
RequestStateGuard = Callable[["VerifiedState", "StateBinding"], "Awaitable[None] | None"]

#: Derives the authenticated caller of a request from what the transport knows about it
#: (`RequestContext.transport_info`: the ASGI scope over Streamable HTTP, with its headers;
#: `"stdio"` or `"memory"` otherwise); `None` when there is none.
PrincipalResolver = Callable[[Any], "str | None"]


def _positive_int(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{name} must be a positive integer, not {value!r}")


def _seconds(owner: str, name: str, value: object, meaning_of_zero: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(
            f"{owner}.{name} must be a number of seconds >= 0 ({meaning_of_zero}), not {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class InputRequiredConfig:
    """Server-side MRTR limits.

    `max_rounds`: the most `InputRequiredResult`s one request may go through before the server
    refuses to ask again. `round_timeout`: seconds one round of handler execution may take
    (0 = no limit). `max_responses`: the most `inputResponses` entries one request may carry.
    `max_response_bytes`: the most bytes of JSON they may take together (the answers are kept
    in the sealed state, so this also bounds how fast it grows). `legacy_shim`: serve
    legacy-era (`initialize`) clients too, on transports that keep sessions: their handlers'
    questions are sent to the client live (each wait bounded by `round_timeout`), and a
    manual-style handler is driven live up to `max_rounds`; False answers `initialize` with
    -32022 naming the modern versions.
    """

    max_rounds: int = 10
    round_timeout: float = 600.0
    legacy_shim: bool = True
    max_responses: int = 64
    max_response_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        owner = "InputRequiredConfig"
        _positive_int(owner, "max_rounds", self.max_rounds)
        _seconds(owner, "round_timeout", self.round_timeout, "0 = no limit")
        _positive_int(owner, "max_responses", self.max_responses)
        _positive_int(owner, "max_response_bytes", self.max_response_bytes)


_Config = InputRequiredConfig  # the options class re-exports it under the seed's nested name


@dataclass(slots=True)
class ServerOptions:
    """Server options.

    `request_state_key`: the secret that seals `requestState` (AEAD), or a list of secrets of
    which the first seals and all verify, for rotation; each at least 32 bytes. Without one
    the server makes a random key per process: fine for one process, but **every instance of
    a multi-instance deployment must be given the same key**, or a retry that lands on another
    instance is refused.
    `request_state_verify_keys`: secrets accepted besides `request_state_key`, never sealed
    with: rotation in two phases (seal `old`, verify-only `[new]` everywhere; then seal `new`,
    verify-only `[old]`; then drop `old`), so that no instance seals what another cannot read.
    `request_state_ttl`: seconds a sealed state stays valid; it bounds how long a person may
    take to answer, so keep it at least `input_required.round_timeout` (a warning says so).
    0 means never expires and is warned about; `math.inf` means the same, deliberately.
    `max_state_bytes`: the longest `requestState` accepted, checked before anything is decoded
    (and never minted: a state that would grow past it is refused with -32602).
    `request_state_verifier`: replaces the built-in verification (e.g. with a KMS); states are
    still sealed with `request_state_key`. Return the `VerifiedState` the token held, its
    `flow_id` included, or `ctx.flow_id` changes from round to round.
    `request_state_guard`: called with each state that passed verification (its `flow_id`,
    `round` and expiry) and the request's binding, before any handler runs; raising refuses
    the state with the same -32602 as a forged one. Use it to make states single-use.
    `principal`: derives the authenticated caller, which the state is then bound to. With
    `auth` and no `principal`, the verified token's issuer, subject and client id.
    `auth`: protect the HTTP endpoint with OAuth 2.1 bearer tokens (`mrtr.server.auth`): its
    metadata, token verification, scopes (also per tool), `ctx.auth`. None: no checks at all.
    `store`: where each redemption of a sealed state is recorded, so a round runs once and a
    repeat of it gets the first outcome (`redemption.py`); a `MemoryStore` of this server by
    default (one process: several instances need a shared one); None records nothing, and a
    replayed state runs its handler again.
    `broker`: carries change notifications (`notify_*`) to the other instances serving the
    same server name, and theirs here, so a `subscriptions/listen` stream or legacy session
    on any instance hears of a change made on any other (`store.py`); None (the default):
    this server's own listeners only. `MRTR_STORE_URL` sets both `store` and `broker` to Redis.
    `max_outcome_bytes`: the largest outcome (result or error, as JSON) kept for repeats; a
    repeat of a round whose outcome was larger is refused with -32602.
    `page_size`: items per page of list results.
    `list_ttl_ms`/`list_cache_scope`: caching hints on list results.
    `input_required`: the server's MRTR limits (`InputRequiredConfig`: rounds, round timeout,
    the size of `inputResponses`, legacy serving).
    `instructions`: what `server/discover` and `initialize` tell clients about this server,
    when the `Server` is not given its own.
    `mask_errors`: an exception a handler raises reaches the client as "an internal error
    occurred (logged on the server as <id>)", its traceback in the server log under that id;
    a `ToolError`'s message and an `McpError` go through. False sends the exception's text.
    `sync_workers`: threads that run sync (`def`) handlers off the event loop.
    `on_duplicate`: registering a second tool, prompt, resource or template under a name (or
    URI) already taken: `"warn"` (logged, then replaced), `"error"` (`ValueError`) or
    `"replace"` (silently).
    `check_replay`: watch the code a 2026-07-28 round replays (before the question the last
    round asked) and log a warning naming `ctx.once` when it changes something: SQLite rows,
    files, processes, network I/O (see `mrtr.server._engine.replay_check`). It slows replayed
    code down; None (the default) checks while tests run (under pytest), in Python's
    development mode (`-X dev`), on every transport (`MRTR_CHECK_REPLAY=1` turns it on
    from the environment).
    `budgets`: the bounds on what callers can make the server hold (`Budgets`: legacy
    sessions per principal and their size, subscriptions, live tasks, listen stream queues);
    past one a caller is refused, never someone else's state given up.
    """

    #: The class of `input_required` (`ServerOptions.InputRequiredConfig(max_rounds=...)`).
    InputRequiredConfig: ClassVar[type[_Config]] = InputRequiredConfig

    request_state_key: Secret | Sequence[Secret] | None = None
    # As long as the default round_timeout: a person answering may take as long as a round.
    request_state_ttl: float = 600.0
    request_state_verifier: RequestStateVerifier | None = None
    input_required: _Config = field(default_factory=lambda: _Config())
    principal: PrincipalResolver | None = None
    page_size: int = 100
    list_ttl_ms: int = 0
    list_cache_scope: str = "public"
    instructions: str | None = None
    max_state_bytes: int = 1024 * 1024
    request_state_guard: RequestStateGuard | None = None
    mask_errors: bool = True
    sync_workers: int = field(default_factory=default_workers)
    on_duplicate: DuplicatePolicy = "warn"
    request_state_verify_keys: Sequence[Secret] = ()
    store: Store | None = field(default_factory=MemoryStore)
    max_outcome_bytes: int = 256 * 1024
    broker: Broker | None = None
    auth: AuthSettings | None = None
    budgets: Budgets = field(default_factory=Budgets)
    check_replay: bool | None = None

    def __post_init__(self) -> None:
        if self.request_state_key is not None:
            check_secrets(self.request_state_key)
        if isinstance(self.request_state_verify_keys, str | bytes):
            self.request_state_verify_keys = [self.request_state_verify_keys]
        if self.request_state_verify_keys:
            check_secrets(self.request_state_verify_keys)
        if self.store is not None and not isinstance(self.store, Store):
            raise ValueError(
                "ServerOptions.store must implement mrtr.server.store.Store (async add, get, "
                f"set, delete), or be None; not {type(self.store).__name__}"
            )
        if self.broker is not None and not isinstance(self.broker, Broker):
            raise ValueError(
                "ServerOptions.broker must implement mrtr.server.store.Broker (publish, async "
                f"subscribe), or be None; not {type(self.broker).__name__}"
            )
        if self.auth is not None:
            from .auth.principal import token_principal
            from .auth.settings import AuthSettings

            if not isinstance(self.auth, AuthSettings):
                raise ValueError(
                    "ServerOptions.auth must be an mrtr.server.auth.AuthSettings, not "
                    f"{type(self.auth).__name__}"
                )
            if self.principal is None:
                self.principal = token_principal
        if not isinstance(self.budgets, Budgets):
            raise ValueError(
                "ServerOptions.budgets must be an mrtr.server.budgets.Budgets, not "
                f"{type(self.budgets).__name__}"
            )
        _positive_int("ServerOptions", "max_outcome_bytes", self.max_outcome_bytes)
        _positive_int("ServerOptions", "max_state_bytes", self.max_state_bytes)
        _positive_int("ServerOptions", "page_size", self.page_size)
        _positive_int("ServerOptions", "sync_workers", self.sync_workers)
        if self.on_duplicate not in ("warn", "error", "replace"):
            raise ValueError(
                "ServerOptions.on_duplicate must be 'warn', 'error' or 'replace', not "
                f"{self.on_duplicate!r}"
            )
        ttl = _seconds("ServerOptions", "request_state_ttl", self.request_state_ttl, "0 = never")
        round_timeout = self.input_required.round_timeout
        if ttl == 0:
            logger.warning(
                "request_state_ttl=0: sealed requestStates never expire, so one copied from a "
                "log or a proxy can be replayed at any later time; give a lifetime in seconds, "
                "or request_state_ttl=math.inf to keep states forever without this warning"
            )
        elif not math.isinf(ttl) and 0 < ttl < round_timeout:
            logger.warning(
                "request_state_ttl (%g s) is shorter than input_required.round_timeout (%g s): "
                "a person who takes more than %g s to answer gets 'Invalid requestState' and "
                "must start over; set request_state_ttl to at least %g",
                ttl,
                round_timeout,
                ttl,
                round_timeout,
            )
