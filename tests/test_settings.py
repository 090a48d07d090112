"""Settings from the environment (`MRTR_*`): read into `ServerOptions` and `serve_http`
keywords, refused with the variable's name when invalid, typos warned about; the request-state
key shared by every worker of a deployment; `mrtr serve --log-level`, logging to stderr only.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.loopback_process import free_port
from helpers.mrtr_flows import accept, call_tool, error_of, result_of
from mrtr import RequestContext, Server, ServerOptions
from mrtr import settings as settings_module
from mrtr.settings import SettingsError, http_options, server_options

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"
TIMEOUT = 30
KEY_A, KEY_B = "a" * 40, "b" * 40
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
FORM = {"elicitation": {"form": {}}}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MRTR_* variable of the outer environment leaks into a test; warnings start afresh."""
    for name in list(os.environ):
        if name.startswith("MRTR_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(settings_module, "_warned", set())


def test_server_options_from_the_environment() -> None:
    env = {
        "MRTR_REQUEST_STATE_TTL": "900",
        "MRTR_MAX_STATE_BYTES": "65536",
        "MRTR_PAGE_SIZE": "20",
        "MRTR_MAX_ROUNDS": "4",
        "MRTR_ROUND_TIMEOUT": "120.5",
        "MRTR_MAX_RESPONSES": "8",
    }
    options = server_options(env)
    assert (options.request_state_ttl, options.max_state_bytes, options.page_size) == (
        900.0, 65536, 20,
    )  # fmt: skip
    limits = options.input_required
    assert (limits.max_rounds, limits.round_timeout, limits.max_responses) == (4, 120.5, 8)
    assert limits.max_response_bytes == 256 * 1024  # not set: the default
    # Code wins over the environment.
    assert server_options(env, page_size=5).page_size == 5


def test_a_server_without_options_takes_them_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_PAGE_SIZE", "3")
    assert Server("env").options.page_size == 3
    assert Server("explicit", options=ServerOptions()).options.page_size == 100


def test_http_options_from_the_environment() -> None:
    env = {
        "MRTR_HOST": "0.0.0.0",
        "MRTR_PORT": "9000",
        "MRTR_HEADER_TIMEOUT": "5",
        "MRTR_MAX_CONNECTIONS": "0",
        "MRTR_MAX_BODY_SIZE": "1000",
        "MRTR_ALLOWED_HOSTS": "shop.example.com  localhost",
    }
    assert http_options(env) == {
        "host": "0.0.0.0",
        "port": 9000,
        "header_timeout": 5.0,
        "max_connections": 0,
        "max_body_size": 1000,
        "allowed_hosts": ["shop.example.com", "localhost"],
    }


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("MRTR_PORT", "eighty", "MRTR_PORT='eighty': give a whole number from 0 to 65535"),
        ("MRTR_PORT", "70000", "from 0 to 65535"),
        ("MRTR_PAGE_SIZE", "0", "MRTR_PAGE_SIZE='0': give a whole number of at least 1"),
        ("MRTR_REQUEST_STATE_TTL", "-1", "MRTR_REQUEST_STATE_TTL='-1': give a number of seconds"),
        ("MRTR_ROUND_TIMEOUT", "nan", "MRTR_ROUND_TIMEOUT='nan'"),
        ("MRTR_KEEP_ALIVE", "0", "MRTR_KEEP_ALIVE='0': give a number of seconds more than 0"),
        ("MRTR_HEADER_TIMEOUT", "inf", "give a finite number"),
        ("MRTR_LOG_LEVEL", "verbose", "give one of debug, info, warning, error, critical"),
        ("MRTR_REQUEST_STATE_KEY", "short", "MRTR_REQUEST_STATE_KEY: a request-state secret"),
        ("MRTR_REQUEST_STATE_KEY", "  ", "MRTR_REQUEST_STATE_KEY is set but empty"),
        ("MRTR_HOST", "", "MRTR_HOST is set but empty"),
        ("MRTR_MAX_INFLIGHT_BODY_BYTES", "10", "MRTR_MAX_BODY_SIZE, MRTR_MAX_INFLIGHT_BODY_BYTES"),
    ],
)
def test_an_invalid_value_is_refused_naming_the_variable(name: str, value: str, says: str) -> None:
    env = {name: value}
    with pytest.raises(SettingsError) as caught:
        server_options(env)
        http_options(env)
        settings_module.log_level(env)
    assert says in str(caught.value)


