"""The "everything" server the MCP conformance suite tests, built only with the public API.

    python conformance/server.py --port 8000    # Streamable HTTP at http://127.0.0.1:8000/mcp

Each tool, prompt and resource is a fixture a scenario asks for by name; the MRTR fixtures are
written the way a user of `mrtr` would write them: `await ctx.elicit(...)` and friends.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Annotated, Any

from pydantic import Field

from mrtr import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    PromptMessage,
    RequestContext,
    Server,
    ServerOptions,
    TextContent,
    TextResourceContents,
    elicit_request,
    roots_request,
    sample_request,
)
from mrtr.protocol.errors import INTERNAL_ERROR, McpError
from mrtr.transport.http_legacy import close_sse_stream

# A 1x1 transparent PNG and a tiny silent WAV, so the media fixtures carry real files.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF"
    + (36).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (1).to_bytes(2, "little")
    + (8000).to_bytes(4, "little")
    + (8000).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (8).to_bytes(2, "little")
    + b"data"
    + (0).to_bytes(4, "little")
).decode()


def _name_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _ok_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


server = Server(
    "mrtr-conformance",
    version="0.1.0",
    options=ServerOptions(list_ttl_ms=60_000),
    instructions="Fixtures for the MCP conformance suite.",
)


# --- plain tools ---------------------------------------------------------------------------


@server.tool()
def test_simple_text() -> str:
    """Returns a simple text response."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> ImageContent:
    """Returns an image."""
    return ImageContent(data=PNG, mime_type="image/png")


@server.tool()
def test_audio_content() -> AudioContent:
    """Returns an audio clip."""
    return AudioContent(data=WAV, mime_type="audio/wav")


@server.tool()
def test_embedded_resource() -> EmbeddedResource:
    """Returns an embedded resource."""
    return EmbeddedResource(
        resource=TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
    )


@server.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Returns text, an image and a resource together."""
    return [
        TextContent(text="Multiple content types test:"),
        ImageContent(data=PNG, mime_type="image/png"),
        EmbeddedResource(
            resource=TextResourceContents(
                uri="test://mixed-content-resource",
                mime_type="application/json",
                text='{"test":"data","value":123}',
            )
        ),
    ]


@server.tool()
def test_error_handling() -> CallToolResult:
    """Always reports an error, as a tool result."""
    return CallToolResult(
        content=[TextContent(text="This tool intentionally returns an error for testing")],
        is_error=True,
    )


@server.tool()
async def test_tool_with_progress(ctx: RequestContext) -> str:
    """Reports progress three times before answering."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"step {step}")
        if step < 100:
            await asyncio.sleep(0.05)
    return "Progress complete"


@server.tool()
async def test_missing_capability(ctx: RequestContext) -> str:
    """Needs sampling, which the client may not have declared."""
    reply = await ctx.sample("Say something", max_tokens=10)
    return str(getattr(reply.content, "text", ""))


@server.tool()
async def test_logging_tool(ctx: RequestContext) -> str:
    """Logs; the messages reach only a client that asked for them with a log level."""
    await ctx.log("info", "logging tool started")
    await ctx.log("info", "logging tool finished")
    return "Logging complete"


@server.tool()
async def test_streaming_elicitation(ctx: RequestContext) -> str:
    """Asks the user a question (over MRTR, never as a server-to-client request)."""
    answer = await ctx.elicit("What is your name?", _name_schema())
    return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"


@server.tool()
def test_trigger_tool_change() -> str:
    """Announces a tools list change to subscribed clients."""
    server.notify_tools_changed()
    return "Tools list change announced"


@server.tool()
def test_trigger_prompt_change() -> str:
    """Announces a prompts list change to subscribed clients."""
    server.notify_prompts_changed()
    return "Prompts list change announced"


# JSON Schema 2020-12 keywords survive untouched when a tool declares its own input schema.
SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@server.tool(input_schema=SCHEMA_2020_12)
def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, str] | None = None,
    contactMethod: str | None = None,
    phone: str | None = None,
    email: str | None = None,
) -> str:
    """Declares its input schema with JSON Schema 2020-12 keywords."""
    return "ok"


@server.tool()
def test_custom_header(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    query: str = "",
) -> str:
    """Mirrors its region argument into the Mcp-Param-Region HTTP header."""
    return f"region={region}"


# --- tools that ask the client (both eras) -------------------------------------------------
# Written once: on a 2026-07-28 request each question is an MRTR round, on a legacy session a
# request (`elicitation/create`, `sampling/createMessage`) sent to the client while it waits.


