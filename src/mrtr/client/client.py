"""`Client`: typed calls over any transport, and the MRTR loop that answers a server's questions.

`call_tool`, `get_prompt` and `read_resource` return the final result: when the server answers
`InputRequiredResult`, the loop resolves each input request through the registered handler
(elicitation, sampling, roots), then retries the original request with a new id, the answers
under the same keys, and `requestState` echoed byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..deadline import Deadline
from ..inputs import (
    ELICITATION_CREATE,
    INPUT_REQUIRED,
    ROOTS_LIST,
    SAMPLING_CREATE_MESSAGE,
    InputRequiredResult,
)
from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    INPUT_HANDLER_FAILED,
    JSONRPC_RESERVED,
    MAX_INPUT_REQUESTS_EXCEEDED,
    MAX_ROUNDS_EXCEEDED,
    NO_INPUT_HANDLER,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)
from ..protocol.types import (
    CallToolResult,
    CompleteResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    DiscoverResult,
    ElicitRequestParams,
    ElicitResult,
    GetPromptResult,
    Implementation,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListRootsRequestParams,
    ListRootsResult,
    ListToolsResult,
    ReadResourceResult,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS
from .options import ClientOptions, RoundInfo
from .subscription import Subscription, run_stream

if TYPE_CHECKING:
    from ..server.server import Server
    from ..transport.base import ClientTransport

logger = logging.getLogger("mrtr.client")

R = TypeVar("R", bound=BaseModel)
ElicitationHandler = Callable[[ElicitRequestParams], "ElicitResult | Awaitable[ElicitResult]"]
SamplingHandler = Callable[
    [CreateMessageRequestParams], "CreateMessageResult | Awaitable[CreateMessageResult]"
]
RootsHandler = Callable[[ListRootsRequestParams], "ListRootsResult | Awaitable[ListRootsResult]"]
ProgressCallback = Callable[[float, float | None, str | None], Any]
LogHandler = Callable[[dict[str, Any]], Any]

_PARAMS_MODELS: dict[str, type[BaseModel]] = {
    ELICITATION_CREATE: ElicitRequestParams,
    SAMPLING_CREATE_MESSAGE: CreateMessageRequestParams,
    ROOTS_LIST: ListRootsRequestParams,
}
_RESULT_MODELS: dict[str, type[BaseModel]] = {
    ELICITATION_CREATE: ElicitResult,
    SAMPLING_CREATE_MESSAGE: CreateMessageResult,
    ROOTS_LIST: ListRootsResult,
}
_HANDLER_NAMES = {
    ELICITATION_CREATE: "elicitation",
    SAMPLING_CREATE_MESSAGE: "sampling",
    ROOTS_LIST: "roots",
}


def _parse_result(method: str, model: type[R], result: Mapping[str, Any]) -> R:
    """`result` as `model`. What a server sends is checked like any input: a result that does
    not fit is its protocol violation, reported as an `McpError`, never a `ValidationError`."""
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = exc.error_count() - 1
        raise McpError(
            PROTOCOL_VIOLATION,
            f"{method}: the server's result is not a valid {model.__name__}: "
            + (f"{where}: " if where else "")
            + first["msg"]
            + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""),
        ) from None


@dataclass(slots=True)
class _FlowPosition:
    """Where an MRTR flow stands: the `requestState` and answers the next round carries."""

    state: str | None
    responses: dict[str, Any] | None

    def mark(self, error: McpError) -> McpError:
        """Record on `error` what resuming the flow needs (see `McpError.request_state`)."""
        if self.state is not None or self.responses:
            error.request_state = self.state
            error.input_responses = dict(self.responses) if self.responses else None
        return error


class InputRequiredError(Exception):
    """With `auto_fulfill=False`: the server needs input; `result` says what it asked."""

    def __init__(self, result: InputRequiredResult) -> None:
        keys = ", ".join(result.input_requests or {}) or "none"
        super().__init__(f"the server needs input before it can complete (keys: {keys})")
        self.result = result


class InputHandlerError(McpError):
    """A registered input handler failed (or is missing) for one of the server's questions."""

    def __init__(self, code: int, message: str, key: str, method: str) -> None:
        super().__init__(code, message, {"key": key, "method": method})
        self.key = key
        self.method = method


