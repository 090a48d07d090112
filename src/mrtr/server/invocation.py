"""`Invocation`: the one path from a request to a registered function and back, for both eras.

Rules:

1. Every `tools/call`, `prompts/get`, `resources/read` and `completion/complete` goes:
   look up (hidden entries are unknown) -> refuse arguments too deep to carry (-32602,
   before validation, whose messages would quote them) -> bind and validate the arguments
   -> run under a round (sync functions on the server's worker threads) -> render the
   value. The era dispatchers call it and add what their revision requires around the
   result; nothing here knows which era asked.
2. A tool's invalid arguments and its own failures are its result (`isError`); a prompt's or
   resource's are -32602 and -32603. Protocol errors stay errors.
3. A tool that takes no context and needs none for itself (`ToolEntry.direct`) runs its first
   round without one: no `RequestContext`, no replay engine, nothing sealed. It is the same
   path, made cheap: its answer is what the full round gives, and if it answers an
   `InputRequiredResult` made by hand, the context is made then and the round settles it.
4. A call of a task-capable tool goes through the tasks extension, which may make it a task.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..protocol.errors import INTERNAL_ERROR, McpError, invalid_params
from ._engine.outcome import Failure, run_unasking
from .primitives import tool_error
from .signature import FunctionSignature, ValidationFailure
from .worker_threads import WorkerPool

if TYPE_CHECKING:
    from ._engine.rounds import RoundKeeper
    from .context import RequestContext
    from .inbound import Inbound
    from .options import ServerOptions
    from .registry import Registry
    from .tasks import TaskManager

logger = logging.getLogger("mrtr.server")

Invoke = Callable[["RequestContext"], Awaitable[Any]]


class Invocation:
    """Runs one server's registered functions for requests of either era (module rules)."""

    def __init__(
        self, name: str, registry: Registry, rounds: RoundKeeper, options: ServerOptions
    ) -> None:
        self.name = name
        self.registry = registry
        self.rounds = rounds
        self.options = options
        #: The tasks extension, once a task-capable tool is registered (rule 4).
        self.tasks: TaskManager | None = None
        # Made when the first sync handler runs: most servers have none.
        self._pool: WorkerPool | None = None

    def workers(self) -> WorkerPool:
        """The pool that runs this server's sync handlers (`ServerOptions.sync_workers`)."""
        pool = self._pool
        if pool is None:
            pool = self._pool = WorkerPool(self.options.sync_workers, self.name)
        return pool

    # --- tools/call --------------------------------------------------------------------------

    async def call_tool(self, request: Inbound) -> dict[str, Any]:
        """Serve a `tools/call` (rules 1-4)."""
        params = request.params
        name = params.get("name")
        if type(name) is not str:
            raise invalid_params('tools/call needs "name", the name of a tool (a string)')
        entry = self.registry.tool(name)
        if entry is None:
            raise invalid_params(f"Unknown tool: {name!r}")
        arguments = params.get("arguments")
        if arguments is not None and type(arguments) is not dict:
            raise invalid_params(f'tools/call {name!r}: "arguments" must be an object')
        if arguments:
            # Before validation (rule 1): a message about a deep value must never be written.
            self.rounds.check_arguments("tools/call", name, arguments)
        signature = entry.signature
        try:
            kwargs = signature.bind(arguments)
        except ValidationFailure as exc:
            return tool_error(f"Invalid arguments for tool {name!r}: {exc}")
        pool = None if signature.is_async or not entry.run_in_thread else self.workers()
        render = functools.partial(entry.render, self.options.mask_errors)
        if entry.direct and "requestState" not in params and "inputResponses" not in params:
            # Rule 3: the first round of a tool that cannot ask, run without a context.
            start = functools.partial(signature.start, kwargs, None, pool)
            outcome = await self.rounds.run(
                run_unasking(start), None, "tools/call", live=request.session is not None
            )
            if type(outcome) is Failure and not outcome.is_error:
                # KeyboardInterrupt and the like: never a tool's result (as a round's run).
                logger.error("tools/call %r: the handler raised", name, exc_info=outcome.exc)
                raise McpError(INTERNAL_ERROR, "Internal error while handling tools/call")
            result = render(outcome)
            if type(result) is dict:
                return result
            # An `InputRequiredResult` made by hand: sealed (or asked live) as any round's.
            round_ = self.rounds.round(request.context(), name, arguments, checked=True)
            return await round_.settle(result, entry.invoker(kwargs, pool), render)
        invoke = entry.invoker(kwargs, pool)
        ctx = request.context()
        round_ = self.rounds.round(ctx, name, arguments, checked=True)
        tasks = self.tasks
        if entry.task is not None and tasks is not None:
            return await tasks.call(ctx, entry.task, name, round_, invoke, render)
        return await round_.complete(invoke, render)

    # --- prompts/get and resources/read ------------------------------------------------------

    def get_prompt(self, request: Inbound) -> Awaitable[dict[str, Any]]:
        """Serve a `prompts/get` (rules 1 and 2)."""
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise invalid_params('prompts/get needs "name", the name of a prompt (a string)')
        entry = self.registry.prompt(name)
        if entry is None:
            raise invalid_params(f"Unknown prompt: {name!r}")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise invalid_params(f'prompts/get {name!r}: "arguments" must be an object')
        if arguments:
            self.rounds.check_arguments("prompts/get", name, arguments)  # before validation
        try:
            kwargs = entry.signature.bind(arguments)
        except ValidationFailure as exc:
            raise invalid_params(f"Invalid arguments for prompt {name!r}: {exc}") from None
        invoke = self._invoke(entry.signature, kwargs, entry.run_in_thread)
        round_ = self.rounds.round(request.context(), name, arguments, checked=True)
        return round_.complete(invoke, entry.result, what=f"prompt {name!r}")

    def read_resource(self, request: Inbound) -> Awaitable[dict[str, Any]]:
        """Serve a `resources/read` (rules 1 and 2): the result without caching hints, which
        are the era's to add."""
        uri = request.params.get("uri")
        if not isinstance(uri, str):
            raise invalid_params('resources/read needs "uri", the URI of a resource (a string)')
        found = self.registry.find_resource(uri)
        if isinstance(found, McpError):
            raise found
        entry, variables = found
        try:
            kwargs = entry.signature.bind(variables)
        except ValidationFailure as exc:
            raise invalid_params(f"Invalid URI {uri!r} for template {entry.uri!r}: {exc}") from None
        invoke = self._invoke(entry.signature, kwargs, entry.run_in_thread)
        render = functools.partial(entry.result, uri)
        round_ = self.rounds.round(request.context(), uri, None)
        return round_.complete(invoke, render, what=f"resource {uri!r}")

    def _invoke(
        self, signature: FunctionSignature, kwargs: dict[str, Any], run_in_thread: bool
    ) -> Invoke:
        pool = None if signature.is_async or not run_in_thread else self.workers()
        return functools.partial(signature.start, kwargs, pool=pool)

    # --- completion/complete -----------------------------------------------------------------

    async def complete(self, request: Inbound) -> dict[str, Any]:
        """Serve a `completion/complete`: the registered handler's values, at most 100."""
        params = request.params
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise invalid_params('completion/complete needs "ref" and "argument" objects')
        registry = self.registry
        registry.completes(ref)
        values: Any = []
        handler = registry.completion
        if handler is not None:
            context = params.get("context") or {}
            call_args: list[Any] = [ref, argument, context.get("arguments") or {}]
            if registry.completion_takes_ctx:
                values = handler(*call_args, ctx=request.context())
            else:
                values = handler(*call_args)
            if inspect.isawaitable(values):
                values = await values
        if isinstance(values, dict):
            completion = values
        elif hasattr(values, "to_wire"):
            completion = values.to_wire()
        else:
            items = [str(v) for v in values]
            completion = {"values": items[:100], "total": len(items), "hasMore": len(items) > 100}
        return {"completion": completion}


__all__ = ["Invocation"]
