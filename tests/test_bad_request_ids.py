"""A request whose id is not a string or an integer is refused with -32600, and the message names
what was sent (its JSON type, and a number's value), over stdio and over HTTP in both eras."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from helpers.transport_flow import GUARD, serve
from mrtr import Server
from mrtr.protocol import jsonrpc
from mrtr.protocol.errors import INVALID_REQUEST
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.transport.http_app import StreamableHTTPApp

FLOW_SERVER = str(Path(__file__).resolve().parent / "servers" / "mrtr_flow_server.py")
LEGACY = "2025-11-25"
LEGACY_INITIALIZE = {
    "protocolVersion": LEGACY,
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"},
}

#: The id as written on the wire, and what the error message must say about it.
BAD_IDS = [
    (b'{"n":1}', "not an object"),
    (b"[1]", "not an array"),
    (b"true", "not a boolean (true)"),
    (b"null", "not null"),
    (b"1.5", "not a fractional number (1.5)"),
    (b"7.0", "(7.0)"),
    (b"123456789012345678901234567890", "not an integer outside the 64-bit range (1.23457e+29)"),
    (b"-9223372036854775809", "integer outside the 64-bit range"),
]


def line(raw_id: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"tools/list","params":{}}'


def check(answer: dict[str, object], said: str) -> None:
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] == INVALID_REQUEST
    assert error["message"].startswith('Invalid Request: "id" must be a string or an integer')
    assert said in error["message"], error["message"]
    assert "id" not in answer  # an id that cannot be echoed


@pytest.mark.parametrize(("raw_id", "said"), BAD_IDS)
def test_the_message_names_what_was_sent(raw_id: bytes, said: str) -> None:
    with pytest.raises(jsonrpc.McpError) as refused:
        jsonrpc.classify(jsonrpc.loads(line(raw_id)))
    assert refused.value.code == INVALID_REQUEST
    assert said in refused.value.message


async def test_over_stdio_each_bad_id_is_named() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        FLOW_SERVER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        # A legacy session first: the same parse path serves both eras on one connection.
        initialize = jsonrpc.request(0, "initialize", LEGACY_INITIALIZE)
        process.stdin.write(orjson.dumps(initialize) + b"\n")
        for raw_id, _ in BAD_IDS:
            process.stdin.write(line(raw_id) + b"\n")
        await process.stdin.drain()
        async with asyncio.timeout(GUARD):
            answers = [
                orjson.loads(await process.stdout.readline()) for _ in range(1 + len(BAD_IDS))
            ]
        assert [a["result"]["protocolVersion"] for a in answers if a.get("id") == 0] == [LEGACY]
        refusals = [a for a in answers if "id" not in a]  # answered in the order sent
        assert len(refusals) == len(BAD_IDS)
        for answer, (_, said) in zip(refusals, BAD_IDS, strict=True):
            check(answer, said)
    finally:
        process.stdin.close()
        async with asyncio.timeout(GUARD):
            await process.communicate()


async def test_over_http_in_both_eras_each_bad_id_is_named() -> None:
    server = Server("ids")
    app = StreamableHTTPApp(server)
    async with serve(app) as base, aiohttp.ClientSession() as http:
        url = base + "/mcp"
        accept = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        initialize = jsonrpc.request(1, "initialize", LEGACY_INITIALIZE)
        async with http.post(url, data=orjson.dumps(initialize), headers=accept) as opened:
            assert opened.status == 200
            session = opened.headers["Mcp-Session-Id"]
        eras = {
            "modern": {**accept, "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION},
            "legacy": {**accept, "MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session},
        }
        for era, headers in eras.items():
            for raw_id, said in BAD_IDS:
                async with http.post(url, data=line(raw_id), headers=headers) as response:
                    assert response.status == 400, (era, raw_id)
                    check(orjson.loads(await response.read()), said)
        app.close()
