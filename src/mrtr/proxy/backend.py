"""The backend a proxy serves: how to reach it, and its sessions, supervised.

A backend is a stdio command (started by the proxy) or a URL (Streamable HTTP or HTTP+SSE, of
either era: whatever `mrtr.Client` speaks), or a `Client` made elsewhere (`ClientTarget`).
Rules:

1. The proxy keeps at most `sessions` backend sessions for tool calls, plus one shared by
   everything else (for a stdio backend, one process each), opened when first needed. A
   `tools/call` has a session to itself while it runs (`BackendPool.lease`): a question the
   backend asks on that session (`elicitation/create`, `sampling/createMessage`,
   `roots/list`), and its logs, can only be for that call, since nothing on the wire names
   the call a legacy server's request belongs to. Lists, reads, prompts and completions go
   to the shared session, which no call ever holds, and never wait for a lease: what the
   backend sends there is nobody's call (a question is refused, a log stays in the proxy's
   log). A `Client` made elsewhere (`ClientTarget`) is one session for both; on it, what
   the backend sends reaches the call holding it only while nothing else is in flight
   there, and is otherwise treated as on the shared session. A call waits at most
   `session_wait` seconds for a free session: all of them may be held by calls waiting for
   their clients' answers (for up to the hold timeout), so past that wait it is refused with
   -32603 saying the backend is busy, `data.mayHaveRun` false (nothing reached the backend:
   it may be sent again), rather than left waiting unseen.
2. A session whose connection failed (the process exited, the connection closed) is closed
   and opened again when next needed; a stdio backend that exited while idle is started
   again before a request is sent, so that request does not fail. Reopening after a failure
   waits a backoff that doubles from `BACKOFF_START` up to `BACKOFF_MAX` seconds, and starts
   over once a session has lived `BACKOFF_RESET` seconds.
3. A request in flight when its session fails gets `McpError(INTERNAL_ERROR)` saying the
   backend failed; it is not sent again. A tool call's error says `data.mayHaveRun` true and
   does not advise calling again (it may have had its effect); a list, read or prompt's says
   to call again. So does an error of the backend's connection raised on this side (a
   timeout, an HTTP status, a failed sign-in: `CONNECTION_ERRORS`), without closing the
   session.
4. A caller is told of a backend failure as an incident (`incident.py`): a short id and the
   backend's neutral name, never its command or URL; the details, redacted, are in the log
   under that id. `describe()` names a backend for the log and the operator, its secrets
   redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client.client import Client
from ..client.options import ClientOptions
from ..protocol.errors import (
    AUTHORIZATION_FAILED,
    CONNECTION_CLOSED,
    HTTP_ERROR,
    INTERNAL_ERROR,
    PROTOCOL_VIOLATION,
    REQUEST_TIMEOUT,
    RESPONSE_TOO_LARGE,
    SESSION_EXPIRED,
    McpError,
)
from .incident import Incidents, redact

logger = logging.getLogger("mrtr.proxy")

#: The first wait before reopening a failed session, in seconds; it doubles on each failure.
BACKOFF_START = 0.25
#: The longest wait before reopening a failed session.
BACKOFF_MAX = 30.0
#: A session that lived this long resets the backoff.
BACKOFF_RESET = 30.0

#: The codes of a backend connection's own failures, raised by its client on this side: their
#: messages name the backend's URL or command, so a caller hears of them as incidents.
CONNECTION_ERRORS = frozenset(
    {
        AUTHORIZATION_FAILED,
        CONNECTION_CLOSED,
        HTTP_ERROR,
        PROTOCOL_VIOLATION,
        REQUEST_TIMEOUT,
        RESPONSE_TOO_LARGE,
        SESSION_EXPIRED,
    }
)

#: Builds the `Client` of one backend session (handlers given as keyword arguments).
ClientFactory = Callable[..., Client]


@dataclass(frozen=True)
class BackendTarget:
    """Where the backend is: a stdio `command` (with `args`, `env`, `cwd`) or a `url`, and
    the `headers` and `options` of the client that talks to it."""

    command: str | None = None
    args: Sequence[str] = ()
    url: str | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    headers: Mapping[str, str] | None = None
    options: ClientOptions | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "a backend is either a stdio command or a URL: give command=... "
                "(e.g. 'npx', args=['-y', 'server']) or url='https://host/mcp', not both"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"backend URL {self.url!r} must start with http:// or https://")

    @classmethod
    def parse(cls, words: Sequence[str]) -> BackendTarget:
        """A target from a command line: one URL, or a command and its arguments."""
        if not words:
            raise ValueError("name a backend: a URL, or `-- COMMAND [ARG ...]`")
        if len(words) == 1 and words[0].startswith(("http://", "https://")):
            return cls(url=words[0])
        return cls(command=words[0], args=tuple(words[1:]))

    def describe(self) -> str:
        """The backend as a person would name it, its secrets redacted (`incident.redact`)."""
        if self.url is not None:
            return redact(self.url)
        return redact(shlex.join([self.command or "", *self.args]))

    def client(self, **handlers: Any) -> Client:
        """A new, unconnected `Client` for one session of this backend."""
        options = self.options or ClientOptions()
        if self.url is not None:
            return Client.http(self.url, headers=self.headers, options=options, **handlers)
        assert self.command is not None
        return Client.stdio(
            self.command, self.args, env=self.env, cwd=self.cwd, options=options, **handlers
        )


class ClientTarget:
    """A `Client` made elsewhere, as a backend of one session (`sessions=1`).

    The backend's questions are routed through its elicitation, sampling and roots handlers,
    which are replaced by the proxy's (a legacy server hears the capabilities the client
    declares when it connects: give it an unconnected client). A client the proxy connects is
    closed when the proxy stops; one connected already is its owner's to close. A closed one
    (its connection failed, or the proxy closed it) is not opened again: every later request
    says so.
    """

    def __init__(self, client: Client) -> None:
        self.given = client
        #: Whether the proxy connects it, and so closes it.
        self.owned = not client.connected
        self._handed = False

    def describe(self) -> str:
        """The backend as a person would name it: the client's URL or command, its secrets
        redacted (`incident.redact`)."""
        transport = self.given.transport
        url, command = getattr(transport, "url", None), getattr(transport, "command", None)
        if url is not None:
            return redact(str(url))
        if isinstance(command, str):
            return redact(shlex.join([command, *getattr(transport, "args", ())]))
        return f"the server of {type(transport).__name__}"

    def client(self, **handlers: Any) -> Client:
        """The given client, its handlers the proxy's, while it is not closed (see the
        class)."""
        if self._handed and not self.given.connected:
            # The caller hears of it as an incident (`BackendSession.client`), this in the log.
            raise McpError(
                INTERNAL_ERROR,
                "its client is closed (its connection failed, or the server it served "
                "stopped), and a client made elsewhere is not opened again: give a new Client, "
                "or a ProxyBackend of a command or URL, which reopens",
            )
        self._handed = True
        client = self.given
        client.set_elicitation_handler(
            handlers["elicitation_handler"], modes=handlers["elicitation_modes"]
        )
        client.set_sampling_handler(handlers["sampling_handler"])
        client.set_roots_handler(handlers["roots_handler"])
        return client


#: What a backend session reaches: a stdio command or URL, or a client made elsewhere.
Target = BackendTarget | ClientTarget


class BackendSession:
    """One session with the backend, opened when first used and reopened after a failure
    (module rules 2 and 3)."""

    def __init__(self, target: Target, backoff: Backoff, incidents: Incidents) -> None:
        self.target = target
        #: How its failures are told (rule 4).
        self.incidents = incidents
        #: The `Client` keyword arguments of its questions, logs and so on.
        self.handlers: dict[str, Any] = {}
        #: What the `tools/call` holding the lease does with the backend's questions, logs
        #: and progress (`held.HeldCall`); None between calls.
        self.holder: Any = None
        self._backoff = backoff
        self._client: Client | None = None
        self._opened_at = 0.0
        self._opening = asyncio.Lock()
        #: Held while a `tools/call` runs on this session (module rule 1).
        self.lease = asyncio.Lock()
        #: Requests in flight on this session.
        self.in_flight = 0

    def serving(self) -> Any:
        """The call what the backend sends now is for: the holder, while its call is the only
        request in flight here; else None (module rule 1)."""
        return self.holder if self.in_flight <= 1 else None

    async def client(self) -> Client:
        """The session's connected `Client`, opening it (after the backoff) if needed; one
        whose process exited while idle is replaced before anything is sent to it."""
        client = self._client
        if client is not None and _exited(client):
            logger.warning("the backend %s exited; starting it again", self.target.describe())
            await self.drop(client)
            client = None
        if client is not None:
            return client
        async with self._opening:
            if self._client is not None:
                return self._client
            await self._backoff.wait()
            try:
                client = self.target.client(**self.handlers)
            except McpError as exc:
                raise self._unreachable(exc.message) from None
            try:
                await client.connect()
                if client.era is None:
                    await client.ping()  # settle the era now, not in a caller's first call
            except (McpError, OSError) as exc:
                self._backoff.failed()
                with contextlib.suppress(Exception):
                    await client.close()
                raise self._unreachable(
                    exc.message if isinstance(exc, McpError) else str(exc)
                ) from None
            self._client = client
            self._opened_at = time.monotonic()
            return client

    async def run(self, call: Callable[[Client], Awaitable[Any]], effect: bool = False) -> Any:
        """`call(client)` on this session; a failed connection is closed (to reopen later)
        and becomes a clear error (rule 3), for a call with an `effect` (a tool's) saying it
        may have run."""
        client = await self.client()
        self.in_flight += 1
        try:
            return await call(client)
        except McpError as exc:
            if exc.code not in CONNECTION_ERRORS:
                raise  # the backend's own answer, or the proxy's
            if exc.code == CONNECTION_CLOSED:
                await self.drop(client)
            raise self._failure(exc, effect) from None
        finally:
            self.in_flight -= 1

    async def drop(self, client: Client | None = None) -> None:
        """Close the session's client (`client`, if still the current one)."""
        current = self._client
        if current is None or (client is not None and current is not client):
            return
        self._client = None
        if time.monotonic() - self._opened_at >= BACKOFF_RESET:
            self._backoff.reset()
        self._backoff.failed()
        with contextlib.suppress(Exception):
            await current.close()

    async def close(self) -> None:
        """Close the session for good (the proxy stops)."""
        client, self._client = self._client, None
        if isinstance(self.target, ClientTarget) and not self.target.owned:
            return  # its owner closes it
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    def _unreachable(self, why: str) -> McpError:
        return self.incidents.failure(
            "the proxy could not reach its backend {backend}",
            why,
            "the proxy could not reach {backend}",
        )

    def _failure(self, exc: McpError, effect: bool) -> McpError:
        closed = exc.code == CONNECTION_CLOSED
        again = "the proxy restarts it; " if closed else ""
        if effect:
            return self.incidents.failure(
                "the proxy's backend {backend} failed during a tool call",
                exc.message,
                f"{{backend}} failed during the call ({again}the call may have had its "
                "effect: check before calling again)",
                mayHaveRun=True,
            )
        return self.incidents.failure(
            "the proxy's backend {backend} failed",
            exc.message,
            f"{{backend}} failed ({again}call again)",
        )


def _exited(client: Client) -> bool:
    """Whether a stdio backend's process has exited (an HTTP backend has no process)."""
    return getattr(client.transport, "returncode", None) is not None


class Backoff:
    """The wait before reopening a failed backend session (module rule 2)."""

    def __init__(self) -> None:
        self._delay = 0.0
        self._failed_at = 0.0

    def failed(self) -> None:
        """Note one failure: the next open waits longer."""
        self._delay = min(BACKOFF_MAX, max(BACKOFF_START, self._delay * 2))
        self._failed_at = time.monotonic()

    def reset(self) -> None:
        """A session lived long enough: open the next one at once."""
        self._delay = 0.0

    async def wait(self) -> None:
        """Sleep out what is left of the current backoff."""
        left = self._failed_at + self._delay - time.monotonic()
        if left > 0:
            await asyncio.sleep(left)


class BackendPool:
    """The proxy's backend sessions (module rule 1): one shared by every request but
    `tools/call`, and up to `sessions` more that each `tools/call` leases to itself."""

    def __init__(
        self,
        target: Target,
        sessions: int,
        make_handlers: Callable[[BackendSession], Mapping[str, Any]],
        session_wait: float = 30.0,
    ) -> None:
        if sessions < 1:
            raise ValueError(f"a proxy needs at least 1 backend session, not {sessions}")
        if not session_wait > 0:
            raise ValueError(f"session_wait must be positive seconds, not {session_wait!r}")
        if isinstance(target, ClientTarget) and sessions != 1:
            raise ValueError(
                f"a backend given as a Client has one session, not {sessions}: give "
                "sessions=1, or a BackendTarget (a command or URL) the proxy opens sessions of"
            )
        self.target = target
        self._backoff = Backoff()
        #: How the backend's failures are told, by every session (rule 4).
        self.incidents = Incidents(target.describe())
        self._make_handlers = make_handlers
        self._size = sessions
        self.session_wait = session_wait
        #: The sessions tool calls lease (a `ClientTarget`'s one is the shared one too).
        self._sessions: list[BackendSession] = []
        self._shared: BackendSession | None = None
        self._free = asyncio.Condition()

    def _open(self) -> BackendSession:
        session = BackendSession(self.target, self._backoff, self.incidents)
        # The handlers know their session, to find the call that holds it.
        session.handlers = dict(self._make_handlers(session))
        return session

    @property
    def shared(self) -> BackendSession:
        """The session lists, reads, prompts and completions use; no call holds it, but for
        a `ClientTarget`'s one session (module rule 1)."""
        if self._shared is None:
            self._shared = self._open()
            if isinstance(self.target, ClientTarget):
                self._sessions.append(self._shared)
        return self._shared

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[BackendSession]:
        """A session to one `tools/call` alone, waiting up to `session_wait` seconds for one
        to be free (rule 1)."""
        try:
            session = await asyncio.wait_for(self._take(), self.session_wait)
        except TimeoutError:
            raise McpError(
                INTERNAL_ERROR,
                f"the backend is busy: its {self._size} session(s) stayed taken by calls in "
                f"progress (some may be waiting for their clients' answers) for "
                f"{self.session_wait:g} s; try again later (the proxy's --sessions sets how "
                "many calls run at once)",
                {"mayHaveRun": False},
            ) from None
        try:
            yield session
        finally:
            session.lease.release()
            async with self._free:
                self._free.notify()

    async def _take(self) -> BackendSession:
        if isinstance(self.target, ClientTarget):
            _ = self.shared  # its one session is the one to lease
        async with self._free:
            while True:
                for session in self._sessions:
                    if not session.lease.locked():
                        break
                else:
                    if len(self._sessions) < self._size:
                        session = self._open()
                        self._sessions.append(session)
                    else:
                        await self._free.wait()
                        continue
                await session.lease.acquire()
                return session

    async def close(self) -> None:
        """Close every session."""
        sessions = list(self._sessions)
        if self._shared is not None and self._shared not in sessions:
            sessions.append(self._shared)
        for session in sessions:
            await session.close()
        self._sessions.clear()
        self._shared = None
