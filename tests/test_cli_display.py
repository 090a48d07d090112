"""What `mrtr call` and `mrtr list` show a person of what a server sent: the display filter,
URL questions, forms that ask for secrets, a server's pattern, a result nested too deep.

In-process, with a scripted console; `test_cli_hostile.py` runs the real command against a
hostile server in a real terminal.
"""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any

import pytest

from mrtr import CallToolResult, ElicitRequestParams, TextContent
from mrtr.cli.call import _task_reporter, forward_server_stderr
from mrtr.cli.display import indented, shown, shown_json, shown_line
from mrtr.cli.forms import PATTERN_SECONDS, FormField, fields_from_schema, pattern_matches
from mrtr.cli.listing import format_listing
from mrtr.cli.notices import Notices
from mrtr.cli.responder import TerminalResponder
from mrtr.cli.results import MAX_RESULT_DEPTH
from mrtr.protocol.tasks import DetailedTask
from mrtr.server.input_bounds import nesting_exceeds

ESC = "\x1b"
HOSTILE = f"a{ESC}[2J\x07\x08\r\x7f\x9b\x85\u202e\u2066\u200f\u2028\ud800b"
#: Every character the filter must never let through (the ones in HOSTILE).
RAW = set(HOSTILE) - set("a[2Jb")


