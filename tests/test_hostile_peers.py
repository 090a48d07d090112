"""Hostile peers on both sides: what an attacker can send mrtr, and what it cannot get from it.

Each numbered guarantee of the security page (docs/concepts/request-state-security.md, "What
a hostile peer cannot do") has its tests here, named after it (`test_<n>_...`), or, where an
existing test already covers it well, is listed below by node id. The attacked server runs for
real: the HTTP app under uvicorn on a loopback port (`transport_flow.serve`), stdio in a child
process (`servers/soundcheck_server.py`). The hostile servers a client faces are a raw ASGI app
here and `servers/hostile_peer_server.py` over stdio, which play either era.

Point -> the existing tests (node ids) that cover it, beside the `test_<n>_...` ones here:

1, session, stream and task ids bound to their principal:
tests/test_http_sse_server.py::test_sessions_are_bound_to_their_principal_and_counted_per_principal
tests/test_scale_out_sessions.py::test_forged_foreign_and_deleted_ids_are_404_on_every_server
tests/test_tasks_client_server.py::test_another_callers_task_id_is_refused
tests/test_tasks_server.py::test_a_task_of_another_caller_does_not_exist_for_this_one
tests/test_server_auth.py::test_state_minted_for_one_user_is_refused_for_another
2, path traversal in resource templates:
tests/test_uri_template.py::test_no_expression_kind_hands_over_an_escaping_value
tests/test_uri_template.py::test_reading_a_traversal_uri_is_resource_not_found
tests/test_uri_template.py::test_reading_an_absolute_path_through_a_reserved_variable_is_refused
3, batches, depth bombs, huge ids:
tests/test_bad_request_ids.py::test_over_http_in_both_eras_each_bad_id_is_named
tests/test_bad_request_ids.py::test_over_stdio_each_bad_id_is_named
tests/test_request_state_hardening.py::test_deep_input_over_http_gets_invalid_params
4, handler errors masked:
tests/test_tool_errors.py::test_both_eras_over_stdio_mask_and_show_alike
tests/test_tool_errors.py::test_an_exception_is_masked_and_its_id_names_the_log_line
5, nothing secret in the logs:
tests/test_server_auth.py::test_tokens_are_never_logged
tests/test_client_auth.py::test_secrets_stay_out_of_reprs
6, no caller token through the proxy:
(none)
7, endless input_required:
tests/test_mrtr_client.py::test_max_rounds_stops_a_server_that_never_completes
8, message caps:
tests/test_client_hardening.py::test_an_http_response_over_the_limit_is_refused_unread
tests/test_client_hardening.py::test_a_stdio_response_over_the_limit_has_a_local_code
tests/test_stdio_transport.py::test_over_long_line_is_refused_with_its_id_and_serving_continues
tests/test_request_state_hardening.py::test_oversized_state_is_refused_before_it_is_decoded
9, responses to ids never sent:
tests/test_scale_out_sessions.py::test_forged_foreign_and_deleted_ids_are_404_on_every_server
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import mrtr
from helpers.loopback_process import START_GUARD, free_port, listening
from helpers.oauth_as import AuthorizationServer
from helpers.transport_flow import GUARD, serve
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client import InputRequiredConfig
from mrtr.client.auth import ClientCredentials, ClientCredentialsGrant, OAuth
from mrtr.protocol import jsonrpc
from mrtr.protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_ROUNDS_EXCEEDED,
    PARSE_ERROR,
    RESPONSE_TOO_LARGE,
    McpError,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.auth import JWTVerifier
from mrtr.transport.headers import encode_value
from mrtr.transport.http_app import StreamableHTTPApp
from mrtr.transport.stdio_client import StdioTransport
from servers.soundcheck_server import SECRET_FAILURE, build

pytestmark = pytest.mark.timeout(120)

SERVERS = Path(__file__).resolve().parent / "servers"
SOUND_SERVER = str(SERVERS / "soundcheck_server.py")
HOSTILE_SERVER = str(SERVERS / "hostile_peer_server.py")
#: The mrtr the test imports, for the processes too.
ENV = {**os.environ, "PYTHONPATH": str(Path(mrtr.__file__).resolve().parent.parent)}
LEGACY = "2025-11-25"
ERAS = ["modern", "legacy"]
KEY = "sound-checks-request-state-key-0123456789"
META = {
    "io.modelcontextprotocol/protocolVersion": LATEST_PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}
ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def user_of(scope: Any) -> str | None:
    """The principal: the `X-User` header (what an authenticated deployment gets from a token)."""
    value = dict(scope.get("headers", [])).get(b"x-user")
    return None if value is None else bytes(value).decode()


def options(era: str, **config: Any) -> ClientOptions:
    return ClientOptions(protocol=era, input_required=InputRequiredConfig(**config))  # type: ignore[arg-type]


def accept_ok(params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


# --- raw HTTP in both eras ---------------------------------------------------------------------


class Raw:
    """Raw JSON-RPC over HTTP to one endpoint, in one era (a legacy one opens a session)."""

    def __init__(self, http: httpx.AsyncClient, url: str, era: str, user: str = "ada") -> None:
        self.http, self.url, self.era, self.user = http, url, era, user
        self.session: str | None = None

    async def open(self) -> Raw:
        if self.era == "legacy":
            params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "r"}}
            opened = await self.post(jsonrpc.request(0, "initialize", params))
            assert opened.status_code == 200, opened.text
            self.session = opened.headers["mcp-session-id"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await self.post(initialized)).status_code == 202
        return self

    def request(self, method: str, params: dict[str, Any], id: Any = 1) -> dict[str, Any]:
        """A well-formed request of this era."""
        if self.era == "modern":
            params = {**params, "_meta": META}
        return jsonrpc.request(id, method, params)

    def headers(self, message: Any) -> dict[str, str]:
        headers = {**ACCEPT, "X-User": self.user}
        if self.session is not None:
            headers |= {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": LEGACY}
            return headers
        headers["MCP-Protocol-Version"] = LATEST_PROTOCOL_VERSION
        if isinstance(message, dict) and "method" in message and "id" in message:
            headers["Mcp-Method"] = message["method"]
            name = {"tools/call": "name", "resources/read": "uri"}.get(message["method"])
            if name is not None:
                headers["Mcp-Name"] = encode_value(message["params"][name])
        return headers

    async def post(self, message: Any, body: bytes | None = None, **extra: str) -> httpx.Response:
        content = orjson.dumps(message) if body is None else body
        headers = self.headers(message) | extra
        return await self.http.post(self.url, content=content, headers=headers)


@contextlib.asynccontextmanager
async def served(**server_options: Any) -> AsyncIterator[tuple[str, list[str]]]:
    """The soundcheck server under uvicorn on loopback: its `/mcp` URL, and what its template
    handlers were given."""
    server, opened = build(**server_options)
    app = StreamableHTTPApp(server)
    try:
        async with serve(app) as base:
            yield base + "/mcp", opened
    finally:
        app.close()


@contextlib.asynccontextmanager
async def raw_http(era: str, **server_options: Any) -> AsyncIterator[tuple[Raw, list[str]]]:
    async with served(**server_options) as (url, opened), httpx.AsyncClient(timeout=GUARD) as http:
        yield await Raw(http, url, era).open(), opened


# --- raw stdio in both eras --------------------------------------------------------------------


class Stdio:
    """The soundcheck server in a child process, spoken to in raw lines, in one era."""

    def __init__(self, process: asyncio.subprocess.Process, era: str) -> None:
        self.process, self.era = process, era
        assert process.stdin is not None and process.stdout is not None
        self.stdin, self.stdout = process.stdin, process.stdout

    def request(self, method: str, params: dict[str, Any], id: Any = 1) -> dict[str, Any]:
        if self.era == "modern":
            params = {**params, "_meta": META}
        return jsonrpc.request(id, method, params)

    async def write(self, line: bytes) -> None:
        self.stdin.write(line + b"\n")
        await self.stdin.drain()

    async def read(self) -> dict[str, Any]:
        async with asyncio.timeout(GUARD):
            message: dict[str, Any] = orjson.loads(await self.stdout.readline())
        return message


@contextlib.asynccontextmanager
async def raw_stdio(era: str, *args: str) -> AsyncIterator[Stdio]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        SOUND_SERVER,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=ENV,
        limit=64 * 1024 * 1024,
    )
    peer = Stdio(process, era)
    try:
        if era == "legacy":
            params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "r"}}
            await peer.write(orjson.dumps(jsonrpc.request(0, "initialize", params)))
            assert (await peer.read())["result"]["protocolVersion"] == LEGACY
            await peer.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield peer
    finally:
        peer.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            async with asyncio.timeout(GUARD):
                await process.wait()


# === 1: ids bound to their principal ===========================================================


async def test_1_another_principals_session_id_and_last_event_id_are_404() -> None:
    async with raw_http("legacy", principal=user_of) as (ada, _):
        bob = Raw(ada.http, ada.url, "legacy", user="bob")
        bob.session = ada.session
        listing = ada.request("tools/list", {})
        refused = await bob.post(listing)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == INVALID_REQUEST
        assert "Session not found" in refused.json()["error"]["message"]
        stream = {**bob.headers(None), "Accept": "text/event-stream"}
        for extra in ({}, {"Last-Event-ID": "0-1"}, {"Last-Event-ID": f"{ada.session}-1"}):
            got = await ada.http.get(ada.url, headers=stream | extra)
            assert got.status_code == 404, extra
            assert "Session not found" in got.json()["error"]["message"]
        assert (await ada.http.delete(ada.url, headers=bob.headers(None))).status_code == 404
        # Ada's session is untouched by all of it.
        mine = await ada.post(listing)
        assert mine.status_code == 200 and "tools" in mine.json()["result"]


# === 2: path traversal in resource templates ===================================================

#: URIs that try to leave the template's directory, each refused.
TRAVERSALS = [
    "file:///docs/../etc/passwd",
    "file:///docs/..",
    "file:///docs/%2e%2e/etc",
    "file:///docs/%2e%2e%2fetc%2fpasswd",
    "file:///docs/..%2Fetc",
    "file:///docs/..\\etc",
    "file:///docs/..%5Cetc",
    "file:///docs//etc/passwd",
    "file:///docs/%2Fetc%2Fpasswd",
    "file:///docs/a%00.txt",
    "file:///tree/../../etc/passwd",
    "file:///tree/a/%2e%2e/%2e%2e/etc/passwd",
    "file:///tree/a/%2E%2E%2F%2E%2E%2Fetc",
    "file:///tree/..\\..\\etc",
    "file:///tree//etc/passwd",
    "file:///tree/%2Fetc%2Fpasswd",
    "file:///tree/C:/Windows/win.ini",
    "file:///tree/a%00.txt",
    "file:///etc/passwd",
]
#: Double-encoded dots: decoded once, they are the literal text `%2e%2e`, no dot segment.
DOUBLE_ENCODED = {
    "file:///docs/%252e%252e%252fetc": "doc %2e%2e%2fetc",
    "file:///tree/%252e%252e/%252e%252e/etc": "tree %2e%2e/%2e%2e/etc",
}


def escapes(value: str) -> bool:
    """Whether a value handed to a template handler could leave its directory."""
    segments = value.replace("\\", "/").split("/")
    return ".." in segments or value.startswith("/") or "\x00" in value or "\\" in value


async def read_all(client: Client) -> tuple[list[str], dict[str, str]]:
    """Read every traversal (each must be refused with -32602) and every double-encoded URI:
    the refusals' messages, and the texts read."""
    refusals: list[str] = []
    for uri in TRAVERSALS:
        with pytest.raises(McpError) as refused:
            await asyncio.wait_for(client.read_resource(uri), GUARD)
        assert refused.value.code == INVALID_PARAMS, uri
        refusals.append(refused.value.message)
    texts = {}
    for uri in DOUBLE_ENCODED:
        read = await asyncio.wait_for(client.read_resource(uri), GUARD)
        texts[uri] = read.contents[0].text  # type: ignore[union-attr]
    return refusals, texts


