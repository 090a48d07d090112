"""`mrtr proxy` tells its clients the backend's identity: the name, title, version and
`instructions` of `@modelcontextprotocol/server-everything` (started by the proxy over stdio, as
a user's command line would), in the 2026-07-28 `server/discover` result and in the legacy
`initialize` result, read by our client and by the official SDK's; `--name` replaces the name.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import mcp
import pytest
from mcp.client.stdio import StdioServerParameters

import mrtr
from helpers.interop.peers import NODE, npm_package
from mrtr import Client, ClientOptions
from mrtr.protocol.meta import SERVER_INFO

pytestmark = pytest.mark.timeout(120)

EVERYTHING = [
    str(NODE),
    str(npm_package("@modelcontextprotocol/server-everything") / "dist" / "index.js"),
    "stdio",
]
PROXY = ["-m", "mrtr", "proxy"]
#: The mrtr the test imports, for the proxy process too.
ENV = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(mrtr.__file__))}
#: What server-everything says it is.
EVERYTHING_INFO = {
    "name": "mcp-servers/everything",
    "title": "Everything Reference Server",
    "version": "2.0.0",
}
INSTRUCTIONS_START = "# Everything Server \u2013 Server Instructions"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_our_client_is_told_the_backends_identity(era: str) -> None:
    """Modern: the proxy's own `server/discover` and the `_meta` of each result; legacy: what
    the proxy's `initialize` result said (our client keeps it as its discover result)."""
    client = Client.stdio(
        sys.executable,
        [*PROXY, "--", *EVERYTHING],
        env=ENV,
        options=ClientOptions(protocol=era),  # type: ignore[arg-type]
    )
    async with client:
        found = await client.request("server/discover")
        assert client.era == era
        assert found["_meta"][SERVER_INFO] == EVERYTHING_INFO
        assert found["instructions"].startswith(INSTRUCTIONS_START)
        if era == "modern":
            listed = await client.request("tools/list")
            assert listed["_meta"][SERVER_INFO] == EVERYTHING_INFO


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_is_told_the_backends_identity(mode: str) -> None:
    """`legacy`: its `initialize` result; `auto`: it finds the proxy modern (`server/discover`)."""
    params = StdioServerParameters(
        command=sys.executable, args=[*PROXY, "--", *EVERYTHING], env=ENV
    )
    async with mcp.Client(params, mode=mode) as client:
        info: Any = client.server_info
        assert (info.name, info.title, info.version) == (
            EVERYTHING_INFO["name"],
            EVERYTHING_INFO["title"],
            EVERYTHING_INFO["version"],
        )
        assert (client.instructions or "").startswith(INSTRUCTIONS_START)


async def test_name_replaces_the_backends_name_only() -> None:
    client = Client.stdio(sys.executable, [*PROXY, "--name", "demo", "--", *EVERYTHING], env=ENV)
    async with client:
        found = await client.request("server/discover")
    assert found["_meta"][SERVER_INFO] == {**EVERYTHING_INFO, "name": "demo"}
    assert found["instructions"].startswith(INSTRUCTIONS_START)
