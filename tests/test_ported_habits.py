"""The habits a server ported from the official SDK or FastMCP brings along: the spellings that
mean the same in mrtr work (`ctx.info(...)`, `ctx.request_context.lifespan_context`,
`Image(data=..., format="png")`, `answer.data`), in both eras, through a real client; the ones
mrtr leaves out by design fail with an error naming the mrtr way."""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.server.mcpserver import Context
from pydantic import BaseModel

from mrtr import (
    Audio,
    Client,
    ElicitRequestParams,
    ElicitResult,
    File,
    Image,
    ImageContent,
    RequestContext,
    Server,
    TextContent,
)
from mrtr.client.options import ClientOptions

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
ERAS = ["modern", "legacy"]


class Database:
    def __init__(self) -> None:
        self.rows = ["ada", "bob"]


@contextlib.asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[Database]:
    yield Database()


class Name(BaseModel):
    name: str


server = Server("ported", lifespan=lifespan)


@server.tool()
async def chatty(ctx: RequestContext) -> str:
    """Log at every level with the official SDK's and FastMCP's shorthands."""
    await ctx.debug("d")
    await ctx.info("i", logger_name="app")
    await ctx.warning("w", extra={"n": 1})
    await ctx.error({"e": True})
    await ctx.log("notice", "n", logger_name="app")
    return "logged"


@server.tool()
def chatty_sync(ctx: RequestContext) -> str:
    """A sync tool (in a worker thread) logs without awaiting."""
    ctx.info("from a thread")
    return "logged"


@server.tool()
def rows(ctx: RequestContext) -> list[str]:
    """Read the lifespan's database as the official SDK spells it."""
    database: Database = ctx.request_context.lifespan_context
    assert database is ctx.state
    return database.rows


@server.tool()
def picture() -> list[Any]:
    return [
        Image(data=PNG, format="png"),
        Image(data=b"not sniffable", format="jpg").to_image_content(),
        Audio(data=b"sound", format="wav"),
        File(data=b"%PDF-1.4", format="pdf", name="a.pdf"),
    ]


@server.tool()
async def ask_name(ctx: RequestContext) -> str:
    answer = await ctx.elicit("Your name?", Name)
    assert answer.data is answer.content
    return "no" if answer.data is None else f"Hi {answer.data.name}"


@server.tool()
async def ask_spelt(ctx: RequestContext) -> str:
    """The official SDK's `message=`/`schema=` and FastMCP's `response_type=`."""
    first = await ctx.elicit(message="Your name?", schema=Name)
    second = await ctx.elicit("Again?", response_type=Name)
    assert first.data is not None and second.data is not None
    return f"{first.data.name} {second.data.name}"


@server.tool()
async def ask_scalar(ctx: RequestContext) -> str:
    await ctx.elicit("Your name?", response_type=str)
    return "asked"


@server.tool()
async def shared_state(ctx: RequestContext) -> str:
    ctx.set_state("k", 1)
    return "set"


@server.tool()
async def log_backwards(ctx: RequestContext) -> str:
    await ctx.log("hello", "info")
    return "logged"


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


