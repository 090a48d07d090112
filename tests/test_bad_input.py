"""Bad input gets the right JSON-RPC error, leaks nothing, and never stops the server.

Raw messages go straight to `Server.handle_message` (decoded) or `ServerConnection.feed_bytes`
(bytes, as stdio would deliver them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mrtr import Server
from mrtr.protocol import errors, jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.server.connection import ServerConnection

MakeRequest = Callable[..., dict[str, Any]]
GUARD = 5.0  # seconds; only a failure guard, never an expectation


def make_server(release: asyncio.Event) -> Server:
    server = Server("bad-input", version="2.0.0")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    @server.tool()
    async def wait() -> str:
        """Wait until released."""
        await release.wait()
        return "released"

    @server.prompt()
    def greet(name: str) -> str:
        return f"Hello {name}"

    @server.resource("file:///readme")
    def readme() -> str:
        return "read me"

    @server.resource_template("db://rows/{id}")
    def row(id: int) -> str:
        return f"row {id}"

    return server


class Wire:
    """A `ServerConnection` whose outgoing messages are recorded."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.sent: list[dict[str, Any]] = []
        self._arrived = asyncio.Condition()
        self.connection = ServerConnection(server, self._send, "test")

    async def _send(self, message: dict[str, Any]) -> None:
        # Encode as a real transport would, so an unserializable message fails here.
        self.sent.append(jsonrpc.loads(jsonrpc.dumps(message)))
        async with self._arrived:
            self._arrived.notify_all()

    async def response_to(self, request_id: Any) -> dict[str, Any]:
        """Wait for the response carrying `request_id`."""
        async with asyncio.timeout(GUARD), self._arrived:
            await self._arrived.wait_for(lambda: self._find(request_id) is not None)
        found = self._find(request_id)
        assert found is not None
        return found

    def _find(self, request_id: Any) -> dict[str, Any] | None:
        for message in self.sent:
            if "method" not in message and message.get("id") == request_id:
                return message
        return None

    async def settle(self) -> None:
        """Let every request the connection started finish."""
        tasks = list(self.connection._tasks.values())
        if tasks:
            async with asyncio.timeout(GUARD):
                await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def release() -> asyncio.Event:
    return asyncio.Event()


@pytest.fixture
def server(release: asyncio.Event) -> Server:
    return make_server(release)


@pytest.fixture
async def wire(server: Server) -> AsyncIterator[Wire]:
    w = Wire(server)
    yield w
    await w.connection.aclose()


def error_of(response: dict[str, Any] | None) -> dict[str, Any]:
    assert response is not None
    assert "result" not in response, response
    assert set(response["error"]) <= {"code", "message", "data"}
    assert isinstance(response["error"]["message"], str) and response["error"]["message"]
    return response["error"]  # type: ignore[no-any-return]


# --- framing: -32700 and -32600 -----------------------------------------------------------------

MALFORMED_JSON = [
    pytest.param(b'{"jsonrpc": "2.0", "id": 1,', id="truncated"),
    pytest.param(b"{'jsonrpc': '2.0'}", id="single-quotes"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"a": 1} {"b": 2}', id="two-documents"),
    pytest.param(b"[" * 5000 + b"]" * 5000, id="nested-too-deep"),
]


@pytest.mark.parametrize("raw", MALFORMED_JSON)
async def test_malformed_json_is_a_parse_error_without_id(wire: Wire, raw: bytes) -> None:
    await wire.connection.feed_bytes(raw)
    assert len(wire.sent) == 1
    err = error_of(wire.sent[0])
    assert err["code"] == errors.PARSE_ERROR
    assert err["message"].startswith("Parse error")
    assert "id" not in wire.sent[0]


@pytest.mark.parametrize("message", [[], [{"jsonrpc": "2.0"}], "tools/list", 5, None, True])
async def test_a_message_that_is_not_an_object_is_an_invalid_request(
    server: Server, message: Any
) -> None:
    response = await server.handle_message(message)
    err = error_of(response)
    assert err["code"] == errors.INVALID_REQUEST
    assert "object" in err["message"]
    assert response is not None and "id" not in response


@pytest.mark.parametrize("version", ["1.0", 2.0, None, "2.0 "])
async def test_wrong_jsonrpc_version_is_an_invalid_request_that_echoes_the_id(
    server: Server, version: Any
) -> None:
    message = {"jsonrpc": version, "id": 7, "method": "tools/list", "params": {}}
    response = await server.handle_message(message)
    assert error_of(response)["code"] == errors.INVALID_REQUEST
    assert '"jsonrpc"' in error_of(response)["message"]
    assert response is not None and response["id"] == 7


async def test_missing_jsonrpc_member_is_an_invalid_request(server: Server) -> None:
    response = await server.handle_message({"id": 3, "method": "tools/list"})
    assert error_of(response)["code"] == errors.INVALID_REQUEST


