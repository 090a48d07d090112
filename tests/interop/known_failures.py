"""Checks of the interoperability matrix known to fail, by cell id (`cells.Cell.id`), each with
its reason: a bug of ours awaiting its fix (issue 28), or a peer's bug (with a link to its code).

Every listed check still runs. The cell fails if a listed check passes (remove it here: the fix
landed) or if an unlisted one fails; otherwise it ends as an xfail naming the reasons. A reason
starting "peer race" is a timing-dependent peer bug: its check is reported either way, and its
passing is not taken for a fix.
"""

from __future__ import annotations

from cells_names import ERROR_PATH_CHECKS

LEGACY_HTTP_STATUS = (
    "ours, issue 28 item 1: on a legacy HTTP session a JSON-RPC error goes out with HTTP 400/404; "
    "the client raises on the status and loses the session"
)
NO_SSE_SERVER = "ours, issue 28 item 2: the server has no HTTP+SSE transport (2024-11-05) yet"
NO_SSE_CLIENT = (
    "ours, issue 28 item 2: the client does not fall back to HTTP+SSE (2024-11-05): "
    "its POST to the /sse URL gets 404 or 405"
)


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

PROBE_KILLS_OLD_SERVER = (
    "ours, issue 28 item 3: the client's first message, a server/discover probe, makes an mcp "
    "1.3 stdio server (2024-11-05) fail validation and exit: the first request fails (mrtr call "
    "with it); later ones start the server again and work"
)

WHOLE_CELL = "*"
"""A key standing for the whole cell: at least one check fails (which ones may vary)."""


def every(checks: list[str], reason: str) -> dict[str, str]:
    """`reason` for each of `checks`."""
    return dict.fromkeys(checks, reason)


KNOWN_FAILURES: dict[str, dict[str, str]] = {
    # mcp 1.x's streamablehttp_client (and FastMCP 3 on it) raises on the HTTP status.
    **{
        f"{peer} | peer client -> mrtr server | http | 2025-11-25": every(
            ERROR_PATH_CHECKS, LEGACY_HTTP_STATUS
        )
        for peer in ("mcp 1.30.0", "fastmcp 3.4.11")
    },
    **{
        f"{peer} | peer client -> mrtr server | sse | 2025-11-25": {WHOLE_CELL: NO_SSE_SERVER}
        for peer in (
            "mcp 1.30.0",
            "fastmcp 3.4.11",
            "fastmcp 4.2.3",
            "TypeScript SDK 1.32.2",
            "TypeScript client 2.4.0",
        )
    },
    "mcp 2.3.0 | mrtr client -> peer server | stdio | 2025-11-25": {
        "elicit": MCP2_MRTR_TOOL_ON_LEGACY
    },
    # The TypeScript SDKs' progress race: any cell may see it (over stdio most do).
    **{
        f"{peer} | peer client -> mrtr server | {transport} | {era}": {
            "progress and logs": TS_PROGRESS_RACE
        }
        for peer in ("TypeScript SDK 1.32.2", "TypeScript client 2.4.0")
        for transport in ("stdio", "http")
        for era in ("2025-11-25", "2026-07-28")
    },
    "TypeScript client 2.4.0 | peer client -> mrtr server | http | 2025-11-25": {
        "progress and logs": TS_PROGRESS_RACE,
        **every(["unknown tool", "unknown resource", "unknown method"], LEGACY_HTTP_STATUS),
    },
    "MCP Inspector 2.12.0 | peer client -> mrtr server | http | 2025-11-25": {
        "unknown resource": LEGACY_HTTP_STATUS
    },
    "TypeScript client 2.4.0 | peer client -> mrtr server | http | 2026-07-28": {
        "progress and logs": TS_PROGRESS_RACE,
        "unknown method": TS2_404_BODY,
    },
    **{
        f"{peer} | {direction} -> peer server | sse | 2025-11-25": {WHOLE_CELL: NO_SSE_CLIENT}
        for peer in ("mcp 1.30.0", "fastmcp 3.4.11", "server-everything 2026.8.31")
        for direction in ("mrtr client", "mrtr call")
    },
    **{
        f"mcp 1.3.0 | {direction} -> peer server | {transport} | 2024-11-05": {
            WHOLE_CELL: NO_SSE_CLIENT if transport == "sse" else PROBE_KILLS_OLD_SERVER
        }
        for direction in ("mrtr client", "mrtr call")
        for transport in ("stdio", "sse")
    },
}
