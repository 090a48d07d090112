"""A hostile MCP server on stdio, for the client: `python hostile_peer_server.py MODE [LOG]`.

It speaks raw JSON-RPC lines and plays either era (an `initialize` gets a legacy result, any
other request but `tools/call` an empty one). What `tools/call` gets depends on MODE:

* `endless`: an `input_required` result asking a new question, every round, forever;
* `huge`: a response of 200 MB, written in 1 MiB pieces (stopping when the client goes);
* `stray`: responses to ids the client never sent (a result, an error, a number and a
  string id) before the real answer, "answered".

With LOG, each `tools/call` that arrives appends a line to that file, for the test to count.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

import orjson

HUGE = 200 * 1024 * 1024
PIECE = 1024 * 1024


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(message) + b"\n")
    sys.stdout.buffer.flush()


def answer_call(mode: str, request_id: Any, round_number: int) -> None:
    if mode == "endless":
        ask = {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": f"Round {round_number}: again?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
        }
        result = {
            "resultType": "input_required",
            "inputRequests": {f"q{round_number}": ask},
            "requestState": f"round-{round_number}",
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif mode == "huge":
        head = orjson.dumps(request_id)
        out = sys.stdout.buffer
        out.write(
            b'{"jsonrpc":"2.0","id":' + head + b',"result":{"content":[{"type":"text","text":"'
        )
        piece = b"x" * PIECE
        for _ in range(HUGE // PIECE):
            out.write(piece)
        out.write(b'"}]}}\n')
        out.flush()
    else:  # stray
        send({"jsonrpc": "2.0", "id": 424242, "result": {"content": []}})
        send({"jsonrpc": "2.0", "id": "never-sent", "result": {"resultType": "complete"}})
        send({"jsonrpc": "2.0", "id": 31337, "error": {"code": -32603, "message": "stray"}})
        text = [{"type": "text", "text": "answered"}]
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": text}})


def main() -> None:
    mode = sys.argv[1]
    log = sys.argv[2] if len(sys.argv) > 2 else None
    rounds = itertools.count(1)
    for line in sys.stdin.buffer:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(message, dict) or "id" not in message or "method" not in message:
            continue  # notifications and the client's responses
        method, request_id = message["method"], message["id"]
        if method == "tools/call":
            if log is not None:
                with open(log, "a", encoding="utf-8") as file:
                    file.write("call\n")
            try:
                answer_call(mode, request_id, next(rounds))
            except BrokenPipeError:
                return  # the client stopped reading: what a capped client does
        elif method == "initialize":
            version = message.get("params", {}).get("protocolVersion", "2025-11-25")
            info = {"name": "hostile", "version": "1"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    main()
