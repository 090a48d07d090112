"""Property: whatever order messages come in, each side effect runs at most once, each completed
flow's effects exactly once, and no caller reaches another's flow, session or task.

A Hypothesis state machine drives real `mrtr serve --transport http` processes over raw HTTP, as
several callers: one process with its store in memory, or two sharing a real `redis-server` (AOF
on), requests taking turns between them. It starts three-round MRTR flows, answers them,
re-sends earlier rounds (duplicated and reordered), sends a flow's round as another caller, drops
connections while a round runs and then retries it, opens legacy sessions and tries them as
another caller, starts tasks (io.modelcontextprotocol/tasks) and polls, answers, fetches and
cancels them, tries them as another caller (`tasks/get`, `tasks/update`, `tasks/cancel`: refused,
nothing changes), and with Redis stalls the store while a round runs and kills -9 one instance
while it runs a flow's last round (restarted on its port; the flow goes on on the other: it
completes, or its commit, inside a `once`, is refused as "effect_uncertain"). After every step it
counts the effects the server's tools appended to a file outside the store (each at most once; a
completed flow's or task's exactly once; a task cancelled before its answer never), and checks
that the servers' memory stays bounded.

Size: 30 examples with the memory store and 12 with Redis, 15 steps each, at most one kill per
example; measured 9-18 s and 39-80 s on a loaded 2-core machine (load average 3-6). Its hang
guard is 300 s: at a load average of 20 the Redis variant passed 120 s.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis import Redis

from helpers.loopback_process import free_port, stop, wait_listening
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.tasks import EXTENSION_ID, TERMINAL_STATUSES
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parent.parent
TARGET = str(ROOT / "tests" / "servers" / "guarantees_server.py") + ":server"
GUARD = 15.0  # seconds for one answer: only ever reached when something hangs
LEGACY_VERSION = "2025-11-25"
CALLERS = ("alice", "bob", "carol")
PAUSE_MS = 300  # how long a "slow" flow's last round runs before its effect
STALL = 1.5  # seconds the store is stopped for (longer than the store's 1 s timeout)
KILLS_PER_EXAMPLE = 1  # an instance killed and restarted costs a process start: kept rare
RSS_CEILING = 400 * 1024 * 1024  # far above what these few flows need; a leak crosses it
_ids = itertools.count(1)


# --- the server under test -------------------------------------------------------------------


@dataclass
class Deployment:
    """The server processes (one with the memory store, two sharing the redis-server with
    Redis), their effects file, and the redis-server (if any). Requests take turns among the
    instances, as a load balancer would spread them."""

    directory: Path
    env: dict[str, str]
    ports: list[int]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    redis: subprocess.Popen[bytes] | None = None
    turn: Iterator[int] = field(default_factory=itertools.count)

    @property
    def effects(self) -> Path:
        return Path(self.env["MRTR_TEST_EFFECTS"])

    def pick(self) -> int:
        """The instance the next request goes to."""
        return next(self.turn) % len(self.ports)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[self.pick()]}/mcp"

    @property
    def port(self) -> int:
        return self.ports[self.pick()]

    def start(self, index: int) -> None:
        """Start instance `index` on its port and return once it listens."""
        self.spawn(index)
        self.wait_listening(index)

    def wait_listening(self, index: int) -> None:
        log = self.directory / f"server-{self.ports[index]}.log"
        wait_listening(
            self.ports[index], self.processes[index], describe=lambda: log.read_text()[-2000:]
        )

    def spawn(self, index: int) -> None:
        """Start instance `index` on its port."""
        port = self.ports[index]
        log = self.directory / f"server-{port}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "mrtr", "serve", TARGET, "--transport", "http",
                 "--host", "127.0.0.1", "--port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
            )  # fmt: skip
        if index < len(self.processes):
            self.processes[index] = process
        else:
            self.processes.append(process)

    def kill(self, index: int) -> str:
        """kill -9 instance `index`; the id its rounds carry in the store."""
        process = self.processes[index]
        process.kill()
        process.wait(GUARD)
        return (self.directory / "process-ids" / str(process.pid)).read_text()

    def effect_counts(self) -> Counter[tuple[str, str]]:
        """(flow, kind) -> how many times that effect ran."""
        counts: Counter[tuple[str, str]] = Counter()
        with contextlib.suppress(FileNotFoundError):
            for line in self.effects.read_text().splitlines():
                flow, kind, _pid = line.split()
                counts[(flow, kind)] += 1
        return counts

    def rss(self, process: subprocess.Popen[bytes]) -> int:
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("the server process has no VmRSS")


def _start_redis(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server with AOF on every write, so a stall or restart loses no record."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (scripts/test.sh installs it)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory,
         "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_listening(port, process)
    return process, port


@contextlib.contextmanager
def deployment(store: str) -> Iterator[Deployment]:
    directory = Path(tempfile.mkdtemp(prefix="mrtr-guarantees-"))
    (directory / "process-ids").mkdir()
    env = {
        **os.environ,
        "MRTR_TEST_EFFECTS": str(directory / "effects"),
        "MRTR_TEST_PROCESS_IDS": str(directory / "process-ids"),
        "MRTR_REQUEST_STATE_KEY": "k" * 32,
        "MRTR_LOG_LEVEL": "error",
    }
    redis = None
    instances = 1
    if store == "redis":
        redis, redis_port = _start_redis(str(directory))
        env["MRTR_STORE_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        instances = 2
    running = Deployment(directory, env, [free_port() for _ in range(instances)], redis=redis)
    try:
        for index in range(instances):
            running.start(index)
        yield running
    finally:
        for process in running.processes:
            stop(process)
        if redis is not None:
            with contextlib.suppress(ProcessLookupError):
                redis.send_signal(signal.SIGCONT)
            stop(redis)
        shutil.rmtree(directory, ignore_errors=True)


# --- the wire --------------------------------------------------------------------------------


def modern_body(name: str, arguments: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    meta = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_INFO: {"name": "guarantees", "version": "1"},
        meta_keys.CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
    }
    params = {"name": name, "arguments": arguments, **extra, "_meta": meta}
    return {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}


def modern_headers(caller: str, name: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        "x-test-user": caller,
    }


def task_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request of the tasks extension (or a `tools/call` that may become a task)."""
    meta = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_INFO: {"name": "guarantees", "version": "1"},
        meta_keys.CLIENT_CAPABILITIES: {
            "elicitation": {"form": {}},
            "extensions": {EXTENSION_ID: {}},
        },
    }
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": method,
        "params": {**params, "_meta": meta},
    }


