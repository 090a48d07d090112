"""`mrtr install`: each host's file in its documented shape, merged without losing anything,
and a command that a host (the official SDK's client, as a host launches a server) can run.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import mcp
import mcp_types
import pytest
from mcp.client.stdio import StdioServerParameters

from mrtr.cli import main
from mrtr.cli.install import default_config_path, parse_env_file

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"


@pytest.fixture
def no_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with neither uv nor claude on it: the installer falls back to this Python."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def install(*words: str) -> int:
    return main(["install", *words])


def read(path: Path) -> Any:
    return json.loads(path.read_text())


# --- the host can use what was written --------------------------------------------------------


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_host_runs_the_configured_command_and_calls_a_tool(
    tmp_path: Path, no_uv: Path
) -> None:
    config = tmp_path / "Claude" / "claude_desktop_config.json"
    status = install(
        "claude-desktop", f"{SHOP}:server", "--config", str(config), "--env", "SHOP_MODE=test"
    )
    assert status == 0
    entry = read(config)["mcpServers"]["shop"]
    assert entry["command"] == sys.executable
    assert entry["args"] == ["-m", "mrtr", "serve", f"{SHOP}:server"]
    assert entry["env"] == {"SHOP_MODE": "test"}

    # As Claude Desktop does: exactly the configured command, args and env, from a directory
    # of the host's choosing, speaking the initialize-based era.
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"region": "eu"})

    server = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry["env"], "PATH": os.environ["PATH"]},
        cwd=str(tmp_path),
    )
    async with mcp.Client(server, mode="legacy", elicitation_callback=answer) as client:
        assert client.session.protocol_version == "2025-11-25"
        price = await client.call_tool("price", {"item": "tea", "quantity": 2})
        assert price.structured_content == {"result": 9.0}
        order = await client.call_tool("order", {"item": "cup"})
        assert order.content[0].text == "Ordered 1 x cup, shipping to eu"  # type: ignore[union-attr]
    assert asked == ["Ship 1 x cup to which region?"]


# --- each host's documented shape -------------------------------------------------------------


def test_vscode_entries_are_typed_stdio_servers_under_servers(
    tmp_path: Path, no_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".vscode" / "mcp.json"
    path.parent.mkdir()
    inputs = [{"type": "promptString", "id": "key", "description": "API key", "password": True}]
    other = {"type": "http", "url": "https://example.com/mcp"}
    path.write_text(json.dumps({"inputs": inputs, "servers": {"other": other}}))
    assert install("vscode", str(SHOP), "--name", "my-shop") == 0
    config = read(path)
    assert config["inputs"] == inputs
    assert config["servers"]["other"] == other
    assert config["servers"]["my-shop"] == {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "mrtr", "serve", f"{SHOP}:server"],
    }


def test_claude_code_without_the_claude_binary_writes_the_project_mcp_json(
    tmp_path: Path, no_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert install("claude-code", f"{SHOP}:server") == 0
    assert read(tmp_path / ".mcp.json") == {
        "mcpServers": {
            "shop": {"command": sys.executable, "args": ["-m", "mrtr", "serve", f"{SHOP}:server"]}
        }
    }


def test_claude_code_with_the_claude_binary_goes_through_mcp_add_json(
    tmp_path: Path, no_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for the claude CLI that records how it was called.
    calls = tmp_path / "calls.jsonl"
    claude = no_uv / "claude"
    claude.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    claude.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert install("claude-code", str(SHOP), "--env", "A=1") == 0
    (call,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert call[:4] == ["mcp", "add-json", "shop", call[3]]
    assert json.loads(call[3]) == {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "mrtr", "serve", f"{SHOP}:server"],
        "env": {"A": "1"},
    }
    assert not (tmp_path / ".mcp.json").exists()


def test_cursor_writes_the_home_or_the_project_file(
    tmp_path: Path, no_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    assert install("cursor", str(SHOP)) == 0
    assert install("cursor", str(SHOP), "--project", "--name", "shop-here") == 0
    assert list(read(home / ".cursor" / "mcp.json")["mcpServers"]) == ["shop"]
    assert list(read(project / ".cursor" / "mcp.json")["mcpServers"]) == ["shop-here"]


def test_json_prints_the_entry_and_writes_nothing(
    tmp_path: Path, no_uv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert install("json", str(SHOP), "--env", "A=1") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {
        "shop": {
            "command": sys.executable,
            "args": ["-m", "mrtr", "serve", f"{SHOP}:server"],
            "env": {"A": "1"},
        }
    }
    assert list(tmp_path.iterdir()) == [tmp_path / "empty-bin"]


def test_the_claude_desktop_file_is_where_each_os_keeps_it(tmp_path: Path) -> None:
    home = tmp_path
    name = "claude_desktop_config.json"
    mac = default_config_path("claude-desktop", platform="darwin", home=home, environ={})
    assert mac == home / "Library" / "Application Support" / "Claude" / name
    appdata = {"APPDATA": str(tmp_path / "Roaming")}
    win = default_config_path("claude-desktop", platform="win32", home=home, environ=appdata)
    assert win == tmp_path / "Roaming" / "Claude" / name
    linux = default_config_path("claude-desktop", platform="linux", home=home, environ={})
    assert linux == home / ".config" / "Claude" / name


# --- the command: this interpreter, with uv layering extra packages over it ------------------


def test_with_uv_on_path_and_no_packages_the_entry_is_this_interpreter(
    no_uv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uv = no_uv / "uv"
    uv.write_text("#!/bin/sh\nexit 1\n")
    uv.chmod(0o755)
    assert install("json", str(SHOP)) == 0
    entry = json.loads(capsys.readouterr().out)["shop"]
    assert entry == {"command": sys.executable, "args": ["-m", "mrtr", "serve", f"{SHOP}:server"]}


def test_with_packages_uv_layers_them_over_this_interpreter(
    tmp_path: Path, no_uv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uv = no_uv / "uv"
    uv.write_text("#!/bin/sh\nexit 1\n")
    uv.chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir()
    words = ["json", str(SHOP), "--with", "httpx>=0.27", "--with-editable", str(lib)]
    assert install(*words) == 0
    entry = json.loads(capsys.readouterr().out)["shop"]
    assert entry["command"] == str(uv)
    assert entry["args"] == [
        "run",
        "--no-project",
        "--python",
        sys.executable,
        "--with",
        "httpx>=0.27",
        "--with-editable",
        str(lib),
        "python",
        "-m",
        "mrtr",
        "serve",
        f"{SHOP}:server",
    ]


# --- merging ----------------------------------------------------------------------------------


def test_merging_keeps_other_entries_and_keys_refuses_a_clash_and_keeps_a_backup(
    tmp_path: Path, no_uv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "claude_desktop_config.json"
    original = {"globalShortcut": "Ctrl+Space", "mcpServers": {"notes": {"command": "notes"}}}
    config.write_text(json.dumps(original))
    config.chmod(0o640)
    assert install("claude-desktop", str(SHOP), "--config", str(config)) == 0
    merged = read(config)
    assert merged["globalShortcut"] == "Ctrl+Space"
    assert merged["mcpServers"]["notes"] == {"command": "notes"}
    assert merged["mcpServers"]["shop"]["args"][-1] == f"{SHOP}:server"
    assert read(config.with_name(config.name + ".bak")) == original
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    # The same entry again: nothing to do. Another entry under the name: refused, untouched.
    assert install("claude-desktop", str(SHOP), "--config", str(config)) == 0
    assert "already installed" in capsys.readouterr().out
    before = config.read_bytes()
    assert install("claude-desktop", str(SHOP), "--config", str(config), "--env", "X=1") == 1
    assert "already has a server named 'shop'" in capsys.readouterr().err
    assert config.read_bytes() == before
    assert install("claude-desktop", str(SHOP), "--config", str(config), "--env", "X=1",
                   "--force") == 0  # fmt: skip
    assert read(config)["mcpServers"]["shop"]["env"] == {"X": "1"}
    assert read(config)["mcpServers"]["notes"] == {"command": "notes"}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "does not hold a JSON object"),
        ('{"mcpServers": []}', "'mcpServers' is not an object"),
    ],
)
def test_a_file_that_cannot_be_merged_is_left_alone(
    tmp_path: Path, no_uv: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(content)
    assert install("cursor", str(SHOP), "--config", str(config)) == 1
    assert says in capsys.readouterr().err
    assert config.read_text() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-bin", "mcp.json"]


def test_a_new_file_is_readable_by_its_owner_only(tmp_path: Path, no_uv: Path) -> None:
    config = tmp_path / "deep" / "mcp.json"
    assert install("cursor", str(SHOP), "--config", str(config), "--env", "TOKEN=s3cret") == 0
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


# --- environment and targets ------------------------------------------------------------------


def test_env_file_and_env_flags_with_the_flags_winning(
    tmp_path: Path, no_uv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "# shop settings\n\nexport API_URL='https://api.example.com'\nTOKEN=\"from file\"\n"
        "EMPTY=\nMODE=file\n"
    )
    assert parse_env_file(dotenv) == {
        "API_URL": "https://api.example.com",
        "TOKEN": "from file",
        "EMPTY": "",
        "MODE": "file",
    }
    assert install("json", str(SHOP), "--env-file", str(dotenv), "--env", "MODE=flag") == 0
    env = json.loads(capsys.readouterr().out)["shop"]["env"]
    assert env["MODE"] == "flag" and env["TOKEN"] == "from file"


@pytest.mark.parametrize(
    ("words", "status", "says"),
    [
        (["--env", "NOEQUALS"], 1, "--env 'NOEQUALS' is not NAME=VALUE"),
        (["--env", "1BAD=x"], 1, "is not NAME=VALUE"),
        (["--env-file", "/nonexistent/.env"], 1, "cannot read it"),
    ],
)
def test_bad_environment_is_refused_clearly(
    no_uv: Path, capsys: pytest.CaptureFixture[str], words: list[str], status: int, says: str
) -> None:
    assert install("json", str(SHOP), *words) == status
    assert says in capsys.readouterr().err


def test_a_bad_env_file_line_is_named(tmp_path: Path, no_uv: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("GOOD=1\nthis is not a setting\n")
    with pytest.raises(Exception, match=r"line 2: 'this is not a setting' is not NAME=VALUE"):
        parse_env_file(dotenv)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("shop.app:server", "give the server as FILE.py:ATTR"),
        ("/nonexistent/shop.py:server", "no such file"),
        (f"{SHOP}:nothing", "has no attribute 'nothing'"),
        (f"{SHOP}:PRICES", "is a dict, not an mrtr Server"),
    ],
)
def test_a_target_that_names_no_server_is_a_usage_error(
    no_uv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, says: str
) -> None:
    config = tmp_path / "mcp.json"
    assert install("cursor", target, "--config", str(config)) == 2
    assert says in capsys.readouterr().err
    assert not config.exists()


def test_a_server_whose_dependencies_are_missing_here_is_named_after_its_file(
    tmp_path: Path, no_uv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs = tmp_path / "needs_pkg.py"
    needs.write_text("import a_package_only_the_host_env_has\n")
    assert install("json", f"{needs}:server") == 0
    captured = capsys.readouterr()
    assert list(json.loads(captured.out)) == ["needs_pkg"]
    assert "could not import it here" in captured.err