@pytest.mark.parametrize("bad_id", [None, True, 1.5, [1], {"n": 1}])
async def test_request_id_that_is_not_a_string_or_integer_is_an_invalid_request(
    server: Server, make_request: MakeRequest, bad_id: Any
) -> None:
    message = make_request("tools/list")
    message["id"] = bad_id
    response = await server.handle_message(message)
    err = error_of(response)
    assert err["code"] == errors.INVALID_REQUEST
    assert "id" in err["message"]
    assert response is not None and "id" not in response  # an id that cannot be read


async def test_method_that_is_not_a_string_is_an_invalid_request(server: Server) -> None:
    response = await server.handle_message({"jsonrpc": "2.0", "id": 1, "method": 42})
    assert error_of(response)["code"] == errors.INVALID_REQUEST
    assert response is not None and response["id"] == 1


@pytest.mark.parametrize("params", [[1, 2], "x", 3])
async def test_params_that_are_not_an_object_are_an_invalid_request(
    server: Server, params: Any
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
    response = await server.handle_message(message)
    assert error_of(response)["code"] == errors.INVALID_REQUEST
    assert '"params"' in error_of(response)["message"]


async def test_object_that_is_neither_request_nor_response_is_an_invalid_request(
    server: Server,
) -> None:
    response = await server.handle_message({"jsonrpc": "2.0", "id": 1})
    assert error_of(response)["code"] == errors.INVALID_REQUEST


# --- dispatch: -32601 -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["tools/explode", "", "ping ", "tools/List"])
async def test_unknown_method_is_method_not_found_naming_it(
    server: Server, make_request: MakeRequest, method: str
) -> None:
    response = await server.handle_message(make_request(method, id="abc"))
    err = error_of(response)
    assert err["code"] == errors.METHOD_NOT_FOUND
    assert err["message"] == f"Method not found: {method}"
    assert response is not None and response["id"] == "abc"


# --- per-request _meta: -32602 when missing, -32022 when unsupported -----------------------


async def test_request_without_meta_is_invalid_params_listing_supported_versions(
    server: Server,
) -> None:
    response = await server.handle_message(jsonrpc.request(1, "tools/list", {}))
    err = error_of(response)
    assert err["code"] == errors.INVALID_PARAMS
    assert "_meta" in err["message"] and "2026-07-28" in err["message"]
    assert err["data"] == {"supported": ["2026-07-28"]}


async def test_request_without_params_is_invalid_params(server: Server) -> None:
    response = await server.handle_message(jsonrpc.request(1, "server/discover"))
    assert error_of(response)["code"] == errors.INVALID_PARAMS


@pytest.mark.parametrize("meta", [None, "2026-07-28", [], 1])
async def test_meta_that_is_not_an_object_is_invalid_params(server: Server, meta: Any) -> None:
    response = await server.handle_message(jsonrpc.request(1, "tools/list", {"_meta": meta}))
    assert error_of(response)["code"] == errors.INVALID_PARAMS


@pytest.mark.parametrize(
    "missing", [meta_keys.PROTOCOL_VERSION, meta_keys.CLIENT_CAPABILITIES], ids=["version", "caps"]
)
async def test_meta_missing_a_required_field_is_invalid_params_naming_it(
    server: Server, request_meta: dict[str, Any], missing: str
) -> None:
    del request_meta[missing]
    response = await server.handle_message(
        jsonrpc.request(1, "server/discover", {"_meta": request_meta})
    )
    err = error_of(response)
    assert err["code"] == errors.INVALID_PARAMS
    assert missing in err["message"]


async def test_client_info_is_optional(server: Server, request_meta: dict[str, Any]) -> None:
    del request_meta[meta_keys.CLIENT_INFO]
    response = await server.handle_message(
        jsonrpc.request(1, "server/discover", {"_meta": request_meta})
    )
    assert response is not None and response["result"]["resultType"] == "complete"


@pytest.mark.parametrize("version", [20260728, None, ["2026-07-28"]])
async def test_protocol_version_that_is_not_a_string_is_invalid_params(
    server: Server, make_request: MakeRequest, version: Any
) -> None:
    message = make_request("tools/list", **{meta_keys.PROTOCOL_VERSION: version})
    err = error_of(await server.handle_message(message))
    assert err["code"] == errors.INVALID_PARAMS
    assert err["data"] == {"supported": ["2026-07-28"]}


@pytest.mark.parametrize("version", ["1900-01-01", "2025-11-25", "2026-07-28-draft", ""])
async def test_unsupported_protocol_version_lists_supported_and_requested(
    server: Server, make_request: MakeRequest, version: str
) -> None:
    message = make_request("tools/call", {"name": "echo"}, **{meta_keys.PROTOCOL_VERSION: version})
    response = await server.handle_message(message)
    assert response == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": errors.UNSUPPORTED_PROTOCOL_VERSION,
            "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": version},
        },
    }


