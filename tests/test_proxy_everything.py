"""`mrtr proxy` in front of `@modelcontextprotocol/server-everything` (a legacy stdio server,
started by the proxy as a user's command line would), reached by our `Client` in both eras,
over the proxy's stdio and its Streamable HTTP: plain calls, its elicitation and sampling
tools (the backend asks mid-call, the client answers through the proxy), an error and then a
call that still works, prompts, resources, templates and completions.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

import mrtr
from helpers.interop.peers import NODE, npm_package
from helpers.loopback_process import free_port, listening
from mrtr import Client, ClientOptions, ElicitResult
from mrtr.client.options import RoundInfo
from mrtr.protocol.errors import McpError
from mrtr.protocol.types import CreateMessageResult

pytestmark = pytest.mark.timeout(240)

EVERYTHING = [
    str(NODE),
    str(npm_package("@modelcontextprotocol/server-everything") / "dist" / "index.js"),
    "stdio",
]
PROXY = [sys.executable, "-m", "mrtr", "proxy"]


def _env() -> dict[str, str]:
    # The mrtr the test imports, for the proxy process too.
    return {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(mrtr.__file__))}


class Asked:
    """The client's handlers, counting what the backend asked through the proxy."""

    def __init__(self) -> None:
        self.elicited: list[str] = []
        self.sampled = 0
        self.rounds: list[RoundInfo] = []

    def elicit(self, params: Any) -> ElicitResult:
        self.elicited.append(params.message)
        return ElicitResult(action="accept", content={"name": "Ada", "check": True})

    def sample(self, params: Any) -> CreateMessageResult:
        self.sampled += 1
        return CreateMessageResult(
            role="assistant", content={"type": "text", "text": "a proxied reply"}, model="m"
        )

    def client_kwargs(self, era: str) -> dict[str, Any]:
        return {
            "options": ClientOptions(protocol=era, on_round=self.rounds.append),  # type: ignore[arg-type]
            "elicitation_handler": self.elicit,
            "sampling_handler": self.sample,
        }


@contextlib.asynccontextmanager
async def proxied(transport: str, era: str, asked: Asked) -> AsyncIterator[Client]:
    """Our client, in `era`, to `mrtr proxy -- server-everything` over `transport`."""
    if transport == "stdio":
        client = Client.stdio(
            PROXY[0], [*PROXY[1:], "--", *EVERYTHING], env=_env(), **asked.client_kwargs(era)
        )
        async with client:
            yield client
        return
    port = free_port()
    command = [*PROXY, "--transport", "http", "--port", str(port), "--", *EVERYTHING]
    with listening(command, port, env=_env(), stderr=subprocess.DEVNULL):
        async with Client.http(
            f"http://127.0.0.1:{port}/mcp", **asked.client_kwargs(era)
        ) as client:
            yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_the_backends_questions_reach_the_client_in_both_eras(
    transport: str, era: str
) -> None:
    asked = Asked()
    async with proxied(transport, era, asked) as client:
        tools = {tool.name for tool in await client.all_tools()}
        assert client.era == era
        assert {
            "echo",
            "get-sum",
            "trigger-elicitation-request",
            "trigger-sampling-request",
        } <= tools

        echoed = await client.call_tool("echo", {"message": "hi"})
        assert echoed.content[0].text == "Echo: hi"  # type: ignore[union-attr]

        elicited = await client.call_tool("trigger-elicitation-request", {})
        assert asked.elicited and "Please provide inputs" in asked.elicited[0]
        assert "Name: Ada" in " ".join(c.text for c in elicited.content)  # type: ignore[union-attr]

        sampled = await client.call_tool("trigger-sampling-request", {"prompt": "say hi"})
        assert asked.sampled == 1
        assert "a proxied reply" in sampled.content[0].text  # type: ignore[union-attr]

        # A modern client answered in rounds (input_required); a legacy one was asked live.
        assert len(asked.rounds) == (2 if era == "modern" else 0)

        with pytest.raises(McpError):
            await client.call_tool("no-such-tool", {})
        total = await client.call_tool("get-sum", {"a": 2, "b": 3})
        assert "5" in total.content[0].text  # type: ignore[union-attr]


async def test_prompts_resources_templates_and_completions_pass_through() -> None:
    asked = Asked()
    async with proxied("stdio", "modern", asked) as client:
        prompts = {prompt.name: prompt for prompt in await client.all_prompts()}
        assert {"simple-prompt", "args-prompt"} <= set(prompts)
        assert [a.name for a in prompts["args-prompt"].arguments or []][:1] == ["city"]
        prompt = await client.get_prompt("args-prompt", {"city": "Paris"})
        assert "Paris" in str(prompt.messages[0].content)

        resources = await client.all_resources()
        assert resources
        read = await client.read_resource(resources[0].uri)
        assert read.contents and read.contents[0].uri == resources[0].uri

        templates = [t.uri_template for t in await client.all_resource_templates()]
        assert "demo://resource/dynamic/text/{resourceId}" in templates
        dynamic = await client.read_resource("demo://resource/dynamic/text/7")
        assert "7" in str(dynamic.contents[0])

        completion = await client.complete(
            {"type": "ref/prompt", "name": "completable-prompt"},
            {"name": "department", "value": "E"},
        )
        assert completion.completion.values == ["Engineering"]
