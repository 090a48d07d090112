"""A terminal client: connect to any MCP server, pick a tool, and answer its questions yourself.

    python examples/terminal_client/client.py http://127.0.0.1:8000/mcp
    python examples/terminal_client/client.py -- python examples/shop.py
    python examples/terminal_client/client.py --call order item=tea -- python examples/shop.py

It speaks to servers of either protocol era (2026-07-28, or an `initialize`-based one), over
Streamable HTTP (a URL) or stdio (a command after `--`). When the server asks something, this
program asks you: a form for an elicitation, the conversation for a sampling request (you type
the model's reply), and your current folder as the only root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mrtr import (
    Client,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)


def ask(prompt: str) -> str:
    """One line from the user; end of input ends the program."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("\n(end of input)")
    return line.rstrip("\n")


def read_value(name: str, schema: dict[str, Any], required: bool) -> Any:
    """Ask for one form field until the answer fits its JSON schema type."""
    kind = schema.get("type", "string")
    choices = schema.get("enum")
    hint = f" ({'/'.join(map(str, choices))})" if choices else f" [{kind}]"
    while True:
        raw = ask(f"  {name}{'*' if required else ''}{hint}: ").strip()
        if not raw and not required:
            return None
        try:
            if kind == "boolean":
                if raw.lower() not in {"y", "yes", "true", "n", "no", "false"}:
                    raise ValueError("answer yes or no")
                return raw.lower() in {"y", "yes", "true"}
            value: Any = int(raw) if kind == "integer" else float(raw) if kind == "number" else raw
        except ValueError as error:
            print(f"  {error}")
            continue
        if choices and value not in choices:
            print(f"  choose one of {choices}")
            continue
        return value


def elicit(params: ElicitRequestParams) -> ElicitResult:
    """Show the server's question; fill in its form, or show its URL."""
    print(f"\nThe server asks: {params.message}")
    if params.mode == "url":
        print(f"  It wants you to open {params.url} (this program never opens it).")
        agreed = ask("  Did you? [y/N] ").lower().startswith("y")
        return ElicitResult(action="accept" if agreed else "decline")
    action = ask("  [a]nswer, [d]ecline or [c]ancel? ").strip().lower()[:1]
    if action != "a":
        return ElicitResult(action="decline" if action == "d" else "cancel")
    schema = params.requested_schema or {}
    required = set(schema.get("required", ()))
    content = {}
    for name, field in (schema.get("properties") or {}).items():
        value = read_value(name, field, name in required)
        if value is not None:
            content[name] = value
    return ElicitResult(action="accept", content=content)


def sample(params: CreateMessageRequestParams) -> CreateMessageResult:
    """Show the conversation the server wants completed, and take your reply as the model's."""
    print("\nThe server asks for a completion of:")
    for message in params.messages:
        text = message.content.text if isinstance(message.content, TextContent) else "(media)"
        print(f"  {message.role}: {text}")
    reply = ask("Your reply as the model: ")
    return CreateMessageResult(role="assistant", content=TextContent(text=reply), model="human")


def roots(params: object) -> ListRootsResult:
    folder = Path.cwd()
    return ListRootsResult(roots=[Root(uri=folder.as_uri(), name=folder.name)])


def connect(url: str | None, command: list[str]) -> Client:
    handlers: dict[str, Any] = {
        "elicitation_handler": elicit,
        "elicitation_modes": ("form", "url"),
        "sampling_handler": sample,
        "roots_handler": roots,
    }
    if url is not None:
        return Client.http(url, **handlers)
    return Client.stdio(command[0], command[1:], **handlers)


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """key=value words; a value that parses as JSON is JSON, otherwise a string."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{pair!r}: give arguments as key=value")
        try:
            arguments[key] = json.loads(value)
        except json.JSONDecodeError:
            arguments[key] = value
    return arguments


async def run(url: str | None, command: list[str], call: list[str] | None) -> None:
    async with connect(url, command) as client:
        tools = await client.all_tools()
        print(f"Connected ({client.era}, {client.protocol_version}). Tools:")
        for tool in tools:
            print(f"  {tool.name}: {tool.description or ''}")
        if call:
            name, arguments = call[0], parse_arguments(call[1:])
        else:
            name = ask("Tool to call: ").strip()
            arguments = parse_arguments(ask("Arguments (key=value ...): ").split())
        result = await client.call_tool(name, arguments)
        print("\nResult:" + (" (error)" if result.is_error else ""))
        for block in result.content:
            print(f"  {block.text}" if isinstance(block, TextContent) else f"  [{block.type}]")


def main() -> None:
    words = sys.argv[1:]
    command: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, command = words[:cut], words[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", help="a Streamable HTTP endpoint (or a command after --)")
    parser.add_argument("--call", nargs="+", metavar="TOOL", help="call TOOL key=value ...")
    args = parser.parse_args(words)
    if (args.url is None) == (not command):
        parser.error("give a URL, or a command after --")
    asyncio.run(run(args.url, command, args.call))


if __name__ == "__main__":
    main()
