"""`mrtr proxy URL` in front of a 2026-07-28 mrtr server (`mrtr serve ... --transport http`),
both started as a user would: the proxy's client runs the MRTR loop with the backend and asks
its own client, modern (rounds) or legacy (live), through the same handlers. Several questions
at once, sampling, roots, progress and logs, a tool error, and a list change and a resource
update announced by the backend all reach the client through the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mrtr
from helpers.loopback_process import free_port, listening
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.protocol.types import CreateMessageResult, ListRootsResult, Root

pytestmark = pytest.mark.timeout(180)

BACKEND = Path(__file__).resolve().parent / "servers" / "both_eras_server.py"
#: The mrtr the test imports, for the processes too.
ENV = {**os.environ, "PYTHONPATH": str(Path(mrtr.__file__).resolve().parent.parent)}


@contextlib.contextmanager
def backend_and_proxy() -> Iterator[str]:
    """The backend served over HTTP, and `mrtr proxy` to its URL over HTTP: the proxy's URL."""
    backend_port, proxy_port = free_port(), free_port()
    mrtr_cli = [sys.executable, "-m", "mrtr"]
    serve = [*mrtr_cli, "serve", f"{BACKEND}:server", "--transport", "http"]
    proxy = [*mrtr_cli, "proxy", "--transport", "http", "--port", str(proxy_port)]
    with (
        listening(
            [*serve, "--port", str(backend_port)], backend_port, env=ENV, stderr=subprocess.DEVNULL
        ),
        listening(
            [*proxy, f"http://127.0.0.1:{backend_port}/mcp"],
            proxy_port,
            env=ENV,
            stderr=subprocess.DEVNULL,
        ),
    ):
        yield f"http://127.0.0.1:{proxy_port}/mcp"


def elicit(params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": params.message.rstrip("?"), "ok": True})


def sample(params: Any) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant", content={"type": "text", "text": "short"}, model="m1"
    )


def roots(params: Any) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///work")])


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_modern_backends_questions_reach_either_client(era: str) -> None:
    logs: list[Any] = []
    progress: list[float] = []
    with backend_and_proxy() as url:
        async with Client.http(
            url,
            options=ClientOptions(protocol=era),  # type: ignore[arg-type]
            elicitation_handler=elicit,
            sampling_handler=sample,
            roots_handler=roots,
            log_handler=logs.append,
            log_level="debug",
        ) as client:
            paired = await client.call_tool("pair")
            assert paired.content[0].text == "First name Last name City Zip"  # type: ignore[union-attr]
            assert client.era == era

            summary = await client.call_tool("summarize", {"text": "a long text"})
            assert summary.content[0].text == "summary: short (m1)"  # type: ignore[union-attr]
            listed = await client.call_tool("roots")
            assert listed.content[0].text == "roots: file:///work"  # type: ignore[union-attr]

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            slow = await client.call_tool("slow", {"n": 3}, progress_callback=on_progress)
            assert slow.content[0].text == "done"  # type: ignore[union-attr]
            assert progress == [1, 2, 3]
            assert [entry["data"] for entry in logs] == ["started", "finished"]

            broken = await client.call_tool("broken")
            assert broken.is_error and "broke on purpose" in broken.content[0].text  # type: ignore[union-attr]

            async with client.listen(tools=True, resource_uris=["file:///notes"]) as changes:
                await client.call_tool("touch", {"uri": "file:///notes"})
                seen = set()
                async with asyncio.timeout(20):
                    async for change in changes:
                        seen.add((change.kind, change.uri))
                        if {("tools", None), ("resource", "file:///notes")} <= seen:
                            break
