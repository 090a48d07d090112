"""A hand-written 2026-07-28 stdio server that breaks its promises, for client tests.

`python lying_list_server.py loop` repeats the same `nextCursor` forever;
`python lying_list_server.py endless` hands out a fresh cursor on every page. Both list a tool
`liar` whose `outputSchema` promises `{"count": integer}` and whose result breaks it
(`{"count": "many"}`), and a tool `silent` with a schema and no structured content.
"""

from __future__ import annotations

import json
import sys

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
}
TOOLS = [
    {"name": "liar", "inputSchema": {"type": "object"}, "outputSchema": SCHEMA},
    {"name": "silent", "inputSchema": {"type": "object"}, "outputSchema": SCHEMA},
]


def answer(mode: str, message: dict[str, object], pages: list[int]) -> dict[str, object]:
    method = message.get("method")
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if method == "server/discover":
        return {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "liar", "version": "1"},
            "ttlMs": 0,
            "cacheScope": "private",
        }
    if method == "tools/list":
        pages[0] += 1
        cursor = "again" if mode == "loop" else f"page-{pages[0]}"
        return {"tools": TOOLS, "nextCursor": cursor, "ttlMs": 0, "cacheScope": "private"}
    if method == "tools/call" and params.get("name") == "liar":
        text = {"type": "text", "text": "many"}
        return {"content": [text], "structuredContent": {"count": "many"}}
    if method == "tools/call" and params.get("name") == "silent":
        return {"content": [{"type": "text", "text": "nothing"}]}
    raise KeyError(method)


def main() -> None:
    mode = sys.argv[1]
    pages = [0]
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        try:
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(mode, message, pages)}
        except KeyError:
            error = {"code": -32601, "message": "Method not found"}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
