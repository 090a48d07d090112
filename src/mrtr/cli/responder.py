"""Answering a server's questions by asking the person at the terminal.

Elicitation (form mode) renders a form from the requested schema; URL mode shows the URL and
its host and asks for consent, never opening anything itself; sampling shows the conversation
and takes the person's typed reply as the "model" output; roots come from the command line and
are answered without asking. When the person stops answering (end of input), a form or URL
question is answered `cancel` and a sampling question fails the call.

Rules:
* What the server wrote is shown through `display`: its message indented under the line that
  names the server, so that it can neither erase that line nor start a line of its own there.
* A URL with any character outside printable ASCII (a control, a space, a bidi mark, a
  non-ASCII letter) can show one address and open another: it is shown escaped, with a
  warning, and answered `decline` without asking. Otherwise its host is shown as a browser
  reaches it: a backslash read as `/`, percent-escapes decoded, and in ASCII (IDNA, `xn--`),
  so a look-alike letter is visible.
* A form with a field that looks like a secret (`FormField.secret`) is warned about (the spec
  forbids servers to ask for secrets in form mode), that field is typed without echo and
  masked in what is printed, and the person reviews the answers (`Send it? [y/N]`) before
  anything is sent; anything but yes declines.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import SplitResult, unquote, urlsplit

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
from .display import indented, shown, shown_line
from .forms import FormField, ask_form, fields_from_schema
from .results import describe_block
from .terminal import MASK, Console, InvalidAnswer, NoAnswer, ask, run_blocking

Action = Literal["accept", "decline", "cancel"]
_ACTIONS: dict[str, Action] = {
    "a": "accept",
    "accept": "accept",
    "d": "decline",
    "decline": "decline",
    "c": "cancel",
    "cancel": "cancel",
}
#: What a URL may hold to be shown as it is: printable ASCII, no space.
_PRINTABLE_URL = re.compile(r"[\x21-\x7e]*")
#: The spec's rule, quoted when a form asks for what looks like a secret.
SECRET_RULE = (
    "servers must not ask for passwords, API keys, access tokens or payment credentials in a "
    'form (MCP specification, Elicitation: "Servers MUST NOT use form mode elicitation to '
    'request sensitive information"); such things belong on a web page of URL mode'
)


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
        secrets = [f for f in fields if f.secret]
        say("")
        say(f"The server ({shown_line(self.server_label)}) asks:")
        say(indented(params.message, "  "))
        if fields:
            say("  It wants: " + ", ".join(shown_line(f.title) for f in fields))
        if secrets:
            names = ", ".join(repr(shown_line(f.title)) for f in secrets)
            say(f"  ! {names} looks like a secret, and {SECRET_RULE}.")
            say("  ! Decline unless you trust this server with it.")
        action = self._action("Respond? [a]ccept / [d]ecline / [c]ancel > ")
        if action != "accept":
            return ElicitResult(action=action)
        content = ask_form(self.console, schema)
        shown_content = json.dumps(_masked(content, secrets), ensure_ascii=False)
        if secrets:
            say(f"  to send: {shown_line(shown_content)}")
            if not ask(self.console, "Send it? [y/N] > ", _yes_or_no):
                say("(not sent: replying decline)")
                return ElicitResult(action="decline")
        say(f"(sending {shown_line(shown_content)})")
        return ElicitResult(action="accept", content=content)

    def _url(self, params: ElicitRequestParams) -> ElicitResult:
        say = self.console.say
        say("")
        say(f"The server ({shown_line(self.server_label)}) asks you to open a web page:")
        say(indented(params.message, "  "))
        if not params.url:
            say("  ! it sent no URL; replying cancel")
            return ElicitResult(action="cancel")
        if not _PRINTABLE_URL.fullmatch(params.url):
            say(f"  URL:  {shown_line(params.url)}")
            say(
                "  ! the URL holds characters outside printable ASCII (controls, spaces, "
                "invisible or non-ASCII letters): it can show one address and open another"
            )
            say("  ! replying decline")
            return ElicitResult(action="decline")
        parts = urlsplit(params.url.replace("\\", "/"))  # browsers read a backslash as `/`
        host = _ascii_host(parts)
        if host is None:
            say(f"  URL:  {params.url}")
            say("  ! its host cannot be read as a host name; replying decline")
            return ElicitResult(action="decline")
        say(f"  URL:  {params.url}")
        say(f"  HOST: {host}")
        for warning in _url_warnings(parts, host):
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
            say("  [system] " + indented(params.system_prompt, "    ").lstrip(" "))
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            text = " ".join(describe_block(b.to_wire()) for b in blocks)
            say(f"  [{shown_line(message.role)}] " + indented(text, "    ").lstrip(" "))
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


def _yes_or_no(text: str) -> bool:
    if text.lower() in ("y", "yes"):
        return True
    if text.lower() in ("", "n", "no"):
        return False
    raise InvalidAnswer("type y (send) or n (do not send)")


def _masked(content: dict[str, Any], secrets: Sequence[FormField]) -> dict[str, Any]:
    """`content` with the answers of secret fields shown as a mask."""
    names = {f.name for f in secrets}
    return {key: MASK if key in names else value for key, value in content.items()}


def _ascii_host(parts: SplitResult) -> str | None:
    """The host as a browser reaches it, in ASCII (`xn--` for international labels): its
    percent-escapes decoded (`%62ank` is `bank`); None when that is no host name."""
    try:
        host = parts.hostname
    except ValueError:  # an unbalanced IPv6 bracket
        return None
    if not host:
        return "(none)"
    try:
        decoded = unquote(host, errors="strict")
    except UnicodeDecodeError:
        return None
    if shown_line(decoded) != decoded or any(c in decoded for c in " /\\@?#%"):
        return None
    if decoded.isascii():
        return decoded.lower()
    try:
        return decoded.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def _url_warnings(parts: SplitResult, host: str) -> list[str]:
    warnings = []
    scheme = parts.scheme
    if scheme not in ("http", "https"):
        warnings.append(f"unusual scheme {shown(repr(scheme))}: this is not a web page address")
    elif scheme == "http" and not _is_loopback(host):
        warnings.append("not HTTPS: what you type there can be read on the way")
    if "xn--" in host:
        warnings.append("the host has international characters; check for look-alike letters")
    if "@" in parts.netloc:
        warnings.append(f"the part before '@' is a user name, not the host: the page is on {host}")
    if unquote(parts.hostname or "") != (parts.hostname or ""):
        warnings.append("the host was percent-encoded in the URL: HOST shows what it decodes to")
    return warnings


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["SECRET_RULE", "SamplingRefused", "TerminalResponder", "roots_from_paths"]
