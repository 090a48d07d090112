"""One handler, both eras: the same tools answer the same way to a 2026-07-28 client and to a
legacy (`initialize`) client, with no branch on the era in the handler.

The tools are `tests/servers/both_eras_server.py`. The modern era is driven by `mrtr.Client`
in memory (stateless MRTR rounds); the legacy era by the official SDK's client (`mcp==2.3.0`)
over a real stdio subprocess, in `mode="legacy"` (the `initialize` handshake: questions are
answered live, as server-to-client requests) and in its default `mode="auto"` (it probes
`server/discover`, finds this server modern, and runs MRTR rounds itself). Every era runs the
same list of checks, each with the answers its client gives through its own callbacks.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp
import mcp_types
from mcp.client.stdio import StdioServerParameters

from mrtr import (
    Client,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

SCRIPT = Path(__file__).resolve().parent / "servers" / "both_eras_server.py"
_spec = importlib.util.spec_from_file_location("both_eras_server", SCRIPT)
assert _spec is not None and _spec.loader is not None
both_eras = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(both_eras)

#: What the "user" answers to each question, by the start of its message.
ANSWERS: dict[str, dict[str, Any]] = {
    "Order": {"ok": True},
    "Ship to": {"region": "eu"},
    "First name": {"name": "Ada"},
    "Last name": {"name": "Lovelace"},
    "City": {"name": "London"},
    "Zip": {"name": "N1"},
    "Rename": {"name": "new.txt"},
    "Go on": {"ok": True},
    "Print the ticket": {"ok": True},
    "Break": {"ok": True},
    "Whom to greet": {"name": "Bob"},
}
ROOTS = ["file:///a", "file:///b"]


def answer_for(message: str) -> dict[str, Any]:
    for start, content in ANSWERS.items():
        if message.startswith(start):
            return content
    raise AssertionError(f"unexpected question {message!r}")


@dataclass
class Seen:
    """What a client's callbacks saw."""

    asked: list[str] = field(default_factory=list)
    sampled: list[str] = field(default_factory=list)
    roots: int = 0
    logs: list[tuple[str, Any]] = field(default_factory=list)

    def clear(self) -> None:
        self.asked.clear()
        self.sampled.clear()
        self.roots = 0
        self.logs.clear()


@dataclass
class Outcome:
    text: str
    is_error: bool


class Era:
    """A connected client of one era, reduced to what the checks need."""

    def __init__(
        self,
        name: str,
        seen: Seen,
        call: Callable[..., Awaitable[Outcome]],
        prompt: Callable[[str], Awaitable[str]],
    ) -> None:
        self.name = name
        self.seen = seen
        self.call = call
        self.prompt = prompt


@asynccontextmanager
async def modern_era() -> AsyncIterator[Era]:
    seen = Seen()

    def elicit(params: ElicitRequestParams) -> ElicitResult:
        seen.asked.append(params.message)
        return ElicitResult(action="accept", content=answer_for(params.message))

    def sample(params: Any) -> CreateMessageResult:
        seen.sampled.append(params.messages[0].content.text)
        return CreateMessageResult(
            role="assistant", content=TextContent(text="short"), model="test-model"
        )

    def roots(params: Any) -> ListRootsResult:
        seen.roots += 1
        return ListRootsResult(roots=[Root(uri=uri) for uri in ROOTS])

    async with Client.in_memory(
        both_eras.server,
        elicitation_handler=elicit,
        sampling_handler=sample,
        roots_handler=roots,
        log_handler=lambda params: seen.logs.append((params["level"], params["data"])),
        log_level="debug",
    ) as client:

        async def call(
            name: str, arguments: dict[str, Any], progress: list[float] | None = None
        ) -> Outcome:
            callback = None
            if progress is not None:

                def callback(done: float, total: float | None, message: str | None) -> None:
                    progress.append(done)

            result = await client.call_tool(name, arguments, progress_callback=callback)
            text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
            return Outcome(text, bool(result.is_error))

        async def prompt(name: str) -> str:
            result = await client.get_prompt(name, {})
            content = result.messages[0].content
            assert isinstance(content, TextContent)
            return content.text

        yield Era("modern (mrtr.Client, in memory)", seen, call, prompt)


