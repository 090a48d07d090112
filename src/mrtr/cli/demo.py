"""`mrtr demo`: the demo shop on loopback HTTP and scripted clients of both protocol eras.

The server (`demo_server.py`) runs under uvicorn in this process and event loop. A 2026-07-28
client answers every question with scripted handlers and reports each MRTR round through
`ClientOptions.on_round`: what the server asked (key, method, message), what was answered,
and how big the sealed `requestState` was. Then a legacy (2025-11-25) client calls the same
tool on the same endpoint, and the same handlers answer the server's live requests on its
session; its result must match the modern one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, TextIO

import uvicorn

from ..client.client import Client
from ..client.options import ClientOptions, RoundInfo
from ..protocol.errors import McpError
from ..protocol.types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    Root,
    TextContent,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION, LEGACY_PROTOCOL_VERSIONS
from ..server.server import Server
from .demo_server import server as demo_server
from .results import describe_block

#: Seconds the whole demo may take before it is stopped as failed (a guard, not a budget).
DEMO_TIMEOUT = 30.0
_STARTUP_TIMEOUT = 10.0
_SHUTDOWN_TIMEOUT = 5


class DemoFailed(Exception):
    """The demo did not go as scripted; the message says what happened."""


def _answer_form(params: ElicitRequestParams) -> ElicitResult:
    """The scripted person: answers each form by the fields it asks for."""
    fields = set((params.requested_schema or {}).get("properties", {}))
    if "confirm" in fields:
        return ElicitResult(action="accept", content={"confirm": True})
    if "region" in fields:
        return ElicitResult(action="accept", content={"region": "eu", "express": True})
    if "tone" in fields:
        return ElicitResult(action="accept", content={"tone": "playful"})
    if "reveal" in fields:
        return ElicitResult(action="accept", content={"reveal": True})
    return ElicitResult(action="decline")


def _kind(prop: dict[str, Any]) -> str:
    if isinstance(prop.get("enum"), list):
        return "one of " + "|".join(str(v) for v in prop["enum"])
    return str(prop.get("type", "value"))


class DemoClient:
    """Scripted handlers that record what they were asked, and the `on_round` report."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.rounds = 0
        #: Methods of the server's live requests on a legacy session, in arrival order.
        self.live_requests: list[str] = []
        self.live = False  # True while a legacy client calls: questions are printed at once
        self._asked: list[list[str]] = []

    def say(self, text: str = "") -> None:
        """Print one line of the report."""
        print(text, file=self.out, flush=True)

    def _record(self, question: str, details: list[str], answer: str) -> None:
        lines = [question, *details, f"answered: {answer}"]
        if not self.live:
            # Handlers start in the order of the round's keys, so records pair up with them.
            self._asked.append(lines)
            return
        self.live_requests.append(question.split(" ", 1)[0])
        label = f"server request {len(self.live_requests)}:"
        self.say(f"  {label} {lines[0]}")
        for line in lines[1:]:
            self.say(f"  {' ' * len(label)} {line}")

    def elicit(self, params: ElicitRequestParams) -> ElicitResult:
        """The elicitation handler."""
        result = _answer_form(params)
        schema = params.requested_schema or {}
        fields = ", ".join(
            f"{name} ({_kind(prop)})" for name, prop in schema.get("properties", {}).items()
        )
        answer: str = result.action
        if result.content is not None:
            answer += " " + json.dumps(result.content)
        self._record(f'elicitation/create "{params.message}"', [f"form fields: {fields}"], answer)
        return result

    def sample(self, params: CreateMessageRequestParams) -> CreateMessageResult:
        """The sampling handler (a scripted model)."""
        prompt = " ".join(
            describe_block(block.to_wire())
            for message in params.messages
            for block in (
                message.content if isinstance(message.content, list) else [message.content]
            )
        )
        reply = "Enjoy every cup, and thank you for shopping with us!"
        self._record(
            f'sampling/createMessage "{prompt}"',
            [f'system prompt: "{params.system_prompt}", max {params.max_tokens} tokens'],
            f'assistant: "{reply}" (model demo-model)',
        )
        return CreateMessageResult(
            role="assistant",
            content=TextContent(text=reply),
            model="demo-model",
            stop_reason="endTurn",
        )

    def list_roots(self, params: ListRootsRequestParams) -> ListRootsResult:
        """The roots handler: the current directory."""
        root = Root(uri=Path.cwd().as_uri(), name="workspace")
        self._record("roots/list", [], f"1 root: {root.uri}")
        return ListRootsResult(roots=[root])

    def on_round(self, info: RoundInfo) -> None:
        """Print one round: the questions under their keys, the answers, the state's size."""
        self.rounds += 1
        asked, self._asked = self._asked, []
        keys = ", ".join(info.keys) or "(none)"
        self.say(f"  round {info.round}: input_required, asking for {keys}")
        for index, lines in enumerate(asked):
            key = info.keys[index] if index < len(info.keys) else "?"
            self.say(f"    [{key}] {lines[0]}")
            for line in lines[1:]:
                self.say(f"    {' ' * (len(key) + 2)} {line}")
        self.say(
            f"    requestState: {info.state_size} bytes, sealed by the server; "
            "echoed back unchanged on the retry"
        )

    def client(self, url: str, *, legacy: bool = False) -> Client:
        """The scripted client for `url`: its era set by the server's first answer, or an
        `initialize`-based (legacy) session when `legacy`."""
        protocol: Literal["auto", "legacy"] = "legacy" if legacy else "auto"
        return Client.http(
            url,
            options=ClientOptions(on_round=self.on_round, protocol=protocol),
            elicitation_handler=self.elicit,
            sampling_handler=self.sample,
            roots_handler=self.list_roots,
        )


