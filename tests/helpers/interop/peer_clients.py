"""The peer clients of the interoperability matrix and its cells: each pinned peer's client,
the eras and transports it speaks, and the command line of its driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from helpers.interop.peers import (
    DRIVERS,
    NODE,
    NPM_PEERS,
    node_script,
    npm_package,
    pinned,
    venv_python,
)

LEGACY = "2025-11-25"


MODERN = "2026-07-28"


@dataclass(frozen=True)
class PeerClient:
    label: str
    eras: dict[str, tuple[str, ...]]
    """The transports the peer's client has, by the era it speaks over them."""
    argv: Callable[[], list[str]]
    """The driver's command line, up to the transport arguments."""
    reports_version: bool = True
    """Whether the driver's `initialize` check shows the negotiated protocol version."""


def python_driver(venv: str, script: str) -> Callable[[], list[str]]:
    return lambda: [str(venv_python(venv)), str(DRIVERS / script)]


def node_driver(package: str, script: str) -> Callable[[], list[str]]:
    def argv() -> list[str]:
        npm_package(package)
        return [str(NODE), str(node_script(script))]

    return argv


EVERY_LEGACY = ("stdio", "http", "sse")


PEER_CLIENTS = [
    PeerClient(
        f"mcp {pinned('mcp1')}",
        {LEGACY: EVERY_LEGACY},
        python_driver("mcp1", "mcp1_client.py"),
    ),
    PeerClient(
        f"mcp {pinned('mcp2')}",
        {MODERN: ("stdio", "http"), LEGACY: EVERY_LEGACY},
        python_driver("mcp2", "mcp2_client.py"),
    ),
    PeerClient(
        f"fastmcp {pinned('fastmcp3')}",
        {LEGACY: EVERY_LEGACY},
        python_driver("fastmcp3", "fastmcp_client.py"),
    ),
    PeerClient(
        f"fastmcp {pinned('fastmcp4')}",
        {MODERN: ("stdio", "http"), LEGACY: EVERY_LEGACY},
        python_driver("fastmcp4", "fastmcp_client.py"),
    ),
    PeerClient(
        f"TypeScript SDK {NPM_PEERS['@modelcontextprotocol/sdk']}",
        {LEGACY: EVERY_LEGACY},
        node_driver("@modelcontextprotocol/sdk", "ts1_client.mjs"),
        reports_version=False,  # its stdio transport keeps the negotiated version to itself
    ),
    PeerClient(
        f"TypeScript client {NPM_PEERS['@modelcontextprotocol/client']}",
        {MODERN: ("stdio", "http"), LEGACY: EVERY_LEGACY},
        node_driver("@modelcontextprotocol/client", "ts2_client.mjs"),
    ),
]


CELLS = [
    pytest.param(peer, era, transport, id=f"{peer.label}-{transport}-{era}")
    for peer in PEER_CLIENTS
    for era, transports in peer.eras.items()
    for transport in transports
]


INSPECTOR_CELLS = [
    pytest.param(transport, id=f"inspector-{transport}") for transport in ("stdio", "http")
]