class Client:
    """An MCP client. Use `Client.in_memory(server)`, `Client.http(url)` or
    `Client.stdio(command)` as an async context manager."""

    def __init__(
        self,
        transport: ClientTransport,
        *,
        options: ClientOptions | None = None,
        client_info: Implementation | None = None,
        elicitation_handler: ElicitationHandler | None = None,
        elicitation_modes: Sequence[str] = ("form",),
        sampling_handler: SamplingHandler | None = None,
        roots_handler: RootsHandler | None = None,
        log_handler: LogHandler | None = None,
        protocol_version: str = LATEST_PROTOCOL_VERSION,
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        self.transport = transport
        self._extra_capabilities = dict(capabilities or {})
        self.options = options or ClientOptions()
        self.client_info = client_info or Implementation(name="mrtr-client", version="0.1.0")
        self._protocol_version = protocol_version
        self._handlers: dict[str, Callable[[Any], Any]] = {}
        self._elicitation_modes: tuple[str, ...] = ("form",)
        self._log_handler = log_handler
        self._ids = itertools.count(1)
        self._progress: dict[str | int, ProgressCallback] = {}
        self._subscriptions: dict[jsonrpc.RequestId, Subscription] = {}
        self._meta: dict[str, Any] = {}
        self._connected = False
        if elicitation_handler is not None:
            self.set_elicitation_handler(elicitation_handler, modes=elicitation_modes)
        if sampling_handler is not None:
            self.set_sampling_handler(sampling_handler)
        if roots_handler is not None:
            self.set_roots_handler(roots_handler)
        self._rebuild_meta()

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def in_memory(cls, server: Server, **kwargs: Any) -> Client:
        """A client connected to `server` in this process (real JSON-RPC, no sockets)."""
        from ..transport.memory import MemoryTransport

        return cls(MemoryTransport(server), **kwargs)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        connect_attempts: int = 3,
        **kwargs: Any,
    ) -> Client:
        """A client for a Streamable HTTP endpoint (`http://host:port/mcp`).

        `connect_attempts`: how many times a request whose connection is refused (so nothing
        was sent) is tried, with a short backoff, before it fails.
        """
        from ..transport.http_client import HTTPTransport

        transport = HTTPTransport(
            url, headers=headers, timeout=timeout, connect_attempts=connect_attempts
        )
        return cls(transport, **kwargs)

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **kwargs: Any,
    ) -> Client:
        """A client that spawns `command args...` and speaks to it over stdin/stdout."""
        from ..transport.stdio_client import StdioTransport

        return cls(StdioTransport(command, list(args), env=env, cwd=cwd), **kwargs)

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the transport (the context manager does this)."""
        if not self._connected:
            await self.transport.connect(self._on_notification)
            self._connected = True

    async def close(self) -> None:
        """Close the transport (the context manager does this)."""
        if self._connected:
            self._connected = False
            await self.transport.close()

    # --- handlers and capabilities -----------------------------------------------------------

    def set_elicitation_handler(
        self, fn: ElicitationHandler, *, modes: Sequence[str] = ("form",)
    ) -> None:
        """Answer `elicitation/create`; `modes` are the modes it handles (`form`, `url`)."""
        bad = set(modes) - {"form", "url"} or (set() if modes else {"(none)"})
        if bad:
            raise ValueError(f"elicitation modes must be 'form' and/or 'url', not {sorted(bad)}")
        self._handlers[ELICITATION_CREATE] = fn
        self._elicitation_modes = tuple(modes)
        self._rebuild_meta()

    def set_sampling_handler(self, fn: SamplingHandler) -> None:
        """Answer `sampling/createMessage`."""
        self._handlers[SAMPLING_CREATE_MESSAGE] = fn
        self._rebuild_meta()

    def set_roots_handler(self, fn: RootsHandler) -> None:
        """Answer `roots/list`."""
        self._handlers[ROOTS_LIST] = fn
        self._rebuild_meta()

    @property
    def capabilities(self) -> dict[str, Any]:
        """The `clientCapabilities` sent on every request: those the registered handlers
        declare, over the `capabilities=` given at construction (which is how an application
        that answers input requests itself, with `auto_fulfill=False`, declares what it can)."""
        caps: dict[str, Any] = dict(self._extra_capabilities)
        if ELICITATION_CREATE in self._handlers:
            caps["elicitation"] = {mode: {} for mode in self._elicitation_modes}
        if SAMPLING_CREATE_MESSAGE in self._handlers:
            caps["sampling"] = {}
        if ROOTS_LIST in self._handlers:
            caps["roots"] = {}
        return caps

    @property
    def protocol_version(self) -> str:
        """The protocol version new requests are sent with. A -32022 answer naming a version
        this client speaks switches it, for later requests (a flow already running keeps the
        version it started with, which its `requestState` is bound to)."""
        return self._protocol_version

    @protocol_version.setter
    def protocol_version(self, version: str) -> None:
        self._protocol_version = version
        self._rebuild_meta()

    def _rebuild_meta(self) -> None:
        self._meta = {
            meta_keys.PROTOCOL_VERSION: self._protocol_version,
            meta_keys.CLIENT_INFO: self.client_info.to_wire(),
            meta_keys.CLIENT_CAPABILITIES: self.capabilities,
        }

    # --- plain requests ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-request bound, applied below
    ) -> dict[str, Any]:
        """Send one request with the required `_meta` and return its raw result.

        Raises `McpError` for an error response, and `McpError(REQUEST_TIMEOUT)` when no answer
        comes within `timeout` (default `ClientOptions.request_timeout`; 0 = no limit), after
        cancelling the request.
        """
        result, _ = await self._request(method, params, meta, timeout, self._protocol_version)
        return result

    async def _request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 - a per-request bound, applied in _send
        version: str,
    ) -> tuple[dict[str, Any], str]:
        """`request` sent with protocol `version`; returns the result and the version that
        produced it (another one when the server asked for it with -32022)."""
        body = dict(params) if params else {}
        limit = self.options.request_timeout if timeout is None else timeout
        response = await self._send(method, body, meta, limit, version=version)
        if "error" in response:
            error = McpError.from_error(response["error"])
            retry = self._version_to_retry(error)
            if retry is None:
                raise error
            # The server named the versions it serves: switch to one we speak and ask again,
            # once, as a new request (versioning.md: the client SHOULD retry). Only this
            # request switches: another flow running on this client keeps its own version.
            logger.info("server asked for protocol version %s; retrying %s", retry, method)
            response = await self._send(method, body, meta, limit, version=retry)
            if "error" in response:
                raise McpError.from_error(response["error"])
            if self._protocol_version == version:
                self.protocol_version = retry  # later requests start from what worked
            version = retry
        result = response.get("result")
        if not isinstance(result, dict):
            raise McpError(PROTOCOL_VIOLATION, f"{method}: the server's result is not an object")
        return result, version

    async def _send(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None = None,
        version: str | None = None,
    ) -> dict[str, Any]:
        base = self._meta
        if version is not None and version != self._protocol_version:
            base = {**base, meta_keys.PROTOCOL_VERSION: version}
        body["_meta"] = {**base, **meta} if meta else base
        if request_id is None:
            request_id = next(self._ids)
        message = jsonrpc.request(request_id, method, body)
        try:
            if limit > 0:
                with Deadline(limit):
                    return await self.transport.request(message)
            return await self.transport.request(message)
        except TimeoutError:
            raise McpError(
                REQUEST_TIMEOUT, f"{method} got no response within {limit:g} s; request cancelled"
            ) from None

    @staticmethod
    def _version_to_retry(error: McpError) -> str | None:
        """The version to retry with after -32022: the newest the server lists that we speak.

        It may be the one just refused (a rolling deploy, a proxy in between): the request is
        retried once all the same, never more.
        """
        if error.code != UNSUPPORTED_PROTOCOL_VERSION or not isinstance(error.data, dict):
            return None
        supported = error.data.get("supported")
        if not isinstance(supported, list):
            return None
        for version in SUPPORTED_PROTOCOL_VERSIONS:  # newest first
            if version in supported:
                return version
        return None

    async def _typed(self, method: str, model: type[R], params: Mapping[str, Any] | None) -> R:
        return _parse_result(method, model, await self.request(method, params))

    async def discover(self) -> DiscoverResult:
        """`server/discover`: the server's versions, capabilities and identity."""
        return await self._typed("server/discover", DiscoverResult, None)

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        """One page of tools (`next_cursor` gives the next)."""
        return await self._typed("tools/list", ListToolsResult, _cursor(cursor))

    async def list_prompts(self, cursor: str | None = None) -> ListPromptsResult:
        """One page of prompts."""
        return await self._typed("prompts/list", ListPromptsResult, _cursor(cursor))

    async def list_resources(self, cursor: str | None = None) -> ListResourcesResult:
        """One page of resources."""
        return await self._typed("resources/list", ListResourcesResult, _cursor(cursor))

    async def list_resource_templates(
        self, cursor: str | None = None
    ) -> ListResourceTemplatesResult:
        """One page of resource templates."""
        return await self._typed(
            "resources/templates/list", ListResourceTemplatesResult, _cursor(cursor)
        )

    async def complete(
        self,
        ref: Mapping[str, Any],
        argument: Mapping[str, str],
        context_arguments: Mapping[str, str] | None = None,
    ) -> CompleteResult:
        """`completion/complete` for a prompt or resource-template argument."""
        params: dict[str, Any] = {"ref": dict(ref), "argument": dict(argument)}
        if context_arguments:
            params["context"] = {"arguments": dict(context_arguments)}
        return await self._typed("completion/complete", CompleteResult, params)

    # --- MRTR calls ----------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        progress_callback: ProgressCallback | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CallToolResult:
        """Call a tool and return its final result, answering the server's questions."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return await self._mrtr(
            "tools/call",
            name,
            params,
            CallToolResult,
            input_responses,
            request_state,
            progress_callback,
            meta,
        )

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> GetPromptResult:
        """Get a prompt, answering the server's questions."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return await self._mrtr(
            "prompts/get",
            name,
            params,
            GetPromptResult,
            input_responses,
            request_state,
            None,
            meta,
        )

    async def read_resource(
        self,
        uri: str,
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ReadResourceResult:
        """Read a resource, answering the server's questions."""
        return await self._mrtr(
            "resources/read",
            uri,
            {"uri": uri},
            ReadResourceResult,
            input_responses,
            request_state,
            None,
            meta,
        )

    async def _mrtr(
        self,
        method: str,
        target: str,
        params: dict[str, Any],
        model: type[R],
        responses: Mapping[str, Any] | None,
        state: str | None,
        progress: ProgressCallback | None,
        meta: Mapping[str, Any] | None,
    ) -> R:
        config = self.options.input_required
        token: str | None = None
        if progress is not None:
            token = f"progress-{next(self._ids)}"
            self._progress[token] = progress
            meta = {**(meta or {}), meta_keys.PROGRESS_TOKEN: token}
        budget = config.max_total_timeout
        position = _FlowPosition(state, dict(responses) if responses else None)
        try:
            if budget <= 0:
                return await self._loop(method, target, params, model, position, meta)
            with Deadline(budget):
                return await self._loop(method, target, params, model, position, meta)
        except TimeoutError:
            raise position.mark(
                McpError(
                    REQUEST_TIMEOUT,
                    f"{method} {target!r} did not complete within max_total_timeout "
                    f"({budget:g} s); the request in flight was cancelled",
                )
            ) from None
        except McpError as error:
            position.mark(error)  # whatever ended the flow, it can be resumed from here
            raise
        finally:
            if token is not None:
                self._progress.pop(token, None)

    async def _loop(
        self,
        method: str,
        target: str,
        base: dict[str, Any],
        model: type[R],
        position: _FlowPosition,
        meta: Mapping[str, Any] | None,
    ) -> R:
        config = self.options.input_required
        # The flow keeps the version it started with: its requestState is bound to it, so a
        # switch made meanwhile by another flow on this client must not reach its rounds.
        version = self._protocol_version
        rounds = 0
        backoff = 0.05
        while True:
            params = dict(base)
            if position.responses:
                params["inputResponses"] = position.responses
            if position.state is not None:
                params["requestState"] = position.state
            started = time.perf_counter()
            result, version = await self._request(
                method, params, meta, config.round_timeout, version
            )
            kind = result.get("resultType", "complete")
            if kind == "complete":
                return _parse_result(method, model, result)
            if kind != INPUT_REQUIRED:
                raise McpError(
                    PROTOCOL_VIOLATION, f"{method}: the server sent an unknown resultType {kind!r}"
                )
            if not config.auto_fulfill:
                raise InputRequiredError(_parse_result(method, InputRequiredResult, result))
            requests = result.get("inputRequests")
            state = result.get("requestState")
            if state is not None and not isinstance(state, str):
                raise McpError(
                    PROTOCOL_VIOLATION, f"{method}: the server's requestState is not a string"
                )
            if not requests and state is None:
                raise McpError(
                    PROTOCOL_VIOLATION,
                    f"{method}: input_required result with neither inputRequests nor requestState",
                )
            # From here on the flow resumes from this state, with the answers gathered so far.
            answers: dict[str, Any] = {}
            position.state, position.responses = state, answers
            rounds += 1
            if rounds > config.max_rounds:
                raise McpError(
                    MAX_ROUNDS_EXCEEDED,
                    f"{method} {target!r}: the server still asked for input after "
                    f"{config.max_rounds} rounds (max_rounds); giving up",
                )
            if requests:
                await self._resolve(requests, answers)
            else:
                # Only a state: the server says "not yet". Back off instead of busy-polling.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.25)
            self._report_round(method, target, rounds, requests or {}, state, started)

    def _report_round(
        self,
        method: str,
        target: str,
        round_number: int,
        requests: Mapping[str, Any],
        state: str | None,
        started: float,
    ) -> None:
        if self.options.on_round is None and not logger.isEnabledFor(logging.DEBUG):
            return  # nobody is watching: skip building the report
        info = RoundInfo(
            method=method,
            target=target,
            round=round_number,
            keys=tuple(requests),
            state_size=len(state) if state is not None else 0,
            elapsed=time.perf_counter() - started,
        )
        if self.options.on_round is not None:
            self.options.on_round(info)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %r round %d: asked %s, state %d chars, %.1f ms",
                method,
                target,
                info.round,
                list(info.keys),
                info.state_size,
                info.elapsed * 1000,
            )

    async def _resolve(self, requests: Any, answers: dict[str, Any]) -> None:
        """Answer every input request of one round, concurrently, into `answers` (which holds
        the answers that were given even when another handler fails)."""
        if not isinstance(requests, dict):
            raise McpError(PROTOCOL_VIOLATION, "inputRequests from the server is not an object")
        cap = self.options.input_required.max_input_requests
        if len(requests) > cap:
            # Refused before any handler runs: each may prompt a person or call a model.
            raise McpError(
                MAX_INPUT_REQUESTS_EXCEEDED,
                f"the server asked {len(requests)} questions in one round; this client answers "
                f"at most {cap} (max_input_requests), so none was asked",
                {"count": len(requests), "max": cap},
            )
        if len(requests) == 1:
            ((key, request),) = requests.items()
            answers[key] = await self._answer(key, request)
            return
        tasks: dict[str, asyncio.Task[dict[str, Any]]] = {}
        try:
            async with asyncio.TaskGroup() as group:
                for key, request in requests.items():
                    tasks[key] = group.create_task(self._answer(key, request))
        except BaseExceptionGroup as group_error:
            first = group_error.exceptions[0]
            raise first from first.__cause__  # keeps the handler's own exception as the cause
        finally:
            for key, task in tasks.items():  # in the server's order, as they were asked
                if task.done() and not task.cancelled() and task.exception() is None:
                    answers[key] = task.result()

    async def _answer(self, key: str, request: Any) -> dict[str, Any]:
        """Dispatch one input request to its handler; return the bare result."""
        method = request.get("method") if isinstance(request, dict) else None
        if not isinstance(method, str):
            raise InputHandlerError(
                PROTOCOL_VIOLATION, f"input request {key!r} has no method", key, str(method)
            )
        handler = self._handlers.get(method)
        if handler is None:
            known = _HANDLER_NAMES.get(method)
            why = (
                f"no {known} handler is registered"
                if known
                else "this method is not an input request this client knows"
            )
            raise InputHandlerError(
                NO_INPUT_HANDLER,
                f"the server asked for input {key!r} with {method}, but {why}",
                key,
                method,
            )
        try:
            params = _PARAMS_MODELS[method].model_validate(request.get("params") or {})
        except Exception as exc:
            raise InputHandlerError(
                PROTOCOL_VIOLATION,
                f"input request {key!r} ({method}) has invalid params: {exc}",
                key,
                method,
            ) from None
        try:
            answer = handler(params)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            # An McpError keeps its code unless it is a JSON-RPC one, which would read as the
            # server's answer; either way the error names the input that failed.
            own = exc.code if isinstance(exc, McpError) else None
            raise InputHandlerError(
                own if own is not None and own not in JSONRPC_RESERVED else INPUT_HANDLER_FAILED,
                f"the {_HANDLER_NAMES[method]} handler failed on input {key!r}: "
                f"{type(exc).__name__}: {exc}",
                key,
                method,
            ) from exc
        if isinstance(answer, dict):
            try:
                answer = _RESULT_MODELS[method].model_validate(answer)
            except ValidationError as exc:
                raise InputHandlerError(
                    INPUT_HANDLER_FAILED,
                    f"the {_HANDLER_NAMES[method]} handler's answer to input {key!r} is not a "
                    f"valid {_RESULT_MODELS[method].__name__}: {exc.errors()[0]['msg']}",
                    key,
                    method,
                ) from None
        if not isinstance(answer, BaseModel):
            raise InputHandlerError(
                INPUT_HANDLER_FAILED,
                f"the {_HANDLER_NAMES[method]} handler returned {type(answer).__name__} for "
                f"input {key!r}; expected {_RESULT_MODELS[method].__name__}",
                key,
                method,
            )
        bare = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        bare.pop("resultType", None)
        bare.pop("_meta", None)
        return bare

    # --- notifications -------------------------------------------------------------------------

    # --- subscriptions -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def listen(
        self,
        *,
        tools: bool = False,
        prompts: bool = False,
        resources: bool = False,
        resource_uris: Sequence[str] = (),
        timeout: float = 30.0,  # noqa: ASYNC109 - bounds the wait for the acknowledgement only
    ) -> AsyncIterator[Subscription]:
        """Open a `subscriptions/listen` stream for the changes named; iterate it for `Change`s.

        The block starts once the server acknowledged (within `timeout` seconds), so a change
        made after that is never missed; `subscription.honoured` says what the server agreed
        to send. Leaving the block cancels the stream.
        """
        wanted: dict[str, Any] = {}
        if tools:
            wanted["toolsListChanged"] = True
        if prompts:
            wanted["promptsListChanged"] = True
        if resources:
            wanted["resourcesListChanged"] = True
        if resource_uris:
            wanted["resourceSubscriptions"] = list(resource_uris)
        request_id = next(self._ids)
        subscription = Subscription()
        self._subscriptions[request_id] = subscription

        async def stream() -> dict[str, Any]:
            body = {"notifications": wanted}
            response = await self._send("subscriptions/listen", body, None, 0, request_id)
            if "error" in response:
                raise McpError.from_error(response["error"])
            return response

        task = asyncio.create_task(run_stream(subscription, stream))
        try:
            try:
                with Deadline(timeout):
                    await subscription.acknowledged()
            except TimeoutError:
                raise McpError(
                    REQUEST_TIMEOUT,
                    f"subscriptions/listen was not acknowledged within {timeout:g} s",
                ) from None
            yield subscription
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._subscriptions.pop(request_id, None)

    async def _on_notification(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            logger.warning("ignoring a %.80r notification whose params are not an object", method)
            return
        meta = params.get("_meta")
        if isinstance(meta, dict) and meta_keys.SUBSCRIPTION_ID in meta:
            subscription_id = meta[meta_keys.SUBSCRIPTION_ID]
            known = isinstance(subscription_id, str | int)
            subscription = self._subscriptions.get(subscription_id) if known else None
            if subscription is not None:
                subscription.deliver(message)
            return
        if method == "notifications/progress":
            token = params.get("progressToken")
            valid = isinstance(token, str | int)
            callback = self._progress.get(token) if valid else None  # type: ignore[arg-type]
            if callback is not None:
                progress, total = params.get("progress", 0), params.get("total")
                text = params.get("message")
                if not (
                    _is_number(progress)
                    and (total is None or _is_number(total))
                    and (text is None or isinstance(text, str))
                ):
                    logger.warning("ignoring a malformed progress notification: %.200r", params)
                    return
                outcome = callback(progress, total, text)
                if inspect.isawaitable(outcome):
                    await outcome
        elif method == "notifications/message":
            if self._log_handler is not None:
                outcome = self._log_handler(params)
                if inspect.isawaitable(outcome):
                    await outcome
            else:
                logger.info("server log [%s]: %s", params.get("level"), params.get("data"))


def _cursor(cursor: str | None) -> dict[str, Any] | None:
    return {"cursor": cursor} if cursor is not None else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
