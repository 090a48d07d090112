"""The tool calls the workloads time, written once for both SDKs.

Both SDKs' clients have `call_tool(name, arguments)` returning a result with `content` (text
blocks with `.text`) and `is_error`; each op checks the answer, so a contender that breaks can
never post a fast time.
"""

from __future__ import annotations

from typing import Any, Protocol


class ToolCaller(Protocol):
    """The part of either SDK's client the workloads use."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any: ...


def expect_text(result: Any, expected: str) -> None:
    """Fail unless `result` is a successful tool result whose first block says `expected`."""
    block = result.content[0] if result.content else None
    if result.is_error or getattr(block, "text", None) != expected:
        raise AssertionError(f"unexpected tool result: {result!r}")


async def mrtr_flow_once(client: ToolCaller) -> None:
    """One full MRTR flow: `confirm` -> input_required -> handler answers -> retry -> "yes"."""
    expect_text(await client.call_tool("confirm", {}), "yes")


async def live_flow_once(client: ToolCaller) -> None:
    """One legacy-session elicitation flow: `confirm_live` -> the server sends
    `elicitation/create` mid-call -> the client's callback answers -> "yes"."""
    expect_text(await client.call_tool("confirm_live", {}), "yes")


async def plain_call_once(client: ToolCaller) -> None:
    """One `tools/call` of `add(2, 3)` with no MRTR round."""
    expect_text(await client.call_tool("add", {"a": 2, "b": 3}), "5")


async def growth_flow_once(client: ToolCaller, k: int) -> None:
    """One flow of `ask{k}`: k questions asked one after another, k+1 rounds."""
    expect_text(await client.call_tool(f"ask{k}", {}), "yes")


async def plain_sync_call_once(client: ToolCaller) -> None:
    """One `tools/call` of `add_sync(2, 3)`: a plain `def` tool, run in a worker thread."""
    expect_text(await client.call_tool("add_sync", {"a": 2, "b": 3}), "5")