class Script:
    """A console that answers from a list of lines and records what is shown and how asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.shown: list[str] = []
        self.secret_prompts: list[str] = []

    def say(self, text: str = "") -> None:
        self.shown.append(text)

    def read_line(self, prompt: str) -> str | None:
        self.shown.append(prompt)
        return self.answers.pop(0) if self.answers else None

    def read_secret(self, prompt: str) -> str | None:
        self.secret_prompts.append(prompt)
        return self.read_line(prompt)

    @property
    def text(self) -> str:
        return "\n".join(self.shown)


def no_raw(text: str) -> bool:
    return not RAW & set(text)


# --- the filter ---------------------------------------------------------------------------------


def test_shown_escapes_controls_bidi_and_surrogates_and_keeps_newline_and_tab() -> None:
    assert shown(HOSTILE) == (
        "a\\x1b[2J\\x07\\x08\\x0d\\x7f\\x9b\\x85\\u202e\\u2066\\u200f\\u2028\\ud800b"
    )
    assert shown("one\n\ttwo") == "one\n\ttwo"
    assert shown("naïve café ✓ 日本") == "naïve café ✓ 日本"  # printable non-ASCII kept
    assert shown_line("one\ntwo") == "one\\x0atwo"
    assert indented(f"first\n{ESC}[1Asecond", "  ") == "  first\n  \\x1b[1Asecond"


def test_shown_json_stays_json_with_the_same_value() -> None:
    value = {"text": HOSTILE, "ok": "日本"}
    text = shown_json(json.dumps(value, ensure_ascii=False))
    assert no_raw(text)
    assert "日本" in text
    assert json.loads(text) == value


def test_listing_shows_hostile_descriptions_escaped() -> None:
    description: dict[str, Any] = {
        "serverInfo": {"name": f"evil{ESC}]0;title\x07", "version": "1"},
        "era": "2026-07-28",
        "protocolVersion": "2026-07-28",
        "tools": [{"name": "t\u202e", "description": f"clears {ESC}[2J the screen"}],
    }
    text = format_listing(description)
    assert no_raw(text)
    assert "clears \\x1b[2J the screen" in text


# --- everything else the command prints ---------------------------------------------------------


def test_notices_task_status_and_server_stderr_are_shown_escaped() -> None:
    stream = io.StringIO()
    notices = Notices(stream)
    notices.log({"level": "warning", "logger": f"l{ESC}[2K", "data": f"line{ESC}]52;c;eA==\x07"})
    notices.progress(1, 2, f"half\r{ESC}[2K")
    stamp = "2026-01-01T00:00:00Z"
    task = DetailedTask(
        task_id=f"t{ESC}[1A", status="working", created_at=stamp, last_updated_at=stamp,
        status_message=f"busy\nmrtr call: done{ESC}[2J",
    )  # fmt: skip
    _task_reporter(stream, notices)(task)
    log = logging.getLogger("mrtr.stdio.server")
    saved = log.handlers[:]
    log.handlers.clear()
    try:
        forward_server_stderr(stream)
        log.info("from stderr %s", f"{ESC}[2J\u202e")
    finally:
        log.handlers[:] = saved
    text = stream.getvalue()
    assert no_raw(text), text
    assert ESC not in text
    assert "busy\\x0amrtr call: done" in text  # a status cannot start a line of its own
    assert "server: from stderr \\x1b[2J\\u202e" in text


# --- URL questions ------------------------------------------------------------------------------


def ask_url(url: str, *answers: str) -> tuple[str, Script]:
    console = Script(*answers)
    responder = TerminalResponder(console, "srv")
    params = ElicitRequestParams(mode="url", message=f"Sign in{ESC}[2K", url=url)
    return responder.answer_elicitation(params).action, console


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/steal" + "\b" * 26 + "https://bank.example/login",
        f"{ESC}]8;;https://evil.example/{ESC}\\https://bank.example/{ESC}]8;;{ESC}\\",
        "https://bank.example\u202e/nigol",
        "https://b\u0430nk.example/login",  # a Cyrillic a
        "https://bank.example/login https://evil.example/",
    ],
    ids=["backspaces", "osc8-link", "bidi", "non-ascii-host", "space"],
)
def test_url_outside_printable_ascii_is_declined_unasked_and_shown_escaped(url: str) -> None:
    action, console = ask_url(url, "a")
    assert action == "decline"
    assert console.answers == ["a"]  # never asked
    assert no_raw(console.text) and ESC not in console.text
    assert "outside printable ASCII" in console.text
    assert "HOST:" not in console.text


@pytest.mark.parametrize(
    ("url", "host", "warning"),
    [
        ("https://%D0%B0pple.com/login", "xn--pple-43d.com", "percent-encoded"),
        ("https://xn--pple-43d.com/", "xn--pple-43d.com", "look-alike"),
        ("https://evil.example\\@bank.example/", "evil.example", None),
        ("https://bank.example@evil.example/", "evil.example", "user name"),
        ("https://%62ank.example/", "bank.example", "percent-encoded"),
    ],
)
def test_url_host_is_shown_as_a_browser_reaches_it(
    url: str, host: str, warning: str | None
) -> None:
    action, console = ask_url(url, "d")
    assert action == "decline"
    assert f"HOST: {host}" in console.text
    if warning is not None:
        assert warning in console.text


def test_url_whose_host_decodes_to_a_control_is_declined() -> None:
    action, console = ask_url("https://bank%1b.example/", "a")
    assert action == "decline" and console.answers == ["a"]
    assert "cannot be read as a host name" in console.text


# --- forms --------------------------------------------------------------------------------------


def test_form_shows_every_server_string_escaped_under_the_server_line() -> None:
    schema = {
        "type": "object",
        "properties": {
            "c": {
                "type": "string",
                "title": f"Colour{ESC}]52;c;ZXZpbA==\x07",
                "description": f"pick{ESC}[2J",
                "oneOf": [{"const": "r", "title": f"Red{ESC}[8m"}],
                "default": f"r{ESC}[1A",
                "minLength": f"1{ESC}[2K",
            }
        },
    }
    console = Script("a", "1")
    responder = TerminalResponder(console, "srv")
    message = f"{ESC}[1A{ESC}[2K\rThe server (https://accounts.google.com) asks:"
    result = responder.answer_elicitation(
        ElicitRequestParams(message=message, requested_schema=schema)  # type: ignore[arg-type]
    )
    assert result.action == "accept"
    assert no_raw(console.text) and ESC not in console.text
    lines = console.text.splitlines()
    assert "The server (srv) asks:" in lines
    # The server's text is indented: it cannot start a line where the command's own start.
    assert not any(line.startswith("The server (https://") for line in lines)


@pytest.mark.parametrize(
    "name",
    ["password", "Bank password", "apiKey", "api_key", "PIN", "Card number", "cvv", "otp",
     "access_token", "passphrase", "SSN", "secret"],
)  # fmt: skip
def test_secret_fields_are_recognised(name: str) -> None:
    assert FormField(name=name, kind="string", title=name).secret


@pytest.mark.parametrize("name", ["name", "email", "shipping", "spinner", "Tokyo", "company"])
def test_ordinary_fields_are_not_secrets(name: str) -> None:
    assert not FormField(name=name, kind="string", title=name).secret


BANK = {
    "type": "object",
    "properties": {
        "user": {"type": "string", "title": "User name"},
        "pw": {"type": "string", "title": "Bank password"},
    },
    "required": ["user", "pw"],
}


@pytest.mark.parametrize(("review", "action"), [("y", "accept"), ("", "decline"), ("n", "decline")])
def test_a_form_asking_a_secret_warns_reads_it_unechoed_masks_it_and_asks_to_review(
    review: str, action: str
) -> None:
    console = Script("a", "bob", "hunter22", review)
    responder = TerminalResponder(console, "srv")
    result = responder.answer_elicitation(
        ElicitRequestParams(message="Sign in", requested_schema=BANK)  # type: ignore[arg-type]
    )
    assert result.action == action
    assert (result.content or {}) == ({"user": "bob", "pw": "hunter22"} if review == "y" else {})
    text = console.text
    assert "'Bank password' looks like a secret" in text
    assert "Servers MUST NOT use form mode elicitation to request sensitive information" in text
    assert len(console.secret_prompts) == 1  # the password, and only it, read without echo
    assert "Send it? [y/N] > " in console.shown
    said = [line for line in console.shown if "sending" in line or "to send" in line]
    assert said and all("hunter22" not in line and "••••" in line for line in said)
    assert console.answers == []


def test_a_form_without_secrets_has_no_review_step() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    console = Script("a", "bob")
    result = TerminalResponder(console, "srv").answer_elicitation(
        ElicitRequestParams(message="Who?", requested_schema=schema)  # type: ignore[arg-type]
    )
    assert result.action == "accept" and result.content == {"name": "bob"}
    assert "Send it? [y/N] > " not in console.shown and not console.secret_prompts


# --- a server's pattern -------------------------------------------------------------------------


def test_pattern_is_matched_and_a_runaway_one_is_cut_off() -> None:
    assert pattern_matches("^[0-9]{3}$", "123") is True
    assert pattern_matches("^[0-9]{3}$", "12a") is False
    assert pattern_matches("(unclosed", "x") is None
    started = time.monotonic()
    assert pattern_matches("^(((.+)+)+)+\x00$", "a" * 24) is None
    assert time.monotonic() - started < PATTERN_SECONDS + 3


def test_a_field_whose_pattern_runs_away_takes_the_answer() -> None:
    [f] = fields_from_schema(
        {"type": "object", "properties": {"c": {"type": "string", "pattern": "^(((.+)+)+)+\x00$"}}}
    )
    assert f.parse("a" * 24) == "a" * 24  # not checked here: the server checks its pattern


# --- depth --------------------------------------------------------------------------------------


def test_nesting_exceeds_walks_models_and_json_without_recursion() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    assert nesting_exceeds(deep, MAX_RESULT_DEPTH)
    shallow = CallToolResult(content=[TextContent(text="hi")], structured_content={"a": [1]})
    assert not nesting_exceeds(shallow, MAX_RESULT_DEPTH)
    assert nesting_exceeds(CallToolResult(content=[], structured_content=deep), 64)
