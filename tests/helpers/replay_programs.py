"""Handler programs: a small language interpreted by one tool, to test the replay engine.

A program is plain JSON, so it travels as a tool argument over any transport and one server
process can run any number of them. It is a list of steps; a step is a list whose first item
names it:

* `["ask", text, key]`: `await ctx.elicit(text, ..., key=key)` (`key` may be None);
* `["ask_all", [text, ...]]`: `await ctx.ask({...})`, one question per text;
* `["gather", [program, ...]]`: the programs as concurrent branches of `asyncio.gather`;
* `["group", [program, ...]]`: the same in an `asyncio.TaskGroup`;
* `["spawn", program, awaited]`: the program in a task of its own (`asyncio.create_task`),
  awaited at once or left running (fire and forget);
* `["once", key, slow]`: `await ctx.once(key, fn)`, `fn` awaiting the loop first when `slow`;
* `["sleep"]`: a short real wait (I/O);
* `["log", text]`: `await ctx.log("info", text)`;
* `["raise", kind]`: raise a `ValueError`, an `McpError`, a `BaseException` that is no
  `Exception`, a `CancelledError`, or (only where no task of the program runs it, since asyncio
  lets it out of the event loop from a task) a `KeyboardInterrupt` or a `SystemExit`;
* `["return", text]`: end this program (or branch) with `text`;
* `["wrap", program]`: run it under `except BaseException as e: raise RuntimeError(...) from e`;
* `["swallow", program]`: run it under `except Exception: pass`.

Kept free of test-runner imports: `servers/replay_program_server.py` imports it in a child.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mrtr import McpError, RequestContext, Server, ServerOptions, elicit_request
from mrtr.server import InputRequiredConfig

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
RAISE_KINDS = ("value", "mcp", "base", "cancel", "keyboard", "exit")


class Abort(BaseException):
    """A `BaseException` that is not an `Exception`, as some libraries raise."""


class Interpreter:
    """Runs one program against one request's context."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.done: list[str] = []

    async def run(self, program: list[Any], in_task: bool = False) -> str:
        for step in program:
            ended = await self.step(step, in_task)
            if ended is not None:
                return ended
        return "ok"

    async def step(self, step: list[Any], in_task: bool) -> str | None:
        op, *args = step
        ctx = self.ctx
        if op == "ask":
            answer = await ctx.elicit(args[0], SCHEMA, key=args[1])
            self.done.append(f"{args[0]}={answer.action}")
        elif op == "ask_all":
            got = await ctx.ask({f"all-{text}": elicit_request(text, SCHEMA) for text in args[0]})
            self.done.append(",".join(sorted(got)))
        elif op == "gather":
            await asyncio.gather(*(self.run(branch, True) for branch in args[0]))
        elif op == "group":
            async with asyncio.TaskGroup() as group:
                for branch in args[0]:
                    group.create_task(self.run(branch, True))
        elif op == "spawn":
            task = asyncio.create_task(self.run(args[0], True))
            if args[1]:
                await task
        elif op == "once":
            self.done.append(str(await ctx.once(args[0], _slow if args[1] else _quick)))
        elif op == "sleep":
            await asyncio.sleep(0.001)
        elif op == "log":
            await ctx.log("info", args[0])
        elif op == "raise":
            _raise(args[0], in_task)
        elif op == "return":
            return str(args[0])
        elif op == "wrap":
            try:
                await self.run(args[0], in_task)
            except BaseException as exc:
                raise RuntimeError("wrapped") from exc
        elif op == "swallow":
            try:
                await self.run(args[0], in_task)
            except Exception:
                self.done.append("swallowed")
        else:
            raise ValueError(f"unknown step {op!r}")
        return None


def _raise(kind: str, in_task: bool) -> None:
    if kind == "value":
        raise ValueError("boom")
    if kind == "mcp":
        raise McpError(-32602, "refused by the program")
    if kind == "cancel":
        raise asyncio.CancelledError()
    if kind in ("keyboard", "exit") and not in_task:
        raise KeyboardInterrupt() if kind == "keyboard" else SystemExit(3)
    raise Abort("aborted")


def _quick() -> str:
    return "quick"


async def _slow() -> str:
    await asyncio.sleep(0.002)
    return "slow"


def add_program_tools(server: Server) -> None:
    """Register `run_program` (runs a program) and `echo` (answers at once)."""

    @server.tool()
    async def run_program(ctx: RequestContext, program: list[Any]) -> str:
        """Interpret `program` (see the module docstring)."""
        return await Interpreter(ctx).run(program)

    @server.tool()
    async def echo(text: str) -> str:
        """Answer `text` at once."""
        return text


def build_program_server() -> Server:
    """A server with the program tools; bounded rounds so every flow ends."""
    options = ServerOptions(
        request_state_key=b"replay-programs-test-key-32-bytes",
        input_required=InputRequiredConfig(max_rounds=8, round_timeout=5),
    )
    server = Server("programs", options=options)
    add_program_tools(server)
    return server