@pytest.mark.parametrize("era", ERAS)
async def test_2_traversal_in_every_form_is_refused_over_http(era: str) -> None:
    async with (
        served() as (url, opened),
        Client.http(url, options=ClientOptions(protocol=era)) as client,  # type: ignore[arg-type]
    ):
        ok = await client.read_resource("file:///tree/a/b.txt")
        refusals, texts = await read_all(client)
    assert ok.contents[0].text == "tree a/b.txt"  # type: ignore[union-attr]
    assert all("not found" in message.lower() for message in refusals)
    assert texts == DOUBLE_ENCODED  # decoded exactly once
    assert opened == ["a/b.txt", "%2e%2e%2fetc", "%2e%2e/%2e%2e/etc"]
    assert not any(escapes(value) for value in opened)


@pytest.mark.parametrize("era", ERAS)
async def test_2_traversal_in_every_form_is_refused_over_stdio(era: str) -> None:
    transport = StdioTransport(sys.executable, [SOUND_SERVER], env=ENV)
    async with Client(transport, options=ClientOptions(protocol=era)) as client:  # type: ignore[arg-type]
        refusals, texts = await read_all(client)
    assert all("not found" in message.lower() for message in refusals)
    assert texts == DOUBLE_ENCODED


# === 3: batches, depth bombs, huge ids, encoded bodies =========================================

