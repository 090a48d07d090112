"""Answering a server's questions by asking the person at the terminal.

Elicitation (form mode) renders a form from the requested schema; URL mode shows the URL and
its host and asks for consent, never opening anything itself; sampling shows the conversation
and takes the person's typed reply as the "model" output; roots come from the command line and
are answered without asking. When the person stops answering (end of input), a form or URL
question is answered `cancel` and a sampling question fails the call.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from ..protocol.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsRequestParams,
    ListRootsResult,
    Root,
    TextContent,
)
from .forms import ask_form, fields_from_schema
from .results import describe_block
from .terminal import Console, InvalidAnswer, NoAnswer, ask, run_blocking

Action = Literal["accept", "decline", "cancel"]
_ACTIONS: dict[str, Action] = {
    "a": "accept",
    "accept": "accept",
    "d": "decline",
    "decline": "decline",
    "c": "cancel",
    "cancel": "cancel",
}


class SamplingRefused(Exception):
    """The person typed no reply to a sampling request (end of input)."""


def roots_from_paths(paths: Sequence[str]) -> list[Root]:
    """`Root`s (file:// URIs) for local paths; raises ValueError for a path that does not exist."""
    roots = []
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            raise ValueError(f"--root {raw}: no such file or directory")
        roots.append(Root(uri=path.as_uri(), name=path.name or str(path)))
    return roots


class TerminalResponder:
    """Answers elicitation, sampling and roots requests through a `Console`.

    `server_label` names the server in every question (the spec asks clients to make clear
    who is asking). Questions are asked one at a time even when the server asks several in
    one round.
    """

    def __init__(self, console: Console, server_label: str, roots: Sequence[Root] = ()) -> None:
        self.console = console
        self.server_label = server_label
        self.roots = list(roots)
        #: The sampling request the person refused, if any: a legacy server only hears that
        #: the client failed, so the command looks here to say why it stopped.
        self.refusal: SamplingRefused | None = None
        self._lock = asyncio.Lock()

    def client_handlers(self) -> dict[str, Any]:
        """Keyword arguments for `Client(...)`: every handler, roots only when there are some."""
        handlers: dict[str, Any] = {
            "elicitation_handler": self.elicit,
            "elicitation_modes": ("form", "url"),
            "sampling_handler": self.sample,
        }
        if self.roots:
            handlers["roots_handler"] = self.list_roots
        return handlers

    # --- async handlers for the client ------------------------------------------------------

    async def elicit(self, params: ElicitRequestParams) -> ElicitResult:
        """The elicitation handler."""
        async with self._lock:
            return await run_blocking(lambda: self.answer_elicitation(params))

    async def sample(self, params: CreateMessageRequestParams) -> CreateMessageResult:
        """The sampling handler."""
        async with self._lock:
            try:
                return await run_blocking(lambda: self.answer_sampling(params))
            except SamplingRefused as refused:
                self.refusal = refused
                raise

    def list_roots(self, params: ListRootsRequestParams) -> ListRootsResult:
        """The roots handler: the `--root` paths, without asking."""
        self.console.say(
            f"(sent {len(self.roots)} root{'s' if len(self.roots) != 1 else ''} to the server: "
            + ", ".join(r.uri for r in self.roots)
            + ")"
        )
        return ListRootsResult(roots=self.roots)

    # --- the interactions (blocking) ----------------------------------------------------------

    def answer_elicitation(self, params: ElicitRequestParams) -> ElicitResult:
        """Ask the person; end of input answers `cancel`."""
        try:
            if params.is_url_mode:
                return self._url(params)
            return self._form(params)
        except NoAnswer:
            self.console.say("(no answer: replying cancel)")
            return ElicitResult(action="cancel")

    def _form(self, params: ElicitRequestParams) -> ElicitResult:
        say = self.console.say
        schema = params.requested_schema or {}
        fields = fields_from_schema(schema)
        say("")
        say(f"The server ({self.server_label}) asks:")
        say(f"  {params.message}")
        if fields:
            say("  It wants: " + ", ".join(f.title for f in fields))
        action = self._action("Respond? [a]ccept / [d]ecline / [c]ancel > ")
        if action != "accept":
            return ElicitResult(action=action)
        content = ask_form(self.console, schema)
        say(f"(sending {json.dumps(content, ensure_ascii=False)})")
        return ElicitResult(action="accept", content=content)

    def _url(self, params: ElicitRequestParams) -> ElicitResult:
        say = self.console.say
        say("")
        say(f"The server ({self.server_label}) asks you to open a web page:")
        say(f"  {params.message}")
        if not params.url:
            say("  ! it sent no URL; replying cancel")
            return ElicitResult(action="cancel")
        parts = urlsplit(params.url)
        host = parts.hostname or "(none)"
        say(f"  URL:  {params.url}")
        say(f"  HOST: {host}")
        for warning in _url_warnings(parts.scheme, host):
            say(f"  ! {warning}")
        say("  This command does not open it. Open it yourself only if you trust that host.")
        action = self._action("Did you open it? [a]ccept / [d]ecline / [c]ancel > ")
        return ElicitResult(action=action)

    def _action(self, prompt: str) -> Action:
        def parse(text: str) -> Action:
            action = _ACTIONS.get(text.lower())
            if action is None:
                raise InvalidAnswer("type a (accept), d (decline) or c (cancel)")
            return action

        return ask(self.console, prompt, parse)

    def answer_sampling(self, params: CreateMessageRequestParams) -> CreateMessageResult:
        """Show the conversation and take the person's reply; raises `SamplingRefused` at EOF."""
        say = self.console.say
        say("")
        say(f"The server ({self.server_label}) asks for a model reply; you are the model.")
        if params.system_prompt:
            say(f"  [system] {params.system_prompt}")
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            text = " ".join(describe_block(b.to_wire()) for b in blocks)
            say(f"  [{message.role}] {text}")
        say(f"  (up to {params.max_tokens} tokens)")

        def parse(text: str) -> str:
            if not text:
                raise InvalidAnswer("type a reply (or end the input to refuse)")
            return text

        try:
            reply = ask(self.console, "Your reply > ", parse)
        except NoAnswer:
            raise SamplingRefused("no reply was typed for the server's sampling request") from None
        return CreateMessageResult(
            role="assistant",
            content=TextContent(text=reply),
            model="human",
            stop_reason="endTurn",
        )


def _url_warnings(scheme: str, host: str) -> list[str]:
    warnings = []
    if scheme not in ("http", "https"):
        warnings.append(f"unusual scheme {scheme!r}: this is not a web page address")
    elif scheme == "http" and not _is_loopback(host):
        warnings.append("not HTTPS: what you type there can be read on the way")
    if "xn--" in host or not host.isascii():
        warnings.append("the host has international characters; check for look-alike letters")
    return warnings


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["SamplingRefused", "TerminalResponder", "roots_from_paths"]
