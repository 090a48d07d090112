"""`mrtr serve --workers N`: uvicorn worker processes sharing one port and one request-state
key, over real HTTP on loopback; refused without a shared key; the environment forms; and
serving without uvloop/httptools (the pure asyncio + h11 fallback).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from helpers.loopback_process import free_port
from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

TIMEOUT = 30
KEY = "worker-key-" + "k" * 32

# Each round's tool reports the pid that served it: flows then show which workers took part.
SERVER_SOURCE = """
import os

from mrtr import RequestContext, Server

server = Server("pids")


@server.tool()
async def pid() -> int:
    return os.getpid()


@server.tool()
async def frozen() -> int:
    import gc

    return gc.get_freeze_count()


@server.tool()
async def runtime() -> dict[str, object]:
    import asyncio
    import sys

    loop = type(asyncio.get_running_loop()).__module__
    return {"loop": loop, "parsers": sorted({"h11", "httptools"} & set(sys.modules))}


@server.tool()
async def confirm(ctx: RequestContext, item: str) -> dict[str, object]:
    first = await ctx.once("asked-on", os.getpid)  # kept in the state: the first round's
    answer = await ctx.elicit(f"Order {item}?", {"type": "object", "properties": {}})
    return {"asked_on": first, "finished_on": os.getpid(), "action": answer.action}
"""

# Makes `import uvloop` and `import httptools` fail, as on a platform without their wheels.
HIDE_FAST = """
import sys


class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("uvloop", "httptools"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Hide())
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
    env.update(extra)
    return env


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "pids.py"
    path.write_text(SERVER_SOURCE)
    return path


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key.txt"
    path.write_text(f"# the request-state ring: the first seals\n{KEY}\n")
    path.chmod(0o600)
    return path


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # so that the worker processes can be stopped with it
    )  # fmt: skip


def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate(timeout=TIMEOUT)


def headers_for(message: dict[str, Any]) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": message["method"],
        "Mcp-Name": message["params"]["name"],
    }


