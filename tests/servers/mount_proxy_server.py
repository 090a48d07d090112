"""A hub (`server`) that mounts a proxy's backend and a client beside a tool of its own, for
`mrtr serve`: `MOUNT_EVERYTHING` (a JSON command line) is a stdio server mounted at `ev`
through a `ProxyBackend`, `MOUNT_URL` an MCP endpoint mounted at `be` through a `Client`.
"""

from __future__ import annotations

import json
import os

from mrtr import Client, Server
from mrtr.proxy import ProxyBackend

server = Server("hub", instructions="A hub.")


@server.tool()
def hello(name: str) -> str:
    """The hub's own tool."""
    return f"Hello, {name}, from the hub"


if "MOUNT_EVERYTHING" in os.environ:
    server.mount("ev", ProxyBackend(json.loads(os.environ["MOUNT_EVERYTHING"])))
if "MOUNT_URL" in os.environ:
    server.mount("be", Client.http(os.environ["MOUNT_URL"]))