@contextlib.asynccontextmanager
async def client_in(era: str, logs: list[dict[str, Any]] | None = None) -> AsyncIterator[Client]:
    def elicit(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Ada"})

    async with Client.in_memory(
        server,
        options=ClientOptions(protocol=era),
        elicitation_handler=elicit,
        log_handler=None if logs is None else logs.append,
        log_level="debug",
    ) as client:
        yield client


@pytest.mark.parametrize("era", ERAS)
async def test_the_log_shorthands_send_log_notifications(era: str) -> None:
    logs: list[dict[str, Any]] = []
    async with client_in(era, logs) as client:
        assert text(await client.call_tool("chatty", {})) == "logged"
        assert text(await client.call_tool("chatty_sync", {})) == "logged"
    seen = [(m["level"], m["data"], m.get("logger")) for m in logs]
    assert seen == [
        ("debug", "d", None),
        ("info", "i", "app"),
        ("warning", {"msg": "w", "extra": {"n": 1}}, None),
        ("error", {"e": True}, None),
        ("notice", "n", "app"),
        ("info", "from a thread", None),
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_request_context_lifespan_context_is_the_lifespan_state(era: str) -> None:
    async with client_in(era) as client:
        result = await client.call_tool("rows", {})
        assert not result.is_error, text(result)
        assert result.structured_content == {"result": ["ada", "bob"]}


@pytest.mark.parametrize("era", ERAS)
async def test_media_helpers_take_format(era: str) -> None:
    async with client_in(era) as client:
        result = await client.call_tool("picture", {})
    assert not result.is_error, text(result)
    image, jpeg, audio, file = result.content
    assert isinstance(image, ImageContent) and image.mime_type == "image/png"
    assert base64.b64decode(image.data) == PNG
    assert isinstance(jpeg, ImageContent) and jpeg.mime_type == "image/jpeg"
    assert audio.type == "audio" and audio.mime_type == "audio/wav"
    assert file.type == "resource" and file.resource.mime_type == "application/pdf"


def test_format_and_mime_type_are_checked_when_made() -> None:
    with pytest.raises(TypeError, match="format= or mime_type=, not both"):
        Image(data=PNG, format="png", mime_type="image/png")
    with pytest.raises(ValueError, match=r"file extension such as 'png'.*mime_type="):
        Image(data=PNG, format="image/png")


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_has_data_as_the_official_sdk_names_it(era: str) -> None:
    async with client_in(era) as client:
        assert text(await client.call_tool("ask_name", {})) == "Hi Ada"


@pytest.mark.parametrize("era", ERAS)
async def test_elicit_takes_the_other_sdks_keywords(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="mrtr"):
        async with client_in(era) as client:
            assert text(await client.call_tool("ask_spelt", {})) == "Ada Ada"
            assert (await client.call_tool("ask_scalar", {})).is_error
    assert "an elicitation asks for a form, an object: pass a pydantic model" in caplog.text


@pytest.mark.parametrize("era", ERAS)
async def test_what_mrtr_leaves_out_names_the_mrtr_way(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="mrtr"):
        async with client_in(era) as client:
            state = await client.call_tool("shared_state", {})
            backwards = await client.call_tool("log_backwards", {})
    assert state.is_error and backwards.is_error
    assert "ctx.set_state is not part of mrtr" in caplog.text
    assert "ctx.once(key, fn)" in caplog.text
    assert "the level comes first, ctx.log('info', message)" in caplog.text


async def test_misspelt_context_attributes_still_say_so() -> None:
    async with client_in("modern") as client:
        seen: list[str] = []

        @server.tool()
        def spy(ctx: RequestContext) -> str:
            for name in ("fastmcp", "session_id", "no_such_thing"):
                try:
                    getattr(ctx, name)
                except AttributeError as exc:
                    seen.append(str(exc))
            return "ok"

        try:
            assert text(await client.call_tool("spy", {})) == "ok"
        finally:
            server.remove_tool("spy")
    assert (
        seen[0]
        == "ctx.fastmcp is not part of mrtr: use ctx.server (the Server serving the request)"
    )
    assert "ctx.flow_id" in seen[1]
    assert seen[2] == "'RequestContext' object has no attribute 'no_such_thing'"


def test_another_sdks_context_annotation_is_refused_at_registration() -> None:
    fresh = Server("s")
    with pytest.raises(TypeError, match=r"annotated mcp\..*Context; in mrtr .*RequestContext"):

        @fresh.tool()
        async def tool(ctx: Context) -> str:  # type: ignore[type-arg]
            return "x"

    with pytest.raises(TypeError, match=r"parameter 'context' is annotated mcp\..*Context"):

        @fresh.tool()
        async def generic(context: Context[Any, Any]) -> str:
            return "x"
