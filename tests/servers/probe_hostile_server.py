"""A legacy stdio server that cannot stand a request arriving before `initialize`: the era
probe's `ping` or `server/discover` (mcp 1.3's server dies of either).

`python probe_hostile_server.py exit` exits at once when the first request is one of them;
`python probe_hostile_server.py garbage` writes a traceback to stdout and stops answering;
`python probe_hostile_server.py late-exit` says nothing to it and exits when the next request
arrives (as mcp 1.3's server does, slowly, after failing on the first).
Otherwise the first request is handed on to the official SDK's legacy server
(`official_shop.py legacy`), which serves the rest of the session.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path


def read_first_line() -> bytes:
    """The first line of stdin, read byte by byte so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def hand_on(first: bytes) -> None:
    """Make fd 0 read `first` and then the rest of the real stdin."""
    original = os.dup(0)
    read_end, write_end = os.pipe()
    os.write(write_end, first)

    def pump() -> None:
        while chunk := os.read(original, 65536):
            os.write(write_end, chunk)
        os.close(write_end)

    threading.Thread(target=pump, daemon=True).start()
    os.dup2(read_end, 0)
    os.close(read_end)


if __name__ == "__main__":
    behaviour = sys.argv[1]
    first = read_first_line()
    if b'"server/discover"' in first or b'"ping"' in first:
        if behaviour == "exit":
            sys.exit(3)
        if behaviour == "late-exit":
            read_first_line()  # the request the client sends once the probe went unanswered
            sys.exit(3)
        sys.stdout.write("Traceback (most recent call last):\n  KeyError: 'protocolVersion'\n")
        sys.stdout.flush()
        while os.read(0, 65536):  # hangs on, answering nothing, until stdin closes
            pass
        sys.exit(0)
    hand_on(first)
    sys.path.insert(0, str(Path(__file__).parent))
    import anyio
    import official_shop

    anyio.run(official_shop.serve_legacy, official_shop.build("legacy"))
