"""The store's record of each `ctx.once` run in a redeemed round: started, then finished.

A redeemed round (one that carries a sealed `requestState` with a flow id, `redemption.py`)
can run again: when its request is cancelled, the claim on it is released so that a retry
runs at once, and when its process dies, a duplicate takes it over. The sealed state holds
only what earlier rounds recorded, so without more a `once` of that round would run again in
the second attempt. Each such `once` is therefore recorded in the store under
`mrtr/once/<flow id>/<once key>`, a guarantee record (never a cache):

1. Before `fn` runs, "started" is written (set if absent), naming this process.
2. When `fn` returns, its recorded result replaces it ("finished"). When `fn` raises, the
   record is dropped: the handler was told that it failed. A `fn` running when the round's
   request is cancelled may finish first (`replay.ONCE_GRACE`).
3. A later attempt of the round that finds "finished" gives the recorded result back and does
   not run `fn`; one that finds "started" knows that `fn` began and never reported: it may
   have taken effect. What happens then is the handler's `on_uncertain` choice (`context.py`):
   fail the round with -32603, `data.reason = "effect_uncertain"` (the default), run `fn`
   again, or ask a callable that checks the outside system under the `once`'s idempotency key.

Records live as long as the round's outcome record: past that, the state itself is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypeAlias

import orjson

from .store import Store

__all__ = ["FINISHED", "STARTED", "OnUncertain", "OnceJournal", "idempotency_key"]

logger = logging.getLogger("mrtr.server")

#: What a `once` found "started" by an earlier attempt does (rule 3): "fail" the round, run it
#: again ("retry"), or ask a callable, given the idempotency key, whether it may have run
#: (True: fail; False: run it).
OnUncertain: TypeAlias = Literal["fail", "retry"] | Callable[[str], bool | Awaitable[bool]]

#: Tag of a record whose `fn` started and has not reported (followed by the process id).
STARTED: Final = b"S"
#: Tag of a record whose `fn` finished (followed by its recorded result, as JSON).
FINISHED: Final = b"F"


def idempotency_key(flow_id: str, once_key: str) -> str:
    """The key naming the `once` called `once_key` of flow `flow_id` in an outside system."""
    return f"{flow_id}/{once_key}"


class OnceJournal:
    """Records the `ctx.once` runs of one redeemed round of the flow `flow_id` in `store`."""

    __slots__ = ("flow_id", "process", "store", "ttl")

    def __init__(self, store: Store, flow_id: str, ttl: float, process: str) -> None:
        self.store = store
        self.flow_id = flow_id
        #: Seconds each record lives: the round's outcome record's lifetime.
        self.ttl = ttl
        self.process = process

    def key(self, once_key: str) -> str:
        """The store key of the `once` named `once_key` in this flow."""
        return f"mrtr/once/{self.flow_id}/{once_key}"

    def idempotency_key(self, once_key: str) -> str:
        """The key that names this `once` in an outside system: the same on every attempt."""
        return idempotency_key(self.flow_id, once_key)

    async def begin(self, once_key: str) -> tuple[bytes, Any]:
        """Claim the `once` before `fn` runs (rule 1).

        `(b"", None)`: claimed, run `fn`. `(FINISHED, recorded)`: an earlier attempt finished
        it. `(STARTED, owner)`: an earlier attempt started it and never reported (rule 3).
        """
        key = self.key(once_key)
        store = self.store
        while True:
            if await store.add(key, STARTED + self.process.encode(), self.ttl):
                return b"", None
            record = await store.get(key)
            if record is None:
                continue  # expired or dropped in between: claim it again
            tag = record[:1]
            if tag == FINISHED:
                return FINISHED, orjson.loads(record[1:])
            return STARTED, record[1:].decode("ascii", "replace")

    async def restart(self, once_key: str) -> None:
        """Take over a "started" record whose `fn` is to run again (`on_uncertain` said so)."""
        await self.store.set(self.key(once_key), STARTED + self.process.encode(), self.ttl)

    async def finish(self, once_key: str, recorded: Any) -> None:
        """Record `fn`'s result (rule 2). A store that fails now is logged: the result is in
        this round's state all the same, and a later attempt finds "started" (uncertain)."""
        try:
            await self.store.set(self.key(once_key), FINISHED + orjson.dumps(recorded), self.ttl)
        except Exception:
            logger.exception("ctx.once(%r): could not record its result in the store", once_key)

    async def drop(self, once_key: str) -> None:
        """Forget a `once` that took no effect, or whose failure the handler was told of."""
        try:
            await self.store.delete(self.key(once_key))
        except Exception:
            logger.exception("ctx.once(%r): could not drop its record from the store", once_key)
