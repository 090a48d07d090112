"""`mrtr list` and `mrtr inspect`: what any server offers, whichever era it speaks, over real
stdio subprocesses (mrtr's own server and the official SDK's) and real loopback HTTP.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.loopback_process import free_port
from mrtr import Client, Server, ServerOptions
from mrtr.cli.listing import describe

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"
OFFICIAL = ROOT / "tests" / "servers" / "official_shop.py"
SERVE_SHOP = [sys.executable, "-m", "mrtr", "serve", f"{SHOP}:server"]
TIMEOUT = 30


def mrtr(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mrtr", *words],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
    )  # fmt: skip


SHOP_LISTING = """\
tools (2):
  price(item: string, quantity?: integer)  The price of `quantity` of an item, in euros.
  order(item: string, quantity?: integer)  Order an item, asking the user where to ship it.
prompts (1):
  recommend(taste)  Ask for a recommendation from the shop's range.
resources (1):
  shop://catalogue [application/json]  Every item and its price.
resource templates: none
"""


@pytest.mark.parametrize(
    ("protocol", "heading"),
    [("auto", "shop 1.0.0 (modern, 2026-07-28)"), ("legacy", "shop 1.0.0 (legacy, 2025-11-25)")],
)
def test_list_describes_a_stdio_server_in_either_era(protocol: str, heading: str) -> None:
    done = mrtr("list", "--protocol", protocol, "--", *SERVE_SHOP)
    assert done.returncode == 0, done.stderr
    assert done.stdout == heading + "\n" + SHOP_LISTING


def test_inspect_describes_a_legacy_only_official_server_in_full() -> None:
    done = mrtr("inspect", "--", sys.executable, str(OFFICIAL), "legacy")
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert described["era"] == "legacy"
    assert described["serverInfo"]["name"] == "official-shop"
    assert described["protocolVersion"] == "2025-11-25"
    assert "tools" in described["capabilities"]
    tools = {tool["name"]: tool for tool in described["tools"]}
    assert "order" in tools and tools["order"]["inputSchema"]["type"] == "object"


def test_inspect_and_list_over_http() -> None:
    port = free_port()
    process = subprocess.Popen(
        [*SERVE_SHOP, "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(100):  # until the server listens (bounded)
            done = mrtr("inspect", url)
            if "cannot connect" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr
        described = json.loads(done.stdout)
        assert described["era"] == "modern"
        assert described["serverInfo"] == {"name": "shop", "version": "1.0.0"}
        assert described["instructions"] == "A shop selling tea, coffee and cups."
        assert [tool["name"] for tool in described["tools"]] == ["price", "order"]
        order = described["tools"][1]
        assert order["inputSchema"]["required"] == ["item"]
        assert [prompt["name"] for prompt in described["prompts"]] == ["recommend"]
        assert described["resources"][0]["uri"] == "shop://catalogue"
        assert described["resourceTemplates"] == []
        listed = mrtr("list", url)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.endswith(SHOP_LISTING)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=TIMEOUT)


async def test_describe_reads_every_page() -> None:
    server = Server("paged", options=ServerOptions(page_size=2))
    for n in range(5):
        server.tool(name=f"t{n}")(lambda: "ok")
    server.resource_template("db://rows/{id}")(lambda id: id)
    async with Client.in_memory(server) as client:
        described = await describe(client)
    assert [tool["name"] for tool in described["tools"]] == [f"t{n}" for n in range(5)]
    assert [t["uriTemplate"] for t in described["resourceTemplates"]] == ["db://rows/{id}"]


def test_an_unreachable_server_is_a_clear_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    done = mrtr("list", url)
    assert done.returncode == 1
    assert f"mrtr list: server/discover: cannot connect to {url}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["list"], "no server: give a URL, or a command after '--'"),
        (["inspect", "http://127.0.0.1:1/mcp", "--", "x"], "either a URL or '-- COMMAND'"),
        (["list", "server.py"], "is not an http:// or https:// URL"),
    ],
)
def test_usage_errors(words: list[str], says: str) -> None:
    done = mrtr(*words)
    assert done.returncode == 2
    assert says in done.stderr


def test_a_server_that_dies_on_start_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit(3)\n")
    done = mrtr("list", "--", sys.executable, str(broken))
    assert done.returncode == 1
    assert "mrtr list: the stdio server" in done.stderr and "exited with code 3" in done.stderr
    assert "Traceback" not in done.stderr