@server.tool()
async def test_tool_with_logging(ctx: RequestContext) -> str:
    """Logs three messages, 50 ms apart."""
    await ctx.log("info", "Tool execution started")
    await asyncio.sleep(0.05)
    await ctx.log("info", "Tool processing data")
    await asyncio.sleep(0.05)
    await ctx.log("info", "Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool()
async def test_sampling(ctx: RequestContext, prompt: str) -> str:
    """Asks the client's model the prompt."""
    reply = await ctx.sample(prompt, max_tokens=100)
    return f"LLM response: {getattr(reply.content, 'text', '')}"


@server.tool()
async def test_elicitation(ctx: RequestContext, message: str) -> str:
    """Asks the user for a username and an email address."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await ctx.elicit(message, schema)
    return f"User response: action={answer.action}, content={answer.content}"


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: RequestContext) -> str:
    """Asks with a default value for every primitive type (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "default": True},
        },
    }
    answer = await ctx.elicit("Please review your profile", schema)
    return f"Elicitation completed: action={answer.action}, content={answer.content}"


@server.tool()
async def test_elicitation_sep1330_enums(ctx: RequestContext) -> str:
    """Asks with each enum form of SEP-1330: plain, titled, legacy titled, multi-select."""
    options = ["option1", "option2", "option3"]
    titled = [
        {"const": "value1", "title": "First Option"},
        {"const": "value2", "title": "Second Option"},
        {"const": "value3", "title": "Third Option"},
    ]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {"type": "string", "oneOf": titled},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    answer = await ctx.elicit("Pick your options", schema)
    return f"Elicitation completed: action={answer.action}, content={answer.content}"


@server.tool()
async def test_reconnection(ctx: RequestContext) -> str:
    """Ends its response stream's connection mid-call, then answers (SEP-1699 polling): a
    legacy client resumes the stream with GET + Last-Event-ID and gets the answer there."""
    close_sse_stream()
    await asyncio.sleep(0.1)
    return "Reconnection test completed"


# --- MRTR tools ----------------------------------------------------------------------------


@server.tool()
async def test_input_required_result_elicitation(ctx: RequestContext) -> str:
    """Asks for the user's name, then greets them."""
    answer = await ctx.elicit("What is your name?", _name_schema(), key="user_name")
    return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"


@server.tool()
async def test_input_required_result_sampling(ctx: RequestContext) -> str:
    """Asks the client's model a question."""
    reply = await ctx.sample(
        "What is the capital of France?", max_tokens=100, key="capital_question"
    )
    return f"The model said: {getattr(reply.content, 'text', '')}"


@server.tool()
async def test_input_required_result_list_roots(ctx: RequestContext) -> str:
    """Asks the client for its roots."""
    roots = await ctx.list_roots(key="client_roots")
    return "Roots: " + ", ".join(root.uri for root in roots.roots)


@server.tool()
async def test_input_required_result_request_state(ctx: RequestContext) -> str:
    """Asks for a confirmation carried across the round in the sealed request state."""
    answer = await ctx.elicit("Please confirm", _ok_schema(), key="confirm")
    return f"state-ok: confirmed={(answer.content or {}).get('ok')}"


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: RequestContext) -> str:
    """Asks three questions (elicitation, sampling, roots) in one round."""
    answers = await ctx.ask(
        {
            "user_name": elicit_request("What is your name?", _name_schema()),
            "greeting": sample_request("Generate a greeting", max_tokens=50),
            "client_roots": roots_request(),
        }
    )
    name = (answers["user_name"].content or {}).get("name")
    greeting = getattr(answers["greeting"].content, "text", "")
    return f"{greeting} {name} ({len(answers['client_roots'].roots)} roots)"


@server.tool()
async def test_input_required_result_multi_round(ctx: RequestContext) -> str:
    """Asks two questions, one per round."""
    name = await ctx.elicit("Step 1: What is your name?", _name_schema(), key="step1")
    color_schema = {
        "type": "object",
        "properties": {"color": {"type": "string"}},
        "required": ["color"],
    }
    color = await ctx.elicit("Step 2: What is your favorite color?", color_schema, key="step2")
    return f"{(name.content or {}).get('name')} likes {(color.content or {}).get('color')}"


@server.tool()
async def test_input_required_result_tampered_state(ctx: RequestContext) -> str:
    """Asks for a confirmation; a tampered request state is refused before this runs again."""
    answer = await ctx.elicit("Please confirm", _ok_schema(), key="confirm")
    return f"confirmed={(answer.content or {}).get('ok')}"


