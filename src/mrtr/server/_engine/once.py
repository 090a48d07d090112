"""The `ctx.once` calls of one run (replay rules 9 to 11): running `fn` once, recording its
result in the state, and in a redeemed round journaling it in the store.

`Replay.once` decides whether a call may start (rules 8 and 9); `OnceCalls` runs it and keeps
what is running and what could not be recorded, for the run to settle when it ends.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import pydantic

from ...protocol.errors import effect_uncertain
from ..once_codec import OnceCodec, Unrecordable, callable_identity
from ..once_journal import FINISHED, STARTED, OnceJournal, OnUncertain
from .outcome import ReplayError
from .validation import describe_validation_error

logger = logging.getLogger("mrtr.server")


class OnceCalls:
    """The `ctx.once` calls of one run: what is running, and what could not be recorded."""

    __slots__ = ("fns", "label", "running", "store", "unrecordable")

    def __init__(self, store: dict[str, Any], label: str) -> None:
        #: Where results are recorded: the round's state (`RoundState.once`).
        self.store = store
        #: The request, as logs name it.
        self.label = label
        self.fns: dict[str, Any] = {}
        #: The calls running now, by key: a task of `fn`, or a future standing for a journaled
        #: run (rule 11).
        self.running: dict[str, asyncio.Future[Any]] = {}
        #: Keys whose result could not be recorded, with why (rule 9).
        self.unrecordable: dict[str, str] = {}

    def check_fn(self, key: str, fn: Callable[[], Any]) -> None:
        """Rule 9: two calls of one run with the same key must call the same function."""
        identity = callable_identity(fn)
        if self.fns.setdefault(key, identity) is not identity:
            raise ReplayError(
                f"ctx.once({key!r}) was called twice in this run with different functions; "
                "give each side effect its own key"
            )

    async def run(
        self,
        key: str,
        codec: OnceCodec,
        fn: Callable[[], Any],
        journal: OnceJournal | None,
        on_uncertain: OnUncertain,
    ) -> Any:
        """Run `fn` (or join its run) and give its result as recorded (rules 9 and 11)."""
        running = self.running.get(key)
        if running is None:
            if journal is not None:
                return await self._journaled(journal, key, codec, fn, on_uncertain)
            produced = fn()
            if not inspect.isawaitable(produced):
                return self._record(key, codec, produced)
            running = asyncio.ensure_future(produced)
            self.running[key] = running
            running.add_done_callback(functools.partial(self._once_done, key, codec))
        # Shielded: if this task is cancelled (the run stops for input), the side effect still
        # finishes and is recorded for the next round.
        await asyncio.shield(running)
        problem = self.unrecordable.get(key)
        if problem is not None:
            raise ReplayError(f"ctx.once({key!r}): {problem}")
        return restore_once(key, codec, self.store[key])

    async def _journaled(
        self,
        journal: OnceJournal,
        key: str,
        codec: OnceCodec,
        fn: Callable[[], Any],
        on_uncertain: OnUncertain,
    ) -> Any:
        """Rule 11: run `fn` under its record in the store (see `once_journal.py`).

        The record is read and written in the handler's own task (with an in-process store
        nothing waits, and a sync `fn` costs no task); `shared` stands for the run meanwhile,
        so that concurrent calls with this key, rule 8's settling and a cancellation see it.
        """
        shared: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.running[key] = shared
        started = False
        try:
            tag, found = await journal.begin(key)
            if tag == FINISHED:
                value = restore_once(key, codec, found)
                self.store[key] = found
                self._end_once(key, shared, value)
                return value
            if tag == STARTED:
                if not await self._may_run_again(journal, key, on_uncertain):
                    logger.warning(
                        "%s: ctx.once(%r) started in an earlier attempt of this round (process "
                        "%s) and never finished; not run again (on_uncertain)",
                        self.label,
                        key,
                        found,
                    )
                    raise effect_uncertain(self.label, key, journal.idempotency_key(key))
                await journal.restart(key)
            started = True
            produced = fn()
        except BaseException as exc:
            if started:  # `fn` reported its failure: nothing is left uncertain
                await journal.drop(key)
            self._end_once(key, shared, error=exc)
            raise
        if inspect.isawaitable(produced):
            # Its own task, as any async `once`: a cancelled handler does not cut it off.
            task = asyncio.ensure_future(
                self._journal_result(journal, key, codec, produced, shared)
            )
            shared.add_done_callback(functools.partial(_cancel_with, task))
            await asyncio.shield(shared)
        else:
            await self._journal_result(journal, key, codec, produced, shared)
        problem = self.unrecordable.get(key)
        if problem is not None:
            raise ReplayError(f"ctx.once({key!r}): {problem}")
        return restore_once(key, codec, self.store[key])

    async def _journal_result(
        self,
        journal: OnceJournal,
        key: str,
        codec: OnceCodec,
        produced: Any,
        shared: asyncio.Future[Any],
    ) -> None:
        """Take `fn`'s result (awaiting it when `produced` is awaitable), record it in the
        state and as finished in the store, and end `shared` with it (or with its error)."""
        if inspect.isawaitable(produced):
            try:
                produced = await produced
            except asyncio.CancelledError:
                self._end_once(key, shared, error=asyncio.CancelledError())
                raise  # cut off: the record stays "started"
            except BaseException as exc:
                await journal.drop(key)  # `fn` reported its failure: nothing is left uncertain
                self._end_once(key, shared, error=exc)
                return
        try:
            recorded = codec.record(produced)[0]
        except Unrecordable as exc:
            self._refuse(key, str(exc))  # the record stays "started": the effect happened
        else:
            self.store[key] = recorded
            try:
                await journal.finish(key, recorded)
            except asyncio.CancelledError:
                # The effect happened: record it before the cancellation goes through.
                await journal.finish(key, recorded)
                self._end_once(key, shared, produced)
                raise
        self._end_once(key, shared, produced)

    def _end_once(
        self,
        key: str,
        shared: asyncio.Future[Any],
        value: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """The journaled `once` that `shared` stands for ended: with `value`, or `error`."""
        if self.running.get(key) is shared:
            del self.running[key]
        if shared.done():
            return
        if error is None:
            shared.set_result(value)
        elif isinstance(error, asyncio.CancelledError):
            shared.cancel()
        else:
            shared.set_exception(error)
            shared.exception()  # whoever awaits it gets it; nobody may: no "never retrieved"

    async def _may_run_again(
        self, journal: OnceJournal, key: str, on_uncertain: OnUncertain
    ) -> bool:
        """Whether a `once` an earlier attempt started and never finished runs again now."""
        if on_uncertain == "retry":
            return True
        if on_uncertain == "fail" or not callable(on_uncertain):
            return False
        may_have_run = on_uncertain(journal.idempotency_key(key))
        if inspect.isawaitable(may_have_run):
            may_have_run = await may_have_run
        return not may_have_run

    async def live(self, key: str, fn: Callable[[], Any]) -> Any:
        """Rule 10: run `fn` once per request; its result is kept as it is, never sealed."""
        store = self.store
        if key in store:
            return store[key]
        running = self.running.get(key)
        if running is None:
            produced = fn()
            if not inspect.isawaitable(produced):
                store[key] = produced
                return produced
            running = asyncio.ensure_future(produced)
            self.running[key] = running
            running.add_done_callback(functools.partial(self._live_once_done, key))
        # Shielded: a call cancelled while another shares the run must not cancel that run.
        return await asyncio.shield(running)

    def _live_once_done(self, key: str, future: asyncio.Future[Any]) -> None:
        self.running.pop(key, None)
        if not future.cancelled() and future.exception() is None:
            self.store[key] = future.result()

    def _record(self, key: str, codec: OnceCodec, value: Any) -> Any:
        try:
            recorded, given = codec.record(value)
        except Unrecordable as exc:
            self._refuse(key, str(exc))
            raise ReplayError(f"ctx.once({key!r}): {exc}") from None
        self.store[key] = recorded
        return given

    def _once_done(self, key: str, codec: OnceCodec, future: asyncio.Future[Any]) -> None:
        self.running.pop(key, None)
        if future.cancelled() or future.exception() is not None:
            return  # nothing to record; whoever awaits it gets the error
        try:
            self.store[key] = codec.record(future.result())[0]
        except Unrecordable as exc:
            self._refuse(key, str(exc))

    def _refuse(self, key: str, problem: str) -> None:
        self.unrecordable[key] = problem


def _cancel_with(running: asyncio.Future[Any], shared: asyncio.Future[Any]) -> None:
    """A cancelled `shared` (the run was cut short) cancels the task it stands for."""
    if shared.cancelled():
        running.cancel()


def restore_once(key: str, codec: OnceCodec, recorded: Any) -> Any:
    """A recorded `once` result as `fn` gave it, or a `ReplayError` naming the key."""
    try:
        return codec.restore(recorded)
    except pydantic.ValidationError as exc:
        raise ReplayError(
            f"ctx.once({key!r}): the recorded result no longer fits the function's return "
            f"type: {describe_validation_error(exc)}"
        ) from None