#: A body nested far past any parser's depth: 100,000 arrays.
DEPTH_BOMB = b"[" * 100_000 + b"]" * 100_000


def deep_call(raw: Raw | Stdio, levels: int) -> bytes:
    """A `tools/call` whose argument is `levels` nested arrays."""
    nested = b"[" * levels + b"]" * levels
    body = orjson.dumps(raw.request("tools/call", {"name": "fail", "arguments": {"a": 0}}))
    return body.replace(b'{"a":0}', b'{"a":' + nested + b"}")


@pytest.mark.parametrize("era", ERAS)
async def test_3_batches_depth_bombs_huge_ids_and_gzip_are_refused_over_http(era: str) -> None:
    async with raw_http(era) as (raw, _):
        batch = [raw.request("tools/list", {}, 1), raw.request("tools/list", {}, 2)]
        refused = await raw.post(batch)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == INVALID_REQUEST
        assert "must be an object" in refused.json()["error"]["message"]

        call = raw.request("tools/call", {"name": "fail", "arguments": {}})
        bomb = orjson.dumps(call).replace(b"{}", DEPTH_BOMB)
        refused = await raw.post(call, body=bomb)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == PARSE_ERROR
        assert "depth limit exceeded" in refused.json()["error"]["message"]
        # Within the parser's depth but past the server's: -32602, before the handler.
        deep = await raw.post(call, body=deep_call(raw, 300))
        error = deep.json()["error"]
        assert error["code"] == INVALID_PARAMS and "nested more than 250" in error["message"]

        for big in (2**64, -(2**63) - 1, 10**30):
            huge_id = orjson.dumps(raw.request("tools/list", {})).replace(
                b'"id":1', b'"id":' + str(big).encode()
            )
            refused = await raw.post(raw.request("tools/list", {}), body=huge_id)
            assert refused.status_code == 400, big
            assert refused.json()["error"]["code"] == INVALID_REQUEST
            assert "64-bit range" in refused.json()["error"]["message"]

        listing = raw.request("tools/list", {})
        packed = gzip.compress(orjson.dumps(listing))
        refused = await raw.post(listing, body=packed, **{"Content-Encoding": "gzip"})
        assert refused.status_code == 415, refused.text
        assert "Content-Encoding" in refused.json()["error"]["message"]
        # The same refusal for a plain body that claims an encoding.
        claimed = await raw.post(listing, **{"Content-Encoding": "gzip"})
        assert claimed.status_code == 415, claimed.text
        # The connection and the session go on.
        assert "tools" in (await raw.post(listing)).json()["result"]


