"""Property: a proxy keeps each caller's held calls its own, runs each backend effect at most
once and ends every call, whatever order rounds, drops, re-sends and broker faults come in.

A Hypothesis state machine, in process. The backend is an mrtr `Server`: `ask2` asks twice
(each question naming the call's id), then appends the id to `Backend.effects` inside
`ctx.once`; the prompt `ask_prompt` asks once; the resource template `log://{id}` logs. Two
`proxy_server` instances share one `MemoryStore` and one broker (a `MemoryBroker` a rule can
make lose or duplicate its next message); instance A reaches the backend as 2026-07-28 and B as
legacy, through an in-memory `Client` per backend session. Callers: alice and bob speak
2026-07-28, each with a verified token of its own, their raw `tools/call` rounds sent to A or B
as a rule picks; carol (on A) and dave (on B) are legacy sessions answering live.

Rules: start a call; answer its pending round fully, or with an answer left out; re-send its
last round unchanged (a client after a lost response); drop a round once its answer reached
the backend (the request is cancelled), to re-send it later; get a prompt or read a resource
while calls are held; lose or duplicate the next broker message. After every step: a caller
was shown (asked, logged to) only what names its own ids; no effect ran twice; a call told
`data.mayHaveRun: false` has no effect. Each round: it ends within `GUARD` seconds; an error
on a continuing round says whether the call may have run (`data.mayHaveRun`); a full answer
moves the call on (that question is not asked again); an answer left out is asked again; a
result names the call and its effect ran once. At teardown every open call is driven to its
end (answered, or its dropped round re-sent, on the instance it started on).

Size: `EXAMPLES` (20) examples of at most `STEPS` (12) steps, `derandomize=True` (the same
examples each run), at most `FAULTS` broker faults an example: about 20 s on a 2-core
machine, every rule on. A failing run shrinks its example, which takes minutes (a stranded
round costs `GUARD` seconds each time it is tried), so only the first failure is shrunk and
reported. The tests after the
machine replay the shortest failing examples it found, one per rule of the expected
behaviour, in a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import secrets
from collections import Counter, defaultdict
from collections.abc import Awaitable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from helpers.mrtr_flows import request_meta
from mrtr import Client, ClientOptions, ElicitResult, RequestContext, Server
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.errors import McpError
from mrtr.proxy import ProxyBackend, proxy_server
from mrtr.server.auth.principal import SCOPE_KEY, token_principal
from mrtr.server.auth.token import AccessToken
from mrtr.server.options import ServerOptions
from mrtr.server.store import Deliver, Gap, MemoryBroker, MemoryStore, Unsubscribe

T = TypeVar("T")

#: Seconds one round (or a prompt, a read) may take: only reached when it is stranded. Every
#: wait the proxy makes in a round here is shorter: the session wait, a relayed hand-over.
GUARD = 3.0
#: The proxy's hold timeout: longer than any example, so no call here expires.
HOLD = 30.0
SESSIONS = 3
#: Seconds a call waits for a free backend session before it is refused (`mayHaveRun` false).
SESSION_WAIT = 0.3
#: Seconds the backend works after each answer: a round dropped then is mid-call.
PAUSE = 0.02
EXAMPLES = 20
STEPS = 12
#: Broker faults armed in one example at most.
FAULTS = 2
#: Calls and side requests open at once, at most.
MAX_OPEN = 5
MODERN = ("alice", "bob")
#: Each legacy caller and the instance its session is on.
LEGACY = {"carol": "A", "dave": "B"}
#: A (2026-07-28) and B (legacy): the era each instance reaches the backend in.
ERAS = {"A": "modern", "B": "legacy"}
OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
ACCEPT = {"action": "accept", "content": {"ok": True}}
#: The ids a question or a log names ("Q1 for alice-c3?", "log for dave-r1").
MENTION = re.compile(r"\bfor ([a-z]+-[cpr]\d+)")
_request_ids = itertools.count(1)


def mentioned(text: str) -> list[str]:
    """The call ids `text` names."""
    return MENTION.findall(text)


# --- the backend -----------------------------------------------------------------------------


class Backend:
    """The backend server, the effects its calls had and the answers that reached it."""

    def __init__(self) -> None:
        #: Each call's effect, by id, in the order they ran.
        self.effects: list[str] = []
        #: How often each question's answer reached the tool ("alice-c1/Q2"); a 2026-07-28
        #: backend replays its handler, so a count can grow on later rounds too.
        self.reached: Counter[str] = Counter()
        #: Set each time an answer reaches the tool.
        self.moved = asyncio.Event()
        server = Server("backend")
        self.server = server

        @server.tool()
        async def ask2(ctx: RequestContext, id: str) -> str:
            """Ask twice, then record the call's effect (once, whatever the rounds)."""
            for number in (1, 2):
                await ctx.elicit(f"Q{number} for {id}?", OK)
                self.reached[f"{id}/Q{number}"] += 1
                self.moved.set()
                await asyncio.sleep(PAUSE)

            def effect() -> str:
                self.effects.append(id)
                return id

            await ctx.once("effect", effect)
            return f"done {id}"

        @server.prompt()
        async def ask_prompt(ctx: RequestContext, id: str) -> str:
            """Ask once, during `prompts/get`."""
            await ctx.elicit(f"P for {id}?", OK)
            return f"prompt {id}"

        @server.resource_template("log://{id}")
        async def logged(ctx: RequestContext, id: str) -> str:
            """Log a line naming the reader's id."""
            await ctx.info(f"log for {id}")
            return f"read {id}"


