"""Shared pieces for MRTR tests: raw wire requests to a `Server` (or a POST's body and headers),
and simple input handlers."""

from __future__ import annotations

import itertools
from typing import Any

from helpers import wire
from mrtr import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    Root,
    Server,
    TextContent,
)
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

#: Every input-request capability a client can declare.
ALL_CAPS: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {},
}

_ids = itertools.count(1)


def request_meta(caps: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `_meta` every 2026-07-28 request carries."""
    return wire.meta(
        client_info={"name": "wire-test", "version": "1"}, caps=ALL_CAPS if caps is None else caps
    )


def http_tool_call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    caps: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    request_id: int = 1,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON body and the headers of a 2026-07-28 `tools/call` of `name` POSTed over HTTP:
    `caps` the declared capabilities (default all), `extra` more params (a retry's
    `requestState` and `inputResponses`), `meta` more `_meta` entries (a log level, a
    progress token)."""
    params = {"name": name, "arguments": arguments or {}, **(extra or {})}
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {**params, "_meta": {**request_meta(caps), **(meta or {})}},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-method": "tools/call",
        "mcp-protocol-version": LATEST_PROTOCOL_VERSION,
        "mcp-name": name,
    }
    return body, headers


async def rpc(
    server: Server,
    method: str,
    params: dict[str, Any],
    *,
    caps: dict[str, Any] | None = None,
    transport_info: Any = None,
) -> dict[str, Any]:
    """Send one raw request to `server` (as a transport would) and return the response."""
    body = {**params, "_meta": request_meta(caps)}
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": body}
    response = await server.handle_message(message, transport_info=transport_info)
    assert response is not None
    return response


async def call_tool(
    server: Server,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    responses: Any = None,
    state: Any = None,
    caps: dict[str, Any] | None = None,
    transport_info: Any = None,
) -> dict[str, Any]:
    """A raw `tools/call`, with `inputResponses`/`requestState` when given."""
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return await rpc(server, "tools/call", params, caps=caps, transport_info=transport_info)


def result_of(response: dict[str, Any]) -> dict[str, Any]:
    """The `result` of a response, failing the test with the error if there is one."""
    assert "error" not in response, response["error"]
    return response["result"]  # type: ignore[no-any-return]


def error_of(response: dict[str, Any]) -> dict[str, Any]:
    """The `error` of a response, failing the test if it succeeded."""
    assert "result" not in response, response["result"]
    return response["error"]  # type: ignore[no-any-return]


def accept(**content: Any) -> dict[str, Any]:
    """A bare accepted `ElicitResult`."""
    return {"action": "accept", "content": content}


def sampled(text: str) -> dict[str, Any]:
    """A bare `CreateMessageResult`."""
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "test"}


class Answers:
    """Input handlers that answer from fixed values and record what they were asked."""

    def __init__(
        self,
        elicit: dict[str, Any] | None = None,
        sample: str = "sampled",
        root_uris: tuple[str, ...] = ("file:///work",),
    ) -> None:
        self.elicit_content = elicit if elicit is not None else {"ok": True}
        self.sample_text = sample
        self.root_uris = root_uris
        self.asked: list[tuple[str, Any]] = []

    def elicitation(self, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(("elicitation/create", params))
        return ElicitResult(action="accept", content=dict(self.elicit_content))

    def sampling(self, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.asked.append(("sampling/createMessage", params))
        return CreateMessageResult(
            role="assistant", content=TextContent(text=self.sample_text), model="test"
        )

    def roots(self, params: ListRootsRequestParams) -> ListRootsResult:
        self.asked.append(("roots/list", params))
        return ListRootsResult(roots=[Root(uri=u) for u in self.root_uris])

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments registering all three handlers on a `Client`."""
        return {
            "elicitation_handler": self.elicitation,
            "sampling_handler": self.sampling,
            "roots_handler": self.roots,
        }

    @property
    def messages(self) -> list[str]:
        """The messages of the elicitations asked, in order."""
        return [p.message for m, p in self.asked if m == "elicitation/create"]