@pytest.mark.parametrize("era", ERAS)
async def test_3_batches_and_depth_bombs_are_refused_over_stdio(era: str) -> None:
    async with raw_stdio(era) as peer:
        batch = [peer.request("tools/list", {}, 1), peer.request("tools/list", {}, 2)]
        await peer.write(orjson.dumps(batch))
        refused = await peer.read()
        assert refused["error"]["code"] == INVALID_REQUEST
        assert "must be an object" in refused["error"]["message"]
        call = peer.request("tools/call", {"name": "fail", "arguments": {}}, 5)
        await peer.write(orjson.dumps(call).replace(b"{}", DEPTH_BOMB))
        refused = await peer.read()
        assert refused["error"]["code"] == PARSE_ERROR
        assert "depth limit exceeded" in refused["error"]["message"]
        await peer.write(deep_call(peer, 300))
        refused = await peer.read()
        assert refused["id"] == 1 and refused["error"]["code"] == INVALID_PARAMS
        await peer.write(orjson.dumps(peer.request("tools/list", {}, 9)))
        assert "tools" in (await peer.read())["result"]


# === 4: handler errors are masked ==============================================================


@pytest.mark.parametrize("era", ERAS)
async def test_4_a_failing_handler_is_masked_over_http_and_logged(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with (
        served() as (url, _),
        Client.http(url, options=ClientOptions(protocol=era)) as client,  # type: ignore[arg-type]
    ):
        result = await client.call_tool("fail", {})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert SECRET_FAILURE not in text and "Traceback" not in text and "RuntimeError" not in text
    error_id = text.rsplit("logged on the server as ", 1)[1].rstrip(")")
    [line] = [r for r in caplog.records if error_id in r.getMessage()]
    assert line.exc_info is not None and SECRET_FAILURE in str(line.exc_info[1])


# === 5: nothing secret in the logs, even at DEBUG ==============================================


@contextlib.asynccontextmanager
async def protected_site() -> AsyncIterator[tuple[AuthorizationServer, str]]:
    """The soundcheck server behind OAuth (tokens of a real authorization server) and a fixed
    request-state key, on loopback: the authorization server and the server's URL."""
    holder: dict[str, Any] = {}

    async def late(scope: Any, receive: Any, send: Any) -> None:
        await holder["app"](scope, receive, send)

    async with AuthorizationServer() as auth_server, serve(late) as base:
        url = base + "/mcp"
        auth = mrtr.AuthSettings(
            resource=url,
            authorization_servers=[auth_server.issuer],
            verifier=JWTVerifier(auth_server.issuer, url),
            scopes_supported=["mcp"],
        )
        server, _ = build(request_state_key=KEY, auth=auth)
        holder["app"] = app = StreamableHTTPApp(server)
        try:
            yield auth_server, url
        finally:
            app.close()


async def test_5_no_token_header_key_state_or_client_secret_is_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets: list[str] = [KEY, base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")]
    async with protected_site() as (auth_server, url):
        machine = auth_server.register_client(grant_types=["client_credentials"])
        assert machine.client_secret
        secrets.append(machine.client_secret)
        for era in ERAS:
            oauth = OAuth(
                grant=ClientCredentialsGrant(),
                client=ClientCredentials(
                    machine.client_id, machine.client_secret, issuer=auth_server.issuer
                ),
            )
            async with Client.http(
                url,
                auth=oauth,
                options=ClientOptions(protocol=era),
                elicitation_handler=accept_ok,  # type: ignore[arg-type]
            ) as client:
                done = await client.call_tool("confirm", {})
            assert done.content[0].text == "answer accept"  # type: ignore[union-attr]
        # A raw modern flow, to know the sealed requestState the server minted.
        token = auth_server.issue_token(audience=url)
        async with httpx.AsyncClient(timeout=GUARD) as http:
            raw = Raw(http, url, "modern")
            bearer = {"Authorization": f"Bearer {token}"}
            call = raw.request("tools/call", {"name": "confirm", "arguments": {}})
            first = (await raw.post(call, **bearer)).json()["result"]
            state = first["requestState"]
            [key] = first["inputRequests"]
            answers = {key: {"action": "accept", "content": {"ok": True}}}
            again = raw.request(
                "tools/call",
                {
                    "name": "confirm",
                    "arguments": {},
                    "requestState": state,
                    "inputResponses": answers,
                },
            )
            final = (await raw.post(again, **bearer)).json()["result"]
            assert final["content"][0]["text"] == "answer accept"
        # Every access token the authorization server issued (its own record of them).
        issued = list(auth_server._issued)
    secrets += [state, token, *issued, *(t.split(".")[2] for t in issued)]
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert len(caplog.records) > 10  # DEBUG was on and the flows were logged
    for secret in secrets:
        assert secret not in logged, secret[:12]
    assert "Bearer " not in logged


# === 6: the caller's token never reaches the proxy's backend ==================================


class HeaderLog:
    """An ASGI app in front of a real server: records the headers of every request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[dict[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(dict(scope["headers"]))
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def proxy_to(backend_url: str) -> AsyncIterator[str]:
    """`mrtr proxy --transport http` in front of `backend_url`, as a user starts it: its URL.
    Started from a thread, since the wait for it to listen blocks, and the backend it reads at
    start is served by this event loop."""
    port = free_port()
    command = [sys.executable, "-m", "mrtr", "proxy", "--transport", "http", "--port", str(port)]
    with contextlib.ExitStack() as stack:
        started = listening(
            [*command, backend_url], port, START_GUARD, env=ENV, stderr=subprocess.DEVNULL
        )
        await asyncio.to_thread(stack.enter_context, started)
        yield f"http://127.0.0.1:{port}/mcp"


async def test_6_the_callers_authorization_never_reaches_the_backend() -> None:
    token = "caller-token-that-must-stay-here"
    server, _ = build()
    app = StreamableHTTPApp(server)
    backend = HeaderLog(app)
    async with serve(backend) as base, proxy_to(base + "/mcp") as url:
        for era in ERAS:
            async with Client.http(
                url,
                headers={"Authorization": f"Bearer {token}", "Cookie": f"s={token}"},
                options=ClientOptions(protocol=era),  # type: ignore[arg-type]
                elicitation_handler=accept_ok,
            ) as client:
                done = await client.call_tool("confirm", {})
                assert done.content[0].text == "answer accept"  # type: ignore[union-attr]
                await client.read_resource("file:///docs/readme")
    app.close()
    assert backend.seen  # the proxy did reach the backend
    for headers in backend.seen:
        assert b"authorization" not in headers
        assert all(token.encode() not in value for value in headers.values())


# === 7: an endless input_required stops at max_rounds ==========================================


class EndlessRounds:
    """A hostile modern server over HTTP: every `tools/call` asks a new question, forever."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        message = orjson.loads(body)
        result: dict[str, Any] = {}
        if message.get("method") == "tools/call":
            self.calls += 1
            ask = {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": "Again?",
                    "requestedSchema": {"type": "object", "properties": {}},
                },
            }
            result = {
                "resultType": "input_required",
                "inputRequests": {f"q{self.calls}": ask},
                "requestState": f"round-{self.calls}",
            }
        reply = orjson.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply})


