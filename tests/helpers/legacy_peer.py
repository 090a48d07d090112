"""A raw legacy (initialize-based) peer of `Server.handle_message`: a session, its handshake,
and sends that return the response."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mrtr import Server
from mrtr.protocol import jsonrpc
from mrtr.server.session import LegacySession

CAPS = {"elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": True}}


class Peer:
    """The client side of one legacy session: records what the server sends, answers its
    requests with `reply(method, params) -> result | Error | GARBAGE | None (never)`."""

    def __init__(self, reply: Callable[[str, dict[str, Any]], Any] | None = None) -> None:
        self.session = LegacySession(self.on_session)
        self.on_session_sent: list[dict[str, Any]] = []
        self.on_request_sent: list[dict[str, Any]] = []
        self.reply = reply or (lambda method, params: {"action": "accept", "content": {"ok": True}})

    async def on_session(self, message: dict[str, Any]) -> None:
        self.on_session_sent.append(message)

    async def notify(self, message: dict[str, Any]) -> None:
        self.on_request_sent.append(message)
        if "id" in message and "method" in message:
            answer = self.reply(message["method"], message.get("params") or {})
            if answer is None:
                return  # never answers
            if isinstance(answer, Error):
                response = {"jsonrpc": "2.0", "id": message["id"], "error": answer.error}
            else:
                response = jsonrpc.result_response(message["id"], answer)
            asyncio.get_running_loop().call_soon(self.session.deliver, response)

    def requests(self) -> list[dict[str, Any]]:
        return [m for m in self.on_request_sent if "id" in m]


class Error:
    def __init__(self, code: int, message: str) -> None:
        self.error = {"code": code, "message": message}


async def send(
    server: Server, peer: Peer, method: str, params: dict[str, Any] | None = None, id: int = 1
) -> dict[str, Any]:
    response = await server.handle_message(
        jsonrpc.request(id, method, params if params is not None else {}),
        peer.notify,
        "test",
        peer.session,
    )
    assert response is not None
    return response


def result(response: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in response, response
    return response["result"]  # type: ignore[no-any-return]


def error(response: dict[str, Any]) -> dict[str, Any]:
    assert "error" in response, response
    return response["error"]  # type: ignore[no-any-return]


async def initialized(
    server: Server, peer: Peer, version: str = "2025-11-25", caps: dict[str, Any] | None = None
) -> dict[str, Any]:
    init = result(
        await send(
            server,
            peer,
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": CAPS if caps is None else caps,
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
    )
    await server.handle_message(
        jsonrpc.notification("notifications/initialized"), session=peer.session
    )
    return init