def test_an_unknown_variable_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    env = {"MRTR_PAGESIZE": "3", "MRTR_PORT": "1"}
    with caplog.at_level(logging.WARNING, logger="mrtr"):
        server_options(env)
        http_options(env)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "MRTR_PAGESIZE is not an mrtr setting and is ignored (did you mean MRTR_PAGE_SIZE?)"
    ]


# --- one key for every worker -----------------------------------------------------------------


def worker(options: ServerOptions | None = None) -> Server:
    """One instance of a deployment: the same code, and what the environment gives it."""
    server = Server("shop", options=options)

    @server.tool()
    async def confirm(ctx: RequestContext) -> str:
        answer = await ctx.elicit("Sure?", SCHEMA)
        return answer.action

    return server


async def asked_on_one_answered_on_another(first: Server, second: Server) -> dict[str, Any]:
    asked = result_of(await call_tool(first, "confirm", {}, caps=FORM))
    (key,) = asked["inputRequests"]
    return await call_tool(
        second,
        "confirm",
        {},
        responses={key: accept(ok=True)},
        state=asked["requestState"],
        caps=FORM,
    )


async def test_workers_share_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", KEY_A)
    done = await asked_on_one_answered_on_another(worker(), worker())
    assert result_of(done)["content"][0]["text"] == "accept"
    # Explicit ServerOptions without a key take it from the environment too.
    explicit = worker(ServerOptions(page_size=10))
    done = await asked_on_one_answered_on_another(explicit, worker())
    assert result_of(done)["content"][0]["text"] == "accept"


async def test_without_the_variable_each_worker_has_its_own_key() -> None:
    refused = await asked_on_one_answered_on_another(worker(), worker())
    assert error_of(refused)["data"]["reason"] == "invalid_request_state"


async def test_rotation_a_new_key_first_still_verifies_the_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", KEY_A)
    old = worker()
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", f"{KEY_B} {KEY_A}")
    rotated = worker()
    done = await asked_on_one_answered_on_another(old, rotated)
    assert result_of(done)["content"][0]["text"] == "accept"
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", KEY_B)
    dropped = await asked_on_one_answered_on_another(old, worker())
    assert error_of(dropped)["data"]["reason"] == "invalid_request_state"


async def test_a_configured_key_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", KEY_A)
    configured = worker(ServerOptions(request_state_key=KEY_B))
    refused = await asked_on_one_answered_on_another(configured, worker())
    assert error_of(refused)["data"]["reason"] == "invalid_request_state"
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", KEY_B)
    done = await asked_on_one_answered_on_another(configured, worker())
    assert result_of(done)["content"][0]["text"] == "accept"


def test_a_bad_key_in_the_environment_stops_the_server_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY", "short")
    with pytest.raises(SettingsError, match=r"MRTR_REQUEST_STATE_KEY: .* at least 32 bytes"):
        Server("shop")


# --- mrtr serve ----------------------------------------------------------------------------------


def serve_stdio(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`mrtr serve` over stdio, sent one request; its input closes once it has answered."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    args = [sys.executable, "-m", "mrtr", "serve", f"{SHOP}:server", *flags]
    with subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**clean, **(env or {})},
    ) as process:  # fmt: skip
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            first = process.stdout.readline()  # the answer, or "" if the server stopped
        except BrokenPipeError:
            first = ""
        out, err = process.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(args, process.returncode, first + out, err)


def test_serve_log_level_logs_to_stderr_and_never_stdout() -> None:
    done = serve_stdio("--log-level", "info")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()  # stdout: the one response, nothing else
    assert json.loads(line)["result"]["serverInfo"]["name"] == "shop"
    assert "INFO mrtr.cli: serving 'shop' over stdio" in done.stderr


def test_the_default_level_is_warning_and_the_flag_wins_over_the_environment() -> None:
    quiet = serve_stdio()
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr
    by_env = serve_stdio(env={"MRTR_LOG_LEVEL": "info"})
    assert "INFO mrtr.cli: serving 'shop'" in by_env.stderr
    flag_wins = serve_stdio("--log-level", "error", env={"MRTR_LOG_LEVEL": "info"})
    assert flag_wins.returncode == 0 and "INFO" not in flag_wins.stderr


