"""Workloads and fixtures for `mrtr`, mirroring `official.py` one for one.

The server holds the same tools as the official fixtures:

* `confirm` asks one question with `await ctx.elicit(...)` (two rounds); on a
  legacy (`initialize`-based) session the same handler asks it live instead, and
  is also registered as `confirm_live`, the name of the official SDK's classic
  (legacy-only) form of the question;
* `add` answers at once (no MRTR round); `add_sync` is the same as a plain `def`, which
  runs in a worker thread;
* `ask1` .. `ask10` ask k questions one after another (k+1 rounds, replaying the
  handler from the top on each round).

Sealing is always on in `mrtr`; the key is fixed so that the stdio child and
the parent build identical servers. Every `*_once` coroutine does one unit of
work against a fixture built by the context managers below; the benchmark
runner does the timing.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from benchmarks.harness import LOOPBACK, AsyncOp, serve_uvicorn
from benchmarks.official import CONFIRM_SCHEMA, MAX_QUESTIONS, QUESTION, SEAL_KEY
from benchmarks.tool_calls import (
    growth_flow_once,
)
from mrtr import (
    Client,
    ClientOptions,
    ElicitRequestParams,
    ElicitResult,
    RequestContext,
    RoundInfo,
    Server,
    ServerOptions,
)
from mrtr.client import InputRequiredConfig
from mrtr.protocol import jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server._engine.questions import question_digest
from mrtr.server._engine.round_state import RoundState
from mrtr.server.request_state import (
    RequestStateKeyRing,
    StateBinding,
    digest_arguments,
    mint_request_state,
    verify_request_state,
)

STDIO_SERVER_SCRIPT = Path(__file__).with_name("ours_stdio_server.py")
MCP_PATH = "/mcp"
STATE_TTL = 300.0
"""Seconds a sealed state stays valid: the server default, and what the boundary op checks."""


# --- server -------------------------------------------------------------------


def _accepted_ok(result: ElicitResult) -> bool:
    return result.action == "accept" and bool((result.content or {}).get("ok"))


async def _confirm(ctx: RequestContext) -> str:
    answer = await ctx.elicit(QUESTION, CONFIRM_SCHEMA)
    return "yes" if _accepted_ok(answer) else "no"


async def _add(a: int, b: int) -> str:
    return str(a + b)


def _add_sync(a: int, b: int) -> str:
    # A plain `def`: the server runs it in a worker thread (`worker_threads.py`).
    return str(a + b)


def _question_chain(k: int) -> Callable[[RequestContext], Awaitable[str]]:
    """A tool asking k questions one after another: k input-required rounds, then the result.

    Each round replays the handler from the top; the questions already answered
    return their recorded answers from the sealed state at once.
    """

    async def tool(ctx: RequestContext) -> str:
        ok = True
        for i in range(1, k + 1):
            answer = await ctx.elicit(f"Question {i}?", CONFIRM_SCHEMA, key=f"q{i}")
            ok = ok and _accepted_ok(answer)
        return "yes" if ok else "no"

    return tool


def build_server(name: str = "bench") -> Server:
    """`Server` with `confirm`, `add` and `ask1`..`ask10`, sealing under a fixed key.

    Tools return plain text (`structured_output=False`), as in the official fixtures.
    """
    server = Server(name, options=ServerOptions(request_state_key=SEAL_KEY))
    server.tool("confirm", structured_output=False)(_confirm)
    # One handler serves both eras, so the legacy flow's tool is the very same function.
    server.tool("confirm_live", structured_output=False)(_confirm)
    server.tool("add", structured_output=False)(_add)
    server.tool("add_sync", structured_output=False)(_add_sync)
    for k in range(1, MAX_QUESTIONS + 1):
        server.tool(f"ask{k}", structured_output=False)(_question_chain(k))
    return server


# --- clients ------------------------------------------------------------------


async def accept_ok(params: ElicitRequestParams) -> ElicitResult:
    """Elicitation handler: accept every question with `{ok: true}`."""
    return ElicitResult(action="accept", content={"ok": True})


def _options(protocol: Literal["auto", "modern", "legacy"] = "auto") -> ClientOptions:
    # Enough rounds for the k=10 growth tool, as on the official side.
    return ClientOptions(
        input_required=InputRequiredConfig(max_rounds=MAX_QUESTIONS + 2), protocol=protocol
    )


@asynccontextmanager
async def _connected(client: Client) -> AsyncIterator[Client]:
    async with client:
        # Listed once as on the official side (which caches schemas from it); ours needs
        # nothing from it, so this only keeps the two fixtures' setup alike.
        await client.list_tools()
        yield client


@asynccontextmanager
async def inproc_client(server: Server | None = None) -> AsyncIterator[Client]:
    """`Client.in_memory(server)`: JSON-RPC encoded and decoded both ways, no sockets."""
    target = server if server is not None else build_server()
    client = Client.in_memory(target, elicitation_handler=accept_ok, options=_options())
    async with _connected(client) as connected:
        yield connected


@asynccontextmanager
async def http_server(*, in_thread: bool = False) -> AsyncIterator[str]:
    """Serve `build_server().asgi_app()` with the shared uvicorn settings; yields its URL."""
    async with serve_uvicorn(build_server().asgi_app(), in_thread=in_thread) as port:
        yield f"http://{LOOPBACK}:{port}{MCP_PATH}"


@asynccontextmanager
async def http_client(url: str) -> AsyncIterator[Client]:
    """`Client.http(url)`: Streamable HTTP on one aiohttp keep-alive session."""
    client = Client.http(url, elicitation_handler=accept_ok, options=_options())
    async with _connected(client) as connected:
        yield connected


@asynccontextmanager
async def legacy_http_client(url: str) -> AsyncIterator[Client]:
    """`Client.http(url)` with `protocol="legacy"`: `initialize` once, then one session.

    The handshake happens here (on the first request), outside any timing.
    """
    client = Client.http(url, elicitation_handler=accept_ok, options=_options("legacy"))
    async with _connected(client) as connected:
        if connected.era != "legacy":
            raise AssertionError(f"expected a legacy session, got era {connected.era!r}")
        yield connected


@asynccontextmanager
async def stdio_client() -> AsyncIterator[Client]:
    """`Client.stdio(python, [ours_stdio_server.py])`: the server runs as a child process."""
    client = Client.stdio(
        sys.executable,
        [str(STDIO_SERVER_SCRIPT)],
        elicitation_handler=accept_ok,
        options=_options(),
    )
    async with _connected(client) as connected:
        yield connected


# --- workloads: one unit of work each --------------------------------------------


async def growth_state_sizes(client: Client, k: int) -> list[int]:
    """Run `ask{k}` once; the `requestState` length (chars) the server sent in each round."""
    sizes: list[int] = []
    previous = client.options.on_round

    def record(info: RoundInfo) -> None:
        sizes.append(info.state_size)

    client.options.on_round = record
    try:
        await growth_flow_once(client, k)
    finally:
        client.options.on_round = previous
    if len(sizes) != k:
        raise AssertionError(f"ask{k} took {len(sizes)} input-required rounds, expected {k}")
    return sizes


# --- request-state sealing ---------------------------------------------------------


def one_question_payload() -> bytes:
    """The plaintext `mrtr` seals after `confirm` asked its one question (`RoundState`)."""
    params = {"mode": "form", "message": QUESTION, "requestedSchema": CONFIRM_SCHEMA}
    digest = question_digest("elicitation/create", params)
    return RoundState(1, asked={"elicit-1": [digest, "elicitation/create"]}).encode()


def seal_verify_op(payload: bytes) -> Callable[[], object]:
    """Sync op: `mint_request_state` then `verify_request_state` of `payload`.

    Unlike the official codec op this already includes the binding (a keyed
    BLAKE2b tag over method, tool, arguments digest and audience) and the round
    header; the expiry is left off, as the official codec has none.
    """
    ring = RequestStateKeyRing(SEAL_KEY)
    binding = StateBinding("tools/call", "confirm", digest_arguments({}), "bench")

    def op() -> object:
        return verify_request_state(
            ring, binding, mint_request_state(ring, binding, payload, round=1)
        )

    return op


def boundary_op(payload: bytes) -> Callable[[], object]:
    """Sync op: what `mrtr` does with the state in one round, the counterpart of one pass
    through the official `RequestStateBoundary`.

    From the request's params: digest the arguments, bind, verify the inbound
    token (with expiry), decode the round state; then encode the next round's
    state and mint it with a fresh expiry.
    """
    ring = RequestStateKeyRing(SEAL_KEY)
    params: dict[str, Any] = {"name": "confirm", "arguments": {}}

    def bind() -> StateBinding:
        return StateBinding(
            "tools/call", params["name"], digest_arguments(params.get("arguments")), "bench"
        )

    params["requestState"] = mint_request_state(ring, bind(), payload, round=1, ttl=STATE_TTL)

    def op() -> object:
        binding = bind()
        verified = verify_request_state(ring, binding, params["requestState"])
        state = RoundState.decode(verified.data, verified.round)
        return mint_request_state(
            ring, binding, state.encode(), round=verified.round + 1, ttl=STATE_TTL
        )

    return op


async def full_round_op() -> AsyncOp:
    """Async op: `Server.handle_request` for round 2 of `ask2`, decoded request in, response out.

    Verifies the inbound state, takes the answer, replays the handler (the
    first question returns its recorded answer, the second is asked), and
    seals the next state: everything the server does in one round except the
    transport's JSON codec.
    """
    server = build_server()
    meta = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
    }
    first = await server.handle_request(
        jsonrpc.request(1, "tools/call", {"name": "ask2", "arguments": {}, "_meta": meta})
    )
    state = first["result"]["requestState"]
    answer = {"action": "accept", "content": {"ok": True}}
    params = {
        "name": "ask2",
        "arguments": {},
        "inputResponses": {"q1": answer},
        "requestState": state,
        "_meta": meta,
    }

    async def op() -> None:
        # A fresh message each time: the server may keep references into what it is given.
        message = jsonrpc.request(2, "tools/call", {**params, "inputResponses": {"q1": answer}})
        response = await server.handle_request(message)
        result = response.get("result")
        if not result or set(result.get("inputRequests", {})) != {"q2"}:
            raise AssertionError(f"unexpected round-2 response: {response!r}")

    return op