@pytest.mark.parametrize("caps", [None, [], "all"])
async def test_client_capabilities_that_are_not_an_object_are_invalid_params(
    server: Server, make_request: MakeRequest, caps: Any
) -> None:
    message = make_request("tools/list", **{meta_keys.CLIENT_CAPABILITIES: caps})
    assert error_of(await server.handle_message(message))["code"] == errors.INVALID_PARAMS


@pytest.mark.parametrize("level", ["verbose", "WARNING", 3, ["debug"], {"level": "debug"}])
async def test_unknown_log_level_is_invalid_params_listing_the_levels(
    server: Server, make_request: MakeRequest, level: Any
) -> None:
    message = make_request("tools/list", **{meta_keys.LOG_LEVEL: level})
    err = error_of(await server.handle_message(message))
    assert err["code"] == errors.INVALID_PARAMS
    assert "debug" in err["message"] and "emergency" in err["message"]


@pytest.mark.parametrize("token", [1.5, True, ["t"], {"t": 1}])
async def test_progress_token_that_is_not_a_string_or_integer_is_invalid_params(
    server: Server, make_request: MakeRequest, token: Any
) -> None:
    message = make_request("tools/call", {"name": "echo"}, **{meta_keys.PROGRESS_TOKEN: token})
    err = error_of(await server.handle_message(message))
    assert err["code"] == errors.INVALID_PARAMS
    assert "progressToken" in err["message"]


# --- method params: -32602 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "nope"}, "Unknown tool: 'nope'"),
        ("prompts/get", {"name": "nope"}, "Unknown prompt: 'nope'"),
        ("resources/read", {"uri": "file:///nope"}, "Resource not found: file:///nope"),
    ],
    ids=["tool", "prompt", "resource"],
)
async def test_unknown_tool_prompt_or_resource_is_invalid_params(
    server: Server, make_request: MakeRequest, method: str, params: dict[str, Any], expected: str
) -> None:
    err = error_of(await server.handle_message(make_request(method, params)))
    assert err["code"] == errors.INVALID_PARAMS
    assert err["message"] == expected


async def test_unknown_resource_error_carries_the_uri(
    server: Server, make_request: MakeRequest
) -> None:
    message = make_request("resources/read", {"uri": "db://tables/1"})
    assert error_of(await server.handle_message(message))["data"] == {"uri": "db://tables/1"}


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [
        ("tools/call", {}, '"name"'),
        ("tools/call", {"name": 5}, '"name"'),
        ("tools/call", {"name": "echo", "arguments": ["hi"]}, '"arguments"'),
        ("tools/call", {"name": "echo", "arguments": "hi"}, '"arguments"'),
        ("prompts/get", {"name": None}, '"name"'),
        ("prompts/get", {"name": "greet", "arguments": [["name", "x"]]}, '"arguments"'),
        ("resources/read", {}, '"uri"'),
        ("resources/read", {"uri": ["file:///readme"]}, '"uri"'),
        ("completion/complete", {"argument": {"name": "a", "value": "b"}}, '"ref"'),
        ("completion/complete", {"ref": {"type": "ref/x"}, "argument": {}}, '"ref.type"'),
        (
            "completion/complete",
            {"ref": {"type": "ref/prompt", "name": ["greet"]}, "argument": {}},
            "Unknown prompt",
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": {"u": 1}}, "argument": {}},
            "Unknown resource",
        ),
    ],
)
async def test_params_of_the_wrong_shape_are_invalid_params_naming_the_field(
    server: Server, make_request: MakeRequest, method: str, params: dict[str, Any], named: str
) -> None:
    err = error_of(await server.handle_message(make_request(method, params)))
    assert err["code"] == errors.INVALID_PARAMS
    assert named in err["message"]


async def test_prompt_missing_a_required_argument_is_invalid_params(
    server: Server, make_request: MakeRequest
) -> None:
    message = make_request("prompts/get", {"name": "greet", "arguments": {}})
    err = error_of(await server.handle_message(message))
    assert err["code"] == errors.INVALID_PARAMS
    assert "greet" in err["message"] and "name" in err["message"]


async def test_uri_that_does_not_fit_the_template_variable_type_is_invalid_params(
    server: Server, make_request: MakeRequest
) -> None:
    message = make_request("resources/read", {"uri": "db://rows/abc"})
    err = error_of(await server.handle_message(message))
    assert err["code"] == errors.INVALID_PARAMS
    assert "db://rows/{id}" in err["message"] and "id" in err["message"]


