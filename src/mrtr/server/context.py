"""`RequestContext`: what a handler knows about its request and how it talks back.

Besides logging and progress, the context is where a handler asks the client for input:
`await ctx.elicit(...)`, `ctx.sample(...)`, `ctx.list_roots()`, `ctx.ask({...})`, and keeps
work from repeating across rounds with `ctx.once(...)`. See `replay.py` for the rules.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

import orjson
import pydantic

from ..inputs import (
    ELICITATION_CREATE,
    ROOTS_LIST,
    SAMPLING_CREATE_MESSAGE,
    InputRequest,
    make_input_request_for_elicitation,
    make_input_request_for_roots,
    make_input_request_for_sampling,
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
    TextContent,
)
from .replay import (
    MISSING,
    Batch,
    Question,
    RoundState,
    convert_answer,
    typed_elicit_converter,
)

if TYPE_CHECKING:
    from .server import Server

T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)

#: Sends one JSON-RPC notification on the stream of the request being handled.
NotifySink = Callable[[dict[str, Any]], Awaitable[None]]

_KEY_PREFIX = {ELICITATION_CREATE: "elicit", SAMPLING_CREATE_MESSAGE: "sample", ROOTS_LIST: "roots"}


_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@functools.lru_cache(maxsize=256)
def _schema_of(model: type[Any]) -> dict[str, Any]:
    # Cached: a schema is built once per model, not on every round that replays the ask.
    schema = pydantic.TypeAdapter(model).json_schema()
    schema.pop("title", None)
    return schema


class RequestContext:
    """The request being handled: its metadata, the client's capabilities, and MRTR."""

    __slots__ = (
        "_notify",
        "_progress",
        "_questions",
        "_state",
        "input_responses",
        "meta",
        "method",
        "params",
        "request_id",
        "server",
        "transport_info",
    )

    def __init__(
        self,
        server: Server,
        request_id: jsonrpc.RequestId,
        method: str,
        params: dict[str, Any],
        notify: NotifySink | None = None,
        transport_info: Any = None,
        state: RoundState | None = None,
        input_responses: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.request_id = request_id
        self.method = method
        self.params = params
        self.meta: dict[str, Any] = params.get("_meta") or {}
        self.transport_info = transport_info
        self.input_responses: dict[str, Any] = input_responses or {}
        self._notify = notify
        self._state = state if state is not None else RoundState()
        self._questions: dict[str, Question[Any]] = {}
        self._progress: float | None = None

    # --- what the request says -----------------------------------------------------------

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
    def round(self) -> int:
        """How many `InputRequiredResult`s this request has been through (0 on the first try)."""
        return self._state.round

    @property
    def request_state(self) -> str | None:
        """The plaintext a manual-style handler put in its last `InputRequiredResult`."""
        return self._state.user

    def client_supports(self, method: str, *, url_mode: bool = False) -> bool:
        """Whether the client declared the capability an input request of `method` needs."""
        caps = self.client_capabilities
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

    # --- notifications -------------------------------------------------------------------

    @property
    def replaying(self) -> bool:
        """True while the handler re-runs code an earlier round already ran (replay rule 7).

        `log` and `report_progress` stay silent meanwhile: the client already heard them.
        """
        return self._state.replaying

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send a log message to the client, if it asked for this level or lower on this request.

        Nothing is sent while `replaying`: the client got it in the round that first ran it.
        """
        rank = meta_keys.LOG_LEVEL_RANK
        if level not in rank:
            # Checked before anything else so the mistake shows whatever the client asked for.
            raise ValueError(f"unknown log level {level!r}: use one of {', '.join(rank)}")
        wanted = self.log_level
        if wanted is None or self._notify is None or self.replaying:
            return
        if rank[level] < rank.get(wanted, 0):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._notify(jsonrpc.notification("notifications/message", params))

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send a progress notification, if the request carried a progress token.

        Progress must increase; a value not above the last one sent is dropped, and nothing is
        sent while `replaying`.
        """
        token = self.progress_token
        if token is None or self._notify is None or self.replaying:
            return
        if self._progress is not None and progress <= self._progress:
            return
        self._progress = progress
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._notify(jsonrpc.notification("notifications/progress", params))

    # --- asking the client (MRTR) ----------------------------------------------------------

    def _register(self, question: Question[Any]) -> None:
        existing = self._questions.get(question.key)
        if existing is not None and existing.digest != question.digest:
            raise ValueError(
                f"input key {question.key!r} is already used for another question in this request"
            )
        self._questions[question.key] = question

    def _key(self, method: str, key: str | None) -> str:
        if key is not None:
            return key
        return f"{_KEY_PREFIX[method]}-{len(self._questions) + 1}"

    def pending(self) -> dict[str, Question[Any]]:
        """Questions created in this run that still have no answer."""
        return {k: q for k, q in self._questions.items() if q.answer() is MISSING}

    def question(
        self,
        request: InputRequest,
        *,
        key: str | None = None,
        convert: Callable[[str, Any], T] | None = None,
    ) -> Question[T]:
        """Ask any input request; awaiting the question gives the answer (see `replay.py`)."""
        return self._ask(request.method, request.params, key, convert)

    def _ask(
        self,
        method: str,
        params: dict[str, Any],
        key: str | None,
        convert: Callable[[str, Any], T] | None = None,
    ) -> Question[T]:
        conv = convert if convert is not None else convert_answer(method)
        return Question(self, self._key(method, key), method, params, conv)

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

    def elicit(
        self,
        request: ElicitRequestParams | str,
        schema: type[Any] | dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> Question[Any]:
        """Ask the user (form mode).

        `ctx.elicit(ElicitRequestParams(...))` and `ctx.elicit("message", {json schema})` give an
        `ElicitResult`; `ctx.elicit("message", Model)` gives `ElicitResultTyped[Model]` with the
        content validated into `Model`.
        """
        if isinstance(request, ElicitRequestParams):
            return self.question(make_input_request_for_elicitation(request), key=key)
        if isinstance(schema, dict) or schema is None:
            # The common case builds the wire params directly: no model round trip per ask.
            params = {
                "mode": "form",
                "message": request,
                "requestedSchema": schema if schema is not None else _EMPTY_SCHEMA,
            }
            return self._ask(ELICITATION_CREATE, params, key)
        form = ElicitRequestParams(
            message=request,
            mode="form",
            requested_schema=_schema_of(schema),  # type: ignore[arg-type]
        )
        return self.question(
            make_input_request_for_elicitation(form),
            key=key,
            convert=typed_elicit_converter(schema),  # type: ignore[arg-type]
        )

    def elicit_url(
        self, message: str, url: str, *, key: str | None = None
    ) -> Question[ElicitResult]:
        """Send the user to `url` (URL mode) and learn whether they went through with it."""
        params = ElicitRequestParams(message=message, mode="url", url=url)
        return self.question(make_input_request_for_elicitation(params), key=key)

    def sample(
        self,
        prompt: str | list[SamplingMessage] | CreateMessageRequestParams,
        *,
        max_tokens: int = 1000,
        system_prompt: str | None = None,
        key: str | None = None,
    ) -> Question[CreateMessageResult]:
        """Ask the client's LLM for a completion (`sampling/createMessage`)."""
        if isinstance(prompt, CreateMessageRequestParams):
            params = prompt
        else:
            messages = (
                [SamplingMessage(role="user", content=TextContent(text=prompt))]
                if isinstance(prompt, str)
                else prompt
            )
            params = CreateMessageRequestParams(
                messages=messages, max_tokens=max_tokens, system_prompt=system_prompt
            )
        return self.question(make_input_request_for_sampling(params), key=key)

    def list_roots(self, *, key: str | None = None) -> Question[ListRootsResult]:
        """Ask the client for its roots (`roots/list`)."""
        return self.question(make_input_request_for_roots(), key=key)

    def ask(self, requests: Mapping[str, InputRequest]) -> Batch:
        """Ask several questions in one round; awaiting gives `{key: answer}`."""
        return Batch({key: self.question(req, key=key) for key, req in requests.items()})

    async def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` (sync or async) once across all rounds of this request.

        Its result must be JSON-serializable: it is recorded in the sealed state and returned
        as recorded on every later round.
        """
        store = self._state.once
        if key in store:
            return store[key]
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        try:
            recorded = orjson.loads(orjson.dumps(value))
        except TypeError as exc:
            raise TypeError(
                f"ctx.once({key!r}): the result must be JSON-serializable: {exc}"
            ) from None
        store[key] = recorded
        return recorded
