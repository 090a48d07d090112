"""End of input on stdio: `printf '<request>\\n' | mrtr serve app.py:server | cat` prints the
answer. Requests in flight when the input ends are answered (within the grace period) and what
was answered is flushed to the pipe before the process exits. A real `mrtr serve` subprocess,
its stdout a pipe (not a file), as a shell pipeline has it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson
import pytest

from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

SERVER = str(Path(__file__).resolve().parent / "servers" / "eof_server.py") + ":server"
GUARD = 30.0  # seconds: only ever reached when something is broken


def call(request_id: int, name: str) -> bytes:
    meta = {meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION, meta_keys.CLIENT_CAPABILITIES: {}}
    params = {"name": name, "arguments": {}, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return orjson.dumps(message) + b"\n"


async def pipe_through_serve(data: bytes, *flags: str) -> tuple[int, list[dict[str, object]]]:
    """`printf data | mrtr serve SERVER --transport stdio | cat`: exit code and answers."""
    env = {**os.environ, "MRTR_REQUEST_STATE_KEY": "eof-test-key-" + "k" * 32}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mrtr",
        "serve",
        SERVER,
        "--transport",
        "stdio",
        *flags,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(GUARD):
        stdout, stderr = await process.communicate(data)  # writes, then closes stdin at once
    assert process.returncode is not None
    assert not stderr.strip() or b"Traceback" not in stderr, stderr.decode()
    return process.returncode, [orjson.loads(line) for line in stdout.splitlines()]


@pytest.mark.parametrize(
    ("tool", "text"), [("quick", "quick answer"), ("half_second", "answer after 0.5 s")]
)
async def test_a_request_piped_in_is_answered_before_exit(tool: str, text: str) -> None:
    code, answers = await pipe_through_serve(call(1, tool))
    assert code == 0
    assert [(a["id"], a["result"]["content"][0]["text"]) for a in answers] == [(1, text)]  # type: ignore[index]


async def test_every_request_in_flight_at_end_of_input_is_answered() -> None:
    data = b"".join(call(i, "half_second" if i % 2 else "quick") for i in range(20))
    code, answers = await pipe_through_serve(data)
    assert code == 0
    assert sorted(a["id"] for a in answers) == list(range(20))  # type: ignore[type-var]


async def test_eof_grace_0_cancels_requests_in_flight_at_once() -> None:
    code, answers = await pipe_through_serve(call(1, "half_second"), "--eof-grace", "0")
    assert code == 0
    assert answers == []  # a cancelled request gets no answer


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--transport", "http", "--eof-grace", "1"), "applies to --transport stdio only"),
        (("--eof-grace", "-1"), "give a number of seconds >= 0"),
    ],
)
async def test_eof_grace_is_checked_on_the_command_line(flags: tuple[str, ...], said: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mrtr",
        "serve",
        SERVER,
        *flags,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(GUARD):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert said in stderr.decode()