@contextlib.asynccontextmanager
async def serving(server: Server, port: int) -> AsyncIterator[str]:
    """Serve `server` on 127.0.0.1:`port` (0 = any free port) in this event loop; yields
    the endpoint URL and stops uvicorn on the way out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise DemoFailed(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        server.asgi_app(),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=_SHUTDOWN_TIMEOUT,
    )
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(_STARTUP_TIMEOUT):
            while not web.started:
                if task.done():
                    break
                await asyncio.sleep(0.01)
        if not web.started:
            raise DemoFailed("the demo server did not start (see the messages above)")
        yield f"http://127.0.0.1:{bound}/mcp"
    finally:
        web.should_exit = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_SHUTDOWN_TIMEOUT + 1):
                await task
        sock.close()


ORDER_ARGUMENTS: dict[str, Any] = {"item": "espresso beans", "quantity": 2}
_ORDER_CALL = f"tools/call place_order {json.dumps(ORDER_ARGUMENTS)}"
_MODERN = LATEST_PROTOCOL_VERSION
_LEGACY = LEGACY_PROTOCOL_VERSIONS[0]
#: The legacy session's live requests: two forms, then a note and the roots, which the
#: handler asks together (so they may come in either order).
_LIVE_FORMS = ["elicitation/create", "elicitation/create"]
_LIVE_TOGETHER = {"sampling/createMessage", "roots/list"}


async def run_demo(port: int = 0, out: TextIO | None = None) -> None:
    """Run the whole demo; raises `DemoFailed` (or `McpError`) when it does not go as scripted."""
    demo = DemoClient(out if out is not None else sys.stdout)
    say = demo.say
    async with serving(demo_server, port) as url:
        say("mrtr demo: one server, two protocol eras, over Streamable HTTP on loopback")
        say(f"  server: {demo_server.name} {demo_server.version} at {url}")
        say("  clients: answer every question with scripted handlers (no person, no LLM)")
        say("  The shop's handlers ask mid-body (`await ctx.elicit(...)`) and are written once;")
        say("  the server answers each era in its own way, so both clients work with them:")
        say(f"    {_MODERN}: each question is an MRTR round (the client answers, then retries)")
        say(f"    {_LEGACY}: each question is a live request on the client's session")
        say("")
        say(f"== {_MODERN}: Multi Round-Trip Requests, stateless ==")
        say('  client: protocol="auto" (the server\'s first answer decides the era)')
        async with demo.client(url) as client:
            say("")
            say(f"[1/3] {_ORDER_CALL}")
            tool = await client.call_tool("place_order", ORDER_ARGUMENTS)
            rounds = demo.rounds
            order = _check_order(tool, rounds)
            say(f"  result after {rounds} rounds ({rounds + 1} requests), structured content:")
            _show(demo, order)
            modern = _negotiated(client, "modern")
            say(f"  negotiated: {modern} (modern era)")

            order_id = str(order["order_id"])
            say("")
            say(f'[2/3] prompts/get order_update_email {{"order_id": "{order_id}"}}')
            prompt = await client.get_prompt("order_update_email", {"order_id": order_id})
            for message in prompt.messages:
                say(f"  result: [{message.role}] {describe_block(message.content.to_wire())}")

            say("")
            say(f"[3/3] resources/read orders://{order_id}")
            resource = await client.read_resource(f"orders://{order_id}")
            for contents in resource.contents:
                text = getattr(contents, "text", None)
                say(f"  result: {text if text is not None else '(binary contents)'}")
        modern_rounds = demo.rounds
        say("")
        n = modern_rounds
        say(f"  {n} input_required rounds, each an independent HTTP request; the server kept")
        say("  no state between them: all it needed came back in the sealed requestState.")

        say("")
        say(f"== {_LEGACY}: initialize, then one session (Mcp-Session-Id) ==")
        say('  client: protocol="legacy" (as a client of an earlier revision opens)')
        say("")
        say(f"[1/1] {_ORDER_CALL}")
        say("  (each question comes as a request of the server's own, in the middle of the call)")
        demo.live = True
        async with demo.client(url, legacy=True) as client:
            tool = await client.call_tool("place_order", ORDER_ARGUMENTS)
            legacy = _negotiated(client, "legacy")
        if demo.rounds != modern_rounds:
            raise DemoFailed("the legacy client got input_required rounds, not live requests")
        asked = demo.live_requests
        again = _check_order(tool, len(asked))
        say(f"  result after {len(asked)} live requests, in one tools/call, structured content:")
        _show(demo, again)
        _check_live(asked)
        _check_same(order, again)
        say(f"  negotiated: {legacy} (legacy era)")
        say(f"  the same result as on {modern}, but for order_id (it is a second order)")
        say("")
        say(f"done: one set of handlers; {modern_rounds} MRTR rounds on {modern}, "
            f"{len(asked)} live requests on {legacy}.")  # fmt: skip


def _show(demo: DemoClient, order: dict[str, Any]) -> None:
    for line in json.dumps(order, indent=2).splitlines():
        demo.say(f"    {line}")


def _negotiated(client: Client, era: str) -> str:
    """The client's protocol version, once it is sure it speaks `era`."""
    if client.era != era:
        raise DemoFailed(f"the client speaks the {client.era} era; expected the {era} one")
    return client.protocol_version


