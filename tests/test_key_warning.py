"""The warning about a random per-process request-state key is logged only where it can matter:
over HTTP by a server whose store is shared with other instances (Redis) and that has no key.
Over stdio, or over HTTP in one process with its own memory store, every round returns to the
process that sealed it: nothing is logged, by `mrtr serve` or by `Server.run()`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.loopback_process import free_port, listening
from helpers.redis_instance import RedisInstance, redis_instance  # noqa: F401  (a fixture)
from mrtr import Server, ServerOptions
from mrtr.server.redis_store import RedisStore

WARNING = "has no request-state key: other instances will refuse its rounds"
KEY = "shared-key-" + "k" * 32
TIMEOUT = 30

SERVER = """\
import logging
import sys

from mrtr import Server

server = Server("pinger")


@server.tool()
def ping() -> str:
    return "pong"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)  # whatever it logs, down to INFO
    if sys.argv[1] == "http":
        server.run(transport="http", port=int(sys.argv[2]))
    else:
        server.run()
"""


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "pinger.py"
    path.write_text(SERVER)
    return path


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    return {**clean, **extra}


def serve_http_briefly(args: list[str], environ: dict[str, str], port: int) -> str:
    """Start an HTTP server, wait until it listens, stop it; what it wrote to stderr."""
    with listening(args, port, stderr=subprocess.PIPE, text=True, env=environ) as process:
        pass
    assert process.stderr is not None
    return str(process.stderr.read())


def test_stdio_and_a_lone_http_process_log_nothing_about_the_key(server_file: Path) -> None:
    discover = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
    for args in (
        [sys.executable, "-m", "mrtr", "serve", str(server_file), "--log-level", "debug"],
        [sys.executable, str(server_file), "stdio"],
    ):
        done = subprocess.run(
            args, input=discover + "\n", capture_output=True, text=True, timeout=TIMEOUT, env=env()
        )
        assert done.returncode == 0, done.stderr
        assert "key" not in done.stderr, done.stderr
    for args in (
        [sys.executable, "-m", "mrtr", "serve", str(server_file), "--transport", "http"],
        [sys.executable, str(server_file), "http"],
    ):
        port = free_port()
        err = serve_http_briefly([*args, *(["--port"] if "serve" in args else []), str(port)],
                                 env(), port)  # fmt: skip
        assert "key" not in err, err


def test_a_shared_store_without_a_key_warns_once_and_briefly(
    server_file: Path,
    redis_instance: RedisInstance,  # noqa: F811
) -> None:
    args = [sys.executable, "-m", "mrtr", "serve", str(server_file), "--transport", "http"]
    port = free_port()
    err = serve_http_briefly(
        [*args, "--port", str(port)], env(MRTR_STORE_URL=redis_instance.url), port
    )
    (line,) = [line for line in err.splitlines() if WARNING in line]
    assert "MRTR_REQUEST_STATE_KEY" in line
    assert len(line) < 220, line
    port = free_port()
    err = serve_http_briefly(
        [*args, "--port", str(port)],
        env(MRTR_STORE_URL=redis_instance.url, MRTR_REQUEST_STATE_KEY=KEY),
        port,
    )
    assert WARNING not in err, err


def test_an_app_with_a_shared_store_warns_as_mrtr_serve_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    alone = Server("alone")
    alone.asgi_app()
    keyed = Server(
        "keyed",
        options=ServerOptions(store=RedisStore("redis://127.0.0.1:1"), request_state_key=KEY),
    )
    keyed.asgi_app()
    assert not [r for r in caplog.records if "key" in r.getMessage()], caplog.text
    shared = Server("shared", options=ServerOptions(store=RedisStore("redis://127.0.0.1:1")))
    shared.asgi_app()
    (record,) = [r for r in caplog.records if "key" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert WARNING in record.getMessage()
