"""Exactly-once redemption of sealed request states.

Sealing stops a client from forging or altering a `requestState`, not from presenting the
same one twice: a replayed final round, or a client's re-send after a lost response. Run
again, the handler would repeat everything after its last question (the order placed twice).
So each redemption is recorded in the server's `Store`, under the state's flow id and round
("this round of this flow"):

1. Before the handler runs, `add` (set if absent) writes "running", naming this process and
   expiring after `round_timeout` (plus a little). A process running rounds keeps a liveness
   key in the store (`mrtr/alive/<process>`, rewritten every `BEAT_EVERY` seconds, expiring
   after `LIVENESS_TTL`): a duplicate waiting on a round whose process is gone (killed,
   crashed) takes the round over within about `LIVENESS_TTL` seconds (one waiter does,
   through `add` of a take-over key) and runs it.
   A round whose request is cancelled (over HTTP, a client that closes its stream: a dropped
   connection looks the same; running on would leave clients no way to cancel) is released
   at once, so that the client's retry runs it without waiting. What the round's handler did
   through `ctx.once` is in the store by then (`once_journal.py`): a retry gets each finished
   `once`'s result without running it again (one still running when the request was
   cancelled finishes first, within `replay.ONCE_GRACE`), and a `once` cut off mid-way is
   "may have run" (`on_uncertain`). The same holds for a round taken over from a process
   that died. Anything else the handler did before the cancellation runs again: a side
   effect belongs in `ctx.once`.
2. When the round ends, its outcome replaces it: the result dict, or the JSON-RPC error
   (a tool's own failure is a result like any other), kept for the state's remaining lifetime,
   after which the state itself is refused as expired. A round refused for what the request
   carried (-32602: an answer that does not fit its question; -32021) is released instead, so
   the client can send it again corrected.
3. A second redemption of the same round gets that outcome again (the same result under its
   own id); while the first is still running it waits for it (polling with backoff, bounded by
   the same expiry), and then claims the round itself if the record expired. A duplicate that
   waited that long and still finds it running gets -32603 saying to retry later. Other answers
   under the same state change nothing: a client may not re-answer by replaying; it is logged.
4. An outcome larger than `ServerOptions.max_outcome_bytes` (or not JSON) is not kept: the
   first request still gets it, a replay gets the uniform -32602 invalid requestState, and
   the cause goes to the log.

5. A round may settle its outcome before its run ends (`EarlyOutcome`): a call that became a
   task answers its request with the `CreateTaskResult` while the handler runs on for as long
   as the task lives, far past the "running" record's expiry. That answer is the round's
   outcome, so a re-sent round gets the same task at any time, and the run's own end records
   nothing more.

Claims a store fault left behind (a store that stalls or restarts must not strand a round):

6. Every claim carries a token, unique in its process ("running" names `<process>:<token>`),
   and the process keeps the set of tokens it holds: taken before the claim is written, and
   given up when the round's outcome is recorded or the round released. A claim whose write
   failed (a timeout: it may still be applied when the store resumes, or have been persisted
   before a restart) is given up at once, since its handler never ran; the client gets the
   store's retryable refusal. A cancelled round gives its token up as it is released (rule 1),
   even when the release itself fails, so that its claim is taken over as in rule 7. A round
   whose outcome could not be written stays held, and the outcome is written again in the
   background until it is.
7. A duplicate that finds a claim of this process under a token the process does not hold
   takes the round over at once. The liveness key of a process lists the tokens it holds, so
   a duplicate on another instance that has seen the same claim for `LIVENESS_TTL` seconds
   while its live owner does not list it takes it over too. A take-over is a compare-and-set
   through `add` of a key naming the stale claim: of any number of duplicates, one runs it.
8. A round whose handler failed on the store itself (`StoreFull`, `StoreUnavailable`, from
   a task that could not be stored, say) is released, not recorded: that answer says "retry",
   and a recorded one would repeat it forever.

Round 0 carries no state and is never recorded; nor are legacy sessions (no sealed state), nor
a state a custom verifier returned without a flow id.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import hashlib
import itertools
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import orjson

from ..protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    McpError,
    invalid_request_state,
)
from .once_journal import OnceJournal
from .store import Store, StoreFull, is_store_refusal

if TYPE_CHECKING:
    from .request_state import StateBinding, VerifiedState

__all__ = [
    "BEAT_EVERY",
    "LIVENESS_TTL",
    "NEVER_EXPIRING_OUTCOME_TTL",
    "PROCESS_ID",
    "EarlyOutcome",
    "Redemptions",
]

logger = logging.getLogger("mrtr.server")

#: Seconds an outcome is kept for a state that never expires (`request_state_ttl` 0 or inf):
#: a replay after that runs the handler again.
NEVER_EXPIRING_OUTCOME_TTL: Final = 86_400.0
# Added to a record's lifetime: instances sharing a store may disagree a little on the time.
_MARGIN: Final = 5.0
_FIRST_POLL: Final = 0.001
_LAST_POLL: Final = 0.1
#: Seconds a process's liveness key lives unless rewritten: a process that died is noticed
#: this long after its last beat. Generous against a loop stalled by a slow handler, since a
#: live process taken for dead would see its round run twice.
LIVENESS_TTL: Final = 10.0
#: Seconds between two rewrites of the liveness key while this process runs rounds.
BEAT_EVERY: Final = 2.0
# How often a waiting duplicate asks whether the running round's process is alive.
_LIVENESS_CHECK: Final = 1.0
#: Names this process as the owner of the rounds it runs.
PROCESS_ID: Final = secrets.token_hex(8)
# The tokens of the claims this process holds (rule 6), process-wide like PROCESS_ID (several
# servers of one process share it), each with the time.monotonic() its "running" record expires.
_HELD: dict[str, float] = {}
_TOKENS = itertools.count(1)
# Seconds between two attempts to write an outcome (or a release) the store refused.
_REWRITE_EVERY: Final = 0.5
# What a round's record says when its outcome did not fit in a full store: no longer than the
# "running" record it replaces, so the write always fits.
_FULL_NOTE: Final = b"the store was full"

# A record is one tag byte, the 32-hex-digit digest of the answers that claimed it, and then
# the outcome as JSON ("running": `<process id>:<token>` of the claim, rule 6).
_RUNNING: Final = b"R"
_RESULT: Final = b"D"
_ERROR: Final = b"E"
_NOT_KEPT: Final = b"L"
_DIGEST_LEN: Final = 32
# Errors that refuse what the request carried (an answer that does not fit its question, a
# question the client declared no capability for): the round did not go through, so the
# state stays redeemable and a corrected re-send runs it.
_REFUSALS: Final = frozenset((INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY))


def _answers_digest(responses: Any) -> bytes:
    # The answers in the order the client sent them (not re-sorted): a client re-sending its
    # request sends the same body, and a digest only decides whether a warning is logged.
    try:
        encoded = orjson.dumps(responses)
    except TypeError:  # answers orjson cannot write (checked on arrival, so rare): by repr
        encoded = repr(responses).encode("utf-8", "surrogatepass")
    digest = _ANSWERS_HASH.copy()  # a copy costs less than making a hasher
    digest.update(encoded)
    return binascii.hexlify(digest.digest())


_ANSWERS_HASH: Final = hashlib.blake2b(digest_size=_DIGEST_LEN // 2)


class _Throttle:
    """Lets one log line per cause through per `interval` seconds (clients choose how often
    they replay, so they must not choose how much the server logs)."""

    interval = 60.0

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def allows(self, cause: str) -> bool:
        now = time.monotonic()
        last = self._last.get(cause)
        if last is not None and now - last < self.interval:
            return False
        self._last[cause] = now
        return True


class Rejections(Protocol):
    """Where refused request states are logged (`rounds.RejectionLog`)."""

    def log(self, binding: StateBinding, cause: str, hint: str) -> None:
        """Log (or count) one refusal of a state presented for `binding`."""


#: Records a redeemed round's outcome in the store.
Keep = Callable[[dict[str, Any]], Awaitable[None]]


class EarlyOutcome:
    """Lets a redeemed round record its outcome before its run ends (rule 5 above).

    Made by the caller of `Redemptions.redeem` and passed to it; the run calls `settle` with
    what its request answered. Outside a redeemed round (round 0, no store) `settle` records
    nothing.
    """

    __slots__ = ("_keep", "settled")

    def __init__(self) -> None:
        self._keep: Keep | None = None
        self.settled = False

    def keep_with(self, keep: Keep) -> None:
        """Record through `keep` from now on (the redemption running the round gives it)."""
        self._keep = keep

    async def settle(self, outcome: dict[str, Any]) -> None:
        """Record `outcome` as the round's, once: a re-sent round gets it from now on."""
        if self.settled:
            return
        self.settled = True
        if self._keep is not None:
            await self._keep(outcome)


