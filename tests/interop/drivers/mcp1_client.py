"""The official Python SDK 1.x client (`mcp.ClientSession`) running the matrix checks.

Run with the peer's interpreter: `python mcp1_client.py stdio COMMAND...`,
`python mcp1_client.py http URL` (Streamable HTTP) or `python mcp1_client.py sse URL`.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Any

import mcp.types as types
from checks import Answers, run_checks, target
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


class Peer:
    def __init__(self, session: ClientSession, version: str, answers: Answers) -> None:
        self.session = session
        self._version = version
        self.answers = answers

    async def version(self) -> str:
        return self._version

    async def tools(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            result = await self.session.call_tool(name, args, **kwargs)
        except McpError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return f"isError: {text}" if result.isError else text

    async def call_with_progress(self, name: str, args: dict[str, Any]) -> str:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            self.answers.progress.append(value)

        return await self.call(name, args, progress_callback=progress)

    async def set_level(self, level: Any) -> object:
        return await self.session.set_logging_level(level)

    async def prompt(self, name: str, args: dict[str, str]) -> str:
        result = await self.session.get_prompt(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        try:
            result = await self.session.read_resource(uri)  # type: ignore[arg-type]
        except McpError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        return " ".join(getattr(c, "text", "") for c in result.contents)

    async def unknown_method(self) -> str:
        # The SDK's typed requests admit no unknown method: build one around its validation.
        warnings.filterwarnings("ignore", category=UserWarning)  # pydantic, on that bypass
        request = types.PingRequest.model_construct(method="matrix/unknown", params=None)
        try:
            await self.session.send_request(
                types.ClientRequest.model_construct(root=request), types.EmptyResult
            )
        except McpError as exc:
            return f"raised: {exc.error.code} {exc.error.message}"
        return "answered"


async def main() -> None:
    answers = Answers()

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(
            action=answers.elicit_action,  # type: ignore[arg-type]
            content=answers.elicit_content(params.message),
        )

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="short"),
            model="peer-model",
        )

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///peer/root")])  # type: ignore[arg-type]

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        answers.logs.append(str(params.data))

    transport, where = target()
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            command, *args = where.split("\0")
            streams = await stack.enter_async_context(
                stdio_client(StdioServerParameters(command=command, args=args))
            )
        elif transport == "sse":
            streams = await stack.enter_async_context(sse_client(where))
        else:
            streams = await stack.enter_async_context(streamablehttp_client(where))
        session = await stack.enter_async_context(
            ClientSession(
                streams[0],
                streams[1],
                sampling_callback=sample,
                elicitation_callback=elicit,
                list_roots_callback=roots,
                logging_callback=log,
            )
        )
        init = await asyncio.wait_for(session.initialize(), 90)  # starts the server
        await run_checks(Peer(session, str(init.protocolVersion), answers), answers)


if __name__ == "__main__":
    asyncio.run(main())