def test_serve_refuses_an_invalid_variable_naming_it() -> None:
    done = serve_stdio(env={"MRTR_LOG_LEVEL": "loud"})
    assert done.returncode == 2
    assert "mrtr serve: MRTR_LOG_LEVEL='loud': give one of" in done.stderr
    assert done.stdout == ""


def test_serve_takes_transport_host_and_port_from_the_environment() -> None:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    env = {**clean, "MRTR_TRANSPORT": "http", "MRTR_HOST": "127.0.0.1", "MRTR_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr", "serve", f"{SHOP}:server"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(100):  # until the server listens (bounded)
            done = subprocess.run(
                [sys.executable, "-m", "mrtr", "call", "--json", url, "price", "item=cup"],
                capture_output=True, text=True, timeout=TIMEOUT, env=clean,
            )  # fmt: skip
            if "cannot connect" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["structuredContent"] == {"result": 12.0}
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=TIMEOUT)
    assert f"serving 'shop' over Streamable HTTP at {url}" in err
    assert out == ""


# --- the key ring: a variable or a file -----------------------------------------------------------


def test_the_key_variable_takes_commas_or_whitespace_the_first_seals() -> None:
    ring = [KEY_A, KEY_B]
    for raw in (f"{KEY_A},{KEY_B}", f" {KEY_A} ,\n{KEY_B} ", f"{KEY_A} {KEY_B}"):
        assert settings_module.request_state_key({"MRTR_REQUEST_STATE_KEY": raw}) == ring
    options = server_options({"MRTR_REQUEST_STATE_KEY": f"{KEY_A}, {KEY_B}"})
    assert options.request_state_key == ring
    assert settings_module.request_state_key({}) is None


def test_the_key_file_holds_one_secret_a_line_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(f"# rotated 2026-07-28\n\n{KEY_B}\n  # the old one, verify only\n{KEY_A}\n")
    path.chmod(0o600)
    env = {"MRTR_REQUEST_STATE_KEY_FILE": str(path)}
    assert settings_module.request_state_key(env) == [KEY_B, KEY_A]
    assert server_options(env).request_state_key == [KEY_B, KEY_A]


async def test_workers_share_the_key_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "key"
    path.write_text(KEY_A + "\n")
    path.chmod(0o600)
    monkeypatch.setenv("MRTR_REQUEST_STATE_KEY_FILE", str(path))
    done = await asked_on_one_answered_on_another(worker(ServerOptions()), worker())
    assert result_of(done)["content"][0]["text"] == "accept"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("# only a comment\n\n", "holds no secret: write one per line"),
        ("short\n", "a request-state secret"),
    ],
)
def test_a_bad_key_file_is_refused_naming_it(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "key"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(SettingsError) as caught:
        settings_module.request_state_key({"MRTR_REQUEST_STATE_KEY_FILE": str(path)})
    assert str(caught.value).startswith(f"MRTR_REQUEST_STATE_KEY_FILE={str(path)!r}")
    assert says in str(caught.value)


def test_a_missing_key_file_or_both_forms_are_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent")
    with pytest.raises(SettingsError, match="no such file"):
        settings_module.request_state_key({"MRTR_REQUEST_STATE_KEY_FILE": missing})
    both = {"MRTR_REQUEST_STATE_KEY": KEY_A, "MRTR_REQUEST_STATE_KEY_FILE": missing}
    with pytest.raises(SettingsError) as caught:
        server_options(both)
    assert "MRTR_REQUEST_STATE_KEY and MRTR_REQUEST_STATE_KEY_FILE are both set" in str(
        caught.value
    )


def test_a_world_readable_key_file_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "key"
    path.write_text(KEY_A)
    path.chmod(0o644)
    env = {"MRTR_REQUEST_STATE_KEY_FILE": str(path)}
    with caplog.at_level(logging.WARNING, logger="mrtr"):
        assert settings_module.request_state_key(env) == [KEY_A]
        settings_module.request_state_key(env)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "is readable by every user of this machine" in warning and "chmod 600" in warning