class InMemoryTarget:
    """A proxy's `Target`: each backend session an in-memory `Client` of `era`."""

    def __init__(self, server: Server, era: str) -> None:
        self.server = server
        self.era = era

    def describe(self) -> str:
        return f"the in-memory backend ({self.era})"

    def client(self, **handlers: Any) -> Client:
        options = ClientOptions(protocol=self.era)  # type: ignore[arg-type]
        return Client.in_memory(self.server, options=options, **handlers)


class FaultyBroker:
    """A `MemoryBroker` that loses, or delivers twice, the next message when told to."""

    def __init__(self) -> None:
        self.inner = MemoryBroker()
        #: "lose" or "duplicate": what happens to the next message published.
        self.fault: str | None = None
        #: What each fault hit: (fault, channel, start of the message).
        self.hits: list[tuple[str, str, bytes]] = []

    def publish(self, channel: str, message: bytes) -> None:
        fault, self.fault = self.fault, None
        if fault is not None:
            self.hits.append((fault, channel, message[:48]))
        if fault == "lose":
            return
        self.inner.publish(channel, message)
        if fault == "duplicate":
            self.inner.publish(channel, message)

    async def subscribe(
        self, channel: str, deliver: Deliver, on_gap: Gap | None = None
    ) -> Unsubscribe:
        return await self.inner.subscribe(channel, deliver, on_gap)


# --- what the test knows of each call --------------------------------------------------------


@dataclass(eq=False)
class Call:
    """One client call of `ask2`, as its caller sees it."""

    id: str
    caller: str
    #: The instance it started on.
    home: str
    legacy: bool
    #: 2026-07-28: the pending round's questions (key -> input request) and state.
    questions: dict[str, Any] = field(default_factory=dict)
    state: str | None = None
    #: 2026-07-28: the last retry sent (its params), what it answered and left out.
    retry: dict[str, Any] | None = None
    answered: frozenset[str] = frozenset()
    left_out: str | None = None
    #: The last retry was dropped: its outcome is unknown until it is re-sent.
    dropped: bool = False
    #: "result" or "error" once the caller was told.
    outcome: str | None = None
    error: Any = None
    #: Legacy: the call's task, and the live question waiting for the test's answer.
    task: asyncio.Task[Any] | None = None
    waiting: tuple[str, asyncio.Future[Any]] | None = None
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    #: Legacy: whether any answer was given (its rounds are one request).
    answered_any: bool = False

    def __repr__(self) -> str:  # how a failing example names the call it drew
        return self.id

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.id)

    def open(self) -> bool:
        return self.outcome is None


def caller_info(name: str) -> dict[str, Any]:
    """A 2026-07-28 caller's `transport_info`: its verified token, as the HTTP guard puts it."""
    return {SCOPE_KEY: AccessToken(subject=name, issuer="test")}


