"""The server's decorator API and the client's typed calls, end to end over the in-memory
transport: schemas from type hints, context injection, structured output, error results,
prompts, resources, templates and completion."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from typing import Annotated, Any, NotRequired, TypedDict

import pytest
from pydantic import BaseModel, Field

from mrtr import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    Client,
    EmbeddedResource,
    ImageContent,
    McpError,
    PromptMessage,
    RequestContext,
    ResourceLink,
    Server,
    ServerOptions,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from mrtr.protocol import errors
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from mrtr.transport.base import NotificationHandler
from mrtr.transport.memory import MemoryTransport


class Query(BaseModel):
    text: str
    limit: int = 10


class Weather(BaseModel):
    temperature: float
    conditions: str


class Address(TypedDict):
    city: str
    zip: NotRequired[str]


class Person(TypedDict):
    name: str
    address: Address


@dataclasses.dataclass
class Box:
    width: float
    height: float


def refs(node: Any) -> Iterator[str]:
    """Every `$ref` in a schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def assert_refs_resolve(schema: dict[str, Any]) -> None:
    """Each `$ref` is a JSON pointer that resolves from the schema's root."""
    for ref in refs(schema):
        assert ref.startswith("#/"), ref
        target: Any = schema
        for part in ref[2:].split("/"):
            assert isinstance(target, dict) and part in target, f"{ref} does not resolve"
            target = target[part]


async def tools_by_name(client: Client) -> dict[str, dict[str, Any]]:
    return {t.name: t.to_wire() for t in (await client.list_tools()).tools}


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


# --- tools: schema from type hints -----------------------------------------------------------