class Claim(NamedTuple):
    """This request's hold on a round it runs (`Redemptions.claim`): what ending it needs
    (a named tuple: made on every redeemed round, and cheaper to build than a frozen
    dataclass)."""

    key: str
    digest: bytes
    kept_for: float
    running: bytes
    token: str
    binding: StateBinding
    early: EarlyOutcome | None


class Redemptions:
    """Records each redemption of a sealed state in `store`, so a round runs at most once."""

    __slots__ = (
        "_beat",
        "_rejections",
        "_rewrites",
        "_throttle",
        "clock",
        "max_outcome_bytes",
        "round_timeout",
        "store",
    )

    def __init__(
        self,
        store: Store,
        *,
        max_outcome_bytes: int,
        round_timeout: float,
        rejections: Rejections,
    ) -> None:
        self.store = store
        self.max_outcome_bytes = max_outcome_bytes
        self.round_timeout = round_timeout
        self._rejections = rejections
        self._throttle = _Throttle()
        self._beat: asyncio.Task[None] | None = None
        self._rewrites: set[asyncio.Task[None]] = set()
        #: Seconds, monotonic: how long a duplicate has waited.
        self.clock: Callable[[], float] = time.monotonic

    @staticmethod
    def liveness_key(process: str) -> str:
        """The store key saying that `process` is alive."""
        return f"mrtr/alive/{process}"

    @staticmethod
    def key(verified: VerifiedState) -> str:
        """The store key of the round `verified` opens."""
        return f"mrtr/round/{verified.flow_id}/{verified.round}"

    def journal(self, verified: VerifiedState) -> OnceJournal:
        """Where the round `verified` opens records its `ctx.once` runs (rule 1)."""
        return OnceJournal(self.store, verified.flow_id, self._outcome_ttl(verified), PROCESS_ID)

    async def claim(
        self,
        binding: StateBinding,
        verified: VerifiedState,
        responses: Any,
        early: EarlyOutcome | None = None,
    ) -> Claim | dict[str, Any]:
        """Claim the round `verified` opens for this request to run: a `Claim` the first time
        (the caller runs the round once, then calls `ran` or `failed` with the claim), or the
        first run's outcome, which a repeat returns (see the module docstring). `early` lets
        the run settle that outcome before it ends (rule 5)."""
        store = self.store
        key = f"mrtr/round/{verified.flow_id}/{verified.round}"
        digest = _answers_digest(responses)
        kept_for = self._outcome_ttl(verified)
        timeout = self.round_timeout
        running_for = kept_for if timeout <= 0 else min(timeout + _MARGIN, kept_for)
        token = str(next(_TOKENS))
        running = b"".join((_RUNNING, digest, PROCESS_ID.encode(), b":", token.encode()))
        _HELD[token] = time.monotonic() + running_for  # before the claim is written (rule 6)
        try:
            claimed = await store.add(key, running, running_for)
            if claimed:
                # The first redemption, every flow's case: the round is claimed and runs.
                beat = self._beat
                if beat is None or beat.done():
                    await self._beating()
            else:
                outcome = await self._again(key, digest, running, token, running_for, binding)
                if outcome is not None:
                    _HELD.pop(token, None)
                    return outcome
        except BaseException:
            # The claim's write failed (or this request went away) before the handler ran:
            # whatever the store made of it, this process does not hold it (rule 6).
            _HELD.pop(token, None)
            raise
        claim = Claim(key, digest, kept_for, running, token, binding, early)
        if early is not None:

            async def settle(outcome: dict[str, Any]) -> None:
                await self._keep(key, _RESULT, digest, outcome, kept_for, binding, token)

            early.keep_with(settle)
        return claim

    async def ran(self, claim: Claim, result: dict[str, Any]) -> None:
        """The claimed round's run returned `result`: kept for its repeats."""
        early = claim.early
        if early is None or not early.settled:
            await self._keep(
                claim.key, _RESULT, claim.digest, result, claim.kept_for, claim.binding, claim.token
            )

    async def failed(self, claim: Claim, exc: BaseException) -> None:
        """The claimed round's run raised `exc` (the caller raises it on): a cancellation
        releases the round (rule 1), a store refusal too (rule 8); any other error is kept for
        its repeats, a handler's own as the generic error the dispatcher answers."""
        early = claim.early
        if early is not None and early.settled:
            return  # rule 5: the round's outcome is already recorded
        key, binding, token = claim.key, claim.binding, claim.token
        # A process that dies leaves "running" for a duplicate to take over; a cancellation
        # releases it (rule 1): what must not run twice is in the `once` journal.
        if isinstance(exc, asyncio.CancelledError):
            await self._release_cancelled(key, claim.running, binding, token)
        elif isinstance(exc, McpError):
            if exc.code in _REFUSALS or is_store_refusal(exc):
                await self._release(key, binding, token)
            else:
                error = exc.to_error()
                await self._keep(key, _ERROR, claim.digest, error, claim.kept_for, binding, token)
        elif isinstance(exc, Exception):
            error = {
                "code": INTERNAL_ERROR,
                "message": f"Internal error while handling {binding.method}",
            }
            await self._keep(key, _ERROR, claim.digest, error, claim.kept_for, binding, token)

    async def _again(
        self,
        key: str,
        digest: bytes,
        running: bytes,
        token: str,
        running_for: float,
        binding: StateBinding,
    ) -> dict[str, Any] | None:
        """A round already claimed: its outcome, once it has one (rules 1 and 3); None once
        this request has claimed the round itself (under `token`), to run it."""
        store = self.store
        started = self.clock()
        waited_until = started + running_for
        next_check = started
        delay = _FIRST_POLL
        seen: bytes | None = None
        seen_since = started
        while True:
            record = await store.get(key)
            if record is None:  # expired or dropped since it was claimed: claim it again
                if await store.add(key, running, running_for):
                    await self._beating()
                    return None
                continue
            if record[:1] != _RUNNING:
                return self._replay(record, digest, binding)
            now = self.clock()
            if record != seen:
                seen, seen_since = record, now
            if now >= waited_until:
                raise McpError(
                    INTERNAL_ERROR,
                    f"{binding.method} {binding.target!r}: an earlier request with this "
                    f"requestState is still being handled after {running_for:g} s; retry later",
                )
            if now >= next_check:
                next_check = now + _LIVENESS_CHECK
                if await self._take_over(
                    key, record, running, token, running_for, now - seen_since, binding
                ):
                    return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LAST_POLL)

    async def _take_over(
        self,
        key: str,
        record: bytes,
        running: bytes,
        token: str,
        running_for: float,
        seen_for: float,
        binding: StateBinding,
    ) -> bool:
        """Claim a round nobody runs (rules 1 and 7): its process died, or holds no such
        claim; whether this request now runs it."""
        owner = record[1 + _DIGEST_LEN :].decode("ascii", "replace")
        process, _, claim = owner.partition(":")
        if not process:
            return False  # no owner named
        store = self.store
        if process == PROCESS_ID:
            if not claim or claim in _HELD:
                return False  # running here, or cancelled here after it started
            why = "this process does not hold its claim (a store fault left it behind)"
        else:
            alive = await store.get(self.liveness_key(process))
            if alive is not None:
                # A live owner: stale only if a beat written since the claim was seen leaves
                # it out (`seen_for` past the liveness key's lifetime) - and old-style claims
                # without a token are never taken from a live process.
                if not claim or seen_for < LIVENESS_TTL or claim.encode() in alive.split(b","):
                    return False
                why = "its process is alive but does not hold its claim"
            else:
                why = f"the process running it is gone (no liveness for {LIVENESS_TTL:g} s)"
        if not await store.add(f"{key}/taken-over/{owner}", PROCESS_ID.encode(), running_for):
            return False  # another duplicate takes it over
        # `record` was read before the awaits above: its owner may have ended the round since
        # (outcome written, then the claim given up, in that order), and writing "running"
        # over that outcome would run the round twice. Read it again: only the same claim
        # still standing is taken over.
        if await store.get(key) != record:
            return False
        logger.warning(
            "%s %r: a redeemed round is taken over here: %s", binding.method, binding.target, why
        )
        await store.set(key, running, running_for)
        await self._beating()
        return True

    async def _beating(self) -> None:
        """Keep this process's liveness key alive while it may run rounds (rule 1)."""
        if self._beat is not None and not self._beat.done():
            return
        await self.store.set(self.liveness_key(PROCESS_ID), self._alive(), LIVENESS_TTL)
        self._beat = asyncio.get_running_loop().create_task(self._heartbeat(), name="mrtr liveness")

    def _alive(self) -> bytes:
        """The liveness key's value: "1" and the tokens this process holds (rule 7)."""
        now = time.monotonic()
        for token in [token for token, until in _HELD.items() if until <= now]:
            del _HELD[token]  # its record expired: nothing is held by it any longer
        return b",".join([b"1", *(token.encode() for token in _HELD)])

    async def _heartbeat(self) -> None:
        key = self.liveness_key(PROCESS_ID)
        while True:
            await asyncio.sleep(BEAT_EVERY)
            # A store that fails now is reported by the requests that need it.
            with contextlib.suppress(Exception):
                await self.store.set(key, self._alive(), LIVENESS_TTL)

    async def _release(self, key: str, binding: StateBinding, token: str | None = None) -> None:
        try:
            await self.store.delete(key)
        except Exception:
            logger.exception(
                "%s %r: could not release a refused redemption of a requestState; retrying",
                binding.method,
                binding.target,
            )
            if token is not None:
                self._retry(token, lambda: self.store.delete(key))
            return
        if token is not None:
            _HELD.pop(token, None)

    async def _release_cancelled(
        self, key: str, running: bytes, binding: StateBinding, token: str
    ) -> None:
        """Reopen a round whose request was cancelled, unless another process has taken it
        over since (its "running" record is not this request's any more)."""
        try:
            if await self.store.get(key) == running:
                await self.store.delete(key)
        except Exception:
            # The token is given up below all the same: a retry on this instance then takes
            # the claim over at once, on another once the liveness key leaves it out (rule 6).
            logger.exception(
                "%s %r: could not release the redemption of a cancelled round; a retry takes "
                "it over",
                binding.method,
                binding.target,
            )
        finally:
            _HELD.pop(token, None)

    async def _keep(
        self,
        key: str,
        tag: bytes,
        digest: bytes,
        outcome: dict[str, Any],
        kept_for: float,
        binding: StateBinding,
        token: str | None = None,
    ) -> None:
        try:
            payload = orjson.dumps(outcome)
        except TypeError as exc:
            tag, payload = _NOT_KEPT, f"its outcome is not JSON ({exc})".encode()
        else:
            if len(payload) > self.max_outcome_bytes:
                tag = _NOT_KEPT
                payload = (
                    f"its outcome ({len(payload)} bytes) is larger than max_outcome_bytes "
                    f"({self.max_outcome_bytes})"
                ).encode()
        record = tag + digest + payload
        store = self.store
        try:
            try:
                await store.set(key, record, kept_for)
            except StoreFull:
                # No room for the outcome: a note no longer than the "running" record takes
                # its place, so a replay is refused rather than run again.
                record = _NOT_KEPT + digest + _FULL_NOTE
                logger.error(
                    "%s %r: the store is full: the outcome of a redeemed requestState is not "
                    "kept (a replay of it is refused)",
                    binding.method,
                    binding.target,
                )
                await store.set(key, record, kept_for)
        except Exception:
            # The request's own outcome still goes out; the record is written again in the
            # background, and until then a duplicate waits for it (rule 6).
            logger.exception(
                "%s %r: could not record the outcome of a redeemed requestState; retrying",
                binding.method,
                binding.target,
            )
            if token is not None:
                self._retry(token, lambda: store.set(key, record, kept_for))
            return
        if token is not None:
            _HELD.pop(token, None)

    def _retry(self, token: str, write: Callable[[], Awaitable[None]]) -> None:
        """Try `write` again every `_REWRITE_EVERY` seconds until it goes through (then give up
        `token`) or the claim's record expires (rule 6)."""

        async def again() -> None:
            while time.monotonic() < _HELD.get(token, 0.0):
                await asyncio.sleep(_REWRITE_EVERY)
                try:
                    await write()
                except Exception:
                    continue
                _HELD.pop(token, None)
                return

        task = asyncio.get_running_loop().create_task(again(), name="mrtr record outcome")
        self._rewrites.add(task)
        task.add_done_callback(self._rewrites.discard)

    def _replay(self, record: bytes, digest: bytes, binding: StateBinding) -> dict[str, Any]:
        tag = record[:1]
        payload = record[1 + _DIGEST_LEN :]
        if record[1 : 1 + _DIGEST_LEN] != digest and self._throttle.allows("answers"):
            logger.warning(
                "%s %r: a requestState was redeemed again with other inputResponses; the "
                "first redemption's outcome is returned (answers cannot be changed by "
                "replaying a state)",
                binding.method,
                binding.target,
            )
        if tag == _RESULT:
            result: dict[str, Any] = orjson.loads(payload)
            return result
        if tag == _ERROR:
            raise McpError.from_error(orjson.loads(payload))
        self._rejections.log(
            binding,
            "redeemed_again",
            f"this round already ran once and {payload.decode(errors='replace')}, so the "
            "repeat cannot be answered with it",
        )
        raise invalid_request_state()

    @staticmethod
    def _outcome_ttl(verified: VerifiedState) -> float:
        expires_at = verified.expires_at
        if expires_at is None or not math.isfinite(expires_at):
            return NEVER_EXPIRING_OUTCOME_TTL
        return max(expires_at - time.time(), 0.0) + _MARGIN
