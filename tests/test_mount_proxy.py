"""`Server.mount(prefix, other)` where `other` is a proxy's backend or a `Client`: started as a
user would, `@modelcontextprotocol/server-everything` (a legacy stdio server, mounted through a
`ProxyBackend`) and a 2026-07-28 mrtr server (`mrtr serve ... --transport http`, mounted
through a `Client`), beside a tool of the outer server; our client in both eras answers the
backends' questions through the outer server, hears their list changes, and a backend whose
names collide with the outer server's is refused at start, or later left out without a crash.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mrtr
from helpers.interop.peers import NODE, npm_package
from helpers.loopback_process import free_port, listening
from mrtr import Client, ClientOptions, ElicitResult, LifespanError, Server
from mrtr.client.options import RoundInfo
from mrtr.proxy import ProxyBackend

pytestmark = pytest.mark.timeout(240)

SERVERS = Path(__file__).resolve().parent / "servers"
HUB = SERVERS / "mount_proxy_server.py"
BACKEND = SERVERS / "mount_backend_server.py"
EVERYTHING = [
    str(NODE),
    str(npm_package("@modelcontextprotocol/server-everything") / "dist" / "index.js"),
    "stdio",
]
#: The mrtr the test imports, for the processes too.
ENV = {**os.environ, "PYTHONPATH": str(Path(mrtr.__file__).resolve().parent.parent)}
ERAS = ["modern", "legacy"]
GUARD = 20.0  # seconds: only reached when something is broken


def serve(script: Path, port: int, **env: str) -> Any:
    """`mrtr serve script:server` over HTTP on `port`, as a user would start it."""
    command = [sys.executable, "-m", "mrtr", "serve", f"{script}:server", "--transport", "http"]
    return listening(
        [*command, "--port", str(port)], port, env={**ENV, **env}, stderr=subprocess.DEVNULL
    )


@pytest.fixture(scope="module")
def backend_url() -> Iterator[str]:
    """The 2026-07-28 backend's URL (one process for the module's tests)."""
    port = free_port()
    with serve(BACKEND, port):
        yield f"http://127.0.0.1:{port}/mcp"


class User:
    """The outer client's answers, and what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.rounds: list[RoundInfo] = []

    def elicit(self, params: Any) -> ElicitResult:
        self.asked.append(params.message)
        if params.message.startswith("Size of"):
            return ElicitResult(action="accept", content={"size": "large"})
        return ElicitResult(action="accept", content={"name": "Ada", "check": True, "ok": True})

    def client(self, url: str, era: str) -> Client:
        return Client.http(
            url,
            options=ClientOptions(protocol=era, on_round=self.rounds.append),  # type: ignore[arg-type]
            elicitation_handler=self.elicit,
        )

    def in_memory(self, server: Server, era: str) -> Client:
        return Client.in_memory(
            server,
            options=ClientOptions(protocol=era, on_round=self.rounds.append),  # type: ignore[arg-type]
            elicitation_handler=self.elicit,
        )


def text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def started(calls: str) -> int:
    """The count in the backend's `calls` answer ("order started N time(s)")."""
    return int(calls.removeprefix("order started ").split()[0])


@pytest.mark.parametrize("era", ERAS)
async def test_a_stdio_server_and_an_http_one_mounted_beside_a_local_tool(
    era: str, backend_url: str
) -> None:
    """The hub, served by `mrtr serve`, mounts server-everything at `ev` (a `ProxyBackend`)
    and the mrtr backend at `be` (a `Client`); each backend's questions reach our client."""
    port = free_port()
    env = {"MOUNT_EVERYTHING": json.dumps(EVERYTHING), "MOUNT_URL": backend_url}
    user = User()
    with serve(HUB, port, **env):
        async with user.client(f"http://127.0.0.1:{port}/mcp", era) as client:
            names = {tool.name for tool in await client.all_tools()}
            assert client.era == era
            assert {"hello", "ev_echo", "ev_trigger-elicitation-request", "be_order"} <= names
            assert "echo" not in names and "order" not in names  # only under their prefixes

            hello = await client.call_tool("hello", {"name": "Ada"})
            assert text(hello) == "Hello, Ada, from the hub"
            echoed = await client.call_tool("ev_echo", {"message": "hi"})
            assert text(echoed) == "Echo: hi"

            elicited = await client.call_tool("ev_trigger-elicitation-request", {})
            assert "Name: Ada" in text(elicited)
            assert user.asked == ["Please provide inputs for the following fields:"]
            # A modern client answered in a round of the outer call; a legacy one live.
            assert len(user.rounds) == (1 if era == "modern" else 0)

            before = text(await client.call_tool("be_calls", {}))
            ordered = await client.call_tool("be_order", {"item": "tea"})
            assert text(ordered) == "large tea: ordered"
            assert user.asked[1:] == ["Size of tea?", "Order a large tea?"]
            assert len(user.rounds) == (3 if era == "modern" else 0)
            # The backend's call was held between the rounds, never started again.
            after = text(await client.call_tool("be_calls", {}))
            assert started(after) == started(before) + 1


