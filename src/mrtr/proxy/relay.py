"""The relay: a retry that reached one proxy instance, carried to the instance holding its call.

A held call lives in one process (`held.py`). Instances sharing a store and a broker
(`MRTR_STORE_URL`, or `ServerOptions.store` and `broker`) carry a round to it. The broker may
lose a message or deliver one twice (a pub/sub reconnect is enough), and the store may pause:
nothing below rests on one message arriving once. Rules:

1. Instance B, given a retry whose `requestState` names instance A, writes the retry's
   answers, its caller and the caller's capabilities in the store under the round, which is
   the call, its step and a digest of the answers (`mrtr/proxy/<call>/<step>/<digest>/ask`,
   set if absent): a retry that carries other answers (one left out before, now given) is
   another round, and a re-sent retry is the same one. B signals A on A's channel
   (`mrtr/proxy/<A>`), and signals again every `RESIGNAL` seconds until A has taken the round,
   so a lost signal only delays it. A re-sent retry finds the round already forwarded and
   waits for the same outcome.
2. A takes the round once (`.../taken`, set if absent, renewed every `CLAIM_TTL` / 3 seconds
   while it works); a round whose outcome is written already is not served again, so a signal
   delivered twice, or late, changes nothing. A applies the answers to its held call, runs
   the call to its result or its next questions, writes that outcome (`.../outcome`) and
   signals B. The call's own errors (it is no longer held, the backend failed) are outcomes
   too.
3. B waits for the outcome, looking at the store with a backoff and woken by A's signal. Each
   instance keeps a liveness key while its relay runs (`mrtr/proxy/alive/<instance>`,
   rewritten every `ALIVE_TTL` / 4 seconds, living `ALIVE_TTL`). If A's key stays missing for
   `ALIVE_GRACE` seconds while the store answers (A stopped: a kill -9 included; an outage
   restarts the count, so a live A has time to write it again), or A, alive, leaves the
   round untaken for `TAKE_TIMEOUT` seconds, B answers -32603 saying the instance holding
   the call is gone, with `data.mayHaveRun` true (the backend call died with A, maybe after
   its effect). A claim that lapses while A lives (its renewal failed) is signalled again,
   and A takes the round up where it was (a re-attach, `held.py` rule 2). That answer is
   B's, never written as the round's outcome: a re-send of the round waits for A again.
4. The backend's logs and progress during the round go from A to B on B's channel, each
   counted (`note <round> <JSON>`), and B passes them on to the client in order, on the
   retry's stream. The outcome says how many A sent: B answers once it has passed them all
   on (the broker and the store are two paths, so the outcome may arrive first), or after
   `NOTE_WAIT` seconds at most (a note the broker lost is not waited for longer). B queues
   at most `MAX_NOTES` of them for a client slower than the backend; past that it drops the
   newest, and logs that it did.
5. Once a round is forwarded, a store that stops answering (`StoreUnavailable`: paused,
   failing over) is waited out for `STORE_GRACE` seconds on both sides: B keeps looking for
   the outcome, A keeps renewing its claim and keeps trying to write the outcome, so a short
   outage delays the round rather than failing it. Past that B answers the store's retryable
   refusal; a re-send of the round waits for the same outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from ..inputs import InputRequest, InputRequiredResult
from ..protocol.errors import INTERNAL_ERROR, McpError
from ..protocol.meta import LOG_LEVEL_RANK
from ..protocol.types import CallToolResult
from ..server.context import supports
from ..server.store import StoreUnavailable
from .held import HeldCalls, principal_of

if TYPE_CHECKING:
    from ..server.context import RequestContext
    from ..server.store import Broker, Store

logger = logging.getLogger("mrtr.proxy")

#: Seconds a forwarded round may wait for a live holding instance to take it.
TAKE_TIMEOUT = 10.0
#: Seconds an instance's liveness key lives unless rewritten (every quarter of it) (rule 3).
ALIVE_TTL = 1.0
#: Seconds a holder's liveness key must stay missing, the store answering, before the holder
#: is taken for gone: long enough for a live holder to rewrite it after a store outage.
ALIVE_GRACE = 2 * ALIVE_TTL
#: Seconds between two signals of a forwarded round not taken yet (rule 1).
RESIGNAL = 0.5
#: Seconds a taken round's claim lives unless renewed (the holder renews it while it works).
CLAIM_TTL = 3.0
#: The longest pause between two looks at the store for an outcome.
MAX_POLL = 0.5
#: Seconds an outcome waits for the round's logs and progress still on their way (rule 4).
NOTE_WAIT = 2.0
#: Logs and progress of one relayed round queued at once for the client (rule 4).
MAX_NOTES = 1000
#: Seconds a relayed round rides out a store that does not answer (a pause, a failover)
#: before it gives up (rule 5).
STORE_GRACE = 10.0


def channel(instance: str) -> str:
    """The broker channel an instance hears its relayed rounds on."""
    return f"mrtr/proxy/{instance}"


class Relay:
    """Forwards retries to the instances holding their calls, and serves those forwarded
    here (module rules)."""

    def __init__(self, held: HeldCalls, store: Store, broker: Broker) -> None:
        self.held = held
        self.store = store
        self.broker = broker
        self._ttl = held.hold_timeout + 60.0
        self._waiting: dict[str, asyncio.Event] = {}
        self._notes: dict[str, _Notes] = {}
        self._serving: set[asyncio.Task[None]] = set()
        self._unsubscribe: Any = None
        self._beat: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen on this instance's channel, and say that it lives (rule 3)."""
        self._unsubscribe = await self.broker.subscribe(channel(self.held.instance), self._heard)
        self._beat = asyncio.ensure_future(self._live())

    async def stop(self) -> None:
        """Stop listening, and stop serving forwarded rounds."""
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(BaseException):
                await self._beat
            self._beat = None
            with contextlib.suppress(McpError):
                await self.store.delete(_alive(self.held.instance))
        if self._unsubscribe is not None:
            await self._unsubscribe()
            self._unsubscribe = None
        for task in list(self._serving):
            task.cancel()
        for task in list(self._serving):
            with contextlib.suppress(BaseException):
                await task

    def _heard(self, message: bytes) -> None:
        kind, _, key = message.decode(errors="replace").partition(" ")
        if kind == "note":
            key, _, body = key.partition(" ")
            notes = self._notes.get(key)
            if notes is not None:
                notes.hear(body)
        elif kind == "serve":
            task = asyncio.ensure_future(self._serve(key))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        elif kind == "done" and key in self._waiting:
            self._waiting[key].set()

    # --- on the instance the retry reached (rules 1 and 3) -----------------------------------

    async def forward(self, ctx: RequestContext, instance: str, call_id: str, step: int) -> Any:
        """Serve a retry for the call `instance` holds; its result, questions or error."""
        responses = ctx.input_responses
        digest = hashlib.sha256(
            json.dumps(responses, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:24]
        key = f"mrtr/proxy/{call_id}/{step}/{digest}"
        ask = {
            "from": self.held.instance,
            "principal": principal_of(ctx),
            "responses": responses,
            "capabilities": ctx.client_capabilities,
        }
        woken = self._waiting[key] = asyncio.Event()
        notes = self._notes[key] = _Notes(ctx)
        try:
            await self.store.add(f"{key}/ask", json.dumps(ask).encode(), self._ttl)
            outcome = await self._outcome(key, woken, instance)
            sent = outcome.get("notes")
            await notes.passed_on(sent if type(sent) is int else 0)
        finally:
            self._waiting.pop(key, None)
            self._notes.pop(key, None)
            notes.stop()
        return _decoded(outcome)

    async def _outcome(self, key: str, woken: asyncio.Event, instance: str) -> dict[str, Any]:
        started = time.monotonic()
        untaken_since = started
        unseen_since: float | None = None  # the holder's liveness key missing (rule 3)
        down_since: float | None = None
        signalled = -RESIGNAL
        pause = 0.02
        while True:
            now = time.monotonic()
            try:
                raw = await self.store.get(f"{key}/outcome")
                taken = raw is None and await self.store.get(f"{key}/taken") is not None
                alive = raw is None and await self.store.get(_alive(instance)) is not None
            except StoreUnavailable:
                down_since = down_since or now
                if now - down_since > STORE_GRACE:
                    raise  # rule 5: the store's retryable refusal
                unseen_since = None  # rule 3: a key missing after an outage is counted anew
                await asyncio.sleep(pause)
                pause = min(MAX_POLL, pause * 2)
                continue
            down_since = None
            if raw is not None:
                outcome: dict[str, Any] = json.loads(raw)
                return outcome
            unseen_since = None if alive else unseen_since or now
            if unseen_since is not None and now - unseen_since > ALIVE_GRACE:
                raise _gone()  # it has not said it lives for longer than it ever waits to
            if taken:
                untaken_since = now
            else:
                if now - untaken_since > TAKE_TIMEOUT:
                    raise _gone()  # alive, but deaf to this round all along
                if now - signalled >= RESIGNAL:
                    signalled = now  # rule 1: until taken, a lost signal is sent again
                    self.broker.publish(channel(instance), f"serve {key}".encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), pause)
            woken.clear()
            pause = min(MAX_POLL, pause * 2)

    # --- on the instance holding the call (rule 2) -------------------------------------------

    async def _serve(self, key: str) -> None:
        parts = key.split("/")
        if len(parts) != 5:
            return  # not a round's key: nothing to serve
        call_id, step_text = parts[2], parts[3]
        claim = f"{key}/taken"
        if not await self.store.add(claim, self.held.instance.encode(), CLAIM_TTL):
            return  # taken already
        renew = asyncio.ensure_future(self._renew(claim))
        heard: _SentBack | None = None
        try:
            raw = await self.store.get(f"{key}/ask")
            ask = json.loads(raw) if raw is not None else {}
            sender = ask.get("from")
            if await self.store.get(f"{key}/outcome") is not None:
                # Served already: this signal came twice, or late (rule 2).
                if isinstance(sender, str):
                    self.broker.publish(channel(sender), f"done {key}".encode())
                return
            try:
                held = self.held.resume(
                    call_id, int(step_text), ask.get("principal", ""), ask.get("responses", {})
                )
                check = functools.partial(supports, ask.get("capabilities") or {})
                if isinstance(sender, str):
                    heard = _SentBack(self.broker, channel(sender), key)
                outcome = _encoded(await self.held.advance(held, check, heard))
            except McpError as exc:
                outcome = {"error": exc.to_error()}
            except Exception:
                logger.exception("serving a relayed round of %s failed", call_id)
                outcome = {
                    "error": {
                        "code": INTERNAL_ERROR,
                        "message": "the proxied call failed",
                        "data": {"mayHaveRun": True},
                    }
                }
            if heard is not None:
                heard.stop()
                outcome["notes"] = heard.sent
            await self._write(f"{key}/outcome", json.dumps(outcome).encode())
            if isinstance(sender, str):
                self.broker.publish(channel(sender), f"done {key}".encode())
        finally:
            renew.cancel()

    async def _live(self) -> None:
        """Keep this instance's liveness key (rule 3) while the relay runs."""
        while True:
            try:
                await self.store.set(_alive(self.held.instance), b"1", ALIVE_TTL)
            except StoreUnavailable:
                await asyncio.sleep(0.2)  # rule 5: written again as soon as it answers
                continue
            await asyncio.sleep(ALIVE_TTL / 4)

    async def _renew(self, claim: str) -> None:
        while True:
            await asyncio.sleep(CLAIM_TTL / 3)
            with contextlib.suppress(StoreUnavailable):  # rule 5: renewed once it answers
                await self.store.set(claim, self.held.instance.encode(), CLAIM_TTL)

    async def _write(self, key: str, value: bytes) -> None:
        """Write a round's outcome, through a store outage of up to `STORE_GRACE` (rule 5)."""
        deadline = time.monotonic() + STORE_GRACE
        pause = 0.05
        while True:
            try:
                await self.store.set(key, value, self._ttl)
                return
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(MAX_POLL, pause * 2)


