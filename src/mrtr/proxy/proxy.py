"""`ProxyBackend`: a backend MCP server, seen through `mrtr.Client`, that a `Server` serves.

It lists the backend's tools, prompts, resources and templates (every page), reads, gets and
completes on its shared session, and calls a tool as a held call (`held.py`): the backend's
questions mid-call reach the proxy's client through the tool's handler context, as
`inputRequests` on 2026-07-28 and as live requests on a legacy session. The backend's logs and
progress during a call go to the round of the call being served. See `backend.py` for its
sessions and their supervision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pydantic

from ..client.client import Client
from ..inputs import ELICITATION_CREATE, ROOTS_LIST, SAMPLING_CREATE_MESSAGE
from ..protocol.errors import METHOD_NOT_FOUND, McpError, invalid_params
from ..protocol.meta import LOG_LEVEL_RANK, SERVER_INFO
from ..protocol.types import CallToolResult, GetPromptResult, Implementation, ReadResourceResult
from .backend import BackendPool, BackendSession, BackendTarget, ClientTarget, Target
from .held import Ended, HeldCall, HeldCalls, parse_state, principal_of

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..server.context import RequestContext
    from .relay import Relay

logger = logging.getLogger("mrtr.proxy")

#: The most pages of one list read from the backend.
MAX_PAGES = 100
#: Each of the backend's lists: its list method and the key of its items.
LISTS = {
    "tools": ("tools/list", "tools"),
    "prompts": ("prompts/list", "prompts"),
    "resources": ("resources/list", "resources"),
    "templates": ("resources/templates/list", "resourceTemplates"),
}


class ProxyBackend:
    """A backend server and the calls held on it.

    `target`: where the backend is (`BackendTarget`, or a URL, or a command line as a list),
    or a `Client` to it (`ClientTarget`: one session). `sessions`: the most backend sessions
    (one per concurrent `tools/call`; 1 keeps a stateful stdio server to one process).
    `session_wait`: how long a call waits for a free session before it is refused (see
    `mrtr.proxy.backend`). `max_held`, `max_held_per_principal`, `hold_timeout`: the bounds
    of held calls (see `mrtr.proxy.held`).
    """

    def __init__(
        self,
        target: BackendTarget | Client | str | list[str],
        *,
        sessions: int = 1,
        max_held: int = 100,
        max_held_per_principal: int = 10,
        hold_timeout: float = 600.0,
        session_wait: float = 30.0,
    ) -> None:
        if isinstance(target, str):
            target = BackendTarget.parse([target])
        elif isinstance(target, list):
            target = BackendTarget.parse(target)
        self.target: Target = ClientTarget(target) if isinstance(target, Client) else target
        self.pool = BackendPool(self.target, sessions, self._handlers, session_wait)
        self.held = HeldCalls(max_held, max_held_per_principal, hold_timeout)
        #: Carries retries between instances sharing a store and broker (`relay.py`); set
        #: while the proxy runs with both.
        self.relay: Relay | None = None

    def describe(self) -> str:
        """The backend as a person would name it."""
        return self.target.describe()

    # --- the backend's questions, logs and progress ------------------------------------------

    def _handlers(self, session: BackendSession) -> Mapping[str, Any]:
        # What the backend sends on a session reaches the call the session serves, never
        # another caller (`BackendSession.serving`); with no call to tell it is for, a
        # question is refused and a log stays in the proxy's own log.
        def ask_client(method: str) -> Any:
            async def answer(params: BaseModel) -> Any:
                holder = session.serving()
                if not isinstance(holder, HeldCall):
                    raise McpError(
                        METHOD_NOT_FOUND,
                        f"the proxy relays {method} to its client only during tools/call, "
                        "whose backend session serves that one call; prompts, reads and "
                        "completions share a session, where a question could reach the wrong "
                        "caller",
                    )
                raw = params.model_dump(mode="json", by_alias=True, exclude_none=True)
                return await holder.ask(method, raw)

            return answer

        async def log(params: dict[str, Any]) -> None:
            holder = session.serving()
            ctx = holder.ctx if isinstance(holder, HeldCall) else None
            if ctx is None:
                logger.info("backend log [%s]: %s", params.get("level"), params.get("data"))
                return
            level, name = params.get("level"), params.get("logger")
            await ctx.log(
                level if level in LOG_LEVEL_RANK else "info",
                params.get("data"),
                name if isinstance(name, str) else None,
            )

        return {
            "elicitation_handler": ask_client(ELICITATION_CREATE),
            "elicitation_modes": ("form", "url"),
            "sampling_handler": ask_client(SAMPLING_CREATE_MESSAGE),
            "roots_handler": ask_client(ROOTS_LIST),
            "log_handler": log,
            "log_level": "debug",
        }

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Client:
        """Open the shared session (the backend is started); its connected `Client`."""
        return await self.pool.shared.client()

    async def identity(self) -> tuple[Implementation | None, str | None]:
        """The backend's `serverInfo` and `instructions`, as it told them (either may be
        None): from its `server/discover`, or a legacy backend's `initialize`."""
        found = await self.pool.shared.run(lambda client: client.request("server/discover"))
        meta, instructions = found.get("_meta"), found.get("instructions")
        info = meta.get(SERVER_INFO) if isinstance(meta, dict) else None
        try:
            told = Implementation.model_validate(info) if isinstance(info, dict) else None
        except pydantic.ValidationError:
            told = None  # an identity that is no `Implementation` is not passed on
        if told is not None:
            self.pool.incidents.name = told.name  # how its failures name it to callers
        return told, instructions if isinstance(instructions, str) else None

    async def close(self) -> None:
        """Cancel the held calls and close every backend session."""
        await self.held.close()
        await self.pool.close()

    # --- what passes through -----------------------------------------------------------------

    async def list(self, method: str, key: str) -> list[dict[str, Any]]:
        """Every entry of the backend's list `method` (`tools/list`...), all pages, raw."""

        async def pages(client: Client) -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = []
            cursor: str | None = None
            for _ in range(MAX_PAGES):
                result = await client.request(method, {"cursor": cursor} if cursor else None)
                items.extend(item for item in result.get(key, []) if isinstance(item, dict))
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
            return items

        result: list[dict[str, Any]] = await self.pool.shared.run(pages)
        return result

    async def call_tool(self, ctx: RequestContext, name: str) -> Any:
        """Serve one round of a proxied `tools/call` of `name` (the tool's handler body)."""
        held = self.held
        state = ctx.request_state
        if held.owns(state):
            assert state is not None
            instance, call_id, step = parse_state(state)
            if instance != held.instance:
                return await self._elsewhere(ctx, instance, call_id, step)
            call: HeldCall | Ended = held.resume(
                call_id, step, principal_of(ctx), ctx.input_responses
            )
        else:
            arguments = ctx.params.get("arguments")

            async def run(call: HeldCall) -> CallToolResult:
                async def progress(done: float, total: float | None, text: str | None) -> None:
                    if call.ctx is not None:
                        await call.ctx.report_progress(done, total, text)

                async with self.pool.lease() as session:
                    session.holder = call
                    try:
                        result: CallToolResult = await session.run(
                            lambda client: client.call_tool(
                                name,
                                arguments if isinstance(arguments, dict) else None,
                                progress_callback=progress,
                            ),
                            effect=True,
                        )
                        return result
                    finally:
                        session.holder = None

            call = held.start(ctx, name, run)
        return await held.outcome(call, ctx)

    async def _elsewhere(self, ctx: RequestContext, instance: str, call_id: str, step: int) -> Any:
        """A retry for a call another instance holds: carried there when a relay runs."""
        relay = self.relay
        if relay is None:
            raise invalid_params(
                "this retry reached a proxy instance that does not hold its backend call "
                "(the instance restarted, or rounds of one call are not routed to one "
                "instance, and no shared store relays them), and that call may have run: "
                "check what it did before calling the tool again",
                {"mayHaveRun": True},
            )
        return await relay.forward(ctx, instance, call_id, step)

    async def get_prompt(self, name: str, arguments: Mapping[str, Any] | None) -> GetPromptResult:
        """The backend's prompt `name`."""
        args = {k: str(v) for k, v in (arguments or {}).items()}
        result: GetPromptResult = await self.pool.shared.run(
            lambda client: client.get_prompt(name, args)
        )
        return result

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """The backend's resource `uri`."""
        result: ReadResourceResult = await self.pool.shared.run(
            lambda client: client.read_resource(uri)
        )
        return result

    async def complete(
        self, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        """The backend's `completion/complete` answer (its `completion` object)."""
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if context:
            params["context"] = {"arguments": context}
        result: dict[str, Any] = await self.pool.shared.run(
            lambda client: client.request("completion/complete", params)
        )
        completion = result.get("completion")
        return completion if isinstance(completion, dict) else {"values": []}
