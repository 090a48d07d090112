"""`Image`, `Audio` and `File`: from a path or bytes, the MIME type given, guessed from the name
or sniffed; as a tool's result, inside a list of content, in a prompt and as a resource; and
as the official client sees them on a legacy session over real stdio."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

from mrtr import (
    Audio,
    Client,
    EmbeddedResource,
    File,
    Image,
    ImageContent,
    Server,
    TextContent,
)

SCRIPT = Path(__file__).resolve().parent / "servers" / "author_server.py"
SERVE = ["-m", "mrtr", "serve", f"{SCRIPT}:server"]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_path_is_read_and_its_type_guessed_from_the_name(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(PNG)
    (tmp_path / "note.wav").write_bytes(WAV)
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.7 ...")
    image = Image(tmp_path / "chart.png")
    assert image.to_block() == {"type": "image", "data": b64(PNG), "mimeType": "image/png"}
    assert Audio(str(tmp_path / "note.wav")).to_block()["mimeType"] in ("audio/wav", "audio/x-wav")
    assert File(tmp_path / "report.pdf").to_block() == {
        "type": "resource",
        "resource": {
            "uri": "file:///report.pdf",  # the name only: the server's path stays on it
            "mimeType": "application/pdf",
            "blob": b64(b"%PDF-1.7 ..."),
        },
    }


def test_bytes_are_sniffed_and_an_unknown_image_asks_for_its_type() -> None:
    assert Image(data=PNG).mime_type == "image/png"
    assert Audio(data=WAV).mime_type == "audio/wav"
    assert File(data=b"\x00\x01").mime_type == "application/octet-stream"
    assert File(data=b"a,b\n", name="rows.csv").mime_type == "text/csv"
    assert Image(data=b"raw", mime_type="image/x-raw").mime_type == "image/x-raw"
    with pytest.raises(ValueError, match="pass mime_type="):
        Image(data=b"not an image")
    with pytest.raises(TypeError, match="a path or data="):
        Image()
    with pytest.raises(TypeError, match="a path or data="):
        File("x.txt", data=b"x")
    with pytest.raises(FileNotFoundError):
        Image("/nonexistent/chart.png")


def helper_server() -> Server:
    server = Server("helpers")

    @server.tool()
    def picture() -> Image:
        return Image(data=PNG)

    @server.tool()
    def report() -> list[str | Image | File]:
        return ["Here is the chart and the data:", Image(data=PNG), File(data=b"1,2", name="d.csv")]

    @server.tool()
    def words() -> list[str]:
        return ["just", "data"]

    @server.prompt()
    def look() -> list[Any]:
        return ["What is in this picture?", Image(data=PNG)]

    @server.resource("file:///logo.png")
    def logo() -> Image:
        return Image(data=PNG)

    return server


async def test_helpers_as_tool_results_and_inside_lists_of_content() -> None:
    async with Client.in_memory(helper_server()) as client:
        one = await client.call_tool("picture")
        many = await client.call_tool("report")
        data = await client.call_tool("words")
    assert one.content == [ImageContent(data=b64(PNG), mime_type="image/png")]
    assert one.structured_content is None
    assert [type(block).__name__ for block in many.content] == [
        "TextContent",
        "ImageContent",
        "EmbeddedResource",
    ]
    embedded = many.content[2]
    assert isinstance(embedded, EmbeddedResource)
    assert embedded.resource.to_wire() == {
        "uri": "file:///d.csv",
        "mimeType": "text/csv",
        "blob": b64(b"1,2"),
    }
    assert data.structured_content == {"result": ["just", "data"]}  # strings alone stay data


async def test_a_tool_returning_helpers_declares_no_output_schema() -> None:
    async with Client.in_memory(helper_server()) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["picture"].output_schema is None
    assert tools["report"].output_schema is None  # text and helpers: content, not data
    assert tools["words"].output_schema is not None  # strings alone: data


async def test_helpers_in_a_prompt_and_as_a_resource() -> None:
    async with Client.in_memory(helper_server()) as client:
        prompt = await client.get_prompt("look")
        read = await client.read_resource("file:///logo.png")
    assert [m.content for m in prompt.messages] == [
        TextContent(text="What is in this picture?"),
        ImageContent(data=b64(PNG), mime_type="image/png"),
    ]
    assert read.contents[0].to_wire() == {
        "uri": "file:///logo.png",
        "mimeType": "image/png",
        "blob": b64(PNG),
    }


async def test_the_official_client_on_a_legacy_session_gets_the_blocks() -> None:
    async with mcp.Client(
        StdioServerParameters(command=sys.executable, args=SERVE), mode="legacy"
    ) as official:
        chart = await official.call_tool("chart", {})
        logo = await official.read_resource("file:///logo.png")
    assert isinstance(chart.content[0], mcp_types.TextContent)
    assert chart.content[0].text == "Chart:"
    image = chart.content[1]
    assert isinstance(image, mcp_types.ImageContent)
    assert image.mime_type == "image/png" and base64.b64decode(image.data) == PNG
    blob = logo.contents[0]
    assert isinstance(blob, mcp_types.BlobResourceContents) and blob.mime_type == "image/png"
