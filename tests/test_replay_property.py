"""Property: whatever a handler does, every request gets exactly one well-formed response.

Random handlers are built from questions, `gather`, `TaskGroup`, `create_task` (awaited or left
running), `ctx.once`, real waits, errors of every kind (including `BaseException`s and cancellations
a handler raises itself), early returns and error wrapping, as programs for the interpreter in
`helpers/replay_programs.py`. Each program's flow is driven round after round, answering every
question, over an in-process `ServerConnection` and over a real stdio subprocess (one process for
all examples). Every response must be a JSON-RPC response for its request, with a result or an error
that carries no traceback, and the server must go on serving.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers.replay_programs import RAISE_KINDS, build_program_server
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.connection import ServerConnection

SERVER = str(Path(__file__).resolve().parent / "servers" / "replay_program_server.py")
GUARD = 10.0  # seconds for one response: only ever reached when something is broken
META = {
    meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
    meta_keys.CLIENT_CAPABILITIES: {"elicitation": {}},
    meta_keys.LOG_LEVEL: "info",
}
_ids = itertools.count(1)

# --- programs --------------------------------------------------------------------------------

texts = st.sampled_from(["x", "y", "z"])  # few texts: identical questions happen
keys = st.sampled_from([None, None, "k1", "k2"])  # and so do shared keys
leaves = st.one_of(
    st.tuples(st.just("ask"), texts, keys),
    st.tuples(st.just("ask_all"), st.lists(texts, min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("once"), st.sampled_from(["o1", "o2"]), st.booleans()),
    st.just(("sleep",)),
    st.tuples(st.just("log"), texts),
    st.tuples(st.just("raise"), st.sampled_from(RAISE_KINDS)),
    st.tuples(st.just("return"), texts),
).map(list)


def _compound(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    branches = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        st.tuples(st.just("gather"), branches),
        st.tuples(st.just("group"), branches),
        st.tuples(st.just("spawn"), inner, st.booleans()),
        st.tuples(st.just("wrap"), inner),
        st.tuples(st.just("swallow"), inner),
    ).map(list)


programs = st.recursive(
    st.lists(leaves, max_size=4),
    lambda inner: st.lists(st.one_of(leaves, _compound(inner)), min_size=1, max_size=4),
    max_leaves=10,
)

# Programs that used to go wrong, tried first on every run.
ASK_X = ["ask", "x", None]
KNOWN_CASES: list[list[Any]] = [
    [["group", [[ASK_X], [["ask", "y", None]]]]],  # questions in a TaskGroup
    [["group", [[ASK_X], [["raise", "value"]]]]],  # a TaskGroup mixing a question and a failure
    [["group", [[ASK_X], [["raise", "base"]]]]],
    [["raise", "base"]],
    [["raise", "keyboard"]],
    [["raise", "cancel"]],
    [["wrap", [ASK_X]]],  # an error raised from a pending question
    [["gather", [[ASK_X], [["once", "o1", True]]]]],  # a once still running at the stop
    [["spawn", [["sleep"], ASK_X], False], ["return", "early"]],  # a question asked too late
    [["ask", "x", "k1"], ["ask", "x", "k1"]],  # a key asked again
]


def with_known_cases(test: Any) -> Any:
    for case in KNOWN_CASES:
        test = example(program=case)(test)
    return test


# --- one flow, whatever the transport ----------------------------------------------------------


def flow(program: list[Any]) -> Generator[dict[str, Any], dict[str, Any], None]:
    """Send `program`'s requests (yielded) and check each response (sent back in)."""
    arguments = {"program": program}
    extra: dict[str, Any] = {}
    for _ in range(10):  # max_rounds is 8: the 9th attempt at the latest ends the flow
        request = _request("run_program", arguments, extra)
        response = yield request
        result = check_response(response, request["id"])
        if result is None or result["resultType"] == "complete":
            break
        asked = result.get("inputRequests", {})
        assert asked, result  # these programs only ever ask through the engine
        extra = {
            "inputResponses": {key: {"action": "accept", "content": {}} for key in asked},
            "requestState": result["requestState"],
        }
    else:
        raise AssertionError("the flow went on past max_rounds")
    request = _request("echo", {"text": "still here"}, {})
    response = yield request
    result = check_response(response, request["id"])
    assert result is not None and result["content"][0]["text"] == "still here"


