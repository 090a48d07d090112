"""The checks every Python peer client runs against the matrix server, written once.

Imported by the per-peer drivers (run with the peer's own interpreter, so no mrtr import here).
A driver gives `run_checks` an object with one coroutine per operation; each check prints one
JSON line: {"check": name, "ok": bool, "detail": text}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

STEP = 20.0  # seconds per check: only reached when something hangs


class Answers:
    """What the peer's callbacks answer; `elicit_action` is switched between checks."""

    def __init__(self) -> None:
        self.elicit_action = "accept"
        self.progress: list[float] = []
        self.logs: list[str] = []

    def elicit_content(self, message: str) -> dict[str, Any] | None:
        if self.elicit_action != "accept":
            return None
        return {"city": "Paris"} if message.startswith("Where to") else {"name": "Ada"}


def emit(check: str, ok: bool, detail: str) -> None:
    print(json.dumps({"check": check, "ok": ok, "detail": detail[:400]}), flush=True)


async def check(name: str, op: Callable[[], Awaitable[Any]], want: Callable[[Any], bool]) -> None:
    """Run `op` (bounded), then pass it to `want`; any exception is a failure."""
    try:
        got = await asyncio.wait_for(op(), STEP)
        emit(name, bool(want(got)), repr(got))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        emit(name, False, f"{type(exc).__name__}: {exc}")


def is_error(outcome: Any) -> bool:
    """The server's answer to a bad request: a JSON-RPC error ("raised: CODE ...") or an isError
    result; anything else the client raised (a lost connection) is not an answer."""
    if not isinstance(outcome, str):
        return False
    code = outcome.removeprefix("raised: ").split(" ", 1)[0]
    return outcome.startswith("isError:") or code.lstrip("-").isdigit()


async def run_checks(peer: Any, answers: Answers) -> None:
    """Every check, in order; error paths are each followed by a call that must still work.

    `peer` has: version(), tools(), call(name, args) -> text or "isError: ..." or
    "raised: ...", set_level(level), prompt(name, args) -> text, read(uri) -> text,
    unknown_method() -> outcome text.
    """
    await check("initialize", peer.version, lambda v: isinstance(v, str) and len(v) == 10)
    await check("tools/list", peer.tools, lambda names: {"add", "greet", "trip"} <= set(names))
    await check("tools/call", lambda: peer.call("add", {"a": 2, "b": 3}), lambda t: t == "5")
    for action, want in (("accept", "hello Ada"), ("decline", "no name (decline)")):
        answers.elicit_action = action
        await check(f"elicit once ({action})", lambda: peer.call("greet", {}), want.__eq__)
    answers.elicit_action = "cancel"
    await check("elicit once (cancel)", lambda: peer.call("greet", {}), "no name (cancel)".__eq__)
    answers.elicit_action = "accept"
    await check("elicit twice", lambda: peer.call("trip", {}), "Ada to Paris".__eq__)
    await check(
        "sampling",
        lambda: peer.call("summarize", {"text": "long"}),
        "short by peer-model".__eq__,
    )
    await check("roots", lambda: peer.call("roots", {}), "file:///peer/root".__eq__)
    await check("logging/setLevel", lambda: peer.set_level("info"), lambda _: True)

    async def progress_and_logs() -> str:
        text = await peer.call_with_progress("count", {"n": 3})
        steps = ",".join(str(int(p)) for p in answers.progress)
        return f"{text}; progress {steps}; logs {','.join(answers.logs)}"

    await check(
        "progress and logs",
        progress_and_logs,
        "counted 3; progress 1,2,3; logs step 1,step 2,step 3".__eq__,
    )
    await check("prompt", lambda: peer.prompt("haiku", {"topic": "tea"}), lambda t: "tea" in t)
    await check("resource", lambda: peer.read("matrix://readme"), "matrix readme".__eq__)
    await check("template", lambda: peer.read("matrix://items/7"), "item 7".__eq__)

    await check("unknown tool", lambda: peer.call("nope", {}), is_error)
    await check("call after unknown tool", lambda: peer.call("add", {"a": 1, "b": 1}), "2".__eq__)
    await check("bad arguments", lambda: peer.call("add", {"a": "x"}), is_error)
    await check("call after bad arguments", lambda: peer.call("add", {"a": 2, "b": 2}), "4".__eq__)
    await check("unknown resource", lambda: peer.read("matrix://missing"), is_error)
    await check(
        "read after unknown resource", lambda: peer.read("matrix://readme"), "matrix readme".__eq__
    )
    await check("unknown method", peer.unknown_method, is_error)
    await check("call after unknown method", lambda: peer.call("add", {"a": 3, "b": 3}), "6".__eq__)


def target() -> tuple[str, str]:
    """(transport, where) from argv: `stdio COMMAND...` (joined by NUL) or `http URL`."""
    transport, *rest = sys.argv[1:]
    return transport, "\0".join(rest)