@asynccontextmanager
async def official_era(mode: str) -> AsyncIterator[Era]:
    seen = Seen()

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        seen.asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content=answer_for(params.message))

    async def sample(context: Any, params: Any) -> mcp_types.CreateMessageResult:
        seen.sampled.append(params.messages[0].content.text)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text="short"),
            model="test-model",
        )

    async def roots(context: Any) -> mcp_types.ListRootsResult:
        seen.roots += 1
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=uri) for uri in ROOTS])

    async def log(params: Any) -> None:
        seen.logs.append((params.level, params.data))

    client = mcp.Client(
        StdioServerParameters(command=sys.executable, args=[str(SCRIPT)]),
        mode=mode,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
        logging_callback=log,
        log_level="debug",  # the modern opt-in; a legacy session gets every level unasked
    )
    async with client:

        async def call(
            name: str, arguments: dict[str, Any], progress: list[float] | None = None
        ) -> Outcome:
            callback = None
            if progress is not None:

                async def callback(done: float, total: float | None, message: str | None) -> None:
                    progress.append(done)

            result = await client.call_tool(name, arguments, progress_callback=callback)
            text = " ".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
            return Outcome(text, bool(result.is_error))

        async def prompt(name: str) -> str:
            result = await client.get_prompt(name, {})
            content = result.messages[0].content
            assert isinstance(content, mcp_types.TextContent)
            return content.text

        era = Era(f"official client, mode={mode!r}, stdio", seen, call, prompt)
        era.protocol_version = client.session.protocol_version  # type: ignore[attr-defined]
        yield era


# --- the one set of checks -------------------------------------------------------------------


async def check_elicit_with_a_dict_schema(era: Era) -> None:
    assert await era.call("confirm", {"item": "book"}) == Outcome("book: confirmed", False)
    assert era.seen.asked == ["Order book?"]


async def check_elicit_with_a_pydantic_model(era: Era) -> None:
    assert await era.call("ship", {}) == Outcome("shipping to eu", False)
    assert era.seen.asked == ["Ship to which region?"]


async def check_sample(era: Era) -> None:
    assert await era.call("summarize", {"text": "a long text"}) == Outcome(
        "summary: short (test-model)", False
    )
    assert era.seen.sampled == ["Summarize: a long text"]


async def check_list_roots(era: Era) -> None:
    assert await era.call("roots", {}) == Outcome("roots: file:///a, file:///b", False)
    assert era.seen.roots == 1


async def check_gather_and_ask_of_two_questions(era: Era) -> None:
    assert await era.call("pair", {}) == Outcome("Ada Lovelace London N1", False)
    assert sorted(era.seen.asked) == ["City?", "First name?", "Last name?", "Zip?"]


async def check_once_runs_its_function_once(era: Era) -> None:
    outcome = await era.call("ticket", {})
    found = re.fullmatch(r"ticket (\d+) == (\d+), issued 1 time\(s\)", outcome.text)
    assert found is not None, outcome
    assert found.group(1) == found.group(2)


async def check_manual_style(era: Era) -> None:
    outcome = await era.call("rename", {"path": "old.txt"})
    assert outcome == Outcome("renamed old.txt to new.txt in round 1", False)
    assert era.seen.asked == ["Rename old.txt to?"]


async def check_progress_and_logs(era: Era) -> None:
    progress: list[float] = []
    assert await era.call("slow", {"n": 3}, progress) == Outcome("done", False)
    assert progress == [1, 2, 3]
    assert era.seen.logs == [("info", "started"), ("debug", "finished")]


async def check_tool_error(era: Era) -> None:
    outcome = await era.call("broken", {})
    assert outcome.is_error
    assert "the tool broke on purpose" in outcome.text
    assert era.seen.asked == ["Break?"]


async def check_prompt_that_asks(era: Era) -> None:
    assert await era.prompt("greet") == "Say hello to Bob."


CHECKS = [
    check_elicit_with_a_dict_schema,
    check_elicit_with_a_pydantic_model,
    check_sample,
    check_list_roots,
    check_gather_and_ask_of_two_questions,
    check_once_runs_its_function_once,
    check_manual_style,
    check_progress_and_logs,
    check_tool_error,
    check_prompt_that_asks,
]


async def run_checks(era: Era) -> None:
    """Every check on a fresh `Seen`; failures are collected so one run names them all."""
    failures = []
    for check in CHECKS:
        era.seen.clear()
        try:
            await check(era)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
    assert not failures, f"{era.name}:\n" + "\n".join(failures)


async def test_every_check_passes_on_the_modern_era() -> None:
    async with modern_era() as era:
        await run_checks(era)


async def test_every_check_passes_on_a_legacy_session_of_the_official_client() -> None:
    async with official_era("legacy") as era:
        assert era.protocol_version == "2025-11-25"  # type: ignore[attr-defined]
        await run_checks(era)


async def test_every_check_passes_with_the_official_client_in_auto_mode() -> None:
    # The probe finds this server modern: the official client runs the MRTR rounds itself.
    async with official_era("auto") as era:
        assert era.protocol_version == "2026-07-28"  # type: ignore[attr-defined]
        await run_checks(era)