@pytest.mark.parametrize("cursor", ["not-a-cursor", "", 12, {"page": 2}])
async def test_invalid_cursor_is_invalid_params(
    server: Server, make_request: MakeRequest, cursor: Any
) -> None:
    err = error_of(await server.handle_message(make_request("tools/list", {"cursor": cursor})))
    assert err["code"] == errors.INVALID_PARAMS
    assert "cursor" in err["message"]


# --- -32603: a bug inside the SDK ----------------------------------------------------------


async def test_bug_inside_the_sdk_is_internal_error_without_internals(
    server: Server, make_request: MakeRequest, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("secret-path /srv/app/keys.pem")

    server._registry.page = broken  # type: ignore[method-assign]
    response = await server.handle_message(make_request("tools/list", id=9))
    err = error_of(response)
    assert err["code"] == errors.INTERNAL_ERROR
    assert response is not None and response["id"] == 9
    text = str(response)
    assert "secret" not in text and "KeyError" not in text and "Traceback" not in text
    assert "data" not in err
    # The cause goes to the server's log instead.
    assert "secret-path" in caplog.text


async def test_prompt_that_raises_is_internal_error_without_internals(
    server: Server, make_request: MakeRequest
) -> None:
    @server.prompt()
    def fragile() -> str:
        raise RuntimeError("db password is hunter2")

    err = error_of(await server.handle_message(make_request("prompts/get", {"name": "fragile"})))
    assert err["code"] == errors.INTERNAL_ERROR
    assert "hunter2" not in str(err) and "RuntimeError" not in str(err)
    assert "fragile" in err["message"]


# --- notifications and responses from the client get no answer ------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/whatever"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "id": 5, "result": {"resultType": "complete"}},
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -1, "message": "no"}},
    ],
    ids=["unknown-notification", "cancel-unknown-id", "result", "error"],
)
async def test_notifications_and_responses_get_no_answer(
    server: Server, wire: Wire, message: dict[str, Any]
) -> None:
    assert await server.handle_message(message) is None
    await wire.connection.feed(message)
    await wire.settle()
    assert wire.sent == []


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"requestId": None},
        {"requestId": [1]},
        {"requestId": {"id": 1}},
        {"requestId": True},  # not the integer 1, which is in flight
        {"requestId": "1"},  # nor is the string "1"
        {"reason": 1},
    ],
    ids=["no-params", "empty", "null-id", "list-id", "object-id", "true-id", "string-id", "no-id"],
)
async def test_malformed_cancellation_is_ignored_and_disturbs_nothing(
    release: asyncio.Event, wire: Wire, make_request: MakeRequest, params: Any
) -> None:
    await wire.connection.feed(make_request("tools/call", {"name": "wait"}, id=1))
    await wire.connection.feed_bytes(
        jsonrpc.dumps(jsonrpc.notification("notifications/cancelled", params))
    )
    release.set()
    response = await wire.response_to(1)
    assert response["result"]["content"] == [{"type": "text", "text": "released"}]
    assert len(wire.sent) == 1


async def test_duplicate_id_of_a_request_in_flight_is_rejected_and_the_first_still_answered(
    release: asyncio.Event, wire: Wire, make_request: MakeRequest
) -> None:
    await wire.connection.feed(make_request("tools/call", {"name": "wait"}, id="dup"))
    await wire.connection.feed(make_request("tools/call", {"name": "echo"}, id="dup"))
    assert len(wire.sent) == 1
    err = error_of(wire.sent[0])
    assert err["code"] == errors.INVALID_REQUEST and "dup" in err["message"]
    release.set()
    await wire.settle()
    assert wire.sent[-1]["result"]["content"][0]["text"] == "released"


# --- nothing stops the server --------------------------------------------------------------

BAD_INPUTS = [
    *(p.values[0] for p in MALFORMED_JSON),
    b"[]",
    b"null",
    b'{"jsonrpc": "1.0", "id": 2, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "no/such"}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {'
    b'"io.modelcontextprotocol/protocolVersion": "1900-01-01",'
    b'"io.modelcontextprotocol/clientCapabilities": {}}}}',
    b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [2]}}',
]


@pytest.mark.parametrize("raw", BAD_INPUTS)
async def test_bad_input_never_stops_the_server_or_disturbs_a_request_in_flight(
    release: asyncio.Event, wire: Wire, make_request: MakeRequest, raw: bytes
) -> None:
    await wire.connection.feed(make_request("tools/call", {"name": "wait"}, id="slow"))
    await wire.connection.feed_bytes(raw)
    await wire.connection.feed_bytes(
        jsonrpc.dumps(
            make_request("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, id="next")
        )
    )
    answer = await wire.response_to("next")
    assert answer["result"]["content"] == [{"type": "text", "text": "ok"}]
    release.set()
    slow = await wire.response_to("slow")
    assert slow["result"]["content"] == [{"type": "text", "text": "released"}]
