"""`Client`: typed calls over any transport, and the MRTR loop that answers a server's questions.

`call_tool`, `get_prompt` and `read_resource` return the final result: when the server answers
`InputRequiredResult`, the loop resolves each input request through the registered handler
(elicitation, sampling, roots), then retries the original request with a new id, the answers
under the same keys, and `requestState` echoed byte for byte.

The same calls work on a legacy (`initialize`-based) server: with `ClientOptions.protocol`
`"auto"` (the default) the first exchange finds out the server's era (`era.py`), and on a
legacy server the client opens a session (`legacy.py`) and answers the server's own
`elicitation/create`, `sampling/createMessage` and `roots/list` requests through the same
handlers (`input_handlers.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

import mrtr.client.era as eras

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
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    LEGACY_ONLY_SERVER,
    MAX_INPUT_REQUESTS_EXCEEDED,
    MAX_ROUNDS_EXCEEDED,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    SESSION_EXPIRED,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)
from ..protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from ..protocol.tasks import RESULT_TYPE_TASK
from ..protocol.types import (
    CallToolResult,
    CompleteResult,
    DiscoverResult,
    GetPromptResult,
    Implementation,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    Tool,
)
from ..protocol.versions import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS
from .era import LEGACY, MODERN, Era
from .input_handlers import (
    ElicitationHandler,
    InputHandlers,
    RootsHandler,
    SamplingHandler,
)
from .input_handlers import (
    InputHandlerError as InputHandlerError,  # re-exported: applications import it from here
)
from .legacy import (
    LegacyListener,
    ServerHandshake,
    accept_initialize,
    honoured,
    initialize_params,
    legacy_meta,
)
from .options import ClientOptions, RoundInfo
from .pagination import DEFAULT_MAX_PAGES, pages
from .subscription import ACKNOWLEDGED, Subscription, run_stream
from .tasks import (
    TaskChannel,
    TaskCreated,
    TaskHandle,
    TaskStatusCallback,
    drive,
    keep_task,
    read_task,
)
from .tool_output import KnownOutput, first_problem, known_output, read_output

if TYPE_CHECKING:
    from ..server.endpoint import ServerEndpoint
    from ..transport.base import ClientTransport
    from .auth.oauth import OAuth
    from .config import ConfigSource, ServerConfig

logger = logging.getLogger("mrtr.client")

R = TypeVar("R", bound=BaseModel)
ProgressCallback = Callable[[float, float | None, str | None], Any]
LogHandler = Callable[[dict[str, Any]], Any]
#: What `_loop` does with a `CreateTaskResult`: returns the final result's raw object.
TaskHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: A transport's optional `request_within(message, limit)`: `request`, bounded as a whole by
#: `limit` seconds (0: unbounded), raising `TimeoutError` past it.
BoundedRequest = Callable[[dict[str, Any], float], Awaitable[dict[str, Any]]]

_DISCOVER = "server/discover"
#: What bounds an MRTR flow that has no `max_total_timeout`.
_UNBOUNDED = contextlib.nullcontext()
#: Session-wide notifications of a legacy server that `client.listen` blocks receive.
_LIST_CHANGES = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)


def _parse_result(method: str, model: type[R], result: Mapping[str, Any]) -> R:
    """`result` as `model`. What a server sends is checked like any input: a result that does
    not fit is its protocol violation, reported as an `McpError`, never a `ValidationError`."""
    try:
        # The model's validator itself: `model_validate` adds only a Python frame and the
        # checks of options not given here (about a third of a small result's validation).
        return model.__pydantic_validator__.validate_python(result)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise McpError(
            PROTOCOL_VIOLATION,
            f"{method}: the server's result is not a valid {model.__name__}: {first_problem(exc)}",
        ) from None


def _mark(error: McpError, state: str | None, answers: dict[str, Any] | None) -> McpError:
    """Record on `error` what resuming the flow needs (see `McpError.request_state`): the
    `requestState` and the answers the next round would have carried."""
    if state is not None or answers:
        error.request_state = state
        error.input_responses = dict(answers) if answers else None
    return error


class _ProbeTimeout(Exception):
    """The server did not answer the `server/discover` probe within `probe_timeout`; `probe`
    is the probe's exchange, still waiting for a late answer."""

    def __init__(self, probe: asyncio.Future[dict[str, Any]]) -> None:
        super().__init__("no answer to server/discover")
        self.probe = probe


