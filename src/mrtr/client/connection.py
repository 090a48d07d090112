"""`Connection`: one client's transport, the era it speaks with its server, and sending.

The era is settled by the first exchange (`era.py` draws the verdicts): a request sent in
the modern shape, or a `server/discover` probe, either settles it modern or falls back to an
`initialize`-based session (`legacy.py`), which is then opened again when the server forgets
it. Every request, whichever era, leaves through `send`, bounded by its own time limit.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import mrtr.client.era as eras

from ..deadline import Deadline
from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import (
    CONNECTION_CLOSED,
    HTTP_ERROR,
    LEGACY_ONLY_SERVER,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    SESSION_EXPIRED,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)
from ..protocol.tasks import EXTENSION_ID as TASKS_EXTENSION
from ..protocol.versions import SUPPORTED_PROTOCOL_VERSIONS
from .era import LEGACY, MODERN, Era
from .input_handlers import InputHandlers
from .legacy import ServerHandshake, accept_initialize, initialize_params, legacy_meta
from .options import ClientOptions
from .probe import ProbeTimeout, await_probe
from .results import result_of
from .server_asks import ServerAsks

if TYPE_CHECKING:
    from ..protocol.types import Implementation
    from ..transport.base import ClientTransport

logger = logging.getLogger("mrtr.client")

#: A transport's optional `request_within(message, limit)`: `request`, bounded as a whole by
#: `limit` seconds (0: unbounded), raising `TimeoutError` past it.
BoundedRequest = Callable[[dict[str, Any], float], Awaitable[dict[str, Any]]]
#: The transport's callbacks for what the server sends unasked.
NotificationCallback = Callable[[dict[str, Any]], Awaitable[None]]
RequestCallback = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

#: The method that tells a server's versions, and probes its era.
DISCOVER = "server/discover"


class Connection:
    """A client's side of one server: its transport, the era settled with it, the legacy
    session when there is one, and the `_meta` every modern request carries."""

    def __init__(
        self,
        transport: ClientTransport,
        *,
        options: ClientOptions,
        client_info: Implementation,
        inputs: InputHandlers,
        capabilities: Mapping[str, Any],
        log_level: str | None,
        protocol_version: str,
    ) -> None:
        self.transport = transport
        self.options = options
        self.client_info = client_info
        self._inputs = inputs
        self._extra_capabilities = dict(capabilities)
        self._log_level = log_level
        self._protocol_version = protocol_version
        # The era: None until the first exchange settles it (see `settle`).
        self.era: Era | None = None
        self._era_key = eras.endpoint_key(transport)
        self._era_lock = asyncio.Lock()
        # `protocol="modern"` against a server found to speak only legacy revisions: the
        # error every request raises from then on, unsent.
        self._legacy_only: McpError | None = None
        self.legacy: ServerHandshake | None = None
        self._legacy_generation = 0  # bumped by each initialize, so one expiry re-opens once
        #: The resources subscribed to on the legacy session, with how many listeners want each.
        self.legacy_uri_counts: dict[str, int] = {}
        self.ids = itertools.count(1)
        #: The bounds on what the server may ask of this client, whichever era.
        self.asks = ServerAsks(lambda: self.options)
        self.connected = False
        self._meta: dict[str, Any] = {}
        self._within_for: object = None  # the transport `_within_fn` was looked up on
        self._within_fn: BoundedRequest | None = None
        self.rebuild_meta()

    # --- lifecycle -------------------------------------------------------------------------

    async def open(
        self, on_notification: NotificationCallback, on_request: RequestCallback
    ) -> None:
        """Open the transport, handing it the callbacks for what the server sends unasked."""
        if not self.connected:
            if _accepts_on_request(self.transport):
                await self.transport.connect(on_notification, on_request=on_request)
            else:  # a transport written before server requests existed
                await self.transport.connect(on_notification)
            self.connected = True

    async def close(self) -> None:
        """End the legacy session, if one is open, and close the transport."""
        end = getattr(self.transport, "end_legacy_session", None)
        if self.legacy is not None and end is not None:
            try:
                await end()
            except Exception as exc:  # the session ends either way; the server may be gone
                logger.info("ending the legacy session failed: %s", exc)
        self.legacy = None
        await self.transport.close()

    # --- the `_meta` of every request ------------------------------------------------------

    @property
    def capabilities(self) -> dict[str, Any]:
        """The `clientCapabilities` sent on every request (see `Client.capabilities`)."""
        caps = {**self._extra_capabilities, **self._inputs.capabilities(legacy=False)}
        if self.options.tasks.enabled:
            extensions = caps.get("extensions")
            caps["extensions"] = {
                TASKS_EXTENSION: {},
                **(extensions if isinstance(extensions, dict) else {}),
            }
        return caps

    @property
    def protocol_version(self) -> str:
        """The protocol version new requests are sent with (see `Client.protocol_version`)."""
        if self.legacy is not None:
            return self.legacy.protocol_version
        return self._protocol_version

    @protocol_version.setter
    def protocol_version(self, version: str) -> None:
        self._protocol_version = version
        self.rebuild_meta()

    @property
    def modern_version(self) -> str:
        """The version modern requests start from (a flow keeps the one it started with)."""
        return self._protocol_version

    def rebuild_meta(self) -> None:
        """Build again the `_meta` block shared by requests, after something in it changed."""
        self._meta = {
            meta_keys.PROTOCOL_VERSION: self._protocol_version,
            meta_keys.CLIENT_INFO: self.client_info.to_wire(),
            meta_keys.CLIENT_CAPABILITIES: self.capabilities,
        }
        if self._log_level is not None:
            self._meta[meta_keys.LOG_LEVEL] = self._log_level

    # --- sending -----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
        timeout: float | None,  # noqa: ASYNC109 - a per-request bound, applied in send
        version: str,
    ) -> tuple[dict[str, Any], str]:
        """`request` sent with protocol `version`; returns the result and the version that
        produced it (another one when the server asked for it with -32022)."""
        body = dict(params) if params else {}
        limit = self.options.request_timeout if timeout is None else timeout
        response = await self.send(method, body, meta, limit, None, version)
        if "error" in response:
            response, version = await self.retry_version(
                method, body, meta, limit, version, response
            )
        return result_of(method, response), version

    async def retry_version(
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
        response = await self.send(method, body, meta, limit, None, retry)
        if "error" in response:
            raise McpError.from_error(response["error"])
        if self._protocol_version == version:
            self.protocol_version = retry  # later requests start from what worked
        return response, retry

    def send(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None = None,
        version: str | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Send one request in the era's shape (settling the era first when it is unknown):
        the raw response, to await; `version` overrides the modern protocol version. A call,
        not a coroutine: every round of every flow passes here."""
        era = self.era
        if era is MODERN:
            return self._send_modern(method, body, meta, limit, request_id, version)
        if era is None:
            return self._first_exchange(method, body, meta, limit, request_id, version)
        return self.send_legacy(method, body, meta, limit)

    def _send_modern(
        self,
        method: str,
        body: dict[str, Any],
        meta: Mapping[str, Any] | None,
        limit: float,
        request_id: jsonrpc.RequestId | None,
        version: str | None,
    ) -> Awaitable[dict[str, Any]]:
        message = self.modern_request(method, body, meta, request_id, version)
        return self.exchange(message, method, limit)

    def modern_request(
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
            request_id = next(self.ids)
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}

    async def exchange(self, message: dict[str, Any], method: str, limit: float) -> dict[str, Any]:
        """One request through the transport, bounded by `limit` seconds (0: unbounded)."""
        within = self.within()
        try:
            if within is not None:
                return await within(message, limit)
            if limit > 0:
                with Deadline(limit):
                    return await self.transport.request(message)
            return await self.transport.request(message)
        except TimeoutError:
            raise no_response(method, limit) from None

    def within(self) -> BoundedRequest | None:
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
            await self.settle()
        else:
            return await self._send_inline(method, body, meta, limit, request_id, version)
        return await self.send(method, body, meta, limit, request_id, version)

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
            if method == DISCOVER and not _lists_modern_version(response.get("result")):
                raise await self._refuse_legacy_only(response.get("result"), None)
            self._settled_modern()
        elif eras.is_recognised_modern_error(McpError.from_error(error_member)):
            self._settled_modern()
        elif method != DISCOVER:
            await self._insist_modern()
        else:
            raise await self._refuse_legacy_only(None, McpError.from_error(error_member))
        return response

    async def _insist_modern(self) -> None:
        """With `protocol="modern"`, after a refusal that may be a legacy server's: ask
        `server/discover`, and settle the era modern, or raise saying the server speaks only
        legacy revisions (and which)."""
        async with self._era_lock:
            if self.era is not None:
                return
            if self._legacy_only is not None:
                raise self._legacy_only
            message = jsonrpc.request(next(self.ids), DISCOVER, {"_meta": self._meta})
            try:
                response = await await_probe(self.transport, message, self.options.probe_timeout)
            except ProbeTimeout:
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
        message = jsonrpc.request(next(self.ids), "initialize", params)
        try:
            response = await self.exchange(message, "initialize", self.options.request_timeout)
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
            request_id = next(self.ids)
        try:
            response = await self._send_modern(method, body, meta, limit, request_id, version)
        except McpError as error:
            verdict = (
                eras.probe_verdict(error)
                if method == DISCOVER
                else eras.inline_verdict(error, answered_id=True)
            )
            if verdict != LEGACY or error.code != HTTP_ERROR:
                raise  # a transport failure is no verdict: the next request tries again
            return await self._fall_back(method, body, meta, limit, version, error)
        error_member = response.get("error")
        if error_member is None:
            if method == DISCOVER and not _lists_modern_version(response.get("result")):
                # A server that answers discover but offers only legacy versions is legacy.
                return await self._fall_back(method, body, meta, limit, version, None)
            self._settled_modern()
            return response
        answer = McpError.from_error(error_member)
        if method == DISCOVER:
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
            if self.era is None:
                logger.info("%s: the server speaks an initialize-based revision; opening a "
                            "legacy session", method)  # fmt: skip
                try:
                    await self._open_legacy(verdict=True)
                except McpError as error:
                    if not self._adopt_modern(error) and original is not None:
                        raise original from error
                    if self.era is None:
                        raise
        body.pop("_meta", None)
        return await self.send(method, body, meta, limit, None, version)

    def _settled_modern(self) -> None:
        if self.era is None:
            self.era = MODERN
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

    async def settle(self) -> None:
        """Settle the era before sending anything else: a legacy session when asked for (or
        cached), else the `server/discover` probe (which `protocol="modern"` insists on)."""
        if self.options.protocol == "modern":
            if self.era is None:
                await self._insist_modern()
            return
        async with self._era_lock:
            if self.era is not None:
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
        message = jsonrpc.request(next(self.ids), DISCOVER, {"_meta": self._meta})
        try:
            response = await await_probe(self.transport, message, self.options.probe_timeout)
        except ProbeTimeout as silent:
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
            await self._restart_legacy(error, DISCOVER)
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
        message = jsonrpc.request(next(self.ids), "ping", {"_meta": self._meta})
        try:
            response = await await_probe(self.transport, message, self.options.probe_timeout)
        except ProbeTimeout as silent:
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
        message = jsonrpc.request(next(self.ids), "initialize", params)
        response = await self.exchange(message, "initialize", self.options.request_timeout)
        if late_probe is not None and self._settled_by_late_probe(late_probe):
            return  # the session `initialize` opened is left unused: nothing is sent on it
        if "error" in response:
            raise McpError.from_error(response["error"])
        session = accept_initialize(response.get("result"))
        await self.transport.notify(jsonrpc.notification("notifications/initialized"))
        start = getattr(self.transport, "start_legacy_session", None)
        if start is not None:
            await start(session.protocol_version)
        self.legacy = session
        self._legacy_generation += 1
        self.era = LEGACY
        if verdict:
            eras.remember(self._era_key, LEGACY)
        logger.info("legacy session open (protocol version %s)", session.protocol_version)
        if self._log_level is not None:
            await self._set_legacy_level(self._log_level)
        for uri in self.legacy_uri_counts:  # a session opened again keeps its subscriptions
            await self.send_legacy("resources/subscribe", {"uri": uri}, None, 0)

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

    async def send_legacy(
        self, method: str, body: dict[str, Any], meta: Mapping[str, Any] | None, limit: float
    ) -> dict[str, Any]:
        """Send one request on the legacy session, opening it again once if it expired."""
        session = self.legacy
        if session is None:  # pragma: no cover - LEGACY is only set with a session
            raise McpError(CONNECTION_CLOSED, "the legacy session is closed")
        if method == DISCOVER:  # no such method before 2026: what initialize said instead
            return jsonrpc.result_response(next(self.ids), session.discover_result().to_wire())
        body.pop("_meta", None)
        if meta:
            level = meta.get(meta_keys.LOG_LEVEL)
            if level in meta_keys.LOG_LEVEL_RANK and level != session.log_level:
                await self._set_legacy_level(level)  # session-wide on a legacy server
            extra = legacy_meta(meta)
            if extra:
                body["_meta"] = extra
        generation = self._legacy_generation
        message = jsonrpc.request(next(self.ids), method, body)
        # The server's own requests are counted per client request in flight (server_asks.py).
        with self.asks.client_request():
            try:
                return await self.exchange(message, method, limit)
            except McpError as error:
                if error.code != SESSION_EXPIRED:
                    raise
            await self._reopen_legacy(generation)
            again = jsonrpc.request(next(self.ids), method, body)
            return await self.exchange(again, method, limit)

    async def _set_legacy_level(self, level: str) -> None:
        session = self.legacy
        if session is None or not session.supports("logging"):
            return  # the server sends no logs: nothing to set
        response = await self.send_legacy(
            "logging/setLevel", {"level": level}, None, self.options.request_timeout
        )
        if "error" in response:
            raise McpError.from_error(response["error"])
        session.log_level = level

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


def no_response(method: str, limit: float) -> McpError:
    """The error of a request that got no answer within `limit` seconds."""
    return McpError(
        REQUEST_TIMEOUT,
        f"{method} got no response within {limit:g} s; request cancelled (each request and "
        "each MRTR round is bounded by ClientOptions.request_timeout, by "
        "InputRequiredConfig.round_timeout when shorter, or by request(timeout=))",
        {"timeout": limit},
    )


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
