"""Checks of the interoperability matrix known to fail, by cell id (`cells.Cell.id`), each with
its reason: a bug of ours awaiting its fix (issue 28), or a peer's bug (with a link to its code).

Every listed check still runs. The cell fails if a listed check passes (remove it here: the fix
landed) or if an unlisted one fails; otherwise it ends as an xfail naming the reasons. A reason
starting "peer race" is a timing-dependent peer bug: its check is reported either way, and its
passing is not taken for a fix.
"""

from __future__ import annotations

TS_PROGRESS_RACE = (
    "peer race, TypeScript SDK (1.x and 2.x): notifications are dispatched a microtask later "
    "than responses, so progress that arrives in the same read as the result finds its handler "
    "gone ('unknown token'); over stdio it usually does. See _onnotification and _onprogress in "
    "https://github.com/modelcontextprotocol/typescript-sdk/blob/main/packages/core/src/shared/protocol.ts"
)
TS2_404_BODY = (
    "peer, TypeScript client 2.x: on 2026-07-28 a server MUST answer an unknown method with HTTP "
    "404 and a -32601 JSON-RPC error; the client reports a transport error "
    "(CLIENT_HTTP_NOT_IMPLEMENTED) and loses the JSON-RPC code. See the status handling in "
    "https://github.com/modelcontextprotocol/typescript-sdk/blob/main/packages/client/src/client/streamableHttp.ts"
)

MCP2_MRTR_TOOL_ON_LEGACY = (
    "peer, mcp 2.3.0: a tool that answers InputRequiredResult (the SDK's 2026-07-28 way to ask) "
    "fails on an initialize-based session ('Handler returned an invalid result', -32603) instead "
    "of asking on the session; see the tool-result handling in "
    "https://github.com/modelcontextprotocol/python-sdk/tree/main/src/mcp/server"
)

TS2_STATELESS_LEGACY = (
    "peer, TypeScript server 2.x over HTTP: its createMcpHandler serves the 2025 era through a "
    "stateless per-request fallback, which cannot send server-to-client requests, so a tool "
    "that asks fails on an initialize-based session ('per-request legacy serving cannot receive "
    "server-to-client requests'); over stdio it asks. See legacyStatelessFallback in "
    "https://github.com/modelcontextprotocol/typescript-sdk/tree/main/packages/server/src"
)

WHOLE_CELL = "*"
"""A key standing for the whole cell: at least one check fails (which ones may vary)."""


def every(checks: list[str], reason: str) -> dict[str, str]:
    """`reason` for each of `checks`."""
    return dict.fromkeys(checks, reason)


KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "mcp 2.3.0 | mrtr client -> peer server | stdio | 2025-11-25": {
        "elicit": MCP2_MRTR_TOOL_ON_LEGACY
    },
    "TypeScript server 2.4.0 | mrtr client -> peer server | http | 2025-11-25": {
        "elicit": TS2_STATELESS_LEGACY
    },
    # The TypeScript SDKs' progress race: any cell may see it (over stdio most do).
    **{
        f"{peer} | peer client -> mrtr server | {transport} | {era}": {
            "progress and logs": TS_PROGRESS_RACE
        }
        for peer in ("TypeScript SDK 1.32.2", "TypeScript client 2.4.0")
        for transport in ("stdio", "http", "sse")
        for era in ("2025-11-25", "2026-07-28")
    },
    "TypeScript client 2.4.0 | peer client -> mrtr server | http | 2026-07-28": {
        "progress and logs": TS_PROGRESS_RACE,
        "unknown method": TS2_404_BODY,
    },
}