class InputRequiredError(Exception):
    """With `auto_fulfill=False`: the server needs input; `result` says what it asked."""

    def __init__(self, result: InputRequiredResult) -> None:
        keys = ", ".join(result.input_requests or {}) or "none"
        super().__init__(f"the server needs input before it can complete (keys: {keys})")
        self.result = result


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
        log_level: str | None = None,
        protocol_version: str = LATEST_PROTOCOL_VERSION,
        capabilities: Mapping[str, Any] | None = None,
    ) -> None:
        if log_level is not None and log_level not in meta_keys.LOG_LEVEL_RANK:
            raise ValueError(
                f"log_level must be one of {', '.join(meta_keys.LOG_LEVELS)}, not {log_level!r}"
            )
        self.transport = transport
        self._extra_capabilities = dict(capabilities or {})
        self.options = options or ClientOptions()
        self.client_info = client_info or Implementation(name="mrtr-client", version="0.1.0")
        self._protocol_version = protocol_version
        self._inputs = InputHandlers()
        self._log_handler = log_handler
        self._log_level = log_level
        # The era: None until the first exchange settles it (see `_settle`).
        self._era: Era | None = None
        self._era_key = eras.endpoint_key(transport)
        self._era_lock = asyncio.Lock()
        # `protocol="modern"` against a server found to speak only legacy revisions: the
        # error every request raises from then on, unsent.
        self._legacy_only: McpError | None = None
        self._legacy: ServerHandshake | None = None
        self._legacy_generation = 0  # bumped by each initialize, so one expiry re-opens once
        self._legacy_listeners: list[LegacyListener] = []
        self._legacy_uri_counts: dict[str, int] = {}
        self._server_requests: dict[Any, asyncio.Task[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._progress: dict[str | int, ProgressCallback] = {}
        self._subscriptions: dict[jsonrpc.RequestId, Subscription] = {}
        self._meta: dict[str, Any] = {}
        self._connected = False
        # Each listed tool's outputSchema, by tool name, to read `CallToolResult.data` with.
        self._tool_outputs: dict[str, KnownOutput] = {}
        self._plain_task_hook: TaskHook | None = None
        self._within_for: object = None  # the transport `_within_fn` was looked up on
        self._within_fn: BoundedRequest | None = None
        if elicitation_handler is not None:
            self.set_elicitation_handler(elicitation_handler, modes=elicitation_modes)
        if sampling_handler is not None:
            self.set_sampling_handler(sampling_handler)
        if roots_handler is not None:
            self.set_roots_handler(roots_handler)
        self._rebuild_meta()

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def in_memory(cls, server: ServerEndpoint, **kwargs: Any) -> Client:
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
        auth: OAuth | None = None,
        **kwargs: Any,
    ) -> Client:
        """A client for a Streamable HTTP endpoint (`http://host:port/mcp`), or an HTTP+SSE
        one of 2024-11-05 (`http://host:port/sse`, or found when `initialize` is refused).

        `connect_attempts`: how many times a request whose connection is refused (so nothing
        was sent) is tried, with a short backoff, before it fails. `auth`: authorization for a
        protected server (`mrtr.client.auth.OAuth`; default: `options.auth`).
        """
        from ..transport.http_client import HTTPTransport

        options = kwargs.get("options")
        if auth is None and options is not None:
            auth = options.auth
        transport = HTTPTransport(
            url, headers=headers, timeout=timeout, connect_attempts=connect_attempts, auth=auth
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

    @classmethod
    def from_config(cls, source: ConfigSource, name: str | None = None, **kwargs: Any) -> Client:
        """A client for one server of an MCP host configuration (`mcp.json`: a path, or its
        content as a dict; see `mrtr.client.config`): the one named, or the only one. For
        several at once, use `ClientGroup.from_config`. Keyword arguments go to `Client`.

        Raises `ValueError` when the entry is missing or invalid, or when `name` is None and
        the configuration holds several servers.
        """
        from .config import parse_config

        servers, invalid = parse_config(source)
        if name is None:
            every = [*servers, *invalid]
            if len(every) != 1:
                raise ValueError(
                    f"the configuration holds {len(every)} servers "
                    f"({', '.join(map(repr, every)) or 'none'}): pass name=... to pick one, "
                    "or open them all with ClientGroup.from_config"
                )
            name = every[0]
        if name in invalid:
            raise invalid[name]
        if name not in servers:
            raise ValueError(
                f"the configuration has no server {name!r} "
                f"(it has: {', '.join(map(repr, servers)) or 'none'})"
            )
        return cls.from_server_config(servers[name], **kwargs)

    @classmethod
    def from_server_config(cls, config: ServerConfig, **kwargs: Any) -> Client:
        """A client for one parsed configuration entry (stdio or Streamable HTTP)."""
        from .config import StdioServerConfig

        if isinstance(config, StdioServerConfig):
            env = dict(config.env) or None
            return cls.stdio(config.command, config.args, env=env, cwd=config.cwd, **kwargs)
        return cls.http(config.url, headers=dict(config.headers) or None, **kwargs)

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the transport (the context manager does this)."""
        if not self._connected:
            if _accepts_on_request(self.transport):
                await self.transport.connect(self._on_notification, on_request=self._on_request)
            else:  # a transport written before server requests existed
                await self.transport.connect(self._on_notification)
            self._connected = True

    async def close(self) -> None:
        """Close the transport (the context manager does this), ending a legacy session."""
        if self._connected:
            self._connected = False
            for task in list(self._server_requests.values()):
                task.cancel()
            end = getattr(self.transport, "end_legacy_session", None)
            if self._legacy is not None and end is not None:
                try:
                    await end()
                except Exception as exc:  # the session ends either way; the server may be gone
                    logger.info("ending the legacy session failed: %s", exc)
            self._legacy = None
            await self.transport.close()

    # --- handlers and capabilities -----------------------------------------------------------

    def set_elicitation_handler(
        self, fn: ElicitationHandler, *, modes: Sequence[str] = ("form",)
    ) -> None:
        """Answer `elicitation/create`; `modes` are the modes it handles (`form`, `url`)."""
        self._inputs.set_elicitation_modes(modes)
        self._inputs.set(ELICITATION_CREATE, fn)
        self._rebuild_meta()

    def set_sampling_handler(self, fn: SamplingHandler) -> None:
        """Answer `sampling/createMessage`."""
        self._inputs.set(SAMPLING_CREATE_MESSAGE, fn)
        self._rebuild_meta()

    def set_roots_handler(self, fn: RootsHandler) -> None:
        """Answer `roots/list`."""
        self._inputs.set(ROOTS_LIST, fn)
        self._rebuild_meta()

    @property
    def capabilities(self) -> dict[str, Any]:
        """The `clientCapabilities` sent on every request: those the registered handlers
        declare, over the `capabilities=` given at construction (which is how an application
        that answers input requests itself, with `auto_fulfill=False`, declares what it can),
        and the tasks extension unless `ClientOptions.tasks.enabled` is False."""
        caps = {**self._extra_capabilities, **self._inputs.capabilities(legacy=False)}
        if self.options.tasks.enabled:
            extensions = caps.get("extensions")
            caps["extensions"] = {
                TASKS_EXTENSION: {},
                **(extensions if isinstance(extensions, dict) else {}),
            }
        return caps

    @property
    def era(self) -> Era | None:
        """`"modern"` (2026-07-28) or `"legacy"` (an `initialize`-based session): what this
        client speaks with its server; None until the first exchange settled it."""
        return self._era

    @property
    def protocol_version(self) -> str:
        """The protocol version new requests are sent with: on a legacy session, the one the
        server chose in `initialize`. On a modern server, a -32022 answer naming a version
        this client speaks switches it, for later requests (a flow already running keeps the
        version it started with, which its `requestState` is bound to)."""
        if self._legacy is not None:
            return self._legacy.protocol_version
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
        if self._log_level is not None:
            self._meta[meta_keys.LOG_LEVEL] = self._log_level

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
        response = await self._send(method, body, meta, limit, None, version)
        if "error" in response:
            response, version = await self._retry_version(
                method, body, meta, limit, version, response
            )
        return _result_of(method, response), version

    async def _retry_version(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        version: str,
        response: dict[str, Any],
    ) -> tuple[dict[str, Any], str]:
        """After an error `response`: raise it, unless it is a -32022 naming a version this
        client speaks; then the request is sent again with that version, once. Returns the
        new response and the version that produced it."""
        error = McpError.from_error(response["error"])
        retry = self._version_to_retry(error)
        if retry is None:
            raise error
        # The server named the versions it serves: switch to one we speak and ask again,
        # once, as a new request (versioning.md: the client SHOULD retry). Only this
        # request switches: another flow running on this client keeps its own version.
        logger.info("server asked for protocol version %s; retrying %s", retry, method)
        response = await self._send(method, body, meta, limit, None, retry)
        if "error" in response:
            raise McpError.from_error(response["error"])
        if self._protocol_version == version:
            self.protocol_version = retry  # later requests start from what worked
        return response, retry

    async def _send(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None = None,
        version: str | None = None,
    ) -> dict[str, Any]:
        era = self._era
        if era is MODERN:  # the hot path first: `_send_modern` without its await
            message = self._modern_request(method, body, meta, request_id, version)
            return await self._exchange(message, method, limit)
        if era is None:
            return await self._first_exchange(method, body, meta, limit, request_id, version)
        return await self._send_legacy(method, body, meta, limit)

    async def _send_modern(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> dict[str, Any]:
        message = self._modern_request(method, body, meta, request_id, version)
        return await self._exchange(message, method, limit)

    def _modern_request(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> dict[str, Any]:
        """The request message in 2026-07-28 form: `body` with the client's `_meta` (the
        prebuilt block, shared by every request while nothing in it changes)."""
        base = self._meta
        if version is not None and version != self._protocol_version:
            base = {**base, meta_keys.PROTOCOL_VERSION: version}
        body["_meta"] = {**base, **meta} if meta else base
        if request_id is None:
            request_id = next(self._ids)
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}

    async def _exchange(self, message: dict[str, Any], method: str, limit: float) -> dict[str, Any]:
        """One request through the transport, bounded by `limit` seconds (0: unbounded)."""
        within = self._within()
        try:
            if within is not None:
                return await within(message, limit)
            if limit > 0:
                with Deadline(limit):
                    return await self.transport.request(message)
            return await self.transport.request(message)
        except TimeoutError:
            raise _no_response(method, limit) from None

    def _within(self) -> BoundedRequest | None:
        """The transport's `request_within(message, limit)`, when it has one: it bounds the
        request itself (HTTP: in place of a bound of its own on each exchange, so one deadline
        instead of two). Looked up again whenever `self.transport` is another object."""
        transport = self.transport
        if transport is not self._within_for:
            self._within_for = transport
            self._within_fn = getattr(transport, "request_within", None)
        return self._within_fn

    # --- the era: settled by the first exchange --------------------------------------------------

    async def _first_exchange(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> dict[str, Any]:
        """Send the client's first request, settling the era on the way (see `era.py`)."""
        mode = self.options.protocol
        if mode == "modern":
            return await self._send_insisting(method, body, meta, limit, request_id, version)
        if (
            mode == "legacy"
            or getattr(self.transport, "era_probe", "inline") in ("discover", "legacy")
            or eras.cached(self._era_key) == LEGACY
        ):
            await self._settle()
        else:
            return await self._send_inline(method, body, meta, limit, request_id, version)
        return await self._send(method, body, meta, limit, request_id, version)

    async def _send_insisting(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> dict[str, Any]:
        """Send a request in the modern shape with `protocol="modern"` while the era is
        unknown: an answer settles it, but a refusal that a legacy server could have sent is
        checked with `server/discover` before the client calls the server modern."""
        if self._legacy_only is not None:
            raise self._legacy_only
        try:
            response = await self._send_modern(method, body, meta, limit, request_id, version)
        except McpError as error:
            if eras.inline_verdict(error, answered_id=True) == LEGACY:
                await self._insist_modern()  # raises when the server speaks legacy only
            raise
        error_member = response.get("error")
        if error_member is None:
            if method == _DISCOVER and not _lists_modern_version(response.get("result")):
                raise await self._refuse_legacy_only(response.get("result"), None)
            self._settled_modern()
        elif eras.is_recognised_modern_error(McpError.from_error(error_member)):
            self._settled_modern()
        elif method != _DISCOVER:
            await self._insist_modern()
        else:
            raise await self._refuse_legacy_only(None, McpError.from_error(error_member))
        return response

    async def _insist_modern(self) -> None:
        """With `protocol="modern"`, after a refusal that may be a legacy server's: ask
        `server/discover`, and settle the era modern, or raise saying the server speaks only
        legacy revisions (and which)."""
        async with self._era_lock:
            if self._era is not None:
                return
            if self._legacy_only is not None:
                raise self._legacy_only
            message = jsonrpc.request(next(self._ids), _DISCOVER, {"_meta": self._meta})
            try:
                response = await self._await_probe(message)
            except _ProbeTimeout:
                raise await self._refuse_legacy_only(None, None) from None
            except McpError as error:
                if eras.probe_verdict(error) != LEGACY:
                    raise
                raise await self._refuse_legacy_only(None, error) from None
            error_member = response.get("error")
            if error_member is not None:
                refusal = McpError.from_error(error_member)
                if eras.probe_verdict(refusal) != LEGACY:
                    if not self._adopt_modern(refusal):
                        self._settled_modern()
                    return
                raise await self._refuse_legacy_only(None, refusal)
            result = response.get("result")
            if not _lists_modern_version(result):
                raise await self._refuse_legacy_only(result, None)
            self._settled_modern()

    async def _refuse_legacy_only(self, discovered: Any, refusal: McpError | None) -> McpError:
        """The error a `protocol="modern"` client raises, now and on every later request, for
        a server that speaks only legacy revisions. The versions are those its discover result
        listed, else those its answer named, else the one it chooses in answer to
        `initialize` (asked only to say so: the session is ended at once, unused)."""
        versions: list[str] = []
        if isinstance(discovered, dict) and isinstance(discovered.get("supportedVersions"), list):
            versions = [str(v) for v in discovered["supportedVersions"]][:10]
        elif refusal is not None:
            versions = (eras.supported_versions(refusal) or [])[:10]
        if not versions:
            chosen = await self._legacy_version()
            versions = [chosen] if chosen is not None else []
        if discovered is not None:
            told = "its server/discover result lists no 2026-07-28 version"
        elif refusal is not None:
            told = f"it answered server/discover with {refusal.code} {refusal.message[:120]!r}"
        else:
            told = "it did not answer server/discover"
        named = ", ".join(versions) if versions else "it named none"
        self._legacy_only = McpError(
            LEGACY_ONLY_SERVER,
            f"the server speaks only initialize-based (legacy) protocol revisions ({named}), not "
            f"{self._protocol_version}: {told}. The client insists on the modern revision "
            "(protocol='modern'), so it will not speak to it in a legacy session; use "
            "protocol='auto' or 'legacy' to talk to this server",
            {"supported": versions, "requested": self._protocol_version, "era": LEGACY},
        )
        return self._legacy_only

    async def _legacy_version(self) -> str | None:
        """The revision a legacy server chooses in answer to `initialize`; None when it
        answers none. An HTTP session it opens is ended (DELETE) straight away."""
        params = initialize_params(self.client_info, {})
        message = jsonrpc.request(next(self._ids), "initialize", params)
        try:
            response = await self._exchange(message, "initialize", self.options.request_timeout)
        except McpError as error:
            logger.info("initialize, asked for the server's version, failed: %s", error)
            return None
        finally:
            end = getattr(self.transport, "end_legacy_session", None)
            if end is not None:
                await end()
        result = response.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        return version[:40] if isinstance(version, str) else None

    async def _send_inline(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> dict[str, Any]:
        """Send a request in the modern shape while the era is unknown; fall back to a legacy
        session (and send it again there) when the answer shows a legacy server."""
        if request_id is None:
            request_id = next(self._ids)
        try:
            response = await self._send_modern(method, body, meta, limit, request_id, version)
        except McpError as error:
            verdict = (
                eras.probe_verdict(error)
                if method == _DISCOVER
                else eras.inline_verdict(error, answered_id=True)
            )
            if verdict != LEGACY or error.code != HTTP_ERROR:
                raise  # a transport failure is no verdict: the next request tries again
            return await self._fall_back(method, body, meta, limit, version, error)
        error_member = response.get("error")
        if error_member is None:
            if method == _DISCOVER and not _lists_modern_version(response.get("result")):
                # A server that answers discover but offers only legacy versions is legacy.
                return await self._fall_back(method, body, meta, limit, version, None)
            self._settled_modern()
            return response
        answer = McpError.from_error(error_member)
        if method == _DISCOVER:
            verdict = eras.probe_verdict(answer)
        else:
            verdict = eras.inline_verdict(answer, response.get("id") == request_id)
        if verdict == LEGACY:
            return await self._fall_back(method, body, meta, limit, version, answer)
        if verdict == MODERN:
            self._settled_modern()
        # No verdict: the server answered this very request (it may have run it), so the
        # answer is the caller's, and the era is left for a later exchange to settle.
        return response

    async def _fall_back(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        version: str | None,
        original: McpError | None,
    ) -> dict[str, Any]:
        """Open a legacy session (once, however many requests found out at the same time) and
        send the request again on it. If the server refuses `initialize` too, it is no legacy
        server after all: the first answer stands."""
        async with self._era_lock:
            if self._era is None:
                logger.info("%s: the server speaks an initialize-based revision; opening a "
                            "legacy session", method)  # fmt: skip
                try:
                    await self._open_legacy(verdict=True)
                except McpError as error:
                    if not self._adopt_modern(error) and original is not None:
                        raise original from error
                    if self._era is None:
                        raise
        body.pop("_meta", None)
        return await self._send(method, body, meta, limit, None, version)

    def _settled_modern(self) -> None:
        if self._era is None:
            self._era = MODERN
            eras.remember(self._era_key, MODERN)

    def _adopt_modern(self, error: McpError) -> bool:
        """After a -32022 naming a modern version this client speaks: go modern with it."""
        supported = eras.supported_versions(error) or []
        for version in SUPPORTED_PROTOCOL_VERSIONS:  # newest first
            if version in supported:
                if version != self._protocol_version:
                    self.protocol_version = version
                self._settled_modern()
                return True
        return False

    async def _settle(self) -> None:
        """Settle the era before sending anything else: a legacy session when asked for (or
        cached), else the `server/discover` probe (which `protocol="modern"` insists on)."""
        if self.options.protocol == "modern":
            if self._era is None:
                await self._insist_modern()
            return
        async with self._era_lock:
            if self._era is not None:
                return
            if self.options.protocol == "legacy" or (
                self.options.protocol == "auto"
                and getattr(self.transport, "era_probe", None) == "legacy"
            ):
                # A transport that carries legacy sessions only (HTTP+SSE): nothing to probe.
                await self._open_legacy()
                return
            if eras.cached(self._era_key) == LEGACY:
                try:
                    await self._open_legacy(verdict=True)
                    return
                except McpError as error:
                    eras.forget(self._era_key)  # the cached verdict proved wrong: look again
                    if self._adopt_modern(error):
                        return
                    logger.info("initialize failed (%s); probing the server afresh", error)
            await self._probe()

    async def _probe(self) -> None:
        """`ping` (stdio), then `server/discover` unless the ping showed a legacy server, and
        what their answers say (stdio's Backward Compatibility)."""
        if getattr(self.transport, "era_probe", None) == "discover":
            try:
                answered = await self._answers_ping()
            except McpError as error:
                await self._restart_legacy(error, "ping")
                return
            if answered:
                try:
                    await self._open_legacy(verdict=True)
                except McpError as error:
                    if not self._adopt_modern(error):
                        raise
                return
        message = jsonrpc.request(next(self._ids), _DISCOVER, {"_meta": self._meta})
        try:
            response = await self._await_probe(message)
        except _ProbeTimeout as silent:
            # A server silent on an unknown request is a legacy one. A modern server that was
            # only slow to start (a loaded machine) answers the probe before `initialize`, as it
            # answers in order: `_open_legacy` then keeps to the modern era, and a modern-only
            # server's -32022 to initialize says the same.
            logger.info("no answer to server/discover within %g s; trying initialize",
                        self.options.probe_timeout)  # fmt: skip
            try:
                await self._open_legacy_or_modern(silent.probe)
            except McpError as error:
                restart = getattr(self.transport, "restart", None)
                if error.code != CONNECTION_CLOSED or restart is None:
                    raise
                # It died of the probe, only later than the probe timeout (a legacy server
                # slow to fail on it): started afresh, it gets `initialize` first.
                logger.info(
                    "the server exited after the server/discover probe (%s); restarting it for "
                    "an initialize-based session",
                    error.message,
                )
                await restart()
                await self._open_legacy()
            finally:
                if not silent.probe.done():
                    silent.probe.cancel()
                await asyncio.gather(silent.probe, return_exceptions=True)
            return
        except McpError as error:
            await self._restart_legacy(error, _DISCOVER)
            return
        error_member = response.get("error")
        if error_member is not None:
            refusal = McpError.from_error(error_member)
            verdict = eras.probe_verdict(refusal)
            if verdict is None:
                raise refusal
            if verdict == MODERN:
                if not self._adopt_modern(refusal):
                    raise refusal
                return
            await self._open_legacy(verdict=True)
            return
        result = response.get("result")
        if not _lists_modern_version(result):
            await self._open_legacy(verdict=True)
            return
        if self._settled_on(result):
            return
        supported = result.get("supportedVersions", []) if isinstance(result, dict) else []
        raise McpError(
            PROTOCOL_VIOLATION,
            f"the server speaks protocol versions {', '.join(map(str, supported))[:200]}; this "
            f"client speaks {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}",
        )

    async def _answers_ping(self) -> bool:
        """Ask `ping`, in the modern shape, before `server/discover`: True when the server
        answered it, which only a legacy server does (2026-07-28 has no ping, and a server of
        both eras takes the request's `_meta` for the modern era's).

        A legacy server answers ping before `initialize` quietly, where every request it does
        not know, the probe among them, costs a long validation error on its stderr (mcp 1.x
        logs one per unknown request). Any refusal or silence leaves the era to the probe."""
        message = jsonrpc.request(next(self._ids), "ping", {"_meta": self._meta})
        try:
            response = await self._await_probe(message)
        except _ProbeTimeout as silent:
            silent.probe.cancel()
            await asyncio.gather(silent.probe, return_exceptions=True)
            return False
        return "result" in response

    async def _restart_legacy(self, error: McpError, method: str) -> None:
        """After the server died or wrote garbage in answer to `method` before `initialize`:
        a legacy server, started afresh and spoken to in an initialize-based session. Any
        other failure is raised."""
        restart = getattr(self.transport, "restart", None)
        if error.code not in (CONNECTION_CLOSED, PROTOCOL_VIOLATION) or restart is None:
            raise error
        logger.info("the server failed the %s probe (%s); restarting it for an "
                    "initialize-based session", method, error.message)  # fmt: skip
        await restart()
        await self._open_legacy()

    async def _await_probe(self, message: dict[str, Any]) -> dict[str, Any]:
        """The probe's response; `_ProbeTimeout` past `probe_timeout`, and
        `McpError(PROTOCOL_VIOLATION)` as soon as the server writes what is not JSON-RPC."""
        noise: asyncio.Event | None = getattr(self.transport, "noise", None)
        if noise is not None:
            noise.clear()  # only what the server writes in answer to the probe counts
        request = asyncio.ensure_future(self.transport.request(message))
        waiters: set[asyncio.Future[Any]] = {request}
        garbage = asyncio.ensure_future(noise.wait()) if noise is not None else None
        if garbage is not None:
            waiters.add(garbage)
        # An authorization flow (which may wait for a person to sign in) runs inside the
        # probe's exchange on a protected server: its silence says nothing about the era.
        authorizing = getattr(self.transport, "auth", None) is not None
        done: set[asyncio.Future[Any]] = set()
        try:
            done, _ = await asyncio.wait(
                waiters,
                timeout=None if authorizing else self.options.probe_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            silent = not done
            for waiter in waiters:
                # A silent server's probe stays open: a late answer may still show a modern
                # server that was slow to start (see `_probe`).
                if not waiter.done() and not (silent and waiter is request):
                    waiter.cancel()
            ended = [w for w in waiters if not (silent and w is request)]
            await asyncio.gather(*ended, return_exceptions=True)
        if request in done and not request.cancelled():
            return request.result()
        if garbage is not None and garbage in done:
            raise McpError(PROTOCOL_VIOLATION, "the server wrote garbage in answer to the probe")
        raise _ProbeTimeout(request)

    async def _open_legacy_or_modern(self, probe: asyncio.Future[dict[str, Any]]) -> None:
        try:
            await self._open_legacy(late_probe=probe)
        except McpError as error:
            if not self._adopt_modern(error):
                raise

    async def _open_legacy(
        self, verdict: bool = False, late_probe: asyncio.Future[dict[str, Any]] | None = None
    ) -> None:
        """`initialize`, `notifications/initialized`, and the session set up around them.

        `verdict`: the server's answer so far showed a legacy server unambiguously, so the era
        is cached for its endpoint (or stdio command) once `initialize` confirms it. Not after
        a silent probe (a slow server), a crash, or `protocol="legacy"` (the caller's choice).
        `late_probe`: the `server/discover` probe the server was silent on; answered by the
        time `initialize` is, with a modern version, it settles the modern era instead.
        """
        capabilities = {**self._extra_capabilities, **self._inputs.capabilities(legacy=True)}
        params = initialize_params(self.client_info, capabilities)
        message = jsonrpc.request(next(self._ids), "initialize", params)
        response = await self._exchange(message, "initialize", self.options.request_timeout)
        if late_probe is not None and self._settled_by_late_probe(late_probe):
            return  # the session `initialize` opened is left unused: nothing is sent on it
        if "error" in response:
            raise McpError.from_error(response["error"])
        session = accept_initialize(response.get("result"))
        await self.transport.notify(jsonrpc.notification("notifications/initialized"))
        start = getattr(self.transport, "start_legacy_session", None)
        if start is not None:
            await start(session.protocol_version)
        self._legacy = session
        self._legacy_generation += 1
        self._era = LEGACY
        if verdict:
            eras.remember(self._era_key, LEGACY)
        logger.info("legacy session open (protocol version %s)", session.protocol_version)
        if self._log_level is not None:
            await self._set_legacy_level(self._log_level)
        for uri in self._legacy_uri_counts:  # a session opened again keeps its subscriptions
            await self._send_legacy("resources/subscribe", {"uri": uri}, None, 0)

    def _settled_by_late_probe(self, probe: asyncio.Future[dict[str, Any]]) -> bool:
        """Whether `probe`, answered late, names a modern version this client speaks: if so
        the era is settled modern on it."""
        if not probe.done() or probe.cancelled() or probe.exception() is not None:
            return False
        result = probe.result().get("result")
        if not (_lists_modern_version(result) and self._settled_on(result)):
            return False
        logger.info("the server answered server/discover late: it is modern")
        return True

    def _settled_on(self, result: Any) -> bool:
        """Settle the modern era on a `DiscoverResult`'s first version this client speaks;
        False when it names none."""
        supported = result.get("supportedVersions", []) if isinstance(result, dict) else []
        for version in SUPPORTED_PROTOCOL_VERSIONS:
            if version in supported:
                if version != self._protocol_version:
                    self.protocol_version = version
                self._settled_modern()
                return True
        return False

    async def _reopen_legacy(self, generation: int) -> None:
        """The server forgot the session: initialize again, once for all who noticed."""
        async with self._era_lock:
            if self._legacy_generation == generation:
                logger.info("the server no longer knows the legacy session; initializing again")
                await self._open_legacy()

    async def _send_legacy(
        self, method: str, body: dict[str, Any], meta: Mapping[str, Any] | None, limit: float
    ) -> dict[str, Any]:
        session = self._legacy
        if session is None:  # pragma: no cover - LEGACY is only set with a session
            raise McpError(CONNECTION_CLOSED, "the legacy session is closed")
        if method == _DISCOVER:  # no such method before 2026: what initialize said instead
            return jsonrpc.result_response(next(self._ids), session.discover_result().to_wire())
        body.pop("_meta", None)
        if meta:
            level = meta.get(meta_keys.LOG_LEVEL)
            if level in meta_keys.LOG_LEVEL_RANK and level != session.log_level:
                await self._set_legacy_level(level)  # session-wide on a legacy server
            extra = legacy_meta(meta)
            if extra:
                body["_meta"] = extra
        generation = self._legacy_generation
        message = jsonrpc.request(next(self._ids), method, body)
        try:
            return await self._exchange(message, method, limit)
        except McpError as error:
            if error.code != SESSION_EXPIRED:
                raise
        await self._reopen_legacy(generation)
        return await self._exchange(jsonrpc.request(next(self._ids), method, body), method, limit)

    async def _set_legacy_level(self, level: str) -> None:
        session = self._legacy
        if session is None or not session.supports("logging"):
            return  # the server sends no logs: nothing to set
        response = await self._send_legacy(
            "logging/setLevel", {"level": level}, None, self.options.request_timeout
        )
        if "error" in response:
            raise McpError.from_error(response["error"])
        session.log_level = level

    async def ping(self) -> None:
        """Check that the server answers: `ping` on a legacy session; a 2026-07-28 server has
        no ping, so there it is `server/discover`, which every such server answers."""
        if self._era is None:
            await self._settle()
        await self.request("ping" if self._era == LEGACY else _DISCOVER)

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
        """One page of tools (`next_cursor` gives the next). Their `outputSchema`s are kept,
        to check and read the results of later calls (`CallToolResult.data`)."""
        page = await self._typed("tools/list", ListToolsResult, _cursor(cursor))
        for tool in page.tools:
            if tool.output_schema is not None:
                self._tool_outputs[tool.name] = known_output(tool.output_schema)
            else:
                self._tool_outputs.pop(tool.name, None)
        return page

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

    # --- every page ----------------------------------------------------------------------------

    async def iter_tools(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> AsyncIterator[Tool]:
        """Every tool, following `nextCursor` page by page as the iteration goes; at most
        `max_pages` pages, and a cursor the server repeats ends it (both `McpError`)."""
        async for page in pages("tools/list", self.list_tools, max_pages):
            for tool in page.tools:
                yield tool

    async def all_tools(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Tool]:
        """Every tool, all pages (see `iter_tools`)."""
        return [tool async for tool in self.iter_tools(max_pages=max_pages)]

    async def iter_prompts(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> AsyncIterator[Prompt]:
        """Every prompt, page by page (see `iter_tools`)."""
        async for page in pages("prompts/list", self.list_prompts, max_pages):
            for prompt in page.prompts:
                yield prompt

    async def all_prompts(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Prompt]:
        """Every prompt, all pages."""
        return [prompt async for prompt in self.iter_prompts(max_pages=max_pages)]

    async def iter_resources(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> AsyncIterator[Resource]:
        """Every resource, page by page (see `iter_tools`)."""
        async for page in pages("resources/list", self.list_resources, max_pages):
            for resource in page.resources:
                yield resource

    async def all_resources(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Resource]:
        """Every resource, all pages."""
        return [resource async for resource in self.iter_resources(max_pages=max_pages)]

    async def iter_resource_templates(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> AsyncIterator[ResourceTemplate]:
        """Every resource template, page by page (see `iter_tools`)."""
        method = "resources/templates/list"
        async for page in pages(method, self.list_resource_templates, max_pages):
            for template in page.resource_templates:
                yield template

    async def all_resource_templates(
        self, *, max_pages: int = DEFAULT_MAX_PAGES
    ) -> list[ResourceTemplate]:
        """Every resource template, all pages."""
        return [t async for t in self.iter_resource_templates(max_pages=max_pages)]

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
        output_type: Any = None,
        on_task_status: TaskStatusCallback | None = None,
    ) -> CallToolResult:
        """Call a tool and return its final result, answering the server's questions.

        The result's structured content is checked against the tool's `outputSchema` when an
        earlier `tools/list` gave one, and `result.data` is it as a value: validated into
        `output_type` (a pydantic model, dataclass, `list[int]`...) when given, unwrapped from
        `{"result": ...}` when the schema wraps a non-object. Content that does not fit is
        `McpError(PROTOCOL_VIOLATION)`.

        When the server runs the call as a task, the task is driven to its end here (polled,
        its input requests answered by the same handlers, cancelled if this call is) and
        `on_task_status` is told of each new status; see `mrtr.client.tasks`.
        """
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        result = await self._mrtr(
            "tools/call",
            name,
            params,
            CallToolResult,
            input_responses,
            request_state,
            progress_callback,
            meta,
            self._task_driver(on_task_status) if self.options.tasks.enabled else None,
        )
        known = self._tool_outputs.get(name) if self._tool_outputs else None
        if known is not None or output_type is not None:
            read_output(name, result, known, output_type)
        return result

    async def call_tool_as_task(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        output_type: Any = None,
    ) -> TaskHandle:
        """Call a tool and return a `TaskHandle` as soon as the server answered: the task it
        runs the call as (persist `handle.task_id` to resume with `task(...)`), or, when it
        answered at once, a handle whose `result()` is that answer and `task_id` None.

        Questions the server asks before it creates the task (MRTR rounds) are answered here;
        those of the task itself when `result()` waits for it.
        """
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        channel = self._task_channel()
        try:
            result = await self._mrtr(
                "tools/call",
                name,
                params,
                CallToolResult,
                None,
                None,
                None,
                meta,
                keep_task if self.options.tasks.enabled else None,
            )
        except TaskCreated as created:
            seed = read_task("tools/call", created.created, seed=True)
            return TaskHandle(channel, seed.task_id, seed=seed, tool=name, output_type=output_type)
        return TaskHandle(
            channel, None, result=self._finish_tool(name, result, output_type), tool=name
        )

    def task(self, task_id: str, *, tool: str | None = None, output_type: Any = None) -> TaskHandle:
        """A handle on a task created earlier, by this client or another one (even in another
        process): nothing is sent until it is used. `tool` (the tool's name) lets `result()`
        check the output against that tool's `outputSchema` from `tools/list`."""
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"task_id must be a non-empty string, not {task_id!r}")
        return TaskHandle(self._task_channel(), task_id, tool=tool, output_type=output_type)

    def _task_driver(self, on_status: TaskStatusCallback | None) -> TaskHook:
        if on_status is None and self._plain_task_hook is not None:
            return self._plain_task_hook  # the same for every call: made once

        async def hook(created: dict[str, Any]) -> dict[str, Any]:
            return await drive(self._task_channel(), created, on_status)

        if on_status is None:
            self._plain_task_hook = hook
        return hook

    def _task_channel(self) -> TaskChannel:
        return TaskChannel(
            request=self.request,
            resolve=self._resolve,
            streams=lambda: self._open_stream if self._era == MODERN else None,
            options=self.options.tasks,
            input_config=self.options.input_required,
            finish=self._finish_tool,
            notify=self._on_notification,
        )

    def _finish_tool(
        self, name: str | None, result: CallToolResult | dict[str, Any], output_type: Any
    ) -> CallToolResult:
        """A tool's final result, parsed, with `data` set up to read its output."""
        if isinstance(result, dict):
            result = _parse_result("tools/call", CallToolResult, result)
        known = self._tool_outputs.get(name) if name is not None else None
        if name is not None and (known is not None or output_type is not None):
            read_output(name, result, known, output_type)
        return result

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
        base: dict[str, Any],
        model: type[R],
        responses: Mapping[str, Any] | None,
        state: str | None,
        progress: ProgressCallback | None,
        meta: Mapping[str, Any] | None,
        task: TaskHook | None = None,
    ) -> R:
        """The MRTR loop: send, answer the server's questions, retry until a final result."""
        config = self.options.input_required
        token: str | None = None
        if progress is not None:
            token = f"progress-{next(self._ids)}"
            self._progress[token] = progress
            meta = {**(meta or {}), meta_keys.PROGRESS_TOKEN: token}
        budget = config.max_total_timeout
        # Where the flow stands: the `requestState` and answers the next round carries, which
        # an error that ends the flow records, so that it can be resumed from there.
        answers = dict(responses) if responses else None
        # The flow keeps the version it started with: its requestState is bound to it, so a
        # switch made meanwhile by another flow on this client must not reach its rounds.
        version = self._protocol_version
        limit = _round_limit(self.options.request_timeout, config.round_timeout)
        rounds = 0
        backoff = 0.05
        try:
            with Deadline(budget) if budget > 0 else _UNBOUNDED:
                while True:
                    params = dict(base)
                    if answers:
                        params["inputResponses"] = answers
                    if state is not None:
                        params["requestState"] = state
                    started = time.perf_counter()
                    if self._era is MODERN:
                        # `_send` and `_exchange` written out: two awaits less on every round.
                        message = self._modern_request(method, params, meta, None, version)
                        within = self._within()
                        try:
                            if within is not None:
                                response = await within(message, limit)
                            elif limit > 0:
                                with Deadline(limit):
                                    response = await self.transport.request(message)
                            else:
                                response = await self.transport.request(message)
                        except TimeoutError:
                            raise _no_response(method, limit) from None
                    else:
                        response = await self._send(method, params, meta, limit, None, version)
                    if "error" in response:
                        response, version = await self._retry_version(
                            method, params, meta, limit, version, response
                        )
                    result = _result_of(method, response)
                    kind = result.get("resultType", "complete")
                    if kind == "complete":
                        return _parse_result(method, model, result)
                    if kind == RESULT_TYPE_TASK and task is not None:
                        return _parse_result(method, model, await task(result))
                    if kind != INPUT_REQUIRED:
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: the server sent an unknown resultType {kind!r}",
                        )
                    if not config.auto_fulfill:
                        raise InputRequiredError(_parse_result(method, InputRequiredResult, result))
                    requests = result.get("inputRequests")
                    asked = result.get("requestState")
                    if asked is not None and not isinstance(asked, str):
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: the server's requestState is not a string",
                        )
                    if not requests and asked is None:
                        raise McpError(
                            PROTOCOL_VIOLATION,
                            f"{method}: input_required result with neither inputRequests nor "
                            "requestState",
                        )
                    # From here on the flow resumes from this state, with the answers
                    # gathered so far (`_resolve` fills the dict in as they come).
                    state, answers = asked, {}
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
                        # Only a state: the server says "not yet". Back off, not busy-poll.
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, 0.25)
                    if self.options.on_round is not None or logger.isEnabledFor(logging.DEBUG):
                        self._report_round(method, target, rounds, requests or {}, state, started)
        except TimeoutError:
            raise _mark(
                McpError(
                    REQUEST_TIMEOUT,
                    f"{method} {target!r} did not complete within max_total_timeout "
                    f"({budget:g} s); the request in flight was cancelled",
                ),
                state,
                answers,
            ) from None
        except McpError as error:
            _mark(error, state, answers)  # whatever ended the flow, it can be resumed from here
            raise
        finally:
            if token is not None:
                self._progress.pop(token, None)

    def _report_round(
        self,
        method: str,
        target: str,
        round_number: int,
        requests: Mapping[str, Any],
        state: str | None,
        started: float,
    ) -> None:
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
            answers[key] = await self._inputs.answer(key, request)
            return
        tasks: dict[str, asyncio.Task[dict[str, Any]]] = {}
        try:
            async with asyncio.TaskGroup() as group:
                for key, request in requests.items():
                    tasks[key] = group.create_task(self._inputs.answer(key, request))
        except BaseExceptionGroup as group_error:
            first = group_error.exceptions[0]
            raise first from first.__cause__  # keeps the handler's own exception as the cause
        finally:
            for key, task in tasks.items():  # in the server's order, as they were asked
                if task.done() and not task.cancelled() and task.exception() is None:
                    answers[key] = task.result()

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
        to send. Leaving the block cancels the stream. On a legacy server the changes come
        from its session-wide notifications (those its capabilities announce) and
        `resources/subscribe`; leaving the block unsubscribes.
        """
        if self._era is None:
            await self._settle()
        if self._era == LEGACY:
            async with self._listen_legacy(tools, prompts, resources, resource_uris) as changes:
                yield changes
            return
        wanted: dict[str, Any] = {}
        if tools:
            wanted["toolsListChanged"] = True
        if prompts:
            wanted["promptsListChanged"] = True
        if resources:
            wanted["resourcesListChanged"] = True
        if resource_uris:
            wanted["resourceSubscriptions"] = list(resource_uris)
        async with self._open_stream(wanted, Subscription(), timeout) as subscription:
            yield subscription

    @contextlib.asynccontextmanager
    async def _open_stream(
        self,
        wanted: dict[str, Any],
        subscription: Subscription,
        timeout: float,  # noqa: ASYNC109 - bounds the wait for the acknowledgement only
    ) -> AsyncIterator[Subscription]:
        """A modern `subscriptions/listen` stream asking for `wanted`, feeding `subscription`,
        open once acknowledged; leaving the block cancels it."""
        request_id = next(self._ids)
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

    @contextlib.asynccontextmanager
    async def _listen_legacy(
        self, tools: bool, prompts: bool, resources: bool, uris: Sequence[str]
    ) -> AsyncIterator[Subscription]:
        session = self._legacy
        if session is None:  # pragma: no cover - LEGACY is only set with a session
            raise McpError(CONNECTION_CLOSED, "the legacy session is closed")
        agreed, kinds = honoured(
            session, tools=tools, prompts=prompts, resources=resources, uris=list(uris)
        )
        subscription = Subscription()
        subscription.deliver({"method": ACKNOWLEDGED, "params": {"notifications": agreed}})
        uris_agreed = frozenset(agreed.get("resourceSubscriptions", ()))
        listener = LegacyListener(subscription, kinds, uris_agreed)
        subscribed: list[str] = []
        try:
            for uri in listener.uris:
                count = self._legacy_uri_counts.get(uri, 0)
                if count == 0:
                    response = await self._send_legacy(
                        "resources/subscribe", {"uri": uri}, None, self.options.request_timeout
                    )
                    if "error" in response:
                        raise McpError.from_error(response["error"])
                self._legacy_uri_counts[uri] = count + 1
                subscribed.append(uri)
            self._legacy_listeners.append(listener)
            yield subscription
        finally:
            with contextlib.suppress(ValueError):
                self._legacy_listeners.remove(listener)
            subscription.end()
            for uri in subscribed:
                left = self._legacy_uri_counts.pop(uri, 1) - 1
                if left:
                    self._legacy_uri_counts[uri] = left
                elif self._connected and self._legacy is not None:
                    try:
                        limit = self.options.request_timeout
                        await self._send_legacy("resources/unsubscribe", {"uri": uri}, None, limit)
                    except McpError as exc:  # the server may be gone; nothing is left to undo
                        logger.info("resources/unsubscribe %r failed: %s", uri, exc)

    # --- server-to-client requests (legacy sessions) -------------------------------------------

    async def _on_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Answer a legacy server's request (the transport's `on_request`); never raises but
        for the transport's own cancellation."""
        request_id = jsonrpc.readable_id(message)
        work = asyncio.ensure_future(self._inputs.respond(message))
        if request_id is not None:
            self._server_requests[request_id] = work
        try:
            return await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                work.cancel()
                raise  # the transport is closing
            # The server cancelled its request (notifications/cancelled): it expects no
            # answer, and one that is sent anyway is ignored.
            return jsonrpc.error_response(
                request_id, McpError(INTERNAL_ERROR, "the request was cancelled by the server")
            )
        finally:
            if request_id is not None and self._server_requests.get(request_id) is work:
                del self._server_requests[request_id]

    async def _on_notification(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            logger.warning("ignoring a %.80r notification whose params are not an object", method)
            return
        if self._legacy_listeners and method in _LIST_CHANGES:
            for listener in list(self._legacy_listeners):
                listener.offer(message)
            return
        if method == "notifications/cancelled":
            target = params.get("requestId")
            work = self._server_requests.get(target) if jsonrpc.is_valid_id(target) else None
            if work is not None:
                work.cancel()
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


def _no_response(method: str, limit: float) -> McpError:
    return McpError(
        REQUEST_TIMEOUT,
        f"{method} got no response within {limit:g} s; request cancelled (each request and "
        "each MRTR round is bounded by ClientOptions.request_timeout, by "
        "InputRequiredConfig.round_timeout when shorter, or by request(timeout=))",
        {"timeout": limit},
    )


def _round_limit(request_timeout: float, round_timeout: float) -> float:
    """The bound of one MRTR round trip: the tighter of the two options (0: no limit)."""
    bounds = [t for t in (request_timeout, round_timeout) if t > 0]
    return min(bounds) if bounds else 0.0


def _accepts_on_request(transport: object) -> bool:
    """Whether `transport.connect` takes `on_request` (transports written before server
    requests existed do not)."""
    try:
        parameters = inspect.signature(transport.connect).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return "on_request" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _lists_modern_version(result: Any) -> bool:
    """Whether a `server/discover` result offers a 2026-07-28 (or later) version."""
    supported = result.get("supportedVersions") if isinstance(result, dict) else None
    return isinstance(supported, list) and any(eras.is_modern_version(v) for v in supported)


def _cursor(cursor: str | None) -> dict[str, Any] | None:
    return {"cursor": cursor} if cursor is not None else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _result_of(method: str, response: dict[str, Any]) -> dict[str, Any]:
    """The `result` object of a successful response to `method`."""
    result = response.get("result")
    if not isinstance(result, dict):
        raise McpError(PROTOCOL_VIOLATION, f"{method}: the server's result is not an object")
    return result
