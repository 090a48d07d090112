"""Client configuration (seed: `ClientOptions`, `ClientOptions::InputRequiredConfig`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

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
    `round_timeout`: seconds to wait for the server's answer to one attempt (0 = no limit).
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

    method: str
    target: str
    round: int
    keys: tuple[str, ...]
    state_size: int
    elapsed: float


_Config = InputRequiredConfig  # the options class re-exports it under the seed's nested name


@dataclass(slots=True)
class ClientOptions:
    """Client options; `on_round` is called after each input-required round is answered.

    `protocol`: `"auto"` (the default) finds out whether the server speaks 2026-07-28 or an
    `initialize`-based revision and speaks the same; `"modern"` and `"legacy"` insist on one.
    `probe_timeout`: seconds a stdio server has to answer the `server/discover` probe before
    it is taken for a legacy server that ignores unknown requests.
    """

    InputRequiredConfig: ClassVar[type[_Config]] = InputRequiredConfig

    input_required: _Config = field(default_factory=lambda: _Config())
    on_round: Callable[[RoundInfo], None] | None = None
    request_timeout: float = 600.0
    protocol: Protocol = "auto"
    probe_timeout: float = 2.0

    def __post_init__(self) -> None:
        if self.protocol not in _PROTOCOLS:
            raise ValueError(
                f"protocol must be 'auto', 'modern' or 'legacy', not {self.protocol!r}"
            )
        if not self.probe_timeout > 0:
            raise ValueError(
                f"probe_timeout must be a positive number of seconds, not {self.probe_timeout!r}"
            )