def _alive(instance: str) -> str:
    """The key an instance keeps while it lives (rule 3)."""
    return f"mrtr/proxy/alive/{instance}"


def _gone() -> McpError:
    """B's answer when the instance holding the call is gone (rule 3)."""
    return McpError(
        INTERNAL_ERROR,
        "the proxy instance holding this call's backend call is gone (it stopped before "
        "answering), and the backend call may have run: check what it did before calling "
        "the tool again",
        {"mayHaveRun": True},
    )


class _SentBack:
    """A relayed round's logs and progress, sent to the instance serving its request (rule 4);
    the `RoundListener` of the held call while the round runs here."""

    def __init__(self, broker: Broker, to: str, key: str) -> None:
        self._broker = broker
        self._to = to
        self._prefix = f"note {key} ".encode()
        self._open = True
        #: How many were sent.
        self.sent = 0

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        self._send({"log": [level, data, logger]})

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        self._send({"progress": [progress, total, message]})

    def _send(self, note: dict[str, Any]) -> None:
        if self._open:  # a note after the outcome was counted would never be waited for
            self.sent += 1
            self._broker.publish(self._to, self._prefix + json.dumps(note).encode())

    def stop(self) -> None:
        """The round is over: what the backend says now is nobody's to hear."""
        self._open = False


