"""`RoundState`: what the sealed `requestState` carries from one round to the next.

See the rules in `replay.py` (rule 5: what is sealed; rule 6: answers sent without a state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pydantic

from ..input_bounds import stored_answer
from ..request_state import new_flow_id
from .questions import validate_answer


@dataclass(slots=True, init=False)
class RoundState:
    """What the sealed `requestState` carries between rounds (see the module rules)."""

    round: int
    answers: dict[str, list[Any]]  # key -> [digest, answer]
    asked: dict[str, list[str]]  # key -> [digest, method]
    once: dict[str, Any]
    user: str | None
    unsealed: dict[str, Any] | None  # answers sent without a state (rule 6); never sealed
    # This round's answers as already-validated models, so awaiting them validates nothing
    # twice; never sealed.
    validated: dict[str, pydantic.BaseModel]
    # The flow this request belongs to (see `ensure_flow_id`); sealed in the token's header.
    flow_id: str

    # Written out rather than generated: the generated one calls a factory per field, and
    # every request makes one of these.
    def __init__(
        self,
        round: int = 0,
        answers: dict[str, list[Any]] | None = None,
        asked: dict[str, list[str]] | None = None,
        once: dict[str, Any] | None = None,
        user: str | None = None,
        unsealed: dict[str, Any] | None = None,
        validated: dict[str, pydantic.BaseModel] | None = None,
        flow_id: str = "",
    ) -> None:
        self.round = round
        self.answers = {} if answers is None else answers
        self.asked = {} if asked is None else asked
        self.once = {} if once is None else once
        self.user = user
        self.unsealed = unsealed
        self.validated = {} if validated is None else validated
        self.flow_id = flow_id

    def ensure_flow_id(self) -> str:
        """The flow id, minted on first use: the same on every round of one flow.

        Made lazily, so a call that never asks and never reads `ctx.flow_id` pays nothing.
        """
        if not self.flow_id:
            self.flow_id = new_flow_id()
        return self.flow_id

    def encode(self) -> bytes:
        """Compact JSON; empty parts are left out to keep small states small."""
        out: dict[str, Any] = {}
        if self.answers:
            out["a"] = self.answers
        if self.asked:
            out["q"] = self.asked
        if self.once:
            out["o"] = self.once
        if self.user is not None:
            out["u"] = self.user
        return orjson.dumps(out)

    @classmethod
    def decode(cls, data: bytes, round: int, flow_id: str = "") -> RoundState:
        """Inverse of `encode` (the bytes were authenticated, so they are ours)."""
        if not data:
            return cls(round, flow_id=flow_id)
        raw = orjson.loads(data)
        # A part left out is None here, for which `__init__` makes the empty dict.
        get = raw.get
        return cls(round, get("a"), get("q"), get("o"), get("u"), flow_id=flow_id)

    def stored_answers(self) -> dict[str, list[Any]]:
        """`answers` as they are sealed: this round's with only the fields their type defines.

        What a client adds beyond the result type (checked for size on arrival) is dropped
        here, so no later round carries, decrypts and parses it again.
        """
        fresh = self.validated
        if not fresh:
            return self.answers
        return {
            key: [entry[0], stored_answer(fresh[key])] if key in fresh else entry
            for key, entry in self.answers.items()
        }

    def take_responses(self, responses: dict[str, Any]) -> None:
        """Record this round's answers to the questions the last round asked."""
        for key, (digest, method) in self.asked.items():
            if key in responses:
                self.validated[key] = validate_answer(key, method, responses[key])
                self.answers[key] = [digest, responses[key]]