async def test_tool_input_schema_comes_from_type_hints(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def add(a: int, b: int = 2, label: str | None = None) -> int:
        return a + b

    async with make_client(server) as client:
        schema = (await tools_by_name(client))["add"]["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["a"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["properties"]["b"] == {"default": 2, "title": "B", "type": "integer"}
    assert {"type": "string"} in schema["properties"]["label"]["anyOf"]


async def test_tool_metadata_comes_from_docstring_and_decorator(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def documented() -> str:
        """Say something useful."""
        return ""

    @server.tool(
        "renamed",
        title="A Title",
        description="From the decorator.",
        annotations=ToolAnnotations(read_only_hint=True),
        meta={"com.example/x": 1},
    )
    def original() -> str:
        """Not this docstring."""
        return ""

    async with make_client(server) as client:
        tools = await tools_by_name(client)
    assert tools["documented"]["description"] == "Say something useful."
    assert tools["renamed"]["title"] == "A Title"
    assert tools["renamed"]["description"] == "From the decorator."
    assert tools["renamed"]["annotations"] == {"readOnlyHint": True}
    assert tools["renamed"]["_meta"] == {"com.example/x": 1}
    assert "original" not in tools


async def test_tools_without_parameters_have_an_empty_object_schema(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def now() -> str:
        return "noon"

    async with make_client(server) as client:
        schema = (await tools_by_name(client))["now"]["inputSchema"]
    assert schema == {"type": "object", "properties": {}}


async def test_annotated_descriptions_reach_the_schema(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def weather(
        city: Annotated[str, "City name or zip code"],
        days: Annotated[int, Field(description="How many days", ge=1, le=7)] = 1,
    ) -> str:
        return city

    async with make_client(server) as client:
        props = (await tools_by_name(client))["weather"]["inputSchema"]["properties"]
    assert props["city"]["description"] == "City name or zip code"
    assert props["days"]["description"] == "How many days"
    assert props["days"]["minimum"] == 1 and props["days"]["maximum"] == 7


async def test_pydantic_model_argument_is_validated_into_the_model(make_client: Any) -> None:
    server = Server("s")
    seen: list[Any] = []

    @server.tool()
    def search(query: Query) -> str:
        seen.append(query)
        return query.text

    async with make_client(server) as client:
        schema = (await tools_by_name(client))["search"]["inputSchema"]
        result = await client.call_tool("search", {"query": {"text": "owls"}})
    assert_refs_resolve(schema)
    assert schema["required"] == ["query"]
    assert seen == [Query(text="owls", limit=10)]
    assert text_of(result) == "owls"


async def test_typeddict_argument_from_the_typing_module_is_validated(make_client: Any) -> None:
    server = Server("s")
    seen: list[Any] = []

    @server.tool()
    def register(person: Person) -> str:
        seen.append(person)
        return person["address"]["city"]

    async with make_client(server) as client:
        schema = (await tools_by_name(client))["register"]["inputSchema"]
        ok = await client.call_tool(
            "register", {"person": {"name": "Ada", "address": {"city": "London"}}}
        )
        bad = await client.call_tool("register", {"person": {"name": "Ada", "address": {}}})
    assert_refs_resolve(schema)
    address = schema["$defs"]["Address"]
    assert address["required"] == ["city"] and set(address["properties"]) == {"city", "zip"}
    assert text_of(ok) == "London"
    assert seen == [{"name": "Ada", "address": {"city": "London"}}]
    assert bad.is_error is True and "person.address.city" in text_of(bad)


async def test_dataclass_argument_is_validated_into_the_dataclass(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def area(box: Box) -> float:
        assert isinstance(box, Box)
        return box.width * box.height

    async with make_client(server) as client:
        result = await client.call_tool("area", {"box": {"width": 2, "height": 3.5}})
    assert result.structured_content == {"result": 7.0}


async def test_request_context_is_injected_under_any_name_and_kept_out_of_the_schema(
    make_client: Any,
) -> None:
    server = Server("s")
    seen: list[RequestContext] = []

    @server.tool()
    async def first(text: str, ctx: RequestContext) -> str:
        seen.append(ctx)
        return text

    @server.tool()
    def second(context: RequestContext, text: str) -> str:
        seen.append(context)
        return text

    async with make_client(server) as client:
        tools = await tools_by_name(client)
        await client.call_tool("first", {"text": "hi"})
        await client.call_tool("second", {"text": "hi"})
    for name in ("first", "second"):
        assert tools[name]["inputSchema"]["properties"].keys() == {"text"}
        assert tools[name]["inputSchema"]["required"] == ["text"]
    assert len(seen) == 2
    for ctx in seen:
        assert isinstance(ctx, RequestContext)
        assert ctx.method == "tools/call"
        assert ctx.protocol_version == "2026-07-28"
        assert ctx.client_info == {"name": "mrtr-client", "version": "0.1.0"}
        assert ctx.client_capabilities == {"extensions": {TASKS_EXTENSION: {}}}


# --- tools: results ----------------------------------------------------------------------------


async def test_scalar_return_gives_wrapped_output_schema_and_structured_content(
    make_client: Any,
) -> None:
    server = Server("s")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["add"]
        result = await client.call_tool("add", {"a": 1, "b": 2})
    assert tool["outputSchema"] == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert result.structured_content == {"result": 3}
    assert text_of(result) == "3"
    assert result.is_error is None


async def test_model_return_gives_object_output_schema_and_structured_content(
    make_client: Any,
) -> None:
    server = Server("s")

    @server.tool()
    def weather(city: str) -> Weather:
        return Weather(temperature=22.5, conditions="Partly cloudy")

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["weather"]
        result = await client.call_tool("weather", {"city": "Paris"})
    assert tool["outputSchema"]["type"] == "object"
    assert tool["outputSchema"]["required"] == ["temperature", "conditions"]
    assert result.structured_content == {"temperature": 22.5, "conditions": "Partly cloudy"}
    assert text_of(result) == '{"temperature":22.5,"conditions":"Partly cloudy"}'


async def test_typeddict_return_gives_an_unwrapped_object_schema(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def where() -> Address:
        return {"city": "Oslo"}

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["where"]
        result = await client.call_tool("where")
    assert tool["outputSchema"]["type"] == "object"
    assert "city" in tool["outputSchema"]["properties"]
    assert result.structured_content == {"city": "Oslo"}


async def test_list_of_models_return_keeps_its_schema_references_resolvable(
    make_client: Any,
) -> None:
    server = Server("s")

    @server.tool()
    def forecast() -> list[Weather]:
        return [Weather(temperature=1, conditions="snow")]

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["forecast"]
        result = await client.call_tool("forecast")
    schema = tool["outputSchema"]
    assert schema["properties"]["result"]["type"] == "array"
    assert_refs_resolve(schema)
    assert result.structured_content == {"result": [{"temperature": 1.0, "conditions": "snow"}]}


async def test_str_return_gives_text_content_and_no_output_schema(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def hello(name: str) -> str:
        return f"Hello {name}"

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["hello"]
        result = await client.call_tool("hello", {"name": "Ada"})
    assert "outputSchema" not in tool
    assert text_of(result) == "Hello Ada"
    assert result.structured_content is None


async def test_structured_output_false_leaves_out_the_output_schema(make_client: Any) -> None:
    server = Server("s")

    @server.tool(structured_output=False)
    def count() -> int:
        return 3

    async with make_client(server) as client:
        tool = (await tools_by_name(client))["count"]
        result = await client.call_tool("count")
    assert "outputSchema" not in tool
    assert text_of(result) == "3"
    assert result.structured_content is None


async def test_content_blocks_returned_by_a_tool_pass_through(make_client: Any) -> None:
    server = Server("s")
    blocks = [
        TextContent(text="see attached"),
        ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
        AudioContent(data="UklGRg==", mime_type="audio/wav"),
        ResourceLink(uri="file:///a.rs", name="a.rs", mime_type="text/x-rust"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///b.txt", text="b")),
    ]

    @server.tool()
    def attach() -> list[Any]:
        return blocks

    @server.tool()
    def picture() -> ImageContent:
        return ImageContent(data="iVBORw0KGgo=", mime_type="image/png")

    async with make_client(server) as client:
        tools = await tools_by_name(client)
        many = await client.call_tool("attach")
        one = await client.call_tool("picture")
    assert [b.to_wire() for b in many.content] == [b.to_wire() for b in blocks]
    assert one.content == [ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]
    assert "outputSchema" not in tools["picture"]


async def test_call_tool_result_returned_by_a_tool_is_sent_as_is(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def custom() -> CallToolResult:
        return CallToolResult(
            content=[TextContent(text="partial")], structured_content=[1, 2], is_error=False
        )

    async with make_client(server) as client:
        result = await client.call_tool("custom")
    assert result.content == [TextContent(text="partial")]
    assert result.structured_content == [1, 2]
    assert result.is_error is False


async def test_none_return_gives_empty_content(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def nothing() -> None:
        return None

    async with make_client(server) as client:
        result = await client.call_tool("nothing")
    assert result.content == []
    assert result.is_error is None


async def test_sync_tool_works(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def shout(text: str, ctx: RequestContext) -> str:
        return f"{text.upper()} ({ctx.method})"

    async with make_client(server) as client:
        result = await client.call_tool("shout", {"text": "hey"})
    assert text_of(result) == "HEY (tools/call)"


# --- tools: errors a model can act on ----------------------------------------------------------


async def test_invalid_arguments_become_an_error_result_naming_each_problem(
    make_client: Any,
) -> None:
    server = Server("s")

    @server.tool()
    def book(city: str, nights: Annotated[int, Field(ge=1)]) -> str:
        return city

    async with make_client(server) as client:
        result = await client.call_tool("book", {"city": 5, "nights": 0})
    assert result.is_error is True
    text = text_of(result)
    assert text.startswith("Invalid arguments for tool 'book': ")
    assert "city: Input should be a valid string (got 5)" in text
    assert "nights: Input should be greater than or equal to 1 (got 0)" in text
    assert "Traceback" not in text and "errors.pydantic.dev" not in text


async def test_missing_argument_becomes_an_error_result(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def book(city: str) -> str:
        return city

    async with make_client(server) as client:
        missing = await client.call_tool("book", {})
        absent = await client.call_tool("book")
    for result in (missing, absent):
        assert result.is_error is True
        assert text_of(result) == "Invalid arguments for tool 'book': city: Field required"


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_exception_raised_by_a_tool_becomes_an_error_result(
    make_client: Any, sync: bool
) -> None:
    server = Server("s", options=ServerOptions(mask_errors=False))  # the text as raised

    def check(date: str) -> str:
        raise ValueError(f"Invalid departure date {date}: must be in the future")

    async def check_async(date: str) -> str:
        return check(date)

    server.tool("check")(check if sync else check_async)
    async with make_client(server) as client:
        result = await client.call_tool("check", {"date": "2020-01-01"})
    assert result.is_error is True
    assert text_of(result) == (
        "Error executing tool 'check': Invalid departure date 2020-01-01: must be in the future"
    )


async def test_exception_without_a_message_is_named_by_its_type(make_client: Any) -> None:
    server = Server("s", options=ServerOptions(mask_errors=False))  # the text as raised

    @server.tool()
    def lookup() -> str:
        raise KeyError

    async with make_client(server) as client:
        result = await client.call_tool("lookup")
    assert result.is_error is True
    assert text_of(result) == "Error executing tool 'lookup': KeyError"


async def test_mcp_error_raised_by_a_tool_is_a_protocol_error(make_client: Any) -> None:
    server = Server("s")

    @server.tool()
    def strict() -> str:
        raise McpError(errors.INVALID_PARAMS, "strict refuses", {"why": "policy"})

    async with make_client(server) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("strict")
    assert (info.value.code, info.value.message, info.value.data) == (
        errors.INVALID_PARAMS,
        "strict refuses",
        {"why": "policy"},
    )


async def test_unknown_tool_is_a_protocol_error(make_client: Any) -> None:
    async with make_client(Server("s")) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("nope", {})
    assert info.value.code == errors.INVALID_PARAMS
    assert info.value.message == "Unknown tool: 'nope'"


# --- prompts -----------------------------------------------------------------------------------


async def test_prompt_arguments_come_from_the_signature(make_client: Any) -> None:
    server = Server("s")

    @server.prompt(title="Code review")
    def code_review(
        code: Annotated[str, "The code to review"], language: str = "python", ctx: Any = None
    ) -> str:
        """Review some code."""
        return code

    async with make_client(server) as client:
        (prompt,) = (await client.list_prompts()).prompts
    assert prompt.to_wire() == {
        "name": "code_review",
        "title": "Code review",
        "description": "Review some code.",
        "arguments": [
            {"name": "code", "description": "The code to review", "required": True},
            {"name": "language", "required": False},
        ],
    }


async def test_prompt_returning_a_string_gives_one_user_message(make_client: Any) -> None:
    server = Server("s")

    @server.prompt()
    async def review(code: str, language: str = "python") -> str:
        """Code review prompt"""
        return f"Please review this {language} code:\n{code}"

    async with make_client(server) as client:
        result = await client.get_prompt("review", {"code": "x = 1"})
    assert result.to_wire() == {
        "resultType": "complete",
        "_meta": {meta_keys.SERVER_INFO: {"name": "s", "version": "0.1.0"}},
        "description": "Code review prompt",
        "messages": [
            {
                "role": "user",
                "content": {"type": "text", "text": "Please review this python code:\nx = 1"},
            }
        ],
    }


async def test_prompt_returning_messages_keeps_roles_and_content(make_client: Any) -> None:
    server = Server("s")

    @server.prompt()
    def dialogue(ctx: RequestContext) -> list[Any]:
        return [
            PromptMessage(role="user", content=TextContent(text="Hi")),
            PromptMessage(
                role="assistant", content=ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
            ),
            "plain text",
        ]

    async with make_client(server) as client:
        result = await client.get_prompt("dialogue")
    assert [(m.role, m.content.type) for m in result.messages] == [
        ("user", "text"),
        ("assistant", "image"),
        ("user", "text"),
    ]


async def test_unknown_prompt_and_missing_argument_are_protocol_errors(make_client: Any) -> None:
    server = Server("s")

    @server.prompt()
    def greet(name: str) -> str:
        return name

    async with make_client(server) as client:
        with pytest.raises(McpError) as unknown:
            await client.get_prompt("nope")
        with pytest.raises(McpError) as missing:
            await client.get_prompt("greet", {})
    assert (unknown.value.code, unknown.value.message) == (
        errors.INVALID_PARAMS,
        "Unknown prompt: 'nope'",
    )
    assert missing.value.code == errors.INVALID_PARAMS
    assert missing.value.message == "Invalid arguments for prompt 'greet': name: Field required"


# --- resources and templates ---------------------------------------------------------------------


async def test_static_resources_are_listed_and_read(make_client: Any) -> None:
    server = Server("s")

    @server.resource("file:///readme", mime_type="text/markdown", title="Read me")
    def readme() -> str:
        """The project's README."""
        return "# Hello"

    @server.resource("file:///logo.png", name="logo", mime_type="image/png")
    async def logo() -> bytes:
        return b"\x89PNG"

    async with make_client(server) as client:
        listed = [r.to_wire() for r in (await client.list_resources()).resources]
        text = await client.read_resource("file:///readme")
        blob = await client.read_resource("file:///logo.png")
    assert listed == [
        {
            "uri": "file:///readme",
            "name": "readme",
            "title": "Read me",
            "description": "The project's README.",
            "mimeType": "text/markdown",
        },
        {"uri": "file:///logo.png", "name": "logo", "mimeType": "image/png"},
    ]
    assert text.contents == [
        TextResourceContents(uri="file:///readme", text="# Hello", mime_type="text/markdown")
    ]
    assert blob.contents == [
        BlobResourceContents(
            uri="file:///logo.png",
            blob=base64.b64encode(b"\x89PNG").decode(),
            mime_type="image/png",
        )
    ]


async def test_resource_read_carries_caching_hints(make_client: Any) -> None:
    server = Server("s")

    @server.resource("file:///readme")
    def readme() -> str:
        return "x"

    async with make_client(server) as client:
        result = await client.read_resource("file:///readme")
    assert (result.ttl_ms, result.cache_scope) == (0, "private")


async def test_resource_template_is_listed_and_its_variables_typed(make_client: Any) -> None:
    server = Server("s")
    seen: list[Any] = []

    @server.resource_template("db://rows/{id}", mime_type="application/json")
    def row(id: int) -> dict[str, int]:
        """One row by id."""
        seen.append(id)
        return {"id": id}

    async with make_client(server) as client:
        (template,) = (await client.list_resource_templates()).resource_templates
        result = await client.read_resource("db://rows/42")
    assert template.to_wire() == {
        "uriTemplate": "db://rows/{id}",
        "name": "row",
        "description": "One row by id.",
        "mimeType": "application/json",
    }
    assert seen == [42]
    assert result.contents == [
        TextResourceContents(uri="db://rows/42", text='{"id":42}', mime_type="application/json")
    ]


async def test_static_resource_wins_over_a_matching_template(make_client: Any) -> None:
    server = Server("s")

    @server.resource_template("db://rows/{name}")
    def row(name: str) -> str:
        return f"template {name}"

    @server.resource("db://rows/special")
    def special() -> str:
        return "static"

    async with make_client(server) as client:
        special_result = await client.read_resource("db://rows/special")
        other_result = await client.read_resource("db://rows/other%20one")
    assert special_result.contents[0].text == "static"  # type: ignore[union-attr]
    assert other_result.contents[0].text == "template other one"  # type: ignore[union-attr]


async def test_reserved_template_variable_spans_path_segments(make_client: Any) -> None:
    server = Server("s")

    @server.resource_template("file:///{+path}")
    def file(path: str) -> str:
        return f"contents of {path}"

    @server.resource_template("users://{name}/profile")
    def profile(name: str) -> str:
        return name

    async with make_client(server) as client:
        deep = await client.read_resource("file:///src/pkg/mod.py")
        with pytest.raises(McpError) as info:
            await client.read_resource("users://a/b/profile")  # {name} is one segment
    assert deep.contents[0].text == "contents of src/pkg/mod.py"  # type: ignore[union-attr]
    assert info.value.code == errors.INVALID_PARAMS


async def test_unknown_resource_is_a_protocol_error(make_client: Any) -> None:
    async with make_client(Server("s")) as client:
        with pytest.raises(McpError) as info:
            await client.read_resource("file:///missing")
    assert info.value.code == errors.INVALID_PARAMS
    assert info.value.data == {"uri": "file:///missing"}


def test_template_parameter_that_is_not_a_template_variable_is_refused() -> None:
    server = Server("s")
    with pytest.raises(TypeError, match=r"\['table'\] are not template variables"):

        @server.resource_template("db://rows/{id}")
        def row(id: int, table: str) -> str:
            return ""


# --- completion ---------------------------------------------------------------------------------


async def test_completion_handler_gets_ref_argument_and_context(make_client: Any) -> None:
    server = Server("s")
    calls: list[Any] = []

    @server.prompt()
    def code_review(language: str, framework: str) -> str:
        return ""

    @server.completion()
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any]) -> Any:
        calls.append((ref, argument, context))
        return [f for f in ("flask", "fastapi", "django") if f.startswith(argument["value"])]

    async with make_client(server) as client:
        caps = (await client.discover()).capabilities
        result = await client.complete(
            {"type": "ref/prompt", "name": "code_review"},
            {"name": "framework", "value": "f"},
            {"language": "python"},
        )
    assert caps.completions == {}
    assert calls == [
        (
            {"type": "ref/prompt", "name": "code_review"},
            {"name": "framework", "value": "f"},
            {"language": "python"},
        )
    ]
    assert result.completion.to_wire() == {
        "values": ["flask", "fastapi"],
        "total": 2,
        "hasMore": False,
    }


async def test_completion_returns_at_most_100_values_and_says_there_are_more(
    make_client: Any,
) -> None:
    server = Server("s")

    @server.resource_template("db://rows/{id}")
    def row(id: str) -> str:
        return id

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> list[int]:
        return list(range(250))

    async with make_client(server) as client:
        result = await client.complete(
            {"type": "ref/resource", "uri": "db://rows/{id}"}, {"name": "id", "value": ""}
        )
    assert result.completion.values == [str(i) for i in range(100)]
    assert (result.completion.total, result.completion.has_more) == (250, True)


async def test_completion_without_a_handler_offers_nothing(make_client: Any) -> None:
    server = Server("s")

    @server.prompt()
    def greet(name: str) -> str:
        return name

    async with make_client(server) as client:
        result = await client.complete(
            {"type": "ref/prompt", "name": "greet"}, {"name": "name", "value": "A"}
        )
    assert result.completion.values == []


async def test_completion_for_an_unknown_prompt_is_a_protocol_error(make_client: Any) -> None:
    async with make_client(Server("s")) as client:
        with pytest.raises(McpError) as info:
            await client.complete(
                {"type": "ref/prompt", "name": "nope"}, {"name": "a", "value": ""}
            )
    assert (info.value.code, info.value.message) == (
        errors.INVALID_PARAMS,
        "Unknown prompt: 'nope'",
    )


# --- client ---------------------------------------------------------------------------------------


class RecordingTransport(MemoryTransport):
    """The in-memory transport, keeping every request the client sends."""

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.requests: list[dict[str, Any]] = []

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(message)
        return await super().request(message)


async def test_client_sends_the_required_meta_on_every_request() -> None:
    server = Server("s")

    @server.tool()
    def t() -> str:
        return ""

    @server.prompt()
    def p() -> str:
        return ""

    @server.resource("file:///r")
    def r() -> str:
        return ""

    @server.resource_template("db://{x}")
    def rt(x: str) -> str:
        return x

    transport = RecordingTransport(server)
    async with Client(transport) as client:
        await client.discover()
        await client.list_tools()
        await client.call_tool("t")
        await client.list_prompts()
        await client.get_prompt("p")
        await client.list_resources()
        await client.list_resource_templates()
        await client.read_resource("file:///r")
        await client.complete({"type": "ref/prompt", "name": "p"}, {"name": "a", "value": ""})
    assert [m["method"] for m in transport.requests] == [
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
    ]
    for message in transport.requests:
        meta = message["params"]["_meta"]
        assert meta[meta_keys.PROTOCOL_VERSION] == "2026-07-28"
        assert meta[meta_keys.CLIENT_CAPABILITIES] == {"extensions": {TASKS_EXTENSION: {}}}
        assert meta[meta_keys.CLIENT_INFO] == {"name": "mrtr-client", "version": "0.1.0"}
    assert len({m["id"] for m in transport.requests}) == len(transport.requests)


class CannedTransport:
    """A transport that answers every request with the same result object."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result

    async def connect(self, on_notification: NotificationHandler) -> None:
        pass

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": message["id"], "result": dict(self.result)}

    async def notify(self, message: dict[str, Any]) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_client_treats_a_result_without_result_type_as_complete() -> None:
    legacy = {"content": [{"type": "text", "text": "from an older server"}], "isError": False}
    async with Client(CannedTransport(legacy)) as client:
        result = await client.call_tool("anything")
    assert result.result_type == "complete"
    assert text_of(result) == "from an older server"


async def test_client_treats_a_list_without_result_type_or_caching_hints_as_complete() -> None:
    async with Client(CannedTransport({"tools": []})) as client:
        result = await client.list_tools()
    assert (result.result_type, result.tools, result.ttl_ms) == ("complete", [], None)


async def test_client_refuses_an_unknown_result_type() -> None:
    async with Client(CannedTransport({"resultType": "partial", "content": []})) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("anything")
    assert info.value.code == errors.PROTOCOL_VIOLATION  # local: never mistaken for the server's
    assert "'partial'" in info.value.message
