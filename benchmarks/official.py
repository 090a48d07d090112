"""Workloads and fixtures for the official `mcp` SDK (pinned in requirements.txt).

Two server forms are built from the same tool set:

* `MCPServer` (the recommended high-level API): `confirm` asks its question
  through an `Elicit` resolver; the SDK's `RequestStateBoundary` seals every
  `requestState` (AES-256-GCM under an ephemeral key) and verifies the echo.
* low-level `Server`: `tools/call` returns an `InputRequiredResult` by hand
  and completes on the retry; nothing is sealed.

Both also hold `confirm_live`, the same question asked the classic way for
legacy (`initialize`-based) sessions: `MCPServer` awaits `ctx.elicit`, the
low-level form `ctx.session.elicit_form`; the server sends `elicitation/create`
on the call's own SSE stream and waits for the client's answer.

Every `*_once` coroutine does one unit of work against a fixture built by the
context managers below; the benchmark runner does the timing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import aiohttp
import httpx
import mcp_types as types
import orjson
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from pydantic import BaseModel

from benchmarks.harness import LOOPBACK, AsyncOp, serve_uvicorn
from benchmarks.tool_calls import (
    expect_text,
)

Form = Literal["mcpserver", "lowlevel"]
FORMS: tuple[Form, ...] = ("mcpserver", "lowlevel")

QUESTION = "Proceed?"
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}
MAX_QUESTIONS = 10
"""Largest k for the growth tools `ask1` .. `ask10` (k questions, k+1 rounds)."""

STDIO_SERVER_SCRIPT = Path(__file__).with_name("official_stdio_server.py")
MCP_PATH = "/mcp"


# --- servers ----------------------------------------------------------------


class Confirm(BaseModel):
    """The elicited answer; `MCPServer` renders its JSON schema as the question's schema."""

    ok: bool


async def _ask_confirm() -> Elicit[Confirm]:
    return Elicit(QUESTION, Confirm)


async def _confirm(answer: Annotated[Confirm, Resolve(_ask_confirm)]) -> str:
    return "yes" if answer.ok else "no"


async def _confirm_live(ctx: Context) -> str:
    # The classic, pre-MRTR API: a request to the client in the middle of the call.
    answer = await ctx.elicit(QUESTION, Confirm)
    return "yes" if answer.action == "accept" and answer.data.ok else "no"


async def _add(a: int, b: int) -> str:
    # async on purpose: MCPServer runs sync tools in a worker thread.
    return str(a + b)


def _add_sync(a: int, b: int) -> str:
    # The sync form, which MCPServer runs in a worker thread (`anyio.to_thread`).
    return str(a + b)


def _question_chain(k: int) -> Callable[..., Awaitable[str]]:
    """A tool whose k resolvers each depend on the previous one.

    A resolver runs only once its dependency is answered, so the questions are
    asked one per round: k `InputRequiredResult`s, then the result.
    """
    prev: Callable[..., Awaitable[Elicit[Confirm]]] | None = None
    for i in range(1, k + 1):
        prev = _make_question(i, prev)
    assert prev is not None
    last = prev

    async def tool(answer: Confirm) -> str:
        return "yes" if answer.ok else "no"

    # The resolver graph is read from annotations, so they are set on the
    # dynamically built functions rather than written out ten times.
    tool.__annotations__ = {"answer": Annotated[Confirm, Resolve(last)], "return": str}
    return tool


def _make_question(
    i: int, prev: Callable[..., Awaitable[Elicit[Confirm]]] | None
) -> Callable[..., Awaitable[Elicit[Confirm]]]:
    message = f"Question {i}?"
    if prev is None:

        async def first() -> Elicit[Confirm]:
            return Elicit(message, Confirm)

        first.__annotations__ = {"return": Elicit[Confirm]}
        return first

    async def nth(previous: Confirm) -> Elicit[Confirm]:
        return Elicit(message, Confirm)

    nth.__annotations__ = {"previous": Annotated[Confirm, Resolve(prev)], "return": Elicit[Confirm]}
    return nth


