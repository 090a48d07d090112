"""`RequestContext`: what a handler knows about its request and how it talks back.

Besides logging and progress, the context is where a handler asks the client for input:
`await ctx.elicit(...)`, `ctx.sample(...)`, `ctx.list_roots()`, `ctx.ask({...})`, and keeps
work from repeating across rounds with `ctx.once(...)`. The context is a face over the replay
engine (`replay.Replay`), which owns all of that state; see `_engine/replay.py` for the rules.

The same context serves both protocol eras. On a legacy (`initialize`) session what a modern
request says in its `_meta` comes from the session instead (`live.session_meta`), and the
engine is given the live asker: the handler and every method here stay the same.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

import pydantic

from ..inputs import (
    ELICITATION_CREATE,
    ROOTS_LIST,
    SAMPLING_CREATE_MESSAGE,
    InputRequest,
    elicit_request,
    roots_request,
    sample_request,
)
from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ElicitResultTyped,
    ListRootsResult,
    SamplingMessage,
)
from ._engine import replay_check
from ._engine.capabilities import Capable
from ._engine.questions import Asker, Batch, Question, typed_elicit_converter
from ._engine.replay import Replay
from ._engine.round_state import RoundState
from .auth.principal import access_token_of
from .injection import InjectedContext
from .once_journal import OnUncertain, idempotency_key
from .worker_threads import check_on_loop, in_worker_thread, on_loop

if TYPE_CHECKING:
    from .auth.token import AccessToken
    from .options import ServerOptions
    from .redemption import EarlyOutcome
    from .session import LegacySession

T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)

#: Sends one JSON-RPC notification on the stream of the request being handled.
NotifySink = Callable[[dict[str, Any]], Awaitable[None]]

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ServerFace(Protocol):
    """The server as a handler reaches it (`ctx.server`; `mrtr.Server` is one): what it is,
    what its lifespan yielded, and how it changes what it offers while it serves."""

    @property
    def name(self) -> str:
        """The server's name."""

    @property
    def version(self) -> str:
        """The server's version."""

    @property
    def options(self) -> ServerOptions:
        """The server's options."""

    @property
    def lifespan_state(self) -> Any:
        """What the server's lifespan yielded (see `RequestContext.state`)."""

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a tool."""

    def remove_tool(self, name: str) -> None:
        """Remove the tool `name`."""

    def add_prompt(self, fn: Callable[..., Any], name: str | None = None, **settings: Any) -> None:
        """Register `fn` as a prompt."""

    def remove_prompt(self, name: str) -> None:
        """Remove the prompt `name`."""

    def add_resource(self, fn: Callable[..., Any], uri: str, **settings: Any) -> None:
        """Register `fn` as the resource at `uri`."""

    def add_resource_template(
        self, fn: Callable[..., Any], uri_template: str, **settings: Any
    ) -> None:
        """Register `fn` for `uri_template`."""

    def remove_resource(self, uri: str) -> None:
        """Remove the resource (or template) at `uri`."""

    def disable(self, *tags: str) -> None:
        """Hide everything carrying one of `tags`."""

    def enable(self, *tags: str) -> None:
        """Show again what `disable(*tags)` hid."""

    def notify_tools_changed(self) -> None:
        """Tell listening clients the tool list changed."""

    def notify_prompts_changed(self) -> None:
        """Tell listening clients the prompt list changed."""

    def notify_resources_changed(self) -> None:
        """Tell listening clients the resource list changed."""

    def notify_resource_updated(self, uri: str) -> None:
        """Tell clients subscribed to `uri` that it changed."""


class TaskStarter(Protocol):
    """How a call becomes a task (the tasks extension's `TaskRun`; see `run_as_task`)."""

    #: Settles the redeemed round's outcome once the call is a task.
    early: EarlyOutcome

    @property
    def task_id(self) -> str | None:
        """The task's id once it exists."""

    async def begin(self) -> dict[str, Any]:
        """Make the call a task (once); the `CreateTaskResult`."""


@functools.lru_cache(maxsize=256)
def _schema_of(model: type[Any]) -> dict[str, Any]:
    # Cached: a schema is built once per model, not on every round that replays the ask.
    schema = pydantic.TypeAdapter(model).json_schema()
    schema.pop("title", None)
    return schema


class SessionAsking(Protocol):
    """How the requests of a legacy session read their `_meta` and ask their client: the
    legacy era's (`mrtr.server.live.LIVE`), handed down so that the context stays below it."""

    def meta(self, session: LegacySession, params: Mapping[str, Any]) -> dict[str, Any]:
        """What a modern request would say in its `_meta`, from the session."""
        ...

    def asker(
        self, ctx: Capable, session: LegacySession, send: NotifySink | None, timeout: float
    ) -> Asker:
        """The asker that puts the request's questions to the session's client now."""
        ...


class RequestContext(InjectedContext):
    """The request being handled: its metadata, the client's capabilities, and MRTR."""

    __slots__ = (
        "_input_responses",
        "_progress",
        "engine",
        "meta",
        "method",
        "notify_sink",
        "params",
        "request_id",
        "server",
        "session",
        "task_run",
        "transport_info",
    )

    def __init__(
        self,
        server: ServerFace,
        request_id: jsonrpc.RequestId,
        method: str,
        params: dict[str, Any],
        notify: NotifySink | None = None,
        transport_info: Any = None,
        state: RoundState | None = None,
        input_responses: dict[str, Any] | None = None,
        session: LegacySession | None = None,
        live: SessionAsking | None = None,
    ) -> None:
        """`live`: how a request of a legacy `session` reads its `_meta` and asks its client,
        which the legacy era gives (`mrtr.server.live.LIVE`); needed with `session` only."""
        #: The server handling the request (`mrtr.Server`, typed as what a handler may use).
        self.server = server
        #: The JSON-RPC id of the request.
        self.request_id = request_id
        #: The request's method (`tools/call`, `prompts/get`, `resources/read`, ...).
        self.method = method
        #: The request's params, as the client sent them.
        self.params = params
        #: What the transport knows of the caller (HTTP: the request and its verified token).
        self.transport_info = transport_info
        #: The legacy session the request came on; None for a 2026-07-28 request.
        self.session = session
        self._input_responses: dict[str, Any] = input_responses or {}
        #: Where the handler's notifications go: the request's stream (None: nowhere); a call
        #: that becomes a task sends them to the task's listeners instead.
        self.notify_sink = notify
        self._progress: float | None = None
        #: The call's way to become a task (set by the tasks extension); None for every other
        #: call.
        self.task_run: TaskStarter | None = None
        #: The request's `_meta` (on a legacy session, the same keys taken from the session).
        self.meta: dict[str, Any]
        if session is None:
            meta = params.get("_meta")
            # Not a dict only on a request the server is about to refuse (middleware sees it).
            self.meta = meta if isinstance(meta, dict) else {}
            #: The replay engine of this attempt at the request, which the server's rounds drive
            #: (`mrtr.server._engine`); a handler uses the methods below instead.
            self.engine = Replay(state, method)
            # Rule 12 of the engine: watch replayed code for effects where it serves (tests,
            # development mode) and where asked to, whatever the transport.
            check = server.options.check_replay
            self.engine.check = replay_check.by_default() if check is None else check
        else:
            if live is None:
                raise ValueError("a request of a legacy session needs its era's live asking")
            self.meta = live.meta(session, params)
            timeout = server.options.input_required.round_timeout
            self.engine = Replay(state, method, live.asker(self, session, notify, timeout))

    # --- what the request says -----------------------------------------------------------

    @property
    def auth(self) -> AccessToken | None:
        """The caller's verified access token (`ServerOptions.auth`), or None: no auth
        configured, or a transport without tokens (stdio, in memory)."""
        return access_token_of(self.transport_info)

    @property
    def protocol_version(self) -> str | None:
        """The protocol version the request declared."""
        return self.meta.get(meta_keys.PROTOCOL_VERSION)

    @property
    def client_capabilities(self) -> dict[str, Any]:
        """The capabilities the client declared on this request."""
        caps = self.meta.get(meta_keys.CLIENT_CAPABILITIES)
        return caps if isinstance(caps, dict) else {}

    @property
    def client_info(self) -> dict[str, Any] | None:
        """The client's name and version, when it said."""
        info = self.meta.get(meta_keys.CLIENT_INFO)
        return info if isinstance(info, dict) else None

    @property
    def log_level(self) -> str | None:
        """The minimum level the client asked to receive for this request, if any."""
        return self.meta.get(meta_keys.LOG_LEVEL)

    @property
    def progress_token(self) -> str | int | None:
        """The token progress notifications for this request carry, if it asked for them."""
        return self.meta.get(meta_keys.PROGRESS_TOKEN)

    @property
    def state(self) -> Any:
        """What the server's lifespan yielded (`Server(lifespan=...)`; None without one).

        Typed `Any`: annotate a handler parameter `State[YourState]` to have it injected with
        its type, or `cast` it. Reading it while the lifespan is not running is a
        `LifespanError`.
        """
        return self.server.lifespan_state

    @property
    def lifespan_context(self) -> Any:
        """`state`, as the official SDK spells it (`ctx.request_context.lifespan_context`)."""
        return self.server.lifespan_state

    @property
    def request_context(self) -> RequestContext:
        """This context: the official SDK keeps the request's details one level down, here
        they are on the context itself (`ctx.request_context.lifespan_context` works)."""
        return self

    @property
    def round(self) -> int:
        """How many `InputRequiredResult`s this request has been through (0 on the first try)."""
        return self.engine.state.round

    @property
    def flow_id(self) -> str:
        """A random id of this flow: the same on every round of one request, new for the next.

        Use it as an idempotency key for side effects (a payment, an email) so that a replayed
        round cannot repeat them. It travels sealed in `requestState`.
        """
        return self.engine.state.ensure_flow_id()

    @property
    def current_flow_id(self) -> str | None:
        """The flow id if this request has one yet (a later round, or `flow_id` was read),
        else None. Reading it never makes one: what an observer such as middleware wants."""
        return self.engine.state.flow_id or None

    @property
    def request_state(self) -> str | None:
        """The plaintext a manual-style handler put in its last `InputRequiredResult`."""
        self.engine.saw_inputs()  # replay rule 7: a manual-style handler reached its inputs
        return self.engine.state.user

    @property
    def input_responses(self) -> dict[str, Any]:
        """This round's `inputResponses` as the client sent them (for the manual style)."""
        self.engine.saw_inputs()  # replay rule 7, as for `request_state`
        return self._input_responses

    @input_responses.setter
    def input_responses(self, responses: dict[str, Any]) -> None:
        self._input_responses = responses

    def client_supports(self, method: str, *, url_mode: bool = False) -> bool:
        """Whether the client declared the capability an input request of `method` needs."""
        return supports(self.client_capabilities, method, url_mode=url_mode)

    # --- notifications -------------------------------------------------------------------

    @property
    def replaying(self) -> bool:
        """True while the handler re-runs code an earlier round already ran (replay rule 7).

        `log` and `report_progress` stay silent meanwhile: the client already heard them.
        """
        return self.engine.replaying

    def log(
        self, level: str, data: Any, logger: str | None = None, *, logger_name: str | None = None
    ) -> Awaitable[None]:
        """Send a log message to the client, if it asked for this level or lower (`logger_name`
        is `logger` as the official SDK spells it).

        A 2026-07-28 client asks per request (the log level in its `_meta`); on a legacy session
        the level `logging/setLevel` chose applies, and every level until it chooses one.
        Nothing is sent while `replaying`: the client got it in the round that first ran it.
        An async handler awaits it; a sync one in a worker thread just calls it (the message
        is sent by the time it returns).
        """
        rank = meta_keys.LOG_LEVEL_RANK
        if level not in rank:
            # Checked before anything else so the mistake shows whatever the client asked for.
            raise ValueError(
                f"unknown log level {level!r}: use one of {', '.join(rank)}; the level comes "
                "first, ctx.log('info', message), or use ctx.info(message)"
            )
        if logger_name is not None:
            if logger is not None:
                raise TypeError("ctx.log takes logger= or logger_name=, not both")
            logger = logger_name
        return on_loop(functools.partial(self._log, level, data, logger, not in_worker_thread()))

    # The official SDK's and FastMCP's shorthands: `extra` is FastMCP's structured addition.

    def debug(
        self,
        message: Any,
        *,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Awaitable[None]:
        """`ctx.log("debug", message)`."""
        return self.log("debug", _with_extra(message, extra), logger_name)

    def info(
        self,
        message: Any,
        *,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Awaitable[None]:
        """`ctx.log("info", message)`."""
        return self.log("info", _with_extra(message, extra), logger_name)

    def warning(
        self,
        message: Any,
        *,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Awaitable[None]:
        """`ctx.log("warning", message)`."""
        return self.log("warning", _with_extra(message, extra), logger_name)

    def error(
        self,
        message: Any,
        *,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Awaitable[None]:
        """`ctx.log("error", message)`."""
        return self.log("error", _with_extra(message, extra), logger_name)

    async def _log(self, level: str, data: Any, logger: str | None, track: bool) -> None:
        if track:  # replay rule 8: a task that logs is one the run can cancel
            self.engine.track()
        wanted = self.log_level
        if wanted is None or self.notify_sink is None:
            return
        if self.engine.replaying:
            if self.engine.tick():
                await asyncio.sleep(0)  # replay rule 2: a replay loop still lets the loop turn
            return
        rank = meta_keys.LOG_LEVEL_RANK
        if rank[level] < rank.get(wanted, 0):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self.notify_sink(jsonrpc.notification("notifications/message", params))

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> Awaitable[None]:
        """Send a progress notification, if the request carried a progress token.

        Progress must increase; a value not above the last one sent is dropped, and nothing is
        sent while `replaying`. Awaited or called as `log` is.
        """
        send = functools.partial(
            self._report_progress, progress, total, message, not in_worker_thread()
        )
        return on_loop(send)

    async def _report_progress(
        self, progress: float, total: float | None, message: str | None, track: bool
    ) -> None:
        if track:  # as in `log`
            self.engine.track()
        token = self.progress_token
        if token is None or self.notify_sink is None:
            return
        if self.engine.replaying:
            if self.engine.tick():
                await asyncio.sleep(0)  # as in `log`
            return
        if self._progress is not None and progress <= self._progress:
            return
        self._progress = progress
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify_sink(jsonrpc.notification("notifications/progress", params))

    # --- tasks (io.modelcontextprotocol/tasks) ----------------------------------------------

    async def run_as_task(self) -> bool:
        """Make this call a task now, if it can be one; whether it runs as a task.

        True for a call of a tool registered with `task=` whose request declared the tasks
        extension: the client gets a `CreateTaskResult` and the handler goes on as the task;
        questions asked from here on reach the client through `tasks/get`. False otherwise
        (the call goes on as an ordinary one). Questions asked before it went through MRTR.
        """
        run = self.task_run
        if run is None:
            return False
        await run.begin()
        return True

    @property
    def task_id(self) -> str | None:
        """The id of the task this call runs as, or None."""
        run = self.task_run
        return run.task_id if run is not None else None

    # --- asking the client (MRTR) ----------------------------------------------------------

    def pending(self) -> dict[str, Question[Any]]:
        """Questions created in this run that still have no answer."""
        return self.engine.pending()

    def question(
        self,
        request: InputRequest,
        *,
        key: str | None = None,
        convert: Callable[[str, Any], T] | None = None,
    ) -> Question[T]:
        """Ask any input request; awaiting the question gives the answer (see `replay.py`).

        Only `elicitation/create`, `sampling/createMessage` and `roots/list` can be asked;
        another method is a `ValueError`.
        """
        return self.engine.ask(request.method, request.params, key, convert)

    @overload
    def elicit(
        self, request: ElicitRequestParams, *, key: str | None = None
    ) -> Question[ElicitResult]: ...
    @overload
    def elicit(
        self, request: str, schema: type[M], *, key: str | None = None
    ) -> Question[ElicitResultTyped[M]]: ...
    @overload
    def elicit(
        self, request: str, schema: dict[str, Any], *, key: str | None = None
    ) -> Question[ElicitResult]: ...
    @overload
    def elicit(
        self, *, message: str, schema: type[M], key: str | None = None
    ) -> Question[ElicitResultTyped[M]]: ...
    @overload
    def elicit(
        self, *, message: str, schema: dict[str, Any], key: str | None = None
    ) -> Question[ElicitResult]: ...
    @overload
    def elicit(
        self, request: str, *, response_type: type[M], key: str | None = None
    ) -> Question[ElicitResultTyped[M]]: ...

    def elicit(
        self,
        request: ElicitRequestParams | str | None = None,
        schema: type[Any] | dict[str, Any] | None = None,
        *,
        key: str | None = None,
        message: str | None = None,
        response_type: type[Any] | None = None,
    ) -> Question[Any]:
        """Ask the user (form mode).

        `ctx.elicit(ElicitRequestParams(...))` and `ctx.elicit("message", {json schema})` give an
        `ElicitResult`; `ctx.elicit("message", Model)` gives `ElicitResultTyped[Model]` with the
        content validated into `Model`. `message=` and FastMCP's `response_type=` (a model)
        are accepted for the message and the schema.
        """
        if message is not None or response_type is not None:
            request, schema = _elicit_spelling(request, schema, message, response_type)
        if request is None:
            raise TypeError("ctx.elicit needs a message: ctx.elicit(message, schema)")
        if isinstance(request, ElicitRequestParams):
            return self.question(elicit_request(request), key=key)
        if isinstance(schema, dict) or schema is None:
            # The common case builds the wire params directly: no model round trip per ask.
            params = {
                "mode": "form",
                "message": request,
                "requestedSchema": schema if schema is not None else _EMPTY_SCHEMA,
            }
            return self.engine.ask(ELICITATION_CREATE, params, key)
        form = ElicitRequestParams(
            message=request,
            mode="form",
            requested_schema=_schema_of(schema),  # type: ignore[arg-type]
        )
        return self.question(
            elicit_request(form),
            key=key,
            convert=typed_elicit_converter(schema),  # type: ignore[arg-type]
        )

    def elicit_url(
        self, message: str, url: str, *, key: str | None = None
    ) -> Question[ElicitResult]:
        """Send the user to `url` (URL mode) and learn whether they went through with it."""
        return self.question(elicit_request(message, url=url), key=key)

    def sample(
        self,
        prompt: str | list[SamplingMessage] | CreateMessageRequestParams,
        *,
        max_tokens: int = 1000,
        system_prompt: str | None = None,
        key: str | None = None,
    ) -> Question[CreateMessageResult]:
        """Ask the client's LLM for a completion (`sampling/createMessage`)."""
        request = sample_request(prompt, max_tokens=max_tokens, system_prompt=system_prompt)
        return self.question(request, key=key)

    def list_roots(self, *, key: str | None = None) -> Question[ListRootsResult]:
        """Ask the client for its roots (`roots/list`)."""
        return self.question(roots_request(), key=key)

    def ask(self, requests: Mapping[str, InputRequest]) -> Batch:
        """Ask several questions in one round; awaiting gives `{key: answer}`."""
        return Batch(
            self.engine, {key: self.question(req, key=key) for key, req in requests.items()}
        )

    def once(
        self,
        key: str,
        fn: Callable[[], Any],
        *,
        type: Any = None,
        on_uncertain: OnUncertain = "fail",
    ) -> Awaitable[Any]:
        """Run `fn` (sync or async) once across all rounds of this request.

        Its result is recorded in the sealed state and given back on every later round the
        way it came the first time: restored through `fn`'s return annotation, or through
        `type=` when given (a pydantic model, a dataclass, `datetime`, `tuple[str, int]`...);
        without either it must be plain JSON. A result that would come back different is a
        `ReplayError`. Two calls with the same key share one run of `fn`; with the same key
        and different functions, they are a `ReplayError`.

        In a round that carries a `requestState`, the start and the result of `fn` are also
        recorded in the server's store: a second attempt at the round (after a cancellation,
        or taken over from a process that died) reuses a finished result, and for a `fn`
        that started and never finished asks `on_uncertain`: "fail" (the default) ends the
        round with -32603 `effect_uncertain`, "retry" runs `fn` again, and a callable given
        `ctx.once_key(key)` answers whether the effect may have happened (True: fail, False:
        run it).
        """
        # Checked when called, not when awaited: a sync handler cannot await the coroutine.
        check_on_loop(f"ctx.once({key!r})")
        return self.engine.once(key, fn, type, on_uncertain)

    def once_key(self, key: str) -> str:
        """The idempotency key of `ctx.once(key, ...)` in this flow, for the outside system
        the effect reaches: the same on every round and every attempt of the flow."""
        return idempotency_key(self.flow_id, key)


#: What the official SDK's and FastMCP's contexts offer that mrtr spells differently or
#: leaves out by design, and what to use instead.
_ELSEWHERE = {
    "fastmcp": "use ctx.server (the Server serving the request)",
    "mcp_server": "use ctx.server (the Server serving the request)",
    "session_id": (
        "a 2026-07-28 request belongs to no session; ctx.flow_id names one call's rounds, "
        "ctx.session is the legacy session (None on 2026-07-28)"
    ),
    "client_id": "use ctx.client_info (name and version) or ctx.auth (the caller's token)",
    "get_state": (
        "per-session state has no place in stateless 2026-07-28 rounds: keep values across "
        "rounds with ctx.once(key, fn); ctx.state is what the lifespan yielded"
    ),
    "set_state": (
        "per-session state has no place in stateless 2026-07-28 rounds: keep values across "
        "rounds with ctx.once(key, fn); ctx.state is what the lifespan yielded"
    ),
    "read_resource": "call the resource's function directly: it is a plain Python function",
    "headers": "over HTTP, ctx.transport_info is the request's ASGI scope: read its 'headers'",
}


#: Makes a request's context from `(request_id, method, params, notify, transport_info, state,
#: input_responses, session)`, positionally (a keyword argument would cost every context a dict).
ContextFactory = Callable[
    [
        jsonrpc.RequestId,
        str,
        dict[str, Any],
        NotifySink | None,
        Any,
        RoundState | None,
        dict[str, Any] | None,
        "LegacySession | None",
    ],
    RequestContext,
]


def context_factory(server: ServerFace, live: SessionAsking | None = None) -> ContextFactory:
    """`server`'s maker of request contexts (`Inbound.context`): a 2026-07-28 request's, or
    with `live`, a legacy session's, which asks its client through `live`."""
    if live is None:
        # The class itself with its first argument bound: no frame of ours per context.
        return functools.partial(RequestContext, server)

    def make(
        request_id: jsonrpc.RequestId,
        method: str,
        params: dict[str, Any],
        notify: NotifySink | None,
        transport_info: Any,
        state: RoundState | None,
        input_responses: dict[str, Any] | None,
        session: LegacySession | None,
    ) -> RequestContext:
        return RequestContext(
            server, request_id, method, params, notify, transport_info, state, input_responses,
            session, live,
        )  # fmt: skip

    return make


class _Elsewhere:
    """A name of another SDK's context: reading it on a context raises an `AttributeError`
    naming the mrtr way. A descriptor per name rather than `__getattr__` on the class, which
    would send every attribute read of every context through a slow lookup."""

    def __init__(self, name: str, hint: str) -> None:
        self.name = name
        self.hint = hint

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        raise AttributeError(f"ctx.{self.name} is not part of mrtr: {self.hint}", name=self.name)


for _name, _hint in _ELSEWHERE.items():
    setattr(RequestContext, _name, _Elsewhere(_name, _hint))


def _elicit_spelling(
    request: ElicitRequestParams | str | None,
    schema: type[Any] | dict[str, Any] | None,
    message: str | None,
    response_type: type[Any] | None,
) -> tuple[ElicitRequestParams | str | None, type[Any] | dict[str, Any] | None]:
    """`ctx.elicit`'s message and schema from the official SDK's `message=` or FastMCP's
    `response_type=`; a form needs an object, so a scalar type is refused with the fix."""
    if message is not None:
        if request is not None:
            raise TypeError("ctx.elicit takes its message once: ctx.elicit(message, schema)")
        request = message
    if response_type is not None:
        if schema is not None:
            raise TypeError("ctx.elicit takes schema= or response_type=, not both")
        if _schema_of(response_type).get("type") != "object":  # type: ignore[arg-type]
            raise TypeError(
                f"ctx.elicit(response_type={response_type!r}): an elicitation asks for a form, "
                "an object: pass a pydantic model with one field, ctx.elicit(message, Model)"
            )
        schema = response_type
    return request, schema


def _with_extra(message: Any, extra: Mapping[str, Any] | None) -> Any:
    """A log message with FastMCP's `extra=`, sent the way FastMCP sends it."""
    return message if extra is None else {"msg": message, "extra": dict(extra)}


def supports(caps: Mapping[str, Any], method: str, *, url_mode: bool = False) -> bool:
    """Whether client capabilities `caps` cover an input request of `method`."""
    if method == ELICITATION_CREATE:
        elicitation = caps.get("elicitation")
        if not isinstance(elicitation, dict):
            return False
        if url_mode:
            return "url" in elicitation
        return "form" in elicitation or "url" not in elicitation
    if method == SAMPLING_CREATE_MESSAGE:
        return isinstance(caps.get("sampling"), dict)
    if method == ROOTS_LIST:
        return isinstance(caps.get("roots"), dict)
    return False
