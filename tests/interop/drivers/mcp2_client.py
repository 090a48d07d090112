"""The official Python SDK 2.x client (`mcp.Client`) running the matrix checks.

Run with the peer's interpreter: `python mcp2_client.py stdio COMMAND...` or
`python mcp2_client.py http URL` or `python mcp2_client.py sse URL` (HTTP+SSE, 2024-11-05's
transport: initialize-based sessions only); MATRIX_MODE picks its mode (`legacy`: the initialize
handshake; `auto`: 2026-07-28 when the server speaks it).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import mcp
import mcp_types as types
from checks import Answers, run_checks, target
from mcp import MCPError, StdioServerParameters
from mcp.client.sse import sse_client


class Peer:
    def __init__(self, client: mcp.Client, answers: Answers, modern: bool) -> None:
        self.client = client
        self.answers = answers
        self.modern = modern

    async def version(self) -> str:
        return str(self.client.protocol_version)

    async def tools(self) -> list[str]:
        return [t.name for t in (await self.client.list_tools()).tools]

    async def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            result = await self.client.call_tool(name, args, **kwargs)
        except MCPError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return f"isError: {text}" if result.is_error else text

    async def call_with_progress(self, name: str, args: dict[str, Any]) -> str:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            self.answers.progress.append(value)

        return await self.call(name, args, progress_callback=progress)

    async def set_level(self, level: Any) -> object:
        if self.modern:
            # 2026-07-28 has no logging/setLevel: the level travels in each request's _meta,
            # which this client sends from its `log_level` (set at construction).
            return f"per-request log level {self.client.log_level}"
        return await self.client.set_logging_level(level)

    async def prompt(self, name: str, args: dict[str, str]) -> str:
        result = await self.client.get_prompt(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        try:
            result = await self.client.read_resource(uri)
        except MCPError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        return " ".join(getattr(c, "text", "") for c in result.contents)

    async def unknown_method(self) -> str:
        try:
            await self.client.session.send_request(
                types.Request(method="matrix/unknown", params=None), types.EmptyResult
            )
        except MCPError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        return "answered"


async def main() -> None:
    answers = Answers()
    mode = os.environ.get("MATRIX_MODE", "auto")

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(
            action=answers.elicit_action,  # type: ignore[arg-type]
            content=answers.elicit_content(params.message),
        )

    async def sample(context: Any, params: Any) -> Any:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="short"),
            model="peer-model",
        )

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///peer/root")])  # type: ignore[arg-type]

    async def log(params: Any) -> None:
        answers.logs.append(str(params.data))

    transport, where = target()
    if transport == "stdio":
        command, *args = where.split("\0")
        server: Any = StdioServerParameters(command=command, args=args)
    elif transport == "sse":
        server = sse_client(where)
    else:
        server = where
    async with mcp.Client(
        server,
        mode=mode,  # type: ignore[arg-type]
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
        logging_callback=log,
        log_level="info" if mode != "legacy" else None,
    ) as client:
        peer = Peer(client, answers, modern=client.protocol_version >= "2026")
        await run_checks(peer, answers)


if __name__ == "__main__":
    asyncio.run(main())
