"""MRTR rounds under their historical path: they live in `mrtr.server._engine.rounds` now."""

from __future__ import annotations

from ._engine.capabilities import AskedQuestions, require_capabilities
from ._engine.rounds import (
    Invoke,
    Questions,
    RejectionLog,
    Render,
    Round,
    RoundContext,
    RoundKeeper,
    timed_out,
)

__all__ = [
    "AskedQuestions",
    "Invoke",
    "Questions",
    "RejectionLog",
    "Render",
    "Round",
    "RoundContext",
    "RoundKeeper",
    "require_capabilities",
    "timed_out",
]