@server.tool()
async def test_input_required_result_capabilities(ctx: RequestContext) -> str:
    """Asks the user if the client can elicit, and its model otherwise."""
    if ctx.client_supports("elicitation/create"):
        answer = await ctx.elicit("What is your name?", _name_schema(), key="user_name")
        return f"Hello, {(answer.content or {}).get('name')}!"
    reply = await ctx.sample("Suggest a name", max_tokens=20, key="name_suggestion")
    return f"Suggested: {getattr(reply.content, 'text', '')}"


# --- prompts -------------------------------------------------------------------------------


@server.prompt()
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two required arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[PromptMessage]:
    """A prompt that embeds a resource."""
    return [
        PromptMessage(
            role="user",
            content=EmbeddedResource(
                resource=TextResourceContents(
                    uri=resourceUri,
                    mime_type="text/plain",
                    text="Embedded resource content for testing.",
                )
            ),
        ),
        PromptMessage(
            role="user", content=TextContent(text="Please process the embedded resource above.")
        ),
    ]


@server.prompt()
def test_prompt_with_image() -> list[PromptMessage]:
    """A prompt that carries an image."""
    return [
        PromptMessage(role="user", content=ImageContent(data=PNG, mime_type="image/png")),
        PromptMessage(role="user", content=TextContent(text="Please analyze the image above.")),
    ]


@server.prompt()
async def test_input_required_result_prompt(ctx: RequestContext) -> str:
    """A prompt that asks the user for context first."""
    schema = {
        "type": "object",
        "properties": {"context": {"type": "string"}},
        "required": ["context"],
    }
    answer = await ctx.elicit("What context should the prompt use?", schema, key="user_context")
    return f"Use this context: {(answer.content or {}).get('context')}"


@server.completion()
def complete(ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any]) -> list[str]:
    """Completes prompt arguments from a small vocabulary."""
    words = ["test", "testValue1", "testValue2", "paris", "python"]
    prefix = str(argument.get("value", ""))
    return [word for word in words if word.startswith(prefix)]


# --- resources -----------------------------------------------------------------------------


@server.resource("test://static-text", name="static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource."""
    return base64.b64decode(PNG)


@server.resource_template(
    "test://template/{id}/data", name="template-data", mime_type="application/json"
)
def template_data(id: str) -> dict[str, Any]:
    """Data for one id."""
    return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}


@server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients subscribe to."""
    return "Watched resource content."


# --- the tasks extension (io.modelcontextprotocol/tasks) -----------------------------------


@server.tool()
def greet(name: str) -> str:
    """Greets someone; never a task."""
    return f"Hello, {name}!"


@server.tool(task="optional")
async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
    """Works for `seconds`, then reports; a task for clients that take tasks."""
    await asyncio.sleep(max(0.0, min(seconds, 600.0)))
    return f"Computed {label or 'result'} after {seconds:g} s"


@server.tool(task="required")
async def failing_job() -> CallToolResult:
    """Runs about a second, then reports a tool error (only as a task)."""
    await asyncio.sleep(1.0)
    return CallToolResult(content=[TextContent(text="The job failed: no data")], is_error=True)


@server.tool(task="optional")
async def protocol_error_job() -> str:
    """Fails with a protocol (JSON-RPC) error after a moment."""
    await asyncio.sleep(0.2)
    raise McpError(INTERNAL_ERROR, "The job's backend went away")


@server.tool(task="optional")
async def confirm_delete(ctx: RequestContext, filename: str) -> str:
    """Becomes a task, then asks the user to confirm deleting `filename`."""
    await ctx.run_as_task()
    answer = await ctx.elicit(f"Delete {filename}?", _confirm_schema())
    confirmed = answer.action == "accept" and bool((answer.content or {}).get("confirm"))
    return f"Deleted {filename}" if confirmed else f"Kept {filename}"


@server.tool(task="optional")
async def multi_input(ctx: RequestContext) -> str:
    """Becomes a task, then asks two questions at once."""
    await ctx.run_as_task()
    first, second = await asyncio.gather(
        ctx.elicit("First name?", _name_schema(), key="first"),
        ctx.elicit("Confirm?", _confirm_schema(), key="second"),
    )
    return f"Got {first.action} and {second.action}"


@server.tool(task="required")
async def test_tool_with_task(ctx: RequestContext) -> str:
    """Asks for the user's name by MRTR, then finishes the greeting as a task."""
    answer = await ctx.elicit("What is your name?", _name_schema(), key="user_name")
    name = (answer.content or {}).get("name", "stranger")
    await ctx.run_as_task()
    await asyncio.sleep(0.1)
    return f"Hello, {name}!"


def _confirm_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"confirm": {"type": "boolean"}, "name": {"type": "string"}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server.run(transport="http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
