"""Raw 2026-07-28 tool calls POSTed to the Streamable HTTP endpoint of an in-process app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson

from helpers import wire
from mrtr.transport.http_app import StreamableHTTPApp

MODERN = "2026-07-28"


def call(name: str, arguments: dict[str, Any], id: int = 1) -> dict[str, Any]:
    return wire.request(
        "tools/call",
        {"name": name, "arguments": arguments},
        id=id,
        version=MODERN,
        client_info={"name": "t", "version": "1"},
    )


async def post(
    app: StreamableHTTPApp,
    message: dict[str, Any],
    headers: dict[str, str | bytes] | None = None,
    *,
    then_disconnect: bool = False,
    on_send: Callable[[MutableMapping[str, Any]], None] | None = None,
) -> tuple[int, dict[bytes, bytes], bytes]:
    body = orjson.dumps(message)
    sent_headers: dict[str, str | bytes] = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "content-length": str(len(body)),
    }
    if message.get("params", {}).get("_meta"):
        sent_headers.update(
            {
                "mcp-method": message["method"],
                "mcp-protocol-version": MODERN,
                "mcp-name": message["params"]["name"],
            }
        )
    sent_headers.update(headers or {})
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "root_path": "",
        "headers": [
            (k.encode(), v if isinstance(v, bytes) else v.encode()) for k, v in sent_headers.items()
        ],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if not then_disconnect:
            await gone.wait()
        return {"type": "http.disconnect"}

    out: list[MutableMapping[str, Any]] = []

    async def send(event: MutableMapping[str, Any]) -> None:
        if on_send is not None:
            on_send(event)
        out.append(event)

    await asyncio.wait_for(app(scope, receive, send), 5)
    gone.set()
    if not out:
        return 0, {}, b""
    return (
        out[0]["status"],
        dict(out[0]["headers"]),
        b"".join(event.get("body", b"") for event in out[1:]),
    )
