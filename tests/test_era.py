"""`protocol/era.py`: which era a request is of and what its `_meta` must hold, decided from
the message alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mrtr import Server
from mrtr.protocol import errors
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.era import check_meta, declares_modern, initialize_refused, is_modern
from mrtr.protocol.errors import McpError
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION
from mrtr.server.connection import ServerConnection

VERSION = meta_keys.PROTOCOL_VERSION
CAPS = meta_keys.CLIENT_CAPABILITIES


def test_a_request_is_modern_when_its_meta_names_a_served_version() -> None:
    assert is_modern({"_meta": {VERSION: LATEST_PROTOCOL_VERSION}})
    assert not is_modern({"_meta": {VERSION: "1999-01-01"}})
    assert not is_modern({"_meta": "not an object"})
    assert not is_modern({})


def test_transports_see_any_declared_version_as_a_modern_client() -> None:
    assert declares_modern({"params": {"_meta": {VERSION: "1999-01-01"}}})
    assert not declares_modern({"params": {"protocolVersion": "2025-11-25"}})
    assert not declares_modern({"params": None})


def test_initialize_without_a_session_is_refused_in_the_terms_of_its_era() -> None:
    modern = initialize_refused({"_meta": {VERSION: LATEST_PROTOCOL_VERSION}})
    assert modern.code == errors.METHOD_NOT_FOUND
    legacy = initialize_refused({"protocolVersion": "2025-11-25"})
    assert legacy.code == errors.UNSUPPORTED_PROTOCOL_VERSION
    assert legacy.data == {"supported": [LATEST_PROTOCOL_VERSION], "requested": "2025-11-25"}


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        (None, errors.INVALID_PARAMS),
        ({CAPS: {}}, errors.INVALID_PARAMS),
        ({VERSION: "1999-01-01", CAPS: {}}, errors.UNSUPPORTED_PROTOCOL_VERSION),
        ({VERSION: LATEST_PROTOCOL_VERSION}, errors.INVALID_PARAMS),
        ({VERSION: LATEST_PROTOCOL_VERSION, CAPS: {}, meta_keys.LOG_LEVEL: "loud"}, -32602),
        ({VERSION: LATEST_PROTOCOL_VERSION, CAPS: {}, meta_keys.PROGRESS_TOKEN: 1.5}, -32602),
    ],
)
def test_a_malformed_meta_gets_its_precise_error(meta: Any, code: int) -> None:
    with pytest.raises(McpError) as raised:
        check_meta({} if meta is None else {"_meta": meta})
    assert raised.value.code == code


def test_a_valid_meta_passes() -> None:
    check_meta({"_meta": {VERSION: LATEST_PROTOCOL_VERSION, CAPS: {}}})
    check_meta(
        {
            "_meta": {
                VERSION: LATEST_PROTOCOL_VERSION,
                CAPS: {},
                meta_keys.LOG_LEVEL: "info",
                meta_keys.PROGRESS_TOKEN: "t",
            }
        }
    )


async def test_a_modern_initialize_on_a_connection_opens_no_session() -> None:
    server = Server("s")
    answered = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        answered.set()

    connection = ServerConnection(server, send)
    params = {"_meta": {VERSION: LATEST_PROTOCOL_VERSION, CAPS: {}}}
    await connection.feed({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    await asyncio.wait_for(answered.wait(), 10)
    assert sent[0]["error"]["code"] == errors.METHOD_NOT_FOUND
    assert connection.session is None
    await connection.aclose()