async def test_7_an_endless_input_required_stops_at_max_rounds_over_http() -> None:
    hostile = EndlessRounds()
    async with (
        serve(hostile) as base,
        Client.http(
            base + "/mcp", options=options("modern", max_rounds=3), elicitation_handler=accept_ok
        ) as client,
    ):
        with pytest.raises(McpError) as stopped:
            await asyncio.wait_for(client.call_tool("anything", {}), GUARD)
    assert stopped.value.code == MAX_ROUNDS_EXCEEDED
    assert "max_rounds" in stopped.value.message
    assert hostile.calls == 4  # three rounds answered, the fourth ask refused


async def test_7_an_endless_input_required_stops_at_max_rounds_over_stdio(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    transport = StdioTransport(sys.executable, [HOSTILE_SERVER, "endless", str(log)], env=ENV)
    async with Client(
        transport, options=options("modern", max_rounds=3), elicitation_handler=accept_ok
    ) as client:
        with pytest.raises(McpError) as stopped:
            await asyncio.wait_for(client.call_tool("anything", {}), GUARD)
    assert stopped.value.code == MAX_ROUNDS_EXCEEDED
    assert log.read_text().count("call") == 4


# === 8: huge answers and huge requests stop at the message cap =================================


@pytest.mark.parametrize("era", ERAS)
async def test_8_a_200_mb_answer_over_stdio_stops_at_the_clients_cap(era: str) -> None:
    transport = StdioTransport(sys.executable, [HOSTILE_SERVER, "huge"], env=ENV)
    async with Client(transport, options=ClientOptions(protocol=era)) as client:  # type: ignore[arg-type]
        with pytest.raises(McpError) as refused:
            await asyncio.wait_for(client.call_tool("big", {}), GUARD)
    assert refused.value.code == RESPONSE_TOO_LARGE
    assert "max_message_size" in refused.value.message


#: A requestState of 50 MB: far past every cap (4 MiB HTTP bodies, 16 MiB stdio lines).
HUGE_STATE = "A" * (50 * 1024 * 1024)


@pytest.mark.parametrize("era", ERAS)
async def test_8_a_50_mb_request_state_over_http_stops_at_the_body_cap(era: str) -> None:
    async with raw_http(era) as (raw, _):
        call = raw.request("tools/call", {"name": "confirm", "requestState": HUGE_STATE})
        refused = await raw.post(call)
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == INVALID_REQUEST
        assert "at most 4194304 bytes" in refused.json()["error"]["message"]
        assert "tools" in (await raw.post(raw.request("tools/list", {}))).json()["result"]


@pytest.mark.parametrize("era", ERAS)
async def test_8_a_50_mb_request_state_over_stdio_stops_at_the_line_cap(era: str) -> None:
    async with raw_stdio(era) as peer:
        call = peer.request("tools/call", {"name": "confirm", "requestState": HUGE_STATE}, 3)
        await peer.write(orjson.dumps(call))
        refused = await peer.read()
        assert refused["id"] == 3 and refused["error"]["code"] == INVALID_REQUEST
        assert "too large" in refused["error"]["message"]
        await peer.write(orjson.dumps(peer.request("tools/list", {}, 4)))
        assert "tools" in (await peer.read())["result"]


# === 9: responses to ids never sent are ignored ================================================


@pytest.mark.parametrize("era", ERAS)
async def test_9_a_client_ignores_answers_to_ids_it_never_sent(era: str) -> None:
    transport = StdioTransport(sys.executable, [HOSTILE_SERVER, "stray"], env=ENV)
    async with Client(transport, options=ClientOptions(protocol=era)) as client:  # type: ignore[arg-type]
        first = await asyncio.wait_for(client.call_tool("any", {}), GUARD)
        second = await asyncio.wait_for(client.call_tool("any", {}), GUARD)
    assert first.content[0].text == "answered"  # type: ignore[union-attr]
    assert second.content[0].text == "answered"  # type: ignore[union-attr]


STRAYS = [
    {"jsonrpc": "2.0", "id": 424242, "result": {"action": "accept"}},
    {"jsonrpc": "2.0", "id": "s-000000000000-1", "result": {}},
    {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "nothing"}},
]


@pytest.mark.parametrize("era", ERAS)
async def test_9_a_server_ignores_responses_to_nothing_over_stdio(era: str) -> None:
    async with raw_stdio(era) as peer:
        for stray in STRAYS:
            await peer.write(orjson.dumps(stray))
        await peer.write(orjson.dumps(peer.request("tools/list", {}, 11)))
        answer = await peer.read()  # the first line back answers the request: nothing else
        assert answer["id"] == 11 and "tools" in answer["result"]


@pytest.mark.parametrize("era", ERAS)
async def test_9_a_server_ignores_responses_to_nothing_over_http(era: str) -> None:
    async with raw_http(era) as (raw, _):
        for stray in STRAYS:
            reply = await raw.post(stray)
            if era == "legacy":
                assert reply.status_code == 202 and not reply.content
            else:  # nothing a modern client may send: refused, and nothing else happens
                assert reply.status_code == 400
                assert reply.json()["error"]["code"] == INVALID_REQUEST
        assert "tools" in (await raw.post(raw.request("tools/list", {}))).json()["result"]