def build_mcpserver(name: str = "bench") -> MCPServer:
    """`MCPServer` with `confirm`, `add` (and its sync form `add_sync`), and `ask1`..`ask10`.

    Sealing is the framework default (`RequestStateSecurity.ephemeral()`);
    tools return plain text (`structured_output=False`) so no output schema is
    validated client-side, keeping the work equal to the low-level form.
    """
    server: MCPServer = MCPServer(name, log_level="WARNING")
    server.add_tool(_confirm, name="confirm", structured_output=False)
    server.add_tool(_confirm_live, name="confirm_live", structured_output=False)
    server.add_tool(_add, name="add", structured_output=False)
    server.add_tool(_add_sync, name="add_sync", structured_output=False)
    for k in range(1, MAX_QUESTIONS + 1):
        server.add_tool(_question_chain(k), name=f"ask{k}", structured_output=False)
    return server


def _elicit(message: str) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=CONFIRM_SCHEMA)
    )


def _accepted_ok(response: types.InputResponse | None) -> bool:
    return (
        isinstance(response, types.ElicitResult)
        and response.action == "accept"
        and bool((response.content or {}).get("ok"))
    )


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


_LOWLEVEL_TOOLS = [
    types.Tool(name="confirm", input_schema={"type": "object"}),
    types.Tool(name="confirm_live", input_schema={"type": "object"}),
    types.Tool(
        name="add",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    *(
        types.Tool(name=f"ask{k}", input_schema={"type": "object"})
        for k in range(1, MAX_QUESTIONS + 1)
    ),
]
_LOWLEVEL_SCHEMAS = {tool.name: tool.input_schema for tool in _LOWLEVEL_TOOLS}


async def _lowlevel_list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_LOWLEVEL_TOOLS)


async def _lowlevel_call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    responses = params.input_responses or {}
    if params.name == "confirm":
        # Round 1 carries no answer: ask. Round 2 carries it: finish. No state needed.
        if "confirm" not in responses:
            return types.InputRequiredResult(input_requests={"confirm": _elicit(QUESTION)})
        return _text("yes" if _accepted_ok(responses["confirm"]) else "no")
    if params.name == "confirm_live":
        # Legacy sessions only: ask on the call's own stream and wait for the answer.
        answer = await ctx.session.elicit_form(
            QUESTION, CONFIRM_SCHEMA, related_request_id=ctx.request_id
        )
        return _text("yes" if _accepted_ok(answer) else "no")
    if params.name == "add":
        args = params.arguments or {}
        return _text(str(int(args["a"]) + int(args["b"])))
    if params.name.startswith("ask"):
        # Hand-rolled, unsealed state: the answers so far, as a JSON list.
        k = int(params.name[3:])
        answers: list[bool] = json.loads(params.request_state) if params.request_state else []
        key = f"q{len(answers) + 1}"
        if key in responses:
            answers.append(_accepted_ok(responses[key]))
        if len(answers) < k:
            n = len(answers) + 1
            return types.InputRequiredResult(
                input_requests={f"q{n}": _elicit(f"Question {n}?")},
                request_state=json.dumps(answers, separators=(",", ":")),
            )
        return _text("yes" if all(answers) else "no")
    raise ValueError(f"unknown tool {params.name!r}")


def build_lowlevel(name: str = "bench-lowlevel") -> Server[Any]:
    """Low-level `Server` serving the same tools by hand, without sealing."""
    return Server(
        name,
        on_list_tools=_lowlevel_list_tools,
        on_call_tool=_lowlevel_call_tool,
        # Without this the HTTP entry re-runs tools/list on every call with
        # arguments to find the schema for Mcp-Param header checks.
        get_tool_input_schema=_LOWLEVEL_SCHEMAS.get,
    )


def build_server(form: Form) -> MCPServer | Server[Any]:
    return build_mcpserver() if form == "mcpserver" else build_lowlevel()


def build_http_app(form: Form, *, json_response: bool = True) -> Any:
    """Starlette app serving `form` over Streamable HTTP at `/mcp`.

    `json_response=True` answers each POST with one JSON body, the cheaper of
    the SDK's two modes for request/response traffic (the other defers to SSE).
    """
    server = build_server(form)
    return server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=json_response)


# --- clients ----------------------------------------------------------------


