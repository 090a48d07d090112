"""The `mrtr` command line: the form renderer, the terminal responder, `serve`, `call`, `demo`.

End-to-end tests run the real command in a subprocess against `tests/servers/cli_server.py`
served over stdio by `mrtr serve`, and type the person's answers through piped stdin.
"""

from __future__ import annotations

import enum
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, TypeAdapter

from helpers.loopback_process import free_port
from mrtr import (
    CallToolResult,
    CreateMessageRequestParams,
    ElicitRequestParams,
    ImageContent,
    ResourceLink,
    SamplingMessage,
    Server,
    TextContent,
)
from mrtr.cli import main
from mrtr.cli.call import CallCommand, parse_arguments, parse_headers
from mrtr.cli.demo import serving
from mrtr.cli.forms import MISSING, ask_field, ask_form, fields_from_schema
from mrtr.cli.responder import SamplingRefused, TerminalResponder, roots_from_paths
from mrtr.cli.results import format_tool_result
from mrtr.cli.serve import TargetError, load_server, split_target
from mrtr.cli.terminal import NoAnswer

ROOT = Path(__file__).resolve().parent.parent
SERVER_FILE = ROOT / "tests" / "servers" / "cli_server.py"
SERVE = ["--", sys.executable, "-m", "mrtr.cli", "serve", str(SERVER_FILE)]
TIMEOUT = 60  # a guard against a hang, never a measurement


