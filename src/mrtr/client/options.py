"""Client configuration (seed: `ClientOptions`, `ClientOptions::InputRequiredConfig`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar


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
    """Client options; `on_round` is called after each input-required round is answered."""

    InputRequiredConfig: ClassVar[type[_Config]] = InputRequiredConfig

    input_required: _Config = field(default_factory=lambda: _Config())
    on_round: Callable[[RoundInfo], None] | None = None
    request_timeout: float = 600.0
