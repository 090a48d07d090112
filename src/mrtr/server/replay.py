"""The replay engine under its historical path: it lives in `mrtr.server._engine` now.

The rules are in `mrtr/server/_engine/replay.py`; this module re-exports the names code and
documentation import from here.
"""

from __future__ import annotations

from ._engine.capabilities import Asked
from ._engine.outcome import (
    STOPPED,
    Failure,
    InputPending,
    ReplayError,
    UnaskableMethod,
    leaves,
    run_unasking,
    stops_for_input,
)
from ._engine.questions import (
    KEY_PREFIX,
    MISSING,
    Asker,
    Batch,
    Question,
    Stepped,
    convert_answer,
    question_digest,
    typed_elicit_converter,
    validate_answer,
)
from ._engine.replay import ONCE_GRACE, YIELD_EVERY, Replay
from ._engine.round_state import RoundState
from ._engine.validation import describe_validation_error

__all__ = [
    "KEY_PREFIX",
    "MISSING",
    "ONCE_GRACE",
    "STOPPED",
    "YIELD_EVERY",
    "Asked",
    "Asker",
    "Batch",
    "Failure",
    "InputPending",
    "Question",
    "Replay",
    "ReplayError",
    "RoundState",
    "Stepped",
    "UnaskableMethod",
    "convert_answer",
    "describe_validation_error",
    "leaves",
    "question_digest",
    "run_unasking",
    "stops_for_input",
    "typed_elicit_converter",
    "validate_answer",
]
