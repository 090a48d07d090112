"""The live asker: how a handler's question is answered on a legacy (`initialize`) session.

A 2026-07-28 request answers a question by replay (the handler stops, the client retries with
the answer). A legacy client cannot retry that way, but it can be asked: on its session the
replay engine is given a `LiveAsker` (replay rule 10), which sends the question to the client
as a real request (`elicitation/create`, `sampling/createMessage`, `roots/list`) on the stream
of the request being handled, awaits the response, and validates it as an `inputResponses`
entry would be. The same piece drives a manual-style handler (`InputRequiredResult`) on a
legacy session: it asks every input request and hands the answers back (see `_engine/rounds.py`).

Rules:

1. Nothing is asked that the client did not declare at `initialize`: -32021, as on the modern
   path, listing what is missing (all of it, for several questions asked together).
2. Each wait for the client is bounded by `round_timeout`; past it the client is told the
   request is cancelled and the handler's request fails with -32603 naming the limit.
3. An answer that is not the result the question calls for is -32602 naming the question's
   key; a JSON-RPC error from the client, or a session that ends first, is -32603 naming the
   method and what the client said. Local error codes never reach the client.
4. Questions asked together (`ctx.ask`, a manual handler's `inputRequests`) go out at once;
   the first failure cancels the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from ..inputs import ELICITATION_CREATE, ROOTS_LIST, SAMPLING_CREATE_MESSAGE, InputRequest
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    REQUEST_TIMEOUT,
    McpError,
    invalid_params,
)
from ..protocol.types import CreateMessageResult, ElicitResult, ListRootsResult
from ._engine.capabilities import Capable, require_capabilities
from ._engine.validation import describe_validation_error

if TYPE_CHECKING:
    from .session import LegacySession

#: Sends one JSON-RPC message on the stream of the request being handled.
Send = Callable[[dict[str, Any]], Awaitable[None]]

T = TypeVar("T")

_RESULTS: dict[str, type[pydantic.BaseModel]] = {
    ELICITATION_CREATE: ElicitResult,
    SAMPLING_CREATE_MESSAGE: CreateMessageResult,
    ROOTS_LIST: ListRootsResult,
}

#: Elicitation modes (and the `mode` field) arrived in this revision; earlier ones have only
#: the form, without the field.
_ELICITATION_MODES_SINCE = "2025-11-25"


def session_meta(session: LegacySession, params: Mapping[str, Any]) -> dict[str, Any]:
    """What a modern request would say in its `_meta`, for a request of a legacy session.

    The session's negotiated version, capabilities, client info and log level (every level
    until `logging/setLevel` chose one), and the request's own progress token.
    """
    meta: dict[str, Any] = {
        meta_keys.PROTOCOL_VERSION: session.protocol_version,
        meta_keys.CLIENT_CAPABILITIES: session.client_capabilities,
        meta_keys.LOG_LEVEL: session.log_level or meta_keys.LOG_LEVELS[0],
    }
    if session.client_info is not None:
        meta[meta_keys.CLIENT_INFO] = session.client_info
    own = params.get("_meta")
    if isinstance(own, dict) and meta_keys.PROGRESS_TOKEN in own:
        meta[meta_keys.PROGRESS_TOKEN] = own[meta_keys.PROGRESS_TOKEN]
    return meta


class LiveAsker:
    """Asks a legacy session's client now (see the module rules)."""

    __slots__ = ("_ctx", "_send", "_session", "_timeout")

    def __init__(
        self,
        ctx: Capable,
        session: LegacySession,
        send: Send | None,
        timeout: float,
    ) -> None:
        self._ctx = ctx
        self._session = session
        self._send = send
        self._timeout = timeout

    async def ask(self, key: str, method: str, params: dict[str, Any]) -> pydantic.BaseModel:
        """Ask one question now; the client's answer, validated."""
        _, model = await self._ask(key, method, params)
        return model

    async def ask_all(
        self, questions: Mapping[str, tuple[str, dict[str, Any]]]
    ) -> dict[str, pydantic.BaseModel]:
        """Ask several questions at once (rule 4); `{key: validated answer}`."""
        self._require(dict(questions))
        values = await _together([self.ask(key, *question) for key, question in questions.items()])
        return dict(zip(questions, values, strict=True))

    async def answer_requests(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """Ask a manual-style handler's input requests; `{key: result}` as the client sent it."""
        self._require({key: (r.method, r.params) for key, r in requests.items()})
        answers = await _together(
            [self._ask(key, r.method, r.params) for key, r in requests.items()]
        )
        return {key: raw for key, (raw, _) in zip(requests, answers, strict=True)}

    def _require(self, questions: dict[str, tuple[str, dict[str, Any]]]) -> None:
        require_capabilities(self._ctx, questions)

    async def _ask(
        self, key: str, method: str, params: dict[str, Any]
    ) -> tuple[dict[str, Any], pydantic.BaseModel]:
        self._require({key: (method, params)})
        session = self._session
        version = session.protocol_version or ""
        if (
            method == ELICITATION_CREATE
            and version < _ELICITATION_MODES_SINCE
            and params.get("mode") == "form"
        ):
            params = {name: value for name, value in params.items() if name != "mode"}
        try:
            raw = await session.request(method, params, send=self._send, timeout=self._timeout)
        except McpError as exc:
            raise self._failed(key, method, exc) from None
        model = _RESULTS[method]
        try:
            return raw, model.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise invalid_params(
                f"the client's answer to {method} (input key {key!r}) is not a valid "
                f"{model.__name__}: {describe_validation_error(exc)}"
            ) from None

    def _failed(self, key: str, method: str, exc: McpError) -> McpError:
        what = f"{self._ctx.method} could not ask the client ({method}, input key {key!r})"
        if exc.code == REQUEST_TIMEOUT:
            return McpError(
                INTERNAL_ERROR,
                f"{what}: no answer within round_timeout ({self._timeout:g} s)",
            )
        if exc.code == CONNECTION_CLOSED:
            return McpError(INTERNAL_ERROR, f"{what}: the session ended before it answered")
        return McpError(
            INTERNAL_ERROR,
            f"{what}: it answered with error {exc.code}: {exc.message}",
            {"method": method, "error": exc.to_error()},
        )


async def _together(calls: list[Awaitable[T]]) -> list[T]:
    """Await `calls` concurrently; the first failure cancels the rest and is raised."""
    if len(calls) == 1:
        return [await calls[0]]
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class LiveAsking:
    """The legacy era's `SessionAsking` for a request's context: `_meta` from the session, and
    questions asked on it now."""

    __slots__ = ()

    def meta(self, session: LegacySession, params: Mapping[str, Any]) -> dict[str, Any]:
        """`session_meta(session, params)`."""
        return session_meta(session, params)

    def asker(
        self, ctx: Capable, session: LegacySession, send: Send | None, timeout: float
    ) -> LiveAsker:
        """A `LiveAsker` for the request."""
        return LiveAsker(ctx, session, send, timeout)


#: The one `LiveAsking` (it holds no state).
LIVE = LiveAsking()
