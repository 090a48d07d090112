"""2026-07-28 requests built by hand: the per-request `_meta` every such request carries.

Rules: a request's `_meta` holds the protocol version, the client's info and the capabilities it
declares (none unless `caps`); `version` or `client_info` set to `None` leaves that entry out, for
a request that lacks it on purpose. Other `_meta` entries are keyword arguments by their full key
(`**{meta_keys.LOG_LEVEL: "info"}`), and replace what the defaults put there.
"""

from __future__ import annotations

from typing import Any

from mrtr.protocol import jsonrpc
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

#: The client info of a hand-built request.
CLIENT_INFO: dict[str, Any] = {"name": "test-client", "version": "1.0.0"}


def meta(
    *,
    version: str | None = LATEST_PROTOCOL_VERSION,
    client_info: dict[str, Any] | None = CLIENT_INFO,
    caps: dict[str, Any] | None = None,
    **entries: Any,
) -> dict[str, Any]:
    """The `_meta` of a 2026-07-28 request (see the module's rules)."""
    built: dict[str, Any] = {}
    if version is not None:
        built[meta_keys.PROTOCOL_VERSION] = version
    if client_info is not None:
        built[meta_keys.CLIENT_INFO] = client_info
    built[meta_keys.CLIENT_CAPABILITIES] = {} if caps is None else caps
    return {**built, **entries}


def request(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    id: jsonrpc.RequestId = 1,
    version: str | None = LATEST_PROTOCOL_VERSION,
    client_info: dict[str, Any] | None = CLIENT_INFO,
    caps: dict[str, Any] | None = None,
    **entries: Any,
) -> dict[str, Any]:
    """A 2026-07-28 JSON-RPC request of `method` with `params` and its `_meta`."""
    body = dict(params or {})
    body["_meta"] = meta(version=version, client_info=client_info, caps=caps, **entries)
    return jsonrpc.request(id, method, body)