async def accept_ok(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    """Elicitation handler: accept every question with `{ok: true}`."""
    return types.ElicitResult(action="accept", content={"ok": True})


def _client(
    target: MCPServer | Server[Any] | StdioServerParameters | str, *, mode: str = "auto"
) -> Client:
    # Enough rounds for the k=10 growth tool; the SDK default is exactly 10.
    return Client(
        target,
        mode=mode,
        elicitation_callback=accept_ok,
        input_required_max_rounds=MAX_QUESTIONS + 2,
    )


@asynccontextmanager
async def _connected(client: Client) -> AsyncIterator[Client]:
    async with client:
        # List once so the client caches output schemas; otherwise every
        # `call_tool` re-lists to look the schema up.
        await client.list_tools()
        yield client


@asynccontextmanager
async def inproc_client(form: Form) -> AsyncIterator[Client]:
    """`Client(server)`: in-process, 2026-07-28 direct dispatch (no JSON-RPC framing)."""
    async with _connected(_client(build_server(form))) as client:
        yield client


@asynccontextmanager
async def http_server(
    form: Form, *, json_response: bool = True, in_thread: bool = False
) -> AsyncIterator[str]:
    """Serve `form` with uvicorn on a free loopback port; yields the endpoint URL."""
    app = build_http_app(form, json_response=json_response)
    # The SDK's session manager starts in the ASGI lifespan, so it must run.
    async with serve_uvicorn(app, lifespan="on", in_thread=in_thread) as port:
        yield f"http://{LOOPBACK}:{port}{MCP_PATH}"


@asynccontextmanager
async def http_client(url: str) -> AsyncIterator[Client]:
    """`Client(url)`: Streamable HTTP via the SDK's own httpx2 transport."""
    async with _connected(_client(url)) as client:
        yield client


@asynccontextmanager
async def legacy_http_client(url: str) -> AsyncIterator[Client]:
    """`Client(url, mode="legacy")`: `initialize` once, then one Streamable HTTP session.

    The handshake (and the session id it yields) happens here, outside any timing.
    """
    async with _connected(_client(url, mode="legacy")) as client:
        if client.session.initialize_result is None:
            raise AssertionError("the official client did not open a legacy session")
        yield client


@asynccontextmanager
async def stdio_client(form: Form) -> AsyncIterator[Client]:
    """`Client(StdioServerParameters)`: the server runs as a child process."""
    params = StdioServerParameters(command=sys.executable, args=[str(STDIO_SERVER_SCRIPT), form])
    async with _connected(_client(params)) as client:
        yield client


# --- workloads: one unit of work each ----------------------------------------


async def growth_state_sizes(client: Client, k: int) -> list[int]:
    """Drive `ask{k}` round by round; the `requestState` length (chars) after each round."""
    sizes: list[int] = []
    responses: types.InputResponses | None = None
    state: str | None = None
    for _ in range(k + 1):
        result = await client.session.call_tool(
            f"ask{k}", {}, input_responses=responses, request_state=state, allow_input_required=True
        )
        if not isinstance(result, types.InputRequiredResult):
            expect_text(result, "yes")
            return sizes
        state = result.request_state
        sizes.append(len(state or ""))
        answer = types.ElicitResult(action="accept", content={"ok": True})
        responses = {key: answer for key in result.input_requests or {}}
    raise AssertionError(f"ask{k} did not finish in {k + 1} rounds")


# --- HTTP floor: two keep-alive POSTs to a trivial ASGI app -------------------

FLOOR_REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"confirm"}}'
FLOOR_RESPONSE = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"yes"}]}}'


async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Smallest ASGI app: drain the body, answer a fixed JSON document."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(FLOOR_RESPONSE)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": FLOOR_RESPONSE})


_FLOOR_MCP_SERVER_INFO = {"name": "bench", "version": "0.1.0"}
#: `tools/list` for `floor_mcp_app`, which our client's fixture asks once before timing.
_FLOOR_MCP_TOOLS = {
    "tools": [
        {
            "name": "add",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        }
    ],
    "resultType": "complete",
}


