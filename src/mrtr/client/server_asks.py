"""What a server may make this client do: the bounds on its questions, in one place.

A server asks in two ways: a 2026-07-28 server in the rounds of an MRTR flow (the
`inputRequests` of an `InputRequiredResult`), a legacy (`initialize`-based) server with
requests of its own (`elicitation/create`, `sampling/createMessage`, `roots/list`). Each
question may prompt a person or call a model the host pays for, so both ways come through
`ServerAsks` before any handler runs, and are held to the same numbers.

Rules:

1. An MRTR round asks at most `InputRequiredConfig.max_input_requests` questions (16), and a
   call takes at most `max_rounds` rounds (10); past either the call fails
   (`MAX_INPUT_REQUESTS_EXCEEDED`, `MAX_ROUNDS_EXCEEDED`) and no question of that round is
   asked.
2. A legacy server has at most `ClientOptions.max_server_requests_in_flight` of its questions
   answered at once (by default `max_input_requests`, a round's worth).
3. And at most `ClientOptions.max_server_requests` per client request (by default
   `max_input_requests * max_rounds`, a whole MRTR call's worth). A legacy server's request
   names no request of the client's (on stdio nothing ties it to one), so "per client
   request" is taken as: while client requests are in flight on the session. The count
   starts again from 0 when a client request is sent while none was in flight, so calls one
   after another each get the whole bound, and calls that overlap share one. A question that
   comes while no client request is in flight counts against the session (over the client's
   connection, never started again).
4. Past rule 2 or 3 the server's request is answered at once with -32600 (Invalid Request:
   the request is refused for being one too many; not -32603, which reads as a failure of
   the client's, worth retrying), its message naming the bound and the option, its `data`
   `{"reason": "too_many_server_requests", "bound", "limit", "option"}`; the handler is not
   called, and a refused request is not counted. `ping` is answered without counting:
   nothing of the host's runs for it.

What the bounds leave to the host: what each question asks for. A sampling handler decides
itself what it will spend (clamp `maxTokens`, refuse or honour `includeContext`, pick the
model), and an elicitation handler what it shows a person.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..inputs import INPUT_METHODS
from ..protocol.errors import (
    INVALID_REQUEST,
    MAX_INPUT_REQUESTS_EXCEEDED,
    MAX_ROUNDS_EXCEEDED,
    McpError,
)

if TYPE_CHECKING:
    from .options import ClientOptions

logger = logging.getLogger("mrtr.client")

#: The `data.reason` of a legacy server's request refused by rule 2 or 3.
TOO_MANY_SERVER_REQUESTS = "too_many_server_requests"


class ServerAsks:
    """The counts of one client's connection, checked against its options (read afresh each
    time, so options set on the client later apply)."""

    def __init__(self, options: Callable[[], ClientOptions]) -> None:
        self._options = options
        self._calls = 0  # client requests in flight on the legacy session
        self._in_flight = 0  # the server's questions being answered now
        self._per_call = 0  # questions since the calls in flight began (rule 3)
        self._per_session = 0  # questions that came while no call was in flight
        self._warned = False  # one warning per stretch of calls, not one per refusal

    # --- MRTR rounds (rule 1) ----------------------------------------------------------------

    def check_round(self, count: int) -> None:
        """Raise `MAX_INPUT_REQUESTS_EXCEEDED` when one round asks more than its bound."""
        cap = self._options().input_required.max_input_requests
        if count > cap:
            raise McpError(
                MAX_INPUT_REQUESTS_EXCEEDED,
                f"the server asked {count} questions in one round; this client answers at "
                f"most {cap} (max_input_requests), so none was asked",
                {"count": count, "max": cap},
            )

    def check_rounds(self, rounds: int, method: str, target: str) -> None:
        """Raise `MAX_ROUNDS_EXCEEDED` when a call reached round `rounds` past its bound."""
        cap = self._options().input_required.max_rounds
        if rounds > cap:
            raise McpError(
                MAX_ROUNDS_EXCEEDED,
                f"{method} {target!r}: the server still asked for input after {cap} rounds "
                "(max_rounds); giving up",
            )

    # --- a legacy server's own requests (rules 2 to 4) ---------------------------------------

    @contextlib.contextmanager
    def client_request(self) -> Iterator[None]:
        """Around one client request on a legacy session: what rule 3 counts within."""
        if self._calls == 0:
            self._per_call = 0
            self._warned = False
        self._calls += 1
        try:
            yield
        finally:
            self._calls -= 1

    def admit(self, method: Any) -> contextlib.AbstractContextManager[None]:
        """Count one request of a legacy server, to be answered within the context returned
        (which frees its place); raises the refusal (an `McpError`, -32600) past a bound."""
        if method not in INPUT_METHODS:
            return contextlib.nullcontext()
        options = self._options()
        in_flight, total = limits(options)
        if self._in_flight >= in_flight:
            raise self._refuse(
                method,
                f"at most {in_flight} server requests at once",
                "in flight",
                in_flight,
                "max_server_requests_in_flight",
            )
        if self._calls:
            if self._per_call >= total:
                raise self._refuse(
                    method,
                    f"at most {total} server requests per client request",
                    "per client request",
                    total,
                    "max_server_requests",
                )
            self._per_call += 1
        else:
            if self._per_session >= total:
                raise self._refuse(
                    method,
                    f"at most {total} server requests while it has no request in flight",
                    "per session",
                    total,
                    "max_server_requests",
                )
            self._per_session += 1
        self._in_flight += 1
        return self._slot()

    @contextlib.contextmanager
    def _slot(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._in_flight -= 1

    def _refuse(self, method: str, what: str, bound: str, limit: int, option: str) -> McpError:
        message = (
            f"Invalid Request: this client answers {what} (ClientOptions.{option}); "
            f"{method} refused, nothing was asked"
        )
        if not self._warned:
            self._warned = True
            logger.warning("the server asked too much: %s", message)
        return McpError(
            INVALID_REQUEST,
            message,
            {
                "reason": TOO_MANY_SERVER_REQUESTS,
                "bound": bound,
                "limit": limit,
                "option": f"ClientOptions.{option}",
            },
        )


def limits(options: ClientOptions) -> tuple[int, int]:
    """A legacy server's bounds under `options`: questions in flight at once, and in total
    (rules 2 and 3, their defaults drawn from the MRTR bounds)."""
    config = options.input_required
    in_flight = options.max_server_requests_in_flight
    total = options.max_server_requests
    return (
        config.max_input_requests if in_flight is None else in_flight,
        config.max_input_requests * config.max_rounds if total is None else total,
    )


__all__ = ["TOO_MANY_SERVER_REQUESTS", "ServerAsks", "limits"]
