"""The same full MRTR flow (tool, prompt, resource template) over memory, stdio and HTTP.

The flow and its assertions live in `helpers/transport_flow.py`; only the connection differs. stdio
runs `servers/flow_stdio_server.py` as a child process; HTTP serves the flow server under uvicorn on
a loopback port of this process.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from helpers.transport_flow import Handlers, build_flow_server, run_mrtr_flow, serve
from mrtr import Client

STDIO_SERVER = str(Path(__file__).resolve().parent / "servers" / "flow_stdio_server.py")


@contextlib.asynccontextmanager
async def connect(transport: str, handlers: Handlers) -> AsyncIterator[Client]:
    """A client connected to the flow server over `transport`, answering with `handlers`."""
    kwargs = handlers.client_kwargs()
    if transport == "memory":
        async with Client.in_memory(build_flow_server(), **kwargs) as client:
            yield client
    elif transport == "stdio":
        async with Client.stdio(sys.executable, [STDIO_SERVER], **kwargs) as client:
            yield client
    else:
        assert transport == "http", transport
        async with (
            serve(build_flow_server().asgi_app()) as base,
            Client.http(base + "/mcp", **kwargs) as client,
        ):
            yield client


@pytest.mark.parametrize("transport", ["memory", "stdio", "http"])
async def test_mrtr_flow_for_tool_prompt_and_template(transport: str) -> None:
    handlers = Handlers()
    async with connect(transport, handlers) as client:
        await run_mrtr_flow(client, handlers)
