"""Client configuration (seed: `ClientOptions`, `ClientOptions::InputRequiredConfig`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from .auth.oauth import OAuth

#: Which protocol era a client speaks: find out (`auto`), or insist on one.
Protocol = Literal["auto", "modern", "legacy"]
_PROTOCOLS = ("auto", "modern", "legacy")


@dataclass(frozen=True, slots=True)
class InputRequiredConfig:
    """How the client drives MRTR for `call_tool`, `get_prompt` and `read_resource`.

    `auto_fulfill`: answer input requests through the registered handlers and retry; when
    False the call raises `InputRequiredError` carrying the `InputRequiredResult`, and the
    application retries by hand with `input_responses=` and `request_state=`.
    `max_rounds`: the most input-required results one call accepts before giving up.
    `max_input_requests`: the most questions one round may ask (at least 1); a round asking
    more fails the call before any handler runs, so a server cannot make the client call its
    handlers (or prompt a person) thousands of times.
    `round_timeout`: seconds to wait for the server's answer to one attempt (0 = no limit);
    `ClientOptions.request_timeout` bounds each attempt too, and the shorter of the two wins.
    `max_total_timeout`: seconds for the whole flow, handlers included (0 = no limit).
    """

    auto_fulfill: bool = True
    max_rounds: int = 10
    round_timeout: float = 600.0
    max_total_timeout: float = 0.0
    max_input_requests: int = 16  # last, so positional construction keeps its meaning

    def __post_init__(self) -> None:
        if self.max_input_requests < 1:
            raise ValueError(
                f"max_input_requests must be at least 1, not {self.max_input_requests}"
            )


@dataclass(frozen=True, slots=True)
class RoundInfo:
    """What one MRTR round did, for `ClientOptions.on_round`."""

    method: str  # the request's method (`tools/call`, ...)
    target: str  # the tool or prompt name, or the resource URI
    round: int  # 1 for the first InputRequiredResult, then 2, ...
    keys: tuple[str, ...]  # the keys of the questions the round asked
    state_size: int  # the length of the sealed requestState, in bytes
    elapsed: float  # seconds the round took, answers included


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How the client takes part in the tasks extension (`io.modelcontextprotocol/tasks`).

    `enabled`: declare the extension on every 2026-07-28 request, so a server may answer a
    `tools/call` with a task, which `call_tool` then drives to its result. On by default: the
    spec lets a server answer either way once it is declared, and every task ends in the
    same `CallToolResult` a plain call returns, so nothing changes for the caller but that a
    long tool no longer needs a long-held request.
    `notifications`: ask for `notifications/tasks` on a `subscriptions/listen` stream while
    waiting, and poll only as a backstop.
    `min_poll_interval`: seconds between polls at least, whatever `pollIntervalMs` says.
    `max_poll_interval`: seconds between polls at most, whatever `pollIntervalMs` says.
    `default_poll_interval`: seconds between polls when the server suggests none.
    `backstop_interval`: seconds between backstop polls while notifications come (sooner
    when the task's TTL runs out first); also the longest the client's own backoff stretches
    the wait between polls to (each poll that finds the task's status unchanged doubles the
    wait, from the server's hint, up to this), so that a task that never ends is not polled
    20 times a second forever.
    `max_poll_failures`: consecutive `tasks/get` failures (a timeout, a dropped connection,
    -32603) tolerated before giving up.
    `ttl_grace`: seconds past the task's `createdAt + ttlMs` the client keeps waiting for a
    task that does not end before it gives up (`TASK_EXPIRED`).
    `max_wait`: seconds the client waits for a task to end, from when it starts waiting,
    before it gives up with `REQUEST_TIMEOUT` naming this bound (`call_tool` then cancels
    the task; `TaskHandle.result(timeout=)` overrides it for one wait; 0: no limit). An hour
    by default: six times `ClientOptions.request_timeout` (what one held request may take), so
    a task has room for far longer work than a request, while one that never ends (a server
    that keeps it working, moving its TTL on) does not hold the caller forever.
    """

    enabled: bool = True
    notifications: bool = True
    min_poll_interval: float = 0.05
    max_poll_interval: float = 30.0
    default_poll_interval: float = 1.0
    backstop_interval: float = 5.0
    max_poll_failures: int = 3
    ttl_grace: float = 5.0
    max_wait: float = 3600.0

    def __post_init__(self) -> None:
        if not self.max_wait >= 0:
            raise ValueError(
                f"max_wait must be a number of seconds, at least 0 (no limit), not "
                f"{self.max_wait!r}"
            )
        if not 0 < self.min_poll_interval <= self.max_poll_interval:
            raise ValueError(
                "min_poll_interval must be positive and at most max_poll_interval, not "
                f"{self.min_poll_interval!r} (max {self.max_poll_interval!r})"
            )
        if self.max_poll_failures < 1:
            raise ValueError(f"max_poll_failures must be at least 1, not {self.max_poll_failures}")