def tools_call(name: str, **params: Any) -> dict[str, Any]:
    meta = {
        meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
        meta_keys.CLIENT_INFO: {"name": "workers-test", "version": "1"},
        meta_keys.CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
    }
    body = {"name": name, **params, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": body}


async def post(url: str, message: dict[str, Any]) -> dict[str, Any]:
    """One request on a connection of its own (closed after it): the kernel hands each new
    connection to whichever worker accepts first."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.post(url, data=orjson.dumps(message), headers=headers_for(message)) as response,
    ):
        assert response.status == 200, await response.text()
        reply: dict[str, Any] = orjson.loads(await response.read())
        return reply


async def wait_until_serving(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert process.poll() is None, process.communicate()
        try:
            await post(url, tools_call("pid"))
            return
        except aiohttp.ClientConnectionError:
            assert time.monotonic() < deadline, "the server did not start"
            await asyncio.sleep(0.1)


async def flow(url: str, item: str) -> dict[str, Any]:
    """A two-round MRTR flow, each round on a fresh connection."""
    first = (await post(url, tools_call("confirm", arguments={"item": item})))["result"]
    assert first["resultType"] == "input_required", first
    (key,) = first["inputRequests"]
    retry = tools_call(
        "confirm",
        arguments={"item": item},
        inputResponses={key: {"action": "accept", "content": {}}},
        requestState=first["requestState"],
    )
    final = (await post(url, retry))["result"]
    assert final.get("isError") is not True, final
    structured: dict[str, Any] = final["structuredContent"]
    return structured


@pytest.fixture
def serving(server_file: Path, key_file: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = clean_env(MRTR_REQUEST_STATE_KEY_FILE=str(key_file))
    args = [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server"]
    process = spawn([*args, "--transport", "http", "--port", str(port), "--workers", "2"], env)
    try:
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        stop(process)


async def test_two_workers_share_the_key_from_a_file_and_serve_every_flow(
    serving: tuple[str, subprocess.Popen[str]],
) -> None:
    url, process = serving
    await wait_until_serving(url, process)
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT
    # Flows, 8 at a time, until a flow asked on one worker was finished on the other (the
    # second worker may still be starting at first; bounded by the deadline).
    while not any(r["asked_on"] != r["finished_on"] for r in results):
        assert time.monotonic() < deadline, f"no flow spread over two workers: {results}"
        results += await asyncio.gather(*(flow(url, f"item-{i}") for i in range(8)))
    assert all(r["action"] == "accept" for r in results)  # every flow completed
    served = {pid for r in results for pid in (r["asked_on"], r["finished_on"])}
    assert len(served) == 2 and process.pid not in served  # the two workers, not the parent
    failed = [r for r in results if r["action"] != "accept"]
    assert failed == [] and len(results) >= 8
    # Each worker froze its startup heap out of the cycle collector, as `serve_http` does.
    reply = await post(url, tools_call("frozen"))
    assert reply["result"]["structuredContent"]["result"] > 10_000


def test_several_workers_without_a_key_refuse_to_start(server_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server", "--transport", "http",
         "--port", str(free_port()), "--workers", "2"],
        capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "mrtr serve: --workers 2 needs a request-state key shared by every worker" in done.stderr
    assert "MRTR_REQUEST_STATE_KEY_FILE" in done.stderr
    assert "serving" not in done.stderr  # nothing was started


def test_mrtr_workers_is_the_environment_form(server_file: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server"],
        capture_output=True, text=True, timeout=TIMEOUT,
        env=clean_env(MRTR_TRANSPORT="http", MRTR_PORT=str(free_port()), MRTR_WORKERS="3"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--workers 3 needs a request-state key" in done.stderr


def test_workers_are_refused_on_stdio_and_below_one(server_file: Path) -> None:
    for flags, says in [
        (["--workers", "2"], "--workers applies to --transport http only"),
        (["--transport", "http", "--workers", "0"], "--workers 0: give a number of processes"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server", *flags],
            capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(),
        )  # fmt: skip
        assert done.returncode == 2 and says in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server"],
        capture_output=True, text=True, timeout=TIMEOUT,
        env=clean_env(MRTR_TRANSPORT="http", MRTR_WORKERS="none"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "MRTR_WORKERS='none': give a whole number of at least 1" in done.stderr


def test_a_key_given_twice_or_a_missing_key_file_stops_serve(
    server_file: Path, key_file: Path, tmp_path: Path
) -> None:
    for env, says in [
        (
            {"MRTR_REQUEST_STATE_KEY": KEY, "MRTR_REQUEST_STATE_KEY_FILE": str(key_file)},
            "MRTR_REQUEST_STATE_KEY and MRTR_REQUEST_STATE_KEY_FILE are both set",
        ),
        (
            {"MRTR_REQUEST_STATE_KEY_FILE": str(tmp_path / "absent")},
            f"MRTR_REQUEST_STATE_KEY_FILE={str(tmp_path / 'absent')!r}: no such file",
        ),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server"],
            capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(**env),
        )  # fmt: skip
        assert done.returncode == 2
        assert f"mrtr serve: {says}" in done.stderr


def find_fast(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Whether a subprocess with `env` finds uvloop and httptools."""
    return subprocess.run(
        [sys.executable, "-c",
         "import importlib.util as u; print(u.find_spec('uvloop'), u.find_spec('httptools'))"],
        capture_output=True, text=True, timeout=TIMEOUT, env=env,
    )  # fmt: skip


async def test_without_uvloop_and_httptools_it_still_serves(
    server_file: Path, tmp_path: Path
) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_FAST)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = clean_env(PYTHONPATH=os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]))
    probe = find_fast(env)
    assert "No module named 'uvloop'" in probe.stderr  # really hidden in the subprocess
    args = [sys.executable, "-m", "mrtr", "serve", f"{server_file}:server", "--transport", "http"]
    process = spawn([*args, "--port", str(port)], env)
    try:
        await wait_until_serving(url, process)
        assert (await flow(url, "tea"))["action"] == "accept"
        used = (await post(url, tools_call("runtime")))["result"]["structuredContent"]
    finally:
        stop(process)
    assert used["loop"].startswith("asyncio") and used["parsers"] == ["h11"]
