"""`mrtr proxy` on the command line: bad input gets a usage error naming the fix, and a backend
that cannot start stops the proxy with a message naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mrtr
from mrtr.cli import main

SRC = str(Path(mrtr.__file__).resolve().parent.parent)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        ([], "no backend: give a URL, or a command after '--'"),
        (["https://h/mcp", "--", "python", "s.py"], "give either a URL or '-- COMMAND'"),
        (["ftp://h/mcp"], "is not an http:// or https:// URL"),
        (["--header", "A=1", "--", "python", "s.py"], "--header applies to a URL backend only"),
        (["--header", "oops", "https://h/mcp"], "--header 'oops': give NAME=VALUE"),
        (["--sessions", "0", "--", "python", "s.py"], "--sessions 0: give at least 1"),
        (["--hold-timeout", "0", "--", "python", "s.py"], "--hold-timeout 0.0: give seconds"),
        (["--port", "80", "--", "python", "s.py"], "--host and --port apply to --transport http"),
    ],
)
def test_bad_options_are_usage_errors_naming_the_fix(
    words: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["proxy", *words]) == 2
    assert says in capsys.readouterr().err


def test_a_backend_that_cannot_start_stops_the_proxy_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mrtr", "proxy", "--", "/no/such/server", "--flag"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert done.returncode == 1
    assert "mrtr proxy: " in done.stderr
    assert "could not reach its backend /no/such/server --flag" in done.stderr
