"""The peer servers of the interoperability matrix and its cells: each pinned peer's server,
the eras and transports it speaks, and how to start it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from helpers.interop.peers import (
    BENCH_NODE,
    HERE,
    NODE,
    NPM_PEERS,
    TS_NODE_VERSION,
    TS_SERVER_VERSION,
    bench_npm_package,
    npm_package,
    pinned,
    venv_python,
)

OLDEST = "2024-11-05"


JUNE_2025 = "2025-06-18"


LEGACY = "2025-11-25"


MODERN = "2026-07-28"


@dataclass(frozen=True)
class PeerServer:
    label: str
    eras: dict[str, tuple[str, ...]]
    """The transports the peer's server has, by the era our client should end up speaking."""
    command: Callable[[str, int], list[str]]
    """argv serving `transport` (on `port`, for HTTP)."""
    paths: dict[str, str]
    """URL path by HTTP transport."""
    plain: tuple[str, dict[str, Any], str]
    """A tool call and text its answer contains."""
    elicit: tuple[str, dict[str, Any], str] | None
    """A tool that elicits (answered with name "Ada") and text its answer contains (None when
    the peer's revision has no elicitation)."""
    prompt: tuple[str, dict[str, str], str]
    """A prompt, its arguments and text its messages contain."""
    resource: tuple[str, str]
    """A resource and text it contains."""
    env: Callable[[int], dict[str, str]] = lambda port: {}


def python_server(venv: str, script: str) -> Callable[[str, int], list[str]]:
    return lambda transport, port: [
        str(venv_python(venv)),
        str(HERE / "peer_servers" / script),
        transport,
        str(port),
    ]


def everything(transport: str, port: int) -> list[str]:
    folder = npm_package("@modelcontextprotocol/server-everything")
    mode = {"stdio": "stdio", "http": "streamableHttp", "sse": "sse"}[transport]
    return [str(NODE), str(folder / "dist" / "index.js"), mode]


def ts2_server(transport: str, port: int) -> list[str]:
    bench_npm_package("@modelcontextprotocol/server", TS_SERVER_VERSION)
    bench_npm_package("@modelcontextprotocol/node", TS_NODE_VERSION)
    script = HERE / "peer_servers" / "ts2_server.mjs"
    return [str(NODE), str(script), str(BENCH_NODE), transport, str(port)]


# What each peer server offers our client: a plain tool, a tool that elicits, a prompt, a resource.
PEER_SERVERS = [
    PeerServer(
        f"mcp {pinned('mcp1-3')}",
        {OLDEST: ("stdio", "sse")},
        python_server("mcp1-3", "mcp1_server.py"),
        {"sse": "sse"},
        ("add", {"a": 2, "b": 3}, "5"),
        None,
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"mcp {pinned('mcp1-10')}",
        {JUNE_2025: ("stdio", "http")},
        python_server("mcp1-10", "mcp1_server.py"),
        {"http": "mcp"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"mcp {pinned('mcp1')}",
        {LEGACY: ("stdio", "http", "sse")},
        python_server("mcp1", "mcp1_server.py"),
        {"http": "mcp", "sse": "sse"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"mcp {pinned('mcp2')}",
        {MODERN: ("stdio", "http"), LEGACY: ("stdio",)},
        python_server("mcp2", "mcp2_server.py"),
        {"http": "mcp"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"fastmcp {pinned('fastmcp3')}",
        {LEGACY: ("stdio", "http", "sse")},
        python_server("fastmcp3", "fastmcp_server.py"),
        {"http": "mcp", "sse": "sse"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"fastmcp {pinned('fastmcp4')}",
        {MODERN: ("stdio", "http")},
        python_server("fastmcp4", "fastmcp_server.py"),
        {"http": "mcp"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        # Over stdio its McpServer speaks the initialize-based revisions only; over HTTP its
        # createMcpHandler serves 2026-07-28 and, statelessly, the 2025 era.
        f"TypeScript server {TS_SERVER_VERSION}",
        {MODERN: ("http",), LEGACY: ("stdio", "http")},
        ts2_server,
        {"http": "mcp"},
        ("add", {"a": 2, "b": 3}, "5"),
        ("greet", {}, "hello Ada"),
        ("haiku", {"topic": "tea"}, "tea"),
        ("peer://readme", "peer readme"),
    ),
    PeerServer(
        f"server-everything {NPM_PEERS['@modelcontextprotocol/server-everything']}",
        {LEGACY: ("stdio", "http", "sse")},
        everything,
        {"http": "mcp", "sse": "sse"},
        ("get-sum", {"a": 2, "b": 3}, "is 5"),
        ("trigger-elicitation-request", {}, "Ada"),
        ("simple-prompt", {}, "simple prompt"),
        ("demo://resource/static/document/architecture.md", "Architecture"),
    ),
]


CELLS = [
    pytest.param(peer, era, transport, id=f"{peer.label}-{transport}-{era}")
    for peer in PEER_SERVERS
    for era, transports in peer.eras.items()
    for transport in transports
]


def runs_cli(peer: PeerServer, era: str, transport: str) -> bool:
    """Whether the cell has an `mrtr call` twin: `mrtr call` always finds the era out, so its
    cell is the era it would find (the modern one, where the peer speaks it over `transport`)."""
    return era == MODERN or transport not in peer.eras.get(MODERN, ())