def decode(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message a response carries (the last one of an SSE stream), or None."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        messages = [
            json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
        ]
        answers = [m for m in messages if "id" in m and ("result" in m or "error" in m)]
        return answers[-1] if answers else None
    if not response.content:
        return None
    message: dict[str, Any] = response.json()
    return message


def raw_post(port: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    """Send one POST and drop the connection without reading the answer."""
    payload = json.dumps(body).encode()
    head = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(payload)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        time.sleep(PAUSE_MS / 3000)  # the round has begun running when the connection drops
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


# --- the model -------------------------------------------------------------------------------


@dataclass
class Flow:
    """What the model knows of one MRTR flow."""

    id: str
    caller: str
    slow: bool
    guarded: bool  # its commit runs inside a `once`
    sent: list[dict[str, Any]] = field(default_factory=list)  # params of rounds 2.. as sent
    pending: dict[str, Any] | None = None  # the next round's params, once known
    done: bool = False
    uncertain: bool = False  # refused as "effect_uncertain" after a crash: may have committed

    @property
    def arguments(self) -> dict[str, Any]:
        return {"flow": self.id, "pause_ms": PAUSE_MS if self.slow else 0, "guarded": self.guarded}


@dataclass
class TaskFlow:
    """What the model knows of one task: its effect is the line `<id> task`."""

    id: str
    caller: str
    task_id: str
    answered: bool = False  # its question got an answer from its caller
    status: str = "working"  # the last status its caller saw
    cancelled_unanswered: bool = False  # cancelled before any answer: its effect never runs
    orphaned: bool = False  # live when an instance was killed: it may have been running there
    done: bool = False  # seen completed, with its result


def answers_for(result: dict[str, Any]) -> dict[str, Any]:
    """The next round's `inputResponses` and `requestState` for an input_required result."""
    responses = {k: {"action": "accept", "content": {"ok": True}} for k in result["inputRequests"]}
    return {"inputResponses": responses, "requestState": result["requestState"]}


def is_effect_uncertain(message: dict[str, Any]) -> bool:
    """The answer to a round whose `once` began on a process that died and never reported."""
    error = message.get("error") or {}
    data = error.get("data") or {}
    return error.get("code") == -32603 and data.get("reason") == "effect_uncertain"


def send_only(port: int, body: dict[str, Any], headers: dict[str, str]) -> socket.socket:
    """Send one POST and leave the connection open, its answer unread."""
    payload = json.dumps(body).encode()
    head = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(payload)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    return sock


def is_retryable(response: httpx.Response, message: dict[str, Any] | None) -> bool:
    """An answer that tells the client to try again later (the store was unavailable)."""
    if response.status_code == 503:
        return True
    data = ((message or {}).get("error") or {}).get("data") or {}
    return isinstance(data, dict) and data.get("reason") in {"store_unavailable", "retry"}


class Guarantees(RuleBasedStateMachine):
    """The state machine; `deployment` is set by the test before it runs."""

    deployment: Deployment

    flows = Bundle("flows")
    sessions = Bundle("sessions")
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.http = httpx.Client(timeout=GUARD)
        self.known: list[Flow] = []
        self.notes: Counter[str] = Counter()  # legacy note flow -> calls answered with a result
        self.opened: list[tuple[str, str]] = []
        self.tasks_started: list[TaskFlow] = []
        self.kills = 0

    def teardown(self) -> None:
        # Sessions and tasks are ended so that examples do not add up against the per-caller
        # budgets.
        for session in self.opened:
            self.http.delete(self.deployment.url, headers=self.legacy_headers(*session))
        for task in self.tasks_started:
            if task.status not in TERMINAL_STATUSES:
                self.task_request(task.caller, "tasks/cancel", {"taskId": task.task_id})
        self.http.close()

    # --- sending ---

    def send_round(
        self, flow: Flow, params: dict[str, Any], caller: str | None = None, port: int = 0
    ) -> tuple[httpx.Response, dict[str, Any] | None]:
        body = modern_body("transfer", flow.arguments, params)
        headers = modern_headers(caller or flow.caller, "transfer")
        url = f"http://127.0.0.1:{port}/mcp" if port else self.deployment.url
        response = self.http.post(url, json=body, headers=headers)
        message = decode(response)
        assert message is not None, f"HTTP {response.status_code} with no JSON-RPC answer"
        assert message.get("id") == body["id"], message
        if "error" in message:
            text = json.dumps(message["error"])
            assert "Traceback" not in text and 'File "' not in text, text
        return response, message

    def take(self, flow: Flow, params: dict[str, Any], message: dict[str, Any]) -> None:
        """Move `flow` on by the answer `message` to the round `params`."""
        result = message.get("result")
        if result is None:
            return
        if result.get("resultType") == "input_required":
            flow.sent.append(params)
            flow.pending = answers_for(result)
        else:
            assert not result.get("isError"), result
            flow.sent.append(params)
            flow.pending = None
            flow.done = True

    # --- rules: modern flows ---

    @rule(target=flows, caller=st.sampled_from(CALLERS), slow=st.booleans(), guarded=st.booleans())
    def start(self, caller: str, slow: bool, guarded: bool) -> Flow:
        return self.new_flow(caller, slow, guarded)

    def new_flow(self, caller: str, slow: bool, guarded: bool) -> Flow:
        flow = Flow(uuid.uuid4().hex[:12], caller, slow, guarded)
        self.known.append(flow)
        _response, message = self.send_round(flow, {})
        assert message is not None and "result" in message, message
        assert message["result"]["resultType"] == "input_required", message
        flow.pending = answers_for(message["result"])
        return flow

    @rule(flow=flows)
    def answer(self, flow: Flow) -> None:
        if flow.pending is None:
            return
        params = flow.pending
        _response, message = self.send_round(flow, params)
        assert message is not None and "result" in message, message
        self.take(flow, params, message)

    @rule(flow=flows, data=st.data())
    def resend(self, flow: Flow, data: st.DataObject) -> None:
        """A round already answered comes again (a duplicate, or late: reordered)."""
        if not flow.sent:
            return
        params = data.draw(st.sampled_from(flow.sent))
        _response, message = self.send_round(flow, params)
        assert message is not None
        if "result" in message:
            result = message["result"]
            assert result.get("resultType") == "input_required" or not result.get("isError")

    @rule(flow=flows, other=st.sampled_from(CALLERS))
    def as_another_caller(self, flow: Flow, other: str) -> None:
        """A flow's next round, sent by someone else, is refused and changes nothing."""
        if other == flow.caller or flow.pending is None:
            return
        # Only this flow's effects: an answered task may take its effect meanwhile.
        mine = [(flow.id, "reserve"), (flow.id, "commit")]
        before = [self.deployment.effect_counts()[effect] for effect in mine]
        _response, message = self.send_round(flow, flow.pending, caller=other)
        assert message is not None and "error" in message, message
        assert [self.deployment.effect_counts()[effect] for effect in mine] == before

    @rule(flow=flows)
    def drop_then_retry(self, flow: Flow) -> None:
        """The connection drops while the round runs; the client sends the round again."""
        if flow.pending is None:
            return
        params = flow.pending
        body = modern_body("transfer", flow.arguments, params)
        raw_post(self.deployment.port, body, modern_headers(flow.caller, "transfer"))
        _response, message = self.send_round(flow, params)
        assert message is not None and "result" in message, message
        self.take(flow, params, message)

    @precondition(lambda self: self.deployment.redis is not None)
    @rule(flow=flows)
    def stall_store(self, flow: Flow) -> None:
        """The store stops answering while a round is sent; the answer says to retry or is the
        result, and once the store is back the round completes."""
        if flow.pending is None:
            return
        redis = self.deployment.redis
        assert redis is not None
        params = flow.pending
        redis.send_signal(signal.SIGSTOP)
        resume = threading.Timer(STALL, redis.send_signal, (signal.SIGCONT,))
        resume.start()
        try:
            response, message = self.send_round(flow, params)
        finally:
            resume.join()
        assert message is not None
        if "result" in message:
            self.take(flow, params, message)
            return
        assert is_retryable(response, message), (response.status_code, message)
        _response, message = self.send_round(flow, params)
        assert message is not None and "result" in message, message
        self.take(flow, params, message)

    @precondition(lambda self: len(self.deployment.ports) > 1 and self.kills < KILLS_PER_EXAMPLE)
    @rule(data=st.data(), victim=st.integers(0, 1))
    def kill_instance(self, data: st.DataObject, victim: int) -> None:
        """kill -9 of one instance while it runs a round of a flow that commits in a `once`
        (one in progress, or a new one brought to its last round); the instance restarts on
        its port. The flow goes on on either instance: the round completes, or (its `once`
        began and never reported) is refused as "effect_uncertain", which leaves the commit
        at most once. Tasks live at the time may have been running there."""
        self.kills += 1
        running = self.deployment
        candidates = [f for f in self.known if f.guarded and f.pending is not None]
        if candidates:
            flow = data.draw(st.sampled_from(candidates))
        else:
            flow = self.new_flow(data.draw(st.sampled_from(CALLERS)), slow=True, guarded=True)
            self.answer(flow)
        params = flow.pending
        assert params is not None
        body = modern_body("transfer", flow.arguments, params)
        sock = send_only(running.ports[victim], body, modern_headers(flow.caller, "transfer"))
        try:
            time.sleep(PAUSE_MS / 3000)  # the round has begun running when the process dies
            dead = running.kill(victim)
        finally:
            sock.close()
        # End the dead process's liveness now, as the key's expiry would LIVENESS_TTL later, so
        # that a retry takes its round over at once.
        store = Redis.from_url(running.env["MRTR_STORE_URL"])
        try:
            store.delete(f"mrtr/alive/{dead}")
        finally:
            store.close()
        for task in self.tasks_started:
            if task.status not in TERMINAL_STATUSES:
                task.orphaned = True
        # The retry goes to the other instance while this one restarts.
        running.spawn(victim)
        survivor = running.ports[1 - victim]
        response, message = self.send_round(flow, params, port=survivor)
        assert message is not None
        if is_retryable(response, message):
            response, message = self.send_round(flow, params, port=survivor)
            assert message is not None
        running.wait_listening(victim)
        if is_effect_uncertain(message):
            flow.uncertain = True
            flow.pending = None
            return
        assert "result" in message, message
        self.take(flow, params, message)

    # --- rules: legacy sessions ---

    @rule(target=sessions, caller=st.sampled_from(CALLERS))
    def open_session(self, caller: str) -> tuple[str, str]:
        body = {
            "jsonrpc": "2.0",
            "id": next(_ids),
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "guarantees", "version": "1"},
            },
        }
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "x-test-user": caller,
        }
        response = self.http.post(self.deployment.url, json=body, headers=headers)
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        response = self.http.post(
            self.deployment.url, json=initialized, headers=self.legacy_headers(caller, session)
        )
        assert response.status_code == 202, response.text
        self.opened.append((caller, session))
        return caller, session

    def legacy_headers(self, caller: str, session: str) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LEGACY_VERSION,
            "Mcp-Session-Id": session,
            "x-test-user": caller,
        }

    def legacy_note(self, caller: str, session: str) -> tuple[str, httpx.Response]:
        flow = uuid.uuid4().hex[:12]
        body = {
            "jsonrpc": "2.0",
            "id": next(_ids),
            "method": "tools/call",
            "params": {"name": "note", "arguments": {"flow": flow}},
        }
        response = self.http.post(
            self.deployment.url, json=body, headers=self.legacy_headers(caller, session)
        )
        return flow, response

    @rule(session=sessions)
    def call_in_session(self, session: tuple[str, str]) -> None:
        flow, response = self.legacy_note(*session)
        message = decode(response)
        assert response.status_code == 200 and message is not None, response.text
        assert "result" in message, message
        self.notes[flow] += 1

    @rule(session=sessions, other=st.sampled_from(CALLERS))
    def session_as_another_caller(self, session: tuple[str, str], other: str) -> None:
        """Another caller cannot use a session: refused at the transport, nothing runs."""
        owner, session_id = session
        if other == owner:
            return
        flow, response = self.legacy_note(other, session_id)
        assert response.status_code in (403, 404), (response.status_code, response.text)
        assert self.deployment.effect_counts()[(flow, "note")] == 0

    @rule(session=consumes(sessions))
    def close_session(self, session: tuple[str, str]) -> None:
        response = self.http.delete(self.deployment.url, headers=self.legacy_headers(*session))
        assert response.status_code in (200, 202, 204), response.text

    # --- rules: tasks ---

    def task_request(self, caller: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request of (or creating) a task, as `caller`; its JSON-RPC answer."""
        body = task_body(method, params)
        name = params.get("taskId", params.get("name"))
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
            "Mcp-Method": method,
            "Mcp-Name": str(name),
            "x-test-user": caller,
        }
        response = self.http.post(self.deployment.url, json=body, headers=headers)
        message = decode(response)
        assert message is not None, f"HTTP {response.status_code} with no JSON-RPC answer"
        assert message.get("id") == body["id"], message
        return message

    def task_status(self, task: TaskFlow) -> dict[str, Any]:
        """`tasks/get` as the task's caller; the model follows what it says."""
        message = self.task_request(task.caller, "tasks/get", {"taskId": task.task_id})
        assert "result" in message, message
        seen: dict[str, Any] = message["result"]
        assert seen["taskId"] == task.task_id, seen
        if task.status in TERMINAL_STATUSES:
            assert seen["status"] == task.status, (task.status, seen)  # terminal stays
        task.status = seen["status"]
        if task.status == "completed":
            assert seen["result"]["content"][0]["text"].startswith(f"{task.id} task "), seen
            task.done = True
        return seen

    def task_until(self, task: TaskFlow, *statuses: str) -> dict[str, Any]:
        """Poll `tasks/get` until the task is in one of `statuses` (bounded by GUARD)."""
        deadline = time.monotonic() + GUARD
        while True:
            seen = self.task_status(task)
            if seen["status"] in statuses:
                return seen
            assert time.monotonic() < deadline, f"task {task.id} stuck in {seen['status']}"
            time.sleep(0.05)

    @rule(target=tasks, caller=st.sampled_from(CALLERS), slow=st.booleans())
    def start_task(self, caller: str, slow: bool) -> TaskFlow:
        flow = uuid.uuid4().hex[:12]
        arguments = {"flow": flow, "pause_ms": PAUSE_MS if slow else 0}
        message = self.task_request(caller, "tools/call", {"name": "job", "arguments": arguments})
        assert "result" in message, message
        created = message["result"]
        assert created["resultType"] == "task" and created["status"] == "working", created
        task = TaskFlow(flow, caller, created["taskId"])
        self.tasks_started.append(task)
        return task

    @rule(task=tasks)
    def poll_task(self, task: TaskFlow) -> None:
        self.task_status(task)

    @rule(task=tasks)
    def answer_task(self, task: TaskFlow) -> None:
        """The caller answers the task's question once it is asked."""
        if task.answered or task.status in TERMINAL_STATUSES:
            return
        seen = self.task_until(task, "input_required", *TERMINAL_STATUSES)
        if seen["status"] != "input_required":
            return
        assert list(seen["inputRequests"]) == ["go"], seen
        answer = {"go": {"action": "accept", "content": {"ok": True}}}
        message = self.task_request(
            task.caller, "tasks/update", {"taskId": task.task_id, "inputResponses": answer}
        )
        if task.orphaned and "error" in message:  # its instance died: it is failed by now
            assert self.task_status(task)["status"] == "failed", message
            return
        assert message.get("result", {}).get("resultType") == "complete", message
        task.answered = True

    @rule(task=tasks)
    def fetch_task_result(self, task: TaskFlow) -> None:
        """An answered task that nobody cancelled completes, with its result."""
        if not task.answered or task.status in TERMINAL_STATUSES:
            return
        seen = self.task_until(task, *TERMINAL_STATUSES)
        expected = {"completed", "failed"} if task.orphaned else {"completed"}
        assert seen["status"] in expected, seen

    @rule(task=tasks)
    def cancel_task(self, task: TaskFlow) -> None:
        unanswered = not task.answered and task.status not in TERMINAL_STATUSES
        message = self.task_request(task.caller, "tasks/cancel", {"taskId": task.task_id})
        assert message.get("result", {}).get("resultType") == "complete", message
        seen = self.task_until(task, *TERMINAL_STATUSES)
        if unanswered:
            expected = {"cancelled", "failed"} if task.orphaned else {"cancelled"}
            assert seen["status"] in expected, seen
            task.cancelled_unanswered = True

    @rule(
        task=tasks,
        other=st.sampled_from(CALLERS),
        method=st.sampled_from(["tasks/get", "tasks/update", "tasks/cancel"]),
    )
    def task_as_another_caller(self, task: TaskFlow, other: str, method: str) -> None:
        """Another caller cannot see, answer or cancel a task: it does not exist for them."""
        if other == task.caller:
            return
        waiting = not (task.answered or task.orphaned) and task.status not in TERMINAL_STATUSES
        if waiting:  # so that an answer or a cancel by the intruder would show
            waiting = self.task_until(task, "input_required", *TERMINAL_STATUSES)["status"] == (
                "input_required"
            )
        answer = {"go": {"action": "accept", "content": {"ok": True}}}
        params = {"taskId": task.task_id, "inputResponses": answer}
        message = self.task_request(other, method, params)
        assert message.get("error", {}).get("code") == -32602, message
        assert task.task_id in message["error"]["message"], message
        before = task.status
        seen = self.task_status(task)
        if before not in TERMINAL_STATUSES:
            assert seen["status"] != "cancelled", seen
        if waiting:
            assert seen["status"] == "input_required", seen
            assert self.deployment.effect_counts()[(task.id, "task")] == 0

    # --- what must hold after every step ---

    @invariant()
    def effects_at_most_once_and_completed_exactly_once(self) -> None:
        counts = self.deployment.effect_counts()
        for flow in self.known:
            reserve, commit = counts[(flow.id, "reserve")], counts[(flow.id, "commit")]
            assert reserve <= 1, f"flow {flow.id} reserved {reserve} times"
            assert commit <= 1, f"flow {flow.id} committed {commit} times"
            if flow.done:
                assert (reserve, commit) == (1, 1), (flow.id, reserve, commit)
        for flow, answered in self.notes.items():
            assert counts[(flow, "note")] == answered, flow
        for task in self.tasks_started:
            ran = counts[(task.id, "task")]
            assert ran <= 1, f"task {task.id} ran its effect {ran} times"
            if task.done:
                assert ran == 1, f"task {task.id} completed with its effect run {ran} times"
            if task.cancelled_unanswered:
                assert ran == 0, f"task {task.id} ran its effect after a cancel before any answer"

    @invariant()
    def memory_bounded(self) -> None:
        for process in self.deployment.processes:
            assert process.poll() is None, "a server exited"
            assert self.deployment.rss(process) < RSS_CEILING


# --- the tests -------------------------------------------------------------------------------

EXAMPLES = {"memory": 30, "redis": 12}


@pytest.mark.timeout(300)  # a hang guard, not a speed assertion (see the module's docstring)
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_guarantees_hold_under_any_interleaving(store: str) -> None:
    with deployment(store) as running:
        Guarantees.deployment = running
        run_state_machine_as_test(
            Guarantees,
            settings=settings(
                max_examples=EXAMPLES[store],
                stateful_step_count=15,
                deadline=None,
                derandomize=True,
                # The server's state outlives an example, so a shrunk replay would not meet the
                # same server: report the failing steps as generated.
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