def _request(name: str, arguments: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": META, **extra}
    return {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}


def check_response(response: Any, request_id: int) -> dict[str, Any] | None:
    """Assert `response` is a well-formed answer to `request_id`; its result, or None."""
    assert isinstance(response, dict) and response.get("jsonrpc") == "2.0", response
    assert response.get("id") == request_id, response
    assert ("result" in response) != ("error" in response), response
    if "error" in response:
        error = response["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
        assert error["message"] and "Traceback" not in error["message"], error
        return None
    result = response["result"]
    assert result.get("resultType") in ("complete", "input_required"), result
    if result["resultType"] == "input_required":
        assert isinstance(result.get("requestState"), str), result
        return result  # type: ignore[no-any-return]
    assert isinstance(result.get("content"), list), result
    for block in result["content"]:
        assert "Traceback" not in block.get("text", ""), block
    return result  # type: ignore[no-any-return]


# --- in process: a ServerConnection, as a stream transport uses it ----------------------------


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=programs)
@with_known_cases
async def test_any_handler_gets_exactly_one_response_in_process(program: list[Any]) -> None:
    server = build_program_server()
    sent: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        arrived.set()

    connection = ServerConnection(server, send, "memory")

    async def exchange(request: dict[str, Any]) -> dict[str, Any]:
        await connection.feed_bytes(orjson.dumps(request))
        async with asyncio.timeout(GUARD):
            while True:
                for message in sent:
                    if message.get("id") == request["id"] and "method" not in message:
                        return message
                arrived.clear()
                await arrived.wait()

    steps = flow(program)
    request = next(steps)
    try:
        while True:
            request = steps.send(await exchange(request))
    except StopIteration:
        pass
    await asyncio.sleep(0.02)  # tasks left running by the program end (and must not answer)
    await connection.aclose()
    answered = [m["id"] for m in sent if "method" not in m]
    assert len(answered) == len(set(answered)), f"a request answered twice: {sent}"


# --- over stdio: one real server process for every example -----------------------------------


class StdioServer:
    """The program server in a child process, spoken to in raw JSON-RPC lines."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.responses: dict[Any, list[dict[str, Any]]] = {}
        self.stderr: list[bytes] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = orjson.loads(line)
            if "method" in message:
                continue  # a notification (a log message)
            with self._changed:
                self.responses.setdefault(message.get("id"), []).append(message)
                self._changed.notify_all()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(request) + b"\n")
        self.process.stdin.flush()
        with self._changed:
            got = self._changed.wait_for(lambda: request["id"] in self.responses, GUARD)
        assert got, f"no response to request {request['id']}: " + b"".join(self.stderr).decode()
        return self.responses[request["id"]][0]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(GUARD)
        except subprocess.TimeoutExpired:  # pragma: no cover - only when something is broken
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def stdio_server() -> Iterator[StdioServer]:
    server = StdioServer()
    try:
        yield server
    finally:
        server.close()
    twice = {key: got for key, got in server.responses.items() if len(got) > 1}
    assert not twice, f"requests answered more than once: {twice}"
    assert server.process.returncode == 0


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=programs)
@with_known_cases
def test_any_handler_gets_exactly_one_response_over_stdio(
    stdio_server: StdioServer, program: list[Any]
) -> None:
    steps = flow(program)
    request = next(steps)
    try:
        while True:
            request = steps.send(stdio_server.exchange(request))
    except StopIteration:
        pass