class ProxyMachine(RuleBasedStateMachine):
    """Two proxy instances, one backend, four callers (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.failed = False
        self.backend = Backend()
        self.broker = FaultyBroker()
        self.faults = 0
        store = MemoryStore()
        key = secrets.token_bytes(32)
        self.proxies: dict[str, Server] = {}
        for instance, era in ERAS.items():
            options = ServerOptions(
                store=store, broker=self.broker, request_state_key=key, principal=token_principal
            )
            proxied = ProxyBackend(
                InMemoryTarget(self.backend.server, era),  # type: ignore[arg-type]
                sessions=SESSIONS,
                hold_timeout=HOLD,
                session_wait=SESSION_WAIT,
            )
            self.proxies[instance] = proxy_server(proxied, name="proxy", options=options)
        self.calls: dict[str, Call] = {}
        self.numbers: dict[str, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        #: Prompts and reads running in the background: what each is, and its task.
        self.side: list[tuple[str, asyncio.Task[None]]] = []
        #: Ids whose caller was told an error with `data.mayHaveRun` false.
        self.no_effect: set[str] = set()
        #: What a caller was shown that names another caller's id.
        self.crossed: list[str] = []
        self.legacy: dict[str, Client] = {}
        self.stack = contextlib.AsyncExitStack()
        self.run(self._open())

    # --- running async code from sync rules ---------------------------------------------------

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return self.loop.run_until_complete(coroutine)
        except BaseException:
            self.failed = True
            raise

    async def _open(self) -> None:
        for server in self.proxies.values():
            await self.stack.enter_async_context(server.running())
        for name, instance in LEGACY.items():
            client = Client.in_memory(
                self.proxies[instance],
                options=ClientOptions(protocol="legacy"),
                elicitation_handler=self._live_question(name),
                log_handler=self._log_heard(name),
                log_level="debug",
            )
            self.legacy[name] = await self.stack.enter_async_context(client)

    def new_id(self, caller: str, kind: str) -> str:
        return f"{caller}-{kind}{next(self.numbers[caller + kind])}"

    def shown(self, caller: str, text: str, how: str) -> None:
        """`caller` was `how` ("asked", "logged") `text`: it must name its own ids only."""
        ids = mentioned(text)
        if not ids or any(ident.split("-")[0] != caller for ident in ids):
            self.crossed.append(f"{caller} was {how} {text!r}")

    # --- 2026-07-28 callers: raw rounds ---------------------------------------------------------

    async def send(
        self, caller: str, instance: str, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """One raw 2026-07-28 request of `caller` to `instance`: its response."""
        meta = {**request_meta({"elicitation": {"form": {}}}), meta_keys.LOG_LEVEL: "debug"}
        message = {
            "jsonrpc": "2.0",
            "id": next(_request_ids),
            "method": method,
            "params": {**params, "_meta": meta},
        }

        async def notify(note: dict[str, Any]) -> None:
            if note.get("method") == "notifications/message":
                self.shown(caller, str(note.get("params", {}).get("data")), "logged")

        server = self.proxies[instance]
        try:
            async with asyncio.timeout(GUARD):
                response = await server.handle_message(message, notify, caller_info(caller))
        except TimeoutError:
            raise AssertionError(
                f"{method} {params.get('arguments') or params.get('uri')} of {caller} on "
                f"{instance} did not end within {GUARD} s (broker faults: {self.broker.hits})"
            ) from None
        assert response is not None
        return response

    async def start_modern(self, caller: str, instance: str) -> None:
        call = Call(self.new_id(caller, "c"), caller, instance, legacy=False)
        self.calls[call.id] = call
        params = {"name": "ask2", "arguments": {"id": call.id}}
        self.settle(call, await self.send(caller, instance, "tools/call", params), instance)

    def retry_of(
        self, call: Call, partial: bool
    ) -> tuple[dict[str, Any], frozenset[str], str | None]:
        """The retry answering `call`'s pending round (an answer left out if `partial`), the
        questions it answers and the one it leaves out."""
        keys = sorted(call.questions)
        left_out = keys[-1] if partial else None
        responses = {key: ACCEPT for key in keys if key != left_out}
        params = {
            "name": "ask2",
            "arguments": {"id": call.id},
            "inputResponses": responses,
            "requestState": call.state,
        }
        messages = {key: call.questions[key]["params"]["message"] for key in keys}
        answered = frozenset(messages[key] for key in responses)
        return params, answered, None if left_out is None else messages[left_out]

    async def answer(self, call: Call, instance: str, partial: bool) -> None:
        params, answered, left_out = self.retry_of(call, partial)
        call.retry, call.answered, call.left_out = params, answered, left_out
        response = await self.send(call.caller, instance, "tools/call", params)
        self.settle(call, response, instance)

    async def resend(self, call: Call, instance: str) -> None:
        assert call.retry is not None
        call.dropped = False
        response = await self.send(call.caller, instance, "tools/call", call.retry)
        self.settle(call, response, instance)

    async def drop(self, call: Call, instance: str) -> None:
        """Send a full answer, and cancel the request once the answer reached the backend (or
        its response came: then that response is lost)."""
        params, answered, _ = self.retry_of(call, partial=False)
        call.retry, call.answered, call.left_out = params, answered, None
        keys = [f"{call.id}/{text.split()[0]}" for text in answered if text.startswith("Q")]
        before = {key: self.backend.reached[key] for key in keys}
        sent = asyncio.ensure_future(self.send(call.caller, instance, "tools/call", params))
        try:
            async with asyncio.timeout(GUARD):
                while True:
                    self.backend.moved.clear()
                    if sent.done() or any(self.backend.reached[k] != before[k] for k in keys):
                        break
                    moved = asyncio.ensure_future(self.backend.moved.wait())
                    await asyncio.wait({sent, moved}, return_when=asyncio.FIRST_COMPLETED)
                    moved.cancel()
        except TimeoutError:
            raise AssertionError(
                f"a round of {call.id} on {instance} neither reached the backend nor ended within "
                f"{GUARD} s (broker faults: {self.broker.hits})"
            ) from None
        finally:
            sent.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sent  # a failure of the round itself (a stranded round) still fails the test
        call.dropped = True
        call.questions, call.state = {}, None

    def settle(self, call: Call, response: dict[str, Any], instance: str) -> None:
        """What a round of a 2026-07-28 call ended with, checked (module docstring)."""
        where = f"{call.id} on {instance}"
        continuing = call.retry is not None
        if "error" in response:
            error = response["error"]
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            assert isinstance(error.get("code"), int) and error.get("message"), error
            if continuing:
                assert "mayHaveRun" in data, (
                    f"a continuing round of {where} failed without saying whether the call may "
                    f"have run: {error}"
                )
            if data.get("mayHaveRun") is False:
                self.no_effect.add(call.id)
            call.outcome, call.error = "error", error
            return
        result = response["result"]
        if result.get("resultType") == "input_required":
            messages = {}
            for key, request in result["inputRequests"].items():
                messages[key] = request["params"]["message"]
                self.shown(call.caller, messages[key], "asked")
            again = call.answered & set(messages.values())
            assert not again, f"{where}: answered {sorted(again)}, and was asked it again"
            if call.left_out is not None:
                assert call.left_out in messages.values(), (
                    f"{where}: left out {call.left_out!r}, and was not asked it again: {messages}"
                )
            call.questions, call.state = result["inputRequests"], result["requestState"]
            return
        text = result["content"][0]["text"]
        assert text == f"done {call.id}", f"{where} ended with {result}"
        count = self.backend.effects.count(call.id)
        assert count == 1, f"{where} ended with a result, its effect ran {count} times"
        call.outcome = "result"
        call.questions, call.state = {}, None

    # --- legacy callers: live questions -------------------------------------------------------

    def _live_question(self, caller: str) -> Any:
        async def answer(params: Any) -> ElicitResult:
            message = params.message
            self.shown(caller, message, "asked")
            [ident, *_] = mentioned(message) or [""]
            call = self.calls.get(ident)
            if call is None or call.caller != caller or not call.open():
                return ElicitResult(action="accept", content={"ok": True})  # a prompt's
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            call.waiting = (message, future)
            call.asked.set()
            result: ElicitResult = await future
            return result

        return answer

    def _log_heard(self, caller: str) -> Any:
        def heard(params: dict[str, Any]) -> None:
            self.shown(caller, str(params.get("data")), "logged")

        return heard

    async def start_legacy(self, caller: str) -> None:
        call = Call(self.new_id(caller, "c"), caller, LEGACY[caller], legacy=True)
        self.calls[call.id] = call
        call.task = asyncio.ensure_future(self.legacy[caller].call_tool("ask2", {"id": call.id}))
        await self.legacy_wait(call)

    async def answer_live(self, call: Call) -> None:
        assert call.waiting is not None
        _, future = call.waiting
        call.waiting = None
        call.asked.clear()
        call.answered_any = True
        if not future.done():  # not cut off meanwhile
            future.set_result(ElicitResult(action="accept", content={"ok": True}))
        await self.legacy_wait(call)

    async def legacy_wait(self, call: Call) -> None:
        """Until `call` is asked its next question live, or ends (checked)."""
        assert call.task is not None
        asked = asyncio.ensure_future(call.asked.wait())
        done, _ = await asyncio.wait(
            {asked, call.task}, timeout=GUARD, return_when=asyncio.FIRST_COMPLETED
        )
        asked.cancel()
        assert done, f"legacy call {call.id} was neither asked nor ended within {GUARD} s"
        if not call.task.done():
            return
        where = f"legacy call {call.id} on {call.home}"
        try:
            result = call.task.result()
        except McpError as exc:
            data = exc.data if isinstance(exc.data, dict) else {}
            if call.answered_any:
                assert "mayHaveRun" in data, (
                    f"{where} failed after an answer without saying whether it may have run: "
                    f"{exc!r}"
                )
            if data.get("mayHaveRun") is False:
                self.no_effect.add(call.id)
            call.outcome, call.error = "error", exc
            return
        text = getattr(result.content[0], "text", None)
        assert text == f"done {call.id}", f"{where} ended with {result}"
        count = self.backend.effects.count(call.id)
        assert count == 1, f"{where} ended with a result, its effect ran {count} times"
        call.outcome = "result"

    # --- prompts and reads, beside the calls -------------------------------------------------

    async def prompt(self, caller: str, instance: str) -> None:
        """`caller` gets `ask_prompt` (answering its question, up to three rounds)."""
        pid = self.new_id(caller, "p")
        if caller in LEGACY:
            try:
                got = await self.legacy[caller].get_prompt("ask_prompt", {"id": pid})
            except McpError:
                return  # refused: a clear error
            text = str(got.messages[0].content)
            assert pid in text, f"{caller}'s prompt {pid} came back as {got}"
            return
        params: dict[str, Any] = {"name": "ask_prompt", "arguments": {"id": pid}}
        for _ in range(3):
            response = await self.send(caller, instance, "prompts/get", params)
            if "error" in response:
                assert response["error"].get("message"), response
                return
            result = response["result"]
            if result.get("resultType") != "input_required":
                assert pid in str(result["messages"]), f"{caller}'s prompt {pid}: {result}"
                return
            for request in result["inputRequests"].values():
                self.shown(caller, request["params"]["message"], "asked")
            params = {
                **params,
                "inputResponses": {key: ACCEPT for key in result["inputRequests"]},
                "requestState": result["requestState"],
            }
        raise AssertionError(f"{caller}'s prompt {pid} on {instance} asked more than twice")

    async def read(self, caller: str, instance: str) -> None:
        """`caller` reads `log://<id>`, which logs naming it."""
        rid = self.new_id(caller, "r")
        uri = f"log://{rid}"
        if caller in LEGACY:
            read = await self.legacy[caller].read_resource(uri)
            assert getattr(read.contents[0], "text", None) == f"read {rid}", read
            return
        response = await self.send(caller, instance, "resources/read", {"uri": uri})
        assert response.get("result", {}).get("contents", [{}])[0].get("text") == f"read {rid}", (
            response
        )

    def beside(self, what: str, work: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                async with asyncio.timeout(GUARD):
                    await work
            except TimeoutError:
                raise AssertionError(f"{what} did not end within {GUARD} s") from None

        self.side.append((what, self.loop.create_task(guarded())))

    # --- what rules may pick ----------------------------------------------------------------

    def open_calls(self, *, legacy: bool | None = None) -> list[Call]:
        return [
            call
            for call in self.calls.values()
            if call.open() and (legacy is None or call.legacy == legacy)
        ]

    def busy(self) -> int:
        return len(self.open_calls()) + sum(1 for _, task in self.side if not task.done())

    def pending(self) -> list[Call]:
        return [
            call for call in self.open_calls(legacy=False) if call.questions and not call.dropped
        ]

    def resendable(self) -> list[Call]:
        return [
            call
            for call in self.calls.values()
            if not call.legacy and call.retry is not None and call.outcome != "error"
        ]

    def waiting(self) -> list[Call]:
        return [call for call in self.open_calls(legacy=True) if call.waiting is not None]

    # --- rules ------------------------------------------------------------------------------

    @precondition(lambda self: self.busy() < MAX_OPEN)
    @rule(caller=st.sampled_from(MODERN), instance=st.sampled_from("AB"))
    def start_call(self, caller: str, instance: str) -> None:
        self.run(self.start_modern(caller, instance))

    @precondition(lambda self: self.busy() < MAX_OPEN)
    @rule(caller=st.sampled_from(sorted(LEGACY)))
    def start_legacy_call(self, caller: str) -> None:
        self.run(self.start_legacy(caller))

    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data(), instance=st.sampled_from("AB"), partial=st.booleans())
    def answer_round(self, data: st.DataObject, instance: str, partial: bool) -> None:
        call = data.draw(st.sampled_from(self.pending()), label="call")
        self.run(self.answer(call, instance, partial))

    @precondition(lambda self: bool(self.resendable()))
    @rule(data=st.data(), instance=st.sampled_from("AB"))
    def resend_last_round(self, data: st.DataObject, instance: str) -> None:
        call = data.draw(st.sampled_from(self.resendable()), label="call")
        self.run(self.resend(call, instance))

    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data(), instance=st.sampled_from("AB"))
    def drop_round(self, data: st.DataObject, instance: str) -> None:
        call = data.draw(st.sampled_from(self.pending()), label="call")
        self.run(self.drop(call, instance))

    @precondition(lambda self: bool(self.waiting()))
    @rule(data=st.data())
    def answer_live_question(self, data: st.DataObject) -> None:
        call = data.draw(st.sampled_from(self.waiting()), label="call")
        self.run(self.answer_live(call))

    @precondition(lambda self: bool(self.open_calls()) and self.busy() < MAX_OPEN)
    @rule(
        caller=st.sampled_from([*MODERN, *sorted(LEGACY)]),
        instance=st.sampled_from("AB"),
        kind=st.sampled_from(["prompt", "read"]),
    )
    def beside_held_calls(self, caller: str, instance: str, kind: str) -> None:
        work = self.prompt(caller, instance) if kind == "prompt" else self.read(caller, instance)
        self.beside(f"{kind} of {caller} on {LEGACY.get(caller, instance)}", work)
        self.run(asyncio.sleep(0.01))  # under way: its question or log meets the held calls

    @precondition(lambda self: self.faults < FAULTS and self.broker.fault is None)
    @rule(fault=st.sampled_from(["lose", "duplicate"]))
    def broker_fault(self, fault: str) -> None:
        self.broker.fault = fault
        self.faults += 1

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def each_caller_shown_only_its_own(self) -> None:
        if self.crossed:
            self.failed = True
        assert not self.crossed, f"a caller was shown another's: {self.crossed}"

    @invariant()
    def each_effect_at_most_once(self) -> None:
        twice = [ident for ident, count in Counter(self.backend.effects).items() if count > 1]
        told_not_run = self.no_effect & set(self.backend.effects)
        if twice or told_not_run:
            self.failed = True
        assert not twice, f"effects ran twice: {twice}"
        assert not told_not_run, f"told mayHaveRun false, yet ran: {sorted(told_not_run)}"

    @invariant()
    def side_requests_did_not_fail(self) -> None:
        for what, task in self.side:
            if task.done() and not task.cancelled() and task.exception() is not None:
                self.failed = True
                raise AssertionError(f"{what}: {task.exception()}")

    # --- teardown: every open call driven to its end ------------------------------------------

    async def finish(self) -> None:
        for call in self.open_calls(legacy=False):
            for _ in range(6):
                if not call.open():
                    break
                if call.dropped:
                    await self.resend(call, call.home)
                else:
                    await self.answer(call, call.home, partial=False)
            assert not call.open(), f"{call.id} did not end: still asked {call.questions}"
        for call in self.open_calls(legacy=True):
            for _ in range(6):
                if not call.open():
                    break
                if call.waiting is None:
                    await self.legacy_wait(call)
                else:
                    await self.answer_live(call)
            assert not call.open(), f"legacy call {call.id} did not end"
        self.each_caller_shown_only_its_own()
        tasks = [task for _, task in self.side]
        if tasks:
            await asyncio.wait(tasks, timeout=GUARD)
        for what, task in self.side:
            assert task.done(), f"{what} did not end"
            task.result()

    def teardown(self) -> None:
        try:
            if not self.failed:
                self.run(self.finish())
                self.each_caller_shown_only_its_own()
                self.each_effect_at_most_once()
        finally:
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(self.stack.aclose())
            for task in [call.task for call in self.calls.values()] + [t for _, t in self.side]:
                if task is not None and task.done() and not task.cancelled():
                    task.exception()  # retrieved: a call cut off by the close is no failure
            leftover = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
            for task in leftover:
                task.cancel()
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            self.loop.close()


@pytest.mark.timeout(600)  # a hang guard: a failing run shrinks its example, which takes longer
def test_the_proxy_keeps_calls_apart_and_runs_each_once_whatever_the_order() -> None:
    run_state_machine_as_test(
        ProxyMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            report_multiple_bugs=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# --- the shortest failing examples found, replayed step by step --------------------------------


@contextlib.contextmanager
def machine() -> Iterator[ProxyMachine]:
    """A fresh `ProxyMachine`, torn down (its open calls driven to their end) after."""
    state = ProxyMachine()
    try:
        yield state
    except BaseException:
        state.failed = True
        raise
    finally:
        state.teardown()


@pytest.mark.parametrize("instance", ["A", "B"])
def test_a_prompts_question_reaches_only_its_own_caller(instance: str) -> None:
    """Rule 1: the backend asks during bob's `prompts/get` while another caller's call holds
    a backend session; the question must not reach that caller."""
    with machine() as state:
        state.start_legacy_call("carol" if instance == "A" else "dave")
        [call] = state.open_calls()
        state.run(state.answer_live(call))
        state.beside_held_calls("bob", instance, "prompt")
        state.run(state.answer_live(call))
        state.run(asyncio.sleep(0.1))
        state.each_caller_shown_only_its_own()


def test_a_reads_log_reaches_only_its_own_caller() -> None:
    with machine() as state:
        state.start_legacy_call("carol")
        state.beside_held_calls("bob", "A", "read")
        state.run(asyncio.sleep(0.1))
        state.each_caller_shown_only_its_own()


@pytest.mark.parametrize(("dropped_on", "resent_on"), [("A", "A"), ("B", "A"), ("A", "B")])
def test_a_dropped_round_resent_reattaches(dropped_on: str, resent_on: str) -> None:
    """Rule 2: the round is dropped once its answer reached the backend; re-sent unchanged, it
    gets the call's next round (or an error saying `mayHaveRun`)."""
    with machine() as state:
        state.start_call("alice", "A")
        [call] = state.open_calls()
        state.run(state.drop(call, dropped_on))
        state.run(state.resend(call, resent_on))


@pytest.mark.parametrize(("partial_on", "full_on"), [("B", "B"), ("B", "A"), ("A", "B")])
def test_an_answer_left_out_is_asked_again_then_the_full_retry_moves_on(
    partial_on: str, full_on: str
) -> None:
    """Rule 3, on either instance."""
    with machine() as state:
        state.start_call("alice", "A")
        [call] = state.open_calls()
        state.run(state.answer(call, partial_on, partial=True))
        state.run(state.answer(call, full_on, partial=False))


@pytest.mark.parametrize("fault", ["lose", "duplicate"])
def test_a_broker_fault_does_not_strand_a_relayed_round(fault: str) -> None:
    """Rule 4: the next broker message (the relay's hand-over) lost or delivered twice."""
    with machine() as state:
        state.start_call("alice", "A")
        [call] = state.open_calls()
        state.broker_fault(fault)
        state.run(state.answer(call, "B", partial=False))
        state.run(state.answer(call, "B", partial=False))
        assert call.outcome == "result"