class _Notes:
    """A relayed round's logs and progress, as they come from the holding instance, passed on
    in order to the round's context (rule 4)."""

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._moved = asyncio.Event()
        self._task = asyncio.ensure_future(self._pass())
        #: How many were passed on (dropped ones included: rule 4).
        self.passed = 0
        self.dropped = 0

    def hear(self, body: str) -> None:
        if self._queue.qsize() < MAX_NOTES:
            self._queue.put_nowait(body)
            return
        if not self.dropped:
            logger.warning(
                "a relayed round's client is %d log and progress messages behind: dropping "
                "the newest",
                MAX_NOTES,
            )
        self.dropped += 1
        self.passed += 1  # nothing more of it will come: waiting for it would only delay
        self._moved.set()

    async def _pass(self) -> None:
        ctx = self._ctx
        while True:
            body = await self._queue.get()
            try:
                note = json.loads(body)
                if "log" in note:
                    level, data, name = note["log"]
                    level = level if level in LOG_LEVEL_RANK else "info"
                    await ctx.log(level, data, name if isinstance(name, str) else None)
                elif "progress" in note:
                    progress, total, message = note["progress"]
                    await ctx.report_progress(progress, total, message)
            except Exception:  # a malformed note, or a closed stream: the round goes on
                logger.debug("a relayed round's note was not passed on", exc_info=True)
            self.passed += 1
            self._moved.set()

    async def passed_on(self, count: int) -> None:
        """Wait until `count` notes were passed on, `NOTE_WAIT` seconds at most."""
        deadline = time.monotonic() + NOTE_WAIT
        while self.passed < count and (left := deadline - time.monotonic()) > 0:
            self._moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)

    def stop(self) -> None:
        self._task.cancel()


def _encoded(value: Any) -> dict[str, Any]:
    """A round's outcome as the store keeps it."""
    if isinstance(value, InputRequiredResult):
        requests = value.input_requests or {}
        return {
            "questions": {k: r.model_dump(mode="json") for k, r in requests.items()},
            "state": value.request_state,
        }
    if isinstance(value, CallToolResult):
        return {"result": value.to_wire()}
    raise TypeError(f"a held call ended with {type(value).__name__}")


def _decoded(outcome: dict[str, Any]) -> Any:
    """What the handler returns (or raises) for a relayed round's `outcome`."""
    if "error" in outcome:
        raise McpError.from_error(outcome["error"])
    if "questions" in outcome:
        return InputRequiredResult(
            input_requests={
                k: InputRequest.model_validate(r) for k, r in outcome["questions"].items()
            },
            request_state=outcome["state"],
        )
    return CallToolResult.model_validate(outcome["result"])