_Config = InputRequiredConfig  # the options class re-exports it under the seed's nested name


@dataclass(slots=True)
class ClientOptions:
    """Client options; `on_round` is called after each input-required round is answered.

    `input_required`: how the client drives MRTR (`InputRequiredConfig`: answer automatically
    or not, the limits on rounds, questions and time).
    `on_round`: called with a `RoundInfo` after each input-required round is answered.
    `request_timeout`: seconds to wait for the answer to one request before it is cancelled
    and fails with `REQUEST_TIMEOUT` (0: no limit); `request(..., timeout=)` overrides it. It
    bounds each round trip, not a whole call: each MRTR round of `call_tool`, `get_prompt` and
    `read_resource` (with `InputRequiredConfig.round_timeout`, the shorter winning), a legacy
    session's call with the questions the server asks during it, each poll of a task; the
    client's own handlers between rounds are not counted (`max_total_timeout` bounds a flow).
    `protocol`: `"auto"` (the default) finds out whether the server speaks 2026-07-28 or an
    `initialize`-based revision and speaks the same; `"modern"` and `"legacy"` insist on one.
    `probe_timeout`: seconds a stdio server has to answer the era probe's `ping`, and then
    its `server/discover`, before it is taken for a legacy server that ignores them.
    `tasks`: the tasks extension (see `TaskOptions`).
    `auth`: authorization for HTTP servers (an `mrtr.client.auth.OAuth`), used by `Client.http`
    when it is given none itself.
    `max_server_requests_in_flight`: the most questions (`elicitation/create`,
    `sampling/createMessage`, `roots/list`) a legacy server may have answered at once; one
    more is refused with -32600 and no handler runs. None (the default): the MRTR bound of a
    round, `input_required.max_input_requests` (16).
    `max_server_requests`: the most questions a legacy server may ask per client request
    (counted while client requests are in flight on the session, and over the session for
    those asked while none is); past it each is refused with -32600 and no handler runs.
    None (the default): the MRTR bound of a call, `max_input_requests * max_rounds` (160).
    """

    #: The class of `input_required` (`ClientOptions.InputRequiredConfig(max_rounds=...)`).
    InputRequiredConfig: ClassVar[type[_Config]] = InputRequiredConfig

    input_required: _Config = field(default_factory=lambda: _Config())
    on_round: Callable[[RoundInfo], None] | None = None
    request_timeout: float = 600.0
    protocol: Protocol = "auto"
    probe_timeout: float = 2.0
    tasks: TaskOptions = field(default_factory=TaskOptions)
    auth: OAuth | None = None
    max_server_requests_in_flight: int | None = None
    max_server_requests: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_server_requests_in_flight", "max_server_requests"):
            bound = getattr(self, name)
            if bound is not None and (
                not isinstance(bound, int) or isinstance(bound, bool) or bound < 1
            ):
                raise ValueError(f"{name} must be None or an integer of at least 1, not {bound!r}")
        if self.protocol not in _PROTOCOLS:
            raise ValueError(
                f"protocol must be 'auto', 'modern' or 'legacy', not {self.protocol!r}"
            )
        if not self.probe_timeout > 0:
            raise ValueError(
                f"probe_timeout must be a positive number of seconds, not {self.probe_timeout!r}"
            )
