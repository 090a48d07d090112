"""The FastMCP client (`fastmcp.Client`, 3.x on mcp 1.x or 4.x on mcp 2.x) running the matrix
checks.

Run with the peer's interpreter: `python fastmcp_client.py stdio COMMAND...`,
`python fastmcp_client.py http URL` or `python fastmcp_client.py sse URL`; on 4.x,
MATRIX_MODE picks its mode (`legacy` or `auto`).
"""

from __future__ import annotations

import asyncio
import os
import warnings
from typing import Any

import fastmcp
from checks import Answers, run_checks, target
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import SSETransport, StdioTransport, StreamableHttpTransport

MAJOR = int(fastmcp.__version__.split(".")[0])


def error_text(exc: Exception) -> str:
    error = getattr(exc, "error", None)
    if error is None:
        raise exc
    return f"raised: {error.code} {error.message}"


class Peer:
    def __init__(self, client: fastmcp.Client[Any], answers: Answers, modern: bool) -> None:
        self.client = client
        self.answers = answers
        self.modern = modern

    async def version(self) -> str:
        if MAJOR >= 4:
            return str(self.client.protocol_version)  # type: ignore[attr-defined]
        return str(self.client.initialize_result.protocolVersion)  # type: ignore[union-attr]

    async def tools(self) -> list[str]:
        return [t.name for t in await self.client.list_tools()]

    async def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            result = await self.client.call_tool_mcp(name, args, **kwargs)
        except Exception as exc:  # the SDK's McpError (1.x) or MCPError (2.x)
            return error_text(exc)
        text = " ".join(getattr(c, "text", "") for c in result.content)
        is_error = result.is_error if MAJOR >= 4 else result.isError  # type: ignore[attr-defined]
        return f"isError: {text}" if is_error else text

    async def call_with_progress(self, name: str, args: dict[str, Any]) -> str:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            self.answers.progress.append(value)

        return await self.call(name, args, progress_handler=progress)

    async def set_level(self, level: Any) -> object:
        if self.modern:
            # 2026-07-28 has no logging/setLevel (the level travels per request).
            return "2026-07-28: no logging/setLevel"
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        await self.client.set_logging_level(level)
        return "set"

    async def prompt(self, name: str, args: dict[str, str]) -> str:
        result = await self.client.get_prompt(name, args)
        return " ".join(getattr(m.content, "text", "") for m in result.messages)

    async def read(self, uri: str) -> str:
        try:
            contents = await self.client.read_resource(uri)
        except Exception as exc:
            return error_text(exc)
        return " ".join(getattr(c, "text", "") for c in contents)

    async def unknown_method(self) -> str:
        if MAJOR >= 4:
            import mcp_types

            request: Any = mcp_types.Request(method="matrix/unknown", params=None)
            result: Any = mcp_types.EmptyResult
        else:
            import mcp.types as types

            warnings.filterwarnings("ignore", category=UserWarning)  # pydantic, on the bypass
            ping = types.PingRequest.model_construct(method="matrix/unknown", params=None)
            request, result = types.ClientRequest.model_construct(root=ping), types.EmptyResult
        try:
            await self.client.session.send_request(request, result)
        except Exception as exc:
            return error_text(exc)
        return "answered"


async def main() -> None:
    answers = Answers()
    mode = os.environ.get("MATRIX_MODE", "legacy")

    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        if answers.elicit_action != "accept":
            return ElicitResult(action=answers.elicit_action)  # type: ignore[arg-type]
        return answers.elicit_content(message)

    async def sample(messages: Any, params: Any, context: Any) -> Any:
        if MAJOR >= 4:
            import mcp_types as types
        else:
            import mcp.types as types  # type: ignore[no-redef]
        text = types.TextContent(type="text", text="short")
        return types.CreateMessageResult(role="assistant", content=text, model="peer-model")

    async def log(message: Any) -> None:
        answers.logs.append(str(message.data))

    transport, where = target()
    if transport == "stdio":
        command, *args = where.split("\0")
        chosen: Any = StdioTransport(command, args)
    elif transport == "sse":
        chosen = SSETransport(where)
    else:
        chosen = StreamableHttpTransport(where)
    options: dict[str, Any] = {"mode": mode} if MAJOR >= 4 else {}
    client = fastmcp.Client(
        chosen,
        elicitation_handler=elicit,
        sampling_handler=sample,
        roots=["file:///peer/root"],
        log_handler=log,
        **options,
    )
    async with client:
        version = await Peer(client, answers, False).version()
        await run_checks(Peer(client, answers, modern=version >= "2026"), answers)


if __name__ == "__main__":
    asyncio.run(main())