async def floor_mcp_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least a Python MCP server does for a `tools/call` of `add`: decode the body, add the
    two arguments, encode the result our server gives (a text block, `resultType`, the server's
    info in `_meta`), answer. No check of any kind (headers, `_meta`, argument types, sizes)
    and no MRTR: a reference for what the HTTP floor plus bare JSON-RPC work costs, answering
    the same requests from the same client as ours (`instructions.py`)."""
    if scope["type"] != "http":
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    request = orjson.loads(b"".join(chunks))
    result: dict[str, Any]
    if request["method"] == "tools/call":
        arguments = request["params"]["arguments"]
        result = {
            "content": [{"type": "text", "text": str(arguments["a"] + arguments["b"])}],
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": _FLOOR_MCP_SERVER_INFO},
        }
    else:
        result = _FLOOR_MCP_TOOLS
    body = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
    length = b"%d" % len(body)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", length)],
        }
    )
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def floor_server(*, in_thread: bool = False) -> AsyncIterator[str]:
    """`floor_app` on the shared uvicorn settings; yields its URL."""
    async with serve_uvicorn(floor_app, lifespan="off", in_thread=in_thread) as port:
        yield f"http://{LOOPBACK}:{port}/"


_FLOOR_HEADERS = {"content-type": "application/json", "accept": "application/json"}


@asynccontextmanager
async def aiohttp_floor(url: str) -> AsyncIterator[AsyncOp]:
    """An op doing two sequential keep-alive POSTs with one `aiohttp.ClientSession`."""
    async with aiohttp.ClientSession() as session:

        async def post() -> None:
            async with session.post(url, data=FLOOR_REQUEST, headers=_FLOOR_HEADERS) as resp:
                await resp.read()

        async def op() -> None:
            await post()
            await post()

        await op()  # open the keep-alive connection outside the timing
        yield op


@asynccontextmanager
async def httpx_floor(url: str) -> AsyncIterator[AsyncOp]:
    """An op doing two sequential keep-alive POSTs with one `httpx.AsyncClient`."""
    async with httpx.AsyncClient() as session:

        async def post() -> None:
            resp = await session.post(url, content=FLOOR_REQUEST, headers=_FLOOR_HEADERS)
            await resp.aread()

        async def op() -> None:
            await post()
            await post()

        await op()
        yield op


@asynccontextmanager
async def httpx2_floor(url: str) -> AsyncIterator[AsyncOp]:
    """Same with `httpx2.AsyncClient`, the HTTP client the official SDK ships with."""
    import httpx2

    async with httpx2.AsyncClient() as session:

        async def post() -> None:
            resp = await session.post(url, content=FLOOR_REQUEST, headers=_FLOOR_HEADERS)
            await resp.aread()

        async def op() -> None:
            await post()
            await post()

        await op()
        yield op


# --- request-state sealing ----------------------------------------------------

SEAL_KEY = b"\x07" * 32


def one_question_state() -> str:
    """Plaintext shaped like `MCPServer`'s state after asking one question.

    Its resolver state is `{"v":3,"outcomes":{},"asked":{<resolver key>: <digest>}}`;
    the key is the resolver's `module:qualname`, the digest 22 base64url chars.
    """
    key = f"{_ask_confirm.__module__}:{_ask_confirm.__qualname__}"
    return json.dumps({"v": 3, "outcomes": {}, "asked": {key: "A" * 22}}, separators=(",", ":"))


def codec_seal_verify_op() -> Callable[[], object]:
    """Sync op: `security.codec.seal` then `.unseal` (AES-256-GCM only, no claims).

    This is the public surface of `RequestStateSecurity`; the claims envelope
    (expiry, request binding, audience) lives in `RequestStateBoundary`.
    """
    codec = RequestStateSecurity(keys=[SEAL_KEY]).codec
    payload = one_question_state().encode()

    def op() -> object:
        return codec.unseal(codec.seal(payload))

    return op


def _mrtr_ctx(params: Mapping[str, Any]) -> ServerRequestContext[Any]:
    # The boundary reads only method and params; no session or transport is needed.
    return ServerRequestContext(
        session=cast(Any, None),
        lifespan_context={},
        protocol_version="2026-07-28",
        method="tools/call",
        params=params,
        request_id=1,
    )


async def boundary_seal_verify_op() -> AsyncOp:
    """Async op: one pass through `RequestStateBoundary`, as each MRTR round does.

    The inbound `requestState` is unsealed and its claims checked (verify), the
    handler's `input_required` result is sealed in a fresh envelope (seal).
    """
    boundary = RequestStateBoundary(RequestStateSecurity(keys=[SEAL_KEY]), default_audience="bench")
    plaintext = one_question_state()
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": QUESTION}}},
        "requestState": plaintext,
    }

    async def handler(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        if ctx.params is None or ctx.params.get("requestState") not in (None, plaintext):
            raise AssertionError("boundary handed the handler the wrong state")
        return result

    base = {"name": "confirm", "arguments": {}}
    minted = await boundary(_mrtr_ctx(base), handler)
    token = cast(dict[str, Any], minted)["requestState"]
    ctx = _mrtr_ctx({**base, "requestState": token})

    async def op() -> None:
        out = await boundary(replace(ctx), handler)
        if not isinstance(out, dict) or not str(out.get("requestState", "")).startswith("v1."):
            raise AssertionError("boundary did not seal the outbound state")

    return op