@pytest.mark.parametrize("era", ERAS)
async def test_a_list_change_of_a_mounted_client_reaches_the_outer_client(
    era: str, backend_url: str
) -> None:
    hub = Server("hub")
    hub.mount("be", Client.http(backend_url))
    name = f"fresh_{era}"
    async with hub.running(), User().in_memory(hub, era) as client:
        assert f"be_{name}" not in {tool.name for tool in await client.all_tools()}
        async with client.listen(tools=True) as changes:
            grown = await client.call_tool("be_grow", {"name": name})
            assert text(grown) == f"grew {name}"
            async with asyncio.timeout(GUARD):
                async for change in changes:
                    if change.kind == "tools":
                        break
        assert f"be_{name}" in {tool.name for tool in await client.all_tools()}
        called = await client.call_tool(f"be_{name}", {})
        assert text(called) == f"I am {name}"


async def test_a_collision_found_at_start_stops_the_outer_server_naming_both(
    backend_url: str,
) -> None:
    hub = Server("hub")
    hub.add_tool(lambda: "mine", name="be_order")
    hub.mount("be", ProxyBackend(backend_url))  # its lists are read when the hub starts
    with pytest.raises(ValueError, match=r"'be_order' is taken twice.*'order' of"):
        async with hub.running():
            pass


async def test_a_collision_a_later_change_brings_is_logged_and_left_out(
    backend_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    hub = Server("hub")
    hub.add_tool(lambda: "the hub's own", name="be_taken")
    hub.mount("be", Client.http(backend_url))
    async with hub.running(), User().in_memory(hub, "modern") as client:
        with caplog.at_level(logging.WARNING, logger="mrtr.server.mount"):
            async with client.listen(tools=True) as changes:
                await client.call_tool("be_grow", {"name": "taken"})
                await client.call_tool("be_grow", {"name": "beside"})
                async with asyncio.timeout(GUARD):
                    async for change in changes:
                        names = {tool.name for tool in await client.all_tools()}
                        if change.kind == "tools" and "be_beside" in names:
                            break
        assert "'be_taken' is taken twice" in caplog.text and "left out" in caplog.text
        own = await client.call_tool("be_taken", {})
        assert text(own) == "the hub's own"
        beside = await client.call_tool("be_beside", {})
        assert text(beside) == "I am beside"


def test_what_cannot_be_mounted_is_refused_naming_what_can() -> None:
    with pytest.raises(TypeError, match="cannot mount str: give an mrtr Server, a Client"):
        Server("hub").mount("x", "http://127.0.0.1:1/mcp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a backend given as a Client has one session"):
        ProxyBackend(Client.http("http://127.0.0.1:1/mcp"), sessions=2)


async def test_a_client_connected_by_its_owner_is_left_open_and_serves_each_run(
    backend_url: str,
) -> None:
    async with Client.http(backend_url) as backend:
        hub = Server("hub")
        hub.mount("be", backend)
        for _ in range(2):  # the hub started twice: the same connection serves both runs
            async with hub.running(), User().in_memory(hub, "modern") as client:
                ordered = await client.call_tool("be_order", {"item": "cup"})
                assert text(ordered) == "large cup: ordered"
        assert backend.connected
        assert "order started" in text(await backend.call_tool("calls", {}))


async def test_a_client_the_outer_server_connected_is_closed_with_it(backend_url: str) -> None:
    backend = Client.http(backend_url)
    hub = Server("hub")
    hub.mount("be", backend)
    async with hub.running():
        assert backend.connected
    assert not backend.connected
    # A backend that cannot start stops the outer server's start, as a lifespan failing does.
    with pytest.raises(LifespanError, match=r"is closed .* give a new Client, or a ProxyBackend"):
        async with hub.running():
            pass