def _check_live(asked: list[str]) -> None:
    if len(asked) != 4 or asked[:2] != _LIVE_FORMS or set(asked[2:]) != _LIVE_TOGETHER:
        raise DemoFailed(f"the legacy session asked {asked}; expected {_LIVE_FORMS} and then "
                         f"{' and '.join(sorted(_LIVE_TOGETHER))}")  # fmt: skip


def _check_same(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    ours = {key: value for key, value in modern.items() if key != "order_id"}
    theirs = {key: value for key, value in legacy.items() if key != "order_id"}
    if ours != theirs:
        raise DemoFailed(f"the legacy result {theirs} differs from the modern one {ours}")


def _check_order(result: CallToolResult, asked: int) -> dict[str, Any]:
    if result.is_error:
        text = " ".join(describe_block(b.to_wire()) for b in result.content)
        raise DemoFailed(f"place_order failed: {text}")
    order = result.structured_content
    if not isinstance(order, dict) or order.get("status") != "placed":
        raise DemoFailed(f"place_order did not place the order: {order!r}")
    if asked < 2:
        raise DemoFailed(f"place_order asked {asked} times; expected at least 2")
    return order


def demo_main(port: int = 0) -> int:
    """Run the demo and return the exit status (0 on success, 1 with a message otherwise)."""

    async def guarded() -> None:
        try:
            async with asyncio.timeout(DEMO_TIMEOUT):
                await run_demo(port)
        except TimeoutError:
            raise DemoFailed(f"the demo did not finish within {DEMO_TIMEOUT:g} seconds") from None

    try:
        asyncio.run(guarded())
    except DemoFailed as exc:
        print(f"mrtr demo: failed: {exc}", file=sys.stderr)
        return 1
    except McpError as exc:
        print(f"mrtr demo: failed: error {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # the reader of our output went away (`mrtr demo | head`): not a demo failure
    except OSError as exc:
        print(f"mrtr demo: failed: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DemoClient", "DemoFailed", "demo_main", "run_demo", "serving"]