class Script:
    """A console that answers from a list of lines and records everything shown."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.shown: list[str] = []

    def say(self, text: str = "") -> None:
        self.shown.append(text)

    def read_line(self, prompt: str) -> str | None:
        self.shown.append(prompt)
        return self.answers.pop(0) if self.answers else None

    def read_secret(self, prompt: str) -> str | None:
        self.shown.append(prompt + "(no echo)")
        return self.answers.pop(0) if self.answers else None

    @property
    def text(self) -> str:
        return "\n".join(self.shown)


def one_field(prop: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {"f": prop}}
    if required:
        schema["required"] = ["f"]
    return schema


def fill(prop: dict[str, Any], *answers: str, required: bool = False) -> tuple[Any, Script]:
    """Ask the single field `f` of a form, answering with `answers`."""
    console = Script(*answers)
    (field,) = fields_from_schema(one_field(prop, required=required))
    return ask_field(console, field), console


# --- the form renderer --------------------------------------------------------------------


def test_string_field_checks_length_and_reasks() -> None:
    value, console = fill(
        {"type": "string", "minLength": 3, "maxLength": 5}, "ab", "abcdefg", "abcd"
    )
    assert value == "abcd"
    assert "needs at least 3 characters (got 2)" in console.text
    assert "allows at most 5 characters (got 7)" in console.text


@pytest.mark.parametrize(
    ("fmt", "bad", "good"),
    [
        ("email", "not-an-email", "ann@example.com"),
        ("uri", "no scheme here", "https://example.com/x"),
        ("date", "2024-13-01", "2024-02-29"),
        ("date-time", "2024-02-29", "2024-02-29T10:30:00Z"),
    ],
)
def test_string_formats_are_validated(fmt: str, bad: str, good: str) -> None:
    value, console = fill({"type": "string", "format": fmt}, bad, good)
    assert value == good
    assert console.text.count("  ! ") == 1


def test_number_field_parses_and_enforces_bounds() -> None:
    value, console = fill({"type": "number", "minimum": 0, "maximum": 10}, "ten", "11", "-1", "2.5")
    assert value == 2.5
    assert "'ten' is not a number" in console.text
    assert "must be at most 10" in console.text
    assert "must be at least 0" in console.text


def test_integer_field_refuses_fractions() -> None:
    value, console = fill({"type": "integer"}, "2.5", "3")
    assert value == 3
    assert isinstance(value, int)
    assert "'2.5' is not a whole number" in console.text


def test_boolean_field_takes_yes_no_and_default() -> None:
    assert fill({"type": "boolean"}, "yes")[0] is True
    assert fill({"type": "boolean"}, "N")[0] is False
    value, console = fill({"type": "boolean", "default": True}, "maybe", "")
    assert value is True
    assert "answer y (yes) or n (no)" in console.text
    assert "[y]> " in console.text


def test_enum_field_by_number_or_value() -> None:
    prop = {"type": "string", "enum": ["red", "green", "blue"]}
    assert fill(prop, "2")[0] == "green"
    assert fill(prop, "blue")[0] == "blue"
    assert fill(prop, "BLUE")[0] == "blue"
    value, console = fill(prop, "4", "purple", "1")
    assert value == "red"
    assert "'4' is not one of the choices (type 1 to 3)" in console.text
    assert "'purple' is not one of the choices" in console.text
    assert "    1) red" in console.text


def test_titled_enum_shows_titles_and_sends_consts() -> None:
    prop = {
        "type": "string",
        "oneOf": [{"const": "#f00", "title": "Red"}, {"const": "#00f", "title": "Blue"}],
        "default": "#00f",
    }
    assert fill(prop, "red")[0] == "#f00"
    value, console = fill(prop, "")
    assert value == "#00f"
    assert "[Blue]> " in console.text
    assert "    2) Blue" in console.text


def test_multi_select_enum() -> None:
    prop = {
        "type": "array",
        "items": {"type": "string", "enum": ["a", "b", "c"]},
        "minItems": 1,
        "maxItems": 2,
    }
    value, console = fill(prop, "1,2,3", "", "3, a, 3", required=True)
    assert value == ["c", "a"]
    assert "choose at most 2 (got 3)" in console.text
    assert "choose at least 1 (got 0)" in console.text
    assert fill(prop, "")[0] is MISSING  # an optional field left empty is skipped


def test_titled_multi_select_with_default() -> None:
    prop = {
        "type": "array",
        "items": {"anyOf": [{"const": "x", "title": "Ex"}, {"const": "y", "title": "Why"}]},
        "default": ["y"],
    }
    assert fill(prop, "Ex, 2")[0] == ["x", "y"]
    value, console = fill(prop, "")
    assert value == ["y"]
    assert "[Why]> " in console.text


def test_required_fields_are_enforced_and_optional_ones_skipped() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "nick": {"type": "string"},
            "age": {"type": "integer", "default": 30},
        },
        "required": ["name"],
    }
    console = Script("", "Ann", "", "")
    assert ask_form(console, schema) == {"name": "Ann", "age": 30}
    assert "this field is required" in console.text
    assert "* Name" in console.text


def test_pydantic_schema_refs_and_optionals_are_unwrapped() -> None:
    class Size(enum.Enum):
        S = "small"
        L = "large"

    class Order(BaseModel):
        size: Size
        note: str | None = None
        region: Literal["eu", "us"] = Field("eu", description="Where to ship")

    schema = TypeAdapter(Order).json_schema()
    fields = {f.name: f for f in fields_from_schema(schema)}
    assert fields["size"].kind == "enum"
    assert fields["size"].required
    assert fields["note"].kind == "string"
    assert fields["note"].default is MISSING
    assert fields["region"].description == "Where to ship"
    assert ask_form(Script("2", "", ""), schema) == {"size": "large", "region": "eu"}


def test_unknown_field_types_take_json() -> None:
    value, console = fill({"type": "object"}, "{oops", '{"a": 1}')
    assert value == {"a": 1}
    assert "that is not valid JSON" in console.text


def test_end_of_input_and_endless_bad_answers_give_no_answer() -> None:
    with pytest.raises(NoAnswer):
        fill({"type": "integer"}, "x")
    with pytest.raises(NoAnswer):
        fill({"type": "integer"}, *["x"] * 50)


# --- the terminal responder ---------------------------------------------------------------


FORM = ElicitRequestParams(
    message="Pick a size", requested_schema=one_field({"type": "string"}, required=True)
)


@pytest.mark.parametrize(
    ("answers", "action", "content"),
    [
        (("a", "XL"), "accept", {"f": "XL"}),
        (("d",), "decline", None),
        (("cancel",), "cancel", None),
        (("?", "D"), "decline", None),
        ((), "cancel", None),  # end of input at the first question
        (("a",), "cancel", None),  # end of input in the form
    ],
)
def test_elicitation_actions(answers: tuple[str, ...], action: str, content: Any) -> None:
    console = Script(*answers)
    result = TerminalResponder(console, "srv").answer_elicitation(FORM)
    assert result.action == action
    assert result.content == content
    assert "The server (srv) asks:" in console.text
    assert "Pick a size" in console.text


def test_url_elicitation_shows_url_and_host_and_never_fills_content() -> None:
    params = ElicitRequestParams(
        message="Sign in", mode="url", url="http://xn--pple-43d.com/login?next=/"
    )
    console = Script("a")
    result = TerminalResponder(console, "srv").answer_elicitation(params)
    assert result.action == "accept"
    assert result.content is None
    assert "URL:  http://xn--pple-43d.com/login?next=/" in console.text
    assert "HOST: xn--pple-43d.com" in console.text
    assert "not HTTPS" in console.text
    assert "international characters" in console.text
    assert "does not open it" in console.text


def test_sampling_reply_is_typed_by_the_person() -> None:
    params = CreateMessageRequestParams(
        messages=[SamplingMessage(role="user", content=TextContent(text="Say hi"))],
        max_tokens=20,
        system_prompt="Be kind",
    )
    console = Script("", "hello there")
    result = TerminalResponder(console, "srv").answer_sampling(params)
    assert result.model == "human"
    assert result.role == "assistant"
    assert result.stop_reason == "endTurn"
    assert isinstance(result.content, TextContent)
    assert result.content.text == "hello there"
    assert "[system] Be kind" in console.text
    assert "[user] Say hi" in console.text
    with pytest.raises(SamplingRefused):
        TerminalResponder(Script(), "srv").answer_sampling(params)


def test_roots_from_paths(tmp_path: Path) -> None:
    (root,) = roots_from_paths([str(tmp_path)])
    assert root.uri == tmp_path.resolve().as_uri()
    assert root.name == tmp_path.name
    with pytest.raises(ValueError, match="no such file"):
        roots_from_paths([str(tmp_path / "missing")])


def test_responder_offers_roots_only_when_given(tmp_path: Path) -> None:
    assert "roots_handler" not in TerminalResponder(Script(), "s").client_handlers()
    roots = roots_from_paths([str(tmp_path)])
    assert "roots_handler" in TerminalResponder(Script(), "s", roots).client_handlers()


# --- arguments and output -----------------------------------------------------------------


def test_key_value_arguments_are_json_when_they_parse() -> None:
    parsed = parse_arguments(
        ["n=3", "name=bob", "ok=true", 'tags=["a"]', 'q="3"', "expr=a=b", "e="]
    )
    assert parsed == {
        "n": 3,
        "name": "bob",
        "ok": True,
        "tags": ["a"],
        "q": "3",
        "expr": "a=b",
        "e": "",
    }
    with pytest.raises(ValueError, match="not key=value"):
        parse_arguments(["oops"])
    with pytest.raises(ValueError, match="given twice"):
        parse_arguments(["a=1", "a=2"])


def test_headers() -> None:
    assert parse_headers(["X-Api-Key=abc", "Authorization: Bearer t=1"]) == {
        "X-Api-Key": "abc",
        "Authorization": "Bearer t=1",
    }
    with pytest.raises(ValueError):
        parse_headers(["novalue"])


def test_result_formatting() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="hello"),
            ImageContent(data="AAAA", mime_type="image/png"),
            ResourceLink(uri="file:///a.txt", name="a.txt"),
        ],
        structured_content={"x": 1},
        is_error=True,
    )
    text = format_tool_result(result)
    assert text.splitlines()[0] == "The tool reported an error:"
    assert "hello" in text
    assert "[image: image/png, 3 bytes]" in text
    assert "[resource link: a.txt <file:///a.txt>]" in text
    assert '{\n  "x": 1\n}' in text
    # A text block repeating the structured content is shown once, indented.
    same = CallToolResult(content=[TextContent(text='{"x":1}')], structured_content={"x": 1})
    assert format_tool_result(same) == '{\n  "x": 1\n}'


# --- mrtr serve -----------------------------------------------------------------------------


def test_split_target() -> None:
    assert split_target("pkg.mod:app") == ("pkg.mod", "app")
    assert split_target("shop.py") == ("shop.py", None)
    with pytest.raises(TargetError):
        split_target("shop.py:")


def test_load_server_from_file_and_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading adds the target's directory
    assert load_server(f"{SERVER_FILE}:server").name == "cli-test-server"
    assert load_server(str(SERVER_FILE)).name == "cli-test-server"
    (tmp_path / "twoservers.py").write_text(
        "from mrtr import Server\na = Server('a')\nb = Server('b')\nnot_one = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    assert load_server("twoservers:b").name == "b"
    with pytest.raises(TargetError, match="several Servers"):
        load_server("twoservers")
    with pytest.raises(TargetError, match="no attribute 'c'; its Servers: a, b"):
        load_server("twoservers:c")
    with pytest.raises(TargetError, match="is a int, not an mrtr Server"):
        load_server("twoservers:not_one")
    with pytest.raises(TargetError, match="no module named 'nonexistent_mod'"):
        load_server("nonexistent_mod:server")
    with pytest.raises(TargetError, match="no such file"):
        load_server("missing.py:server")
    assert isinstance(load_server("twoservers:a"), Server)


def run_cli(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "mrtr.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_here:server", "no module named 'no_such_module_here'"),
        ("tests/servers/cli_server.py:nothing", "has no attribute 'nothing'"),
        ("tests/servers/cli_server.py:SIGNUP_SCHEMA", "is a dict, not an mrtr Server"),
        ("tests/servers/missing.py:server", "no such file"),
        ("bad target!", "neither a module name nor a path"),
    ],
)
def test_serve_bad_target_exits_2(target: str, message: str) -> None:
    done = run_cli("serve", target)
    assert done.returncode == 2
    assert message in done.stderr
    assert "usage: mrtr serve" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_reports_a_module_that_fails_to_import(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import no_such_dependency_xyz\n")
    done = run_cli("serve", "broken:server", cwd=tmp_path)
    assert done.returncode == 1
    assert "importing broken failed" in done.stderr
    assert "No module named 'no_such_dependency_xyz'" in done.stderr


def test_serve_rejects_port_with_stdio() -> None:
    done = run_cli("serve", str(SERVER_FILE), "--port", "8000")
    assert done.returncode == 2
    assert "--transport http only" in done.stderr


def test_serve_answers_over_stdio() -> None:
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "add",
            "arguments": {"a": 2, "b": 3},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr.cli", "serve", "tests/servers/cli_server.py:server",
         "--transport", "stdio"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=ROOT,
    )  # fmt: skip
    assert process.stdin and process.stdout and process.stderr
    try:
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        # stdin stays open until the answer is in: end of input tells the server to stop.
        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(process.stdout.readline)
            try:
                line = reading.result(timeout=TIMEOUT)
            except FutureTimeout:
                process.kill()  # unblocks the read; the test fails below
                raise
    finally:
        process.stdin.close()
        process.wait(timeout=TIMEOUT)
    assert process.returncode == 0, process.stderr.read()
    response = json.loads(line)
    assert response["id"] == 7
    assert response["result"]["structuredContent"] == {"result": 5}


# --- mrtr call ------------------------------------------------------------------------------


def test_call_fills_a_form_typed_on_stdin() -> None:
    answers = "\n".join(
        ["a", "B", "Bob", "bob@example", "bob@example.com", "12", "40", "", "2, 3", "y"]
    )
    done = run_cli("call", "signup", "source=pipe", *SERVE, stdin=answers + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "signed up from pipe: {'age': 40, 'email': 'bob@example.com', "
        "'extras': ['mug', 'hoodie'], 'name': 'Bob', 'newsletter': True, 'plan': 'free'}"
    )
    # The questions went to stderr, with the reasons for each re-ask.
    assert "Tell us about yourself" in done.stderr
    assert "needs at least 2 characters" in done.stderr
    assert "that is not an email address" in done.stderr
    assert "must be at least 18" in done.stderr


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [("d\n", "signup declined"), ("c\n", "signup cancelled"), ("a\nBob\n", "signup cancelled")],
)
def test_call_decline_and_cancel(stdin: str, expected: str) -> None:
    done = run_cli("call", "signup", *SERVE, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_call_json_output_and_argument_types() -> None:
    done = run_cli("call", "--json", "echo", "n=3", "name=bob", "ok=true", 'tags=["a"]', *SERVE)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {
        "n": {"value": 3, "type": "int"},
        "name": {"value": "bob", "type": "str"},
        "ok": {"value": True, "type": "bool"},
        "tags": {"value": ["a"], "type": "list"},
    }


def test_call_sampling_reply_typed_by_the_person() -> None:
    done = run_cli("call", "poem", "topic=sea", *SERVE, stdin="Waves, and more waves\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "human/endTurn: Waves, and more waves"
    assert "[system] You are a poet" in done.stderr
    assert "[user] A poem about sea" in done.stderr


def test_call_sampling_end_of_input_fails_the_call() -> None:
    done = run_cli("call", "poem", "topic=sea", *SERVE)
    assert done.returncode == 1
    assert "no reply was typed" in done.stderr


def test_call_timeout_ends_a_never_ending_task_with_one_line() -> None:
    started = time.monotonic()
    done = run_cli("call", "--timeout", "3", "forever", *SERVE)
    assert time.monotonic() - started < TIMEOUT
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    stops = [line for line in lines if line.startswith("mrtr call: stopped")]
    assert stops == ["mrtr call: stopped: the call did not end within 3 s (--timeout)"], lines
    assert lines[-1] == stops[0]  # nothing after it (no stray traceback of the ended call)
    assert "Traceback" not in done.stderr
    # What it stopped was a task the server ran the call as.
    assert any(line.startswith("mrtr call: task ") for line in lines[:-1]), lines


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_call_timeout_must_be_a_positive_number_of_seconds(bad: str) -> None:
    done = run_cli("call", f"--timeout={bad}", "add", "a=1", "b=2", *SERVE)
    assert done.returncode == 2
    assert "--timeout" in done.stderr and "positive number of seconds" in done.stderr


def test_call_roots_from_the_command_line(tmp_path: Path) -> None:
    done = run_cli("call", "where", "--root", str(tmp_path), *SERVE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path.name}={tmp_path.resolve().as_uri()}"


def test_call_without_roots_does_not_declare_them() -> None:
    done = run_cli("call", "where", *SERVE)
    assert done.returncode == 1
    assert "-32021" in done.stderr
    assert "--root PATH" in done.stderr


def test_call_url_elicitation() -> None:
    done = run_cli("call", "login", *SERVE, stdin="d\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "login decline"
    assert "HOST: auth.example.com" in done.stderr


def test_call_tool_error_exits_1() -> None:
    done = run_cli("call", "fail", *SERVE)
    assert done.returncode == 1
    assert done.stdout.startswith("The tool reported an error:")
    assert "this tool always fails" in done.stdout


def test_call_protocol_error_exits_1() -> None:
    done = run_cli("call", "nope", *SERVE)
    assert done.returncode == 1
    assert "Unknown tool: 'nope'" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "a=1"), "no server"),
        (("add", "a", *SERVE), "'a' is not key=value"),
        (("http://127.0.0.1:9/mcp", "add", *SERVE), "either a URL or '-- COMMAND'"),
        (("--header", "X=1", "add", *SERVE), "--header applies to an HTTP server"),
        (("--root", "/no/such/dir/here", "add", *SERVE), "no such file or directory"),
    ],
)
def test_call_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    done = run_cli("call", *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_main_without_a_command_shows_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "serve" in capsys.readouterr().err
    assert main(["--version"]) == 0


# --- mrtr demo ------------------------------------------------------------------------------


def structured_content(part: str) -> dict[str, Any]:
    """The JSON the demo printed under "structured content:" in `part`."""
    lines = part.split("structured content:\n", 1)[1].splitlines()
    block: list[str] = []
    for line in lines:
        block.append(line)
        if line == "    }":
            break
    found: dict[str, Any] = json.loads("\n".join(block))
    return found


def test_demo_runs_the_same_tool_on_both_eras() -> None:
    done = run_cli("demo")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    modern, legacy = out.split("== 2026-07-28:")[1].split("== 2025-11-25:")

    # 2026-07-28: the questions come as MRTR rounds, the state sealed and echoed.
    tool_part = modern.split("[1/3]")[1].split("[2/3]")[0]
    assert "round 1: input_required, asking for confirm" in tool_part
    assert "round 2: input_required, asking for shipping" in tool_part
    assert "round 3: input_required, asking for gift_note, receipt_folder" in tool_part
    assert "requestState:" in tool_part
    assert "negotiated: 2026-07-28 (modern era)" in tool_part
    assert "[3/3] resources/read orders://" in modern
    first = structured_content(tool_part)
    assert first["status"] == "placed"

    # 2025-11-25: the same questions asked live on the session, answered by the same handlers.
    assert "negotiated: 2025-11-25 (legacy era)" in legacy
    assert "round " not in legacy and "requestState" not in legacy
    asked = [line.split(": ", 1)[1] for line in legacy.splitlines() if "server request " in line]
    assert asked[:2] == [
        'elicitation/create "Place an order for 2 x espresso beans at 9.50 each?"',
        'elicitation/create "Where should we ship it?"',
    ]
    # The note and the roots are asked together, so they may arrive in either order.
    assert sorted(asked[2:]) == [
        "roots/list",
        'sampling/createMessage "Write a one-line gift note to go with espresso beans."',
    ]
    assert 'answered: accept {"region": "eu", "express": true}' in legacy
    second = structured_content(legacy)
    assert second["order_id"] != first["order_id"]  # a second order ...
    del first["order_id"], second["order_id"]
    assert second == first  # ... otherwise the same result
    assert out.rstrip().endswith(
        "done: one set of handlers; 5 MRTR rounds on 2026-07-28, 4 live requests on 2025-11-25."
    )


def test_demo_fails_with_a_clear_message_when_the_legacy_client_is_turned_away(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mrtr import ServerOptions
    from mrtr.cli import demo, demo_server
    from mrtr.server.options import InputRequiredConfig

    # The demo's own handlers on a server that serves 2026-07-28 only.
    modern_only = ServerOptions(input_required=InputRequiredConfig(legacy_shim=False))
    shop = Server("mrtr-demo-shop", options=modern_only)
    shop.tool()(demo_server.place_order)
    shop.prompt()(demo_server.order_update_email)
    shop.resource_template("orders://{order_id}")(demo_server.order_details)
    monkeypatch.setattr(demo, "demo_server", shop)
    assert demo.demo_main() == 1
    out, err = capsys.readouterr()
    assert "negotiated: 2026-07-28 (modern era)" in out  # the modern part ran as scripted
    assert err.startswith("mrtr demo: failed: error -32022: initialize is not part of")
    assert err.count("\n") == 1  # one line, no traceback


def test_demo_that_cannot_listen_exits_1_saying_why() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = run_cli("demo", "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1
    assert done.stderr.startswith("mrtr demo: failed: cannot listen on 127.0.0.1:")
    assert "Traceback" not in done.stderr


# --- over Streamable HTTP -------------------------------------------------------------------


async def test_call_over_http_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading adds the target's directory
    server = load_server(f"{SERVER_FILE}:server")
    async with serving(server, 0) as url:
        out, err = io.StringIO(), io.StringIO()
        console = Script("a", "Ann", "ann@example.com", "33", "2", "", "n")
        command = CallCommand(tool="signup", arguments={"source": "http"}, url=url)
        assert await command.run(console, out, err) == 0, err.getvalue()
    assert out.getvalue().strip() == (
        "signed up from http: {'age': 33, 'email': 'ann@example.com', 'name': 'Ann', "
        "'newsletter': False, 'plan': 'pro'}"
    )
    assert f"The server ({url}) asks:" in console.text


def test_serve_http_and_call_it() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr.cli", "serve", str(SERVER_FILE), "--transport", "http",
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(100):  # until the server listens (bounded)
            done = run_cli("call", "--json", url, "add", "a=2", "b=40")
            if "cannot connect" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["structuredContent"] == {"result": 42}
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0
    assert f"serving 'cli-test-server' over Streamable HTTP at {url}" in err
    assert "Traceback" not in err


def test_serve_http_sse_beside_streamable_http_and_call_it_there() -> None:
    # `mrtr call` on a URL that is neither /mcp nor /sse: its initialize POST is refused
    # (400), and the GET of the same URL finds the HTTP+SSE transport `--sse-path` moved there.
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr.cli", "serve", str(SERVER_FILE), "--transport", "http",
         "--port", str(port), "--sse-path", "/events"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/events"
        for _ in range(100):  # until the server listens (bounded)
            done = run_cli("call", "--json", url, "add", "a=2", "b=40")
            if "cannot connect" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["structuredContent"] == {"result": 42}
        unknown = run_cli("call", url, "nope")
        assert unknown.returncode == 1
        assert "nope" in unknown.stderr
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0
    assert "(HTTP+SSE at /events)" in err
    assert "Traceback" not in err


def test_serve_refuses_sse_flags_where_they_cannot_work() -> None:
    done = run_cli("serve", str(SERVER_FILE), "--sse-path", "/events")
    assert done.returncode == 2
    assert "--transport http only" in done.stderr
    done = run_cli("serve", str(SERVER_FILE), "--transport", "http", "--sse-path", "events")
    assert done.returncode == 2
    assert "starting with /" in done.stderr
