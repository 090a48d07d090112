"""`mrtr install` never loses what the user had: `--force` through the `claude` CLI keeps a
working entry when an add fails, and a configuration file that is a symbolic link is written
through the link to its target, the link kept."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mrtr.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"
OLD = {"type": "stdio", "command": "/opt/shop/bin/shop-server", "args": ["--port", "0"]}
NEW = {
    "type": "stdio",
    "command": sys.executable,
    "args": ["-m", "mrtr", "serve", f"{SHOP}:server"],
    "env": {"A": "2"},
}

# A stand-in for the `claude` CLI (the real one needs an account): its servers live in a JSON
# file, `mcp add-json` refuses a name it has (as the real one does), `mcp remove` one it lacks,
# and the names listed in fail.json under "add-json" or "remove" fail that command.
FAKE_CLAUDE = """\
import json, pathlib, sys
here = pathlib.Path({here!r})
with open(here / "calls.jsonl", "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\\n")
servers = json.loads((here / "servers.json").read_text())
fail = json.loads((here / "fail.json").read_text())
command, name = sys.argv[2], sys.argv[3]
if name in fail.get(command, []) or "*" in fail.get(command, []):
    sys.exit("claude: " + command + " failed (as this test asked)")
if command == "add-json":
    if name in servers:
        sys.exit("MCP server " + name + " already exists in local config")
    servers[name] = json.loads(sys.argv[4])
    print("Added stdio MCP server " + name + " to local config")
elif command == "remove":
    if name not in servers:
        sys.exit("No MCP server found with name: " + name)
    del servers[name]
    print("Removed MCP server " + name + " from local config")
(here / "servers.json").write_text(json.dumps(servers))
"""


class FakeClaude:
    """The stand-in's state: its servers, the commands to fail, and every call it got."""

    def __init__(self, here: Path) -> None:
        self.here = here

    @property
    def servers(self) -> dict[str, Any]:
        servers: dict[str, Any] = json.loads((self.here / "servers.json").read_text())
        return servers

    @servers.setter
    def servers(self, value: dict[str, Any]) -> None:
        (self.here / "servers.json").write_text(json.dumps(value))

    def fail(self, **names: list[str]) -> None:
        (self.here / "fail.json").write_text(json.dumps(names))

    @property
    def calls(self) -> list[list[str]]:
        lines = (self.here / "calls.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeClaude:
    """A PATH holding only the stand-in `claude`, which already has `shop` installed (OLD)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "claude"
    script.write_text(f"#!{sys.executable}\n" + FAKE_CLAUDE.format(here=str(tmp_path)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.chdir(tmp_path)
    fake = FakeClaude(tmp_path)
    fake.servers = {"shop": OLD}
    fake.fail()
    return fake


def force_install() -> int:
    return main(["install", "claude-code", str(SHOP), "--env", "A=2", "--force"])


# --- --force through the claude CLI ------------------------------------------------------------


def test_force_replaces_the_entry_and_leaves_no_temporary_one(
    claude: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    assert force_install() == 0
    assert claude.servers == {"shop": NEW}
    # The new entry is added under a temporary name first, so it is known to be addable
    # before the old one goes.
    temporary = claude.calls[0][2]
    assert temporary != "shop"
    assert [call[:3] for call in claude.calls] == [
        ["mcp", "add-json", temporary],
        ["mcp", "remove", "shop"],
        ["mcp", "add-json", "shop"],
        ["mcp", "remove", temporary],
    ]
    assert capsys.readouterr().err == ""


def test_force_with_no_entry_of_that_name_adds_it(claude: FakeClaude) -> None:
    claude.servers = {"notes": OLD}
    assert force_install() == 0
    assert claude.servers == {"notes": OLD, "shop": NEW}


def test_a_failed_add_under_force_keeps_the_old_entry(
    claude: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    claude.fail(**{"add-json": ["*"]})
    assert force_install() == 1
    assert claude.servers == {"shop": OLD}
    assert ["mcp", "remove", "shop"] not in claude.calls
    err = capsys.readouterr().err
    assert "failed (as this test asked)" in err  # the CLI's own words are shown
    assert "'shop' is unchanged" in err


def test_when_only_the_final_add_fails_the_new_entry_stays_under_the_temporary_name(
    claude: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    claude.fail(**{"add-json": ["shop"]})
    assert force_install() == 1
    ((temporary, entry),) = claude.servers.items()  # as many working entries as before
    assert temporary != "shop"
    assert entry == NEW
    err = capsys.readouterr().err
    assert f"installed as {temporary!r}" in err
    assert "the old 'shop' was removed" in err


def test_an_old_entry_that_cannot_be_removed_is_kept_and_the_temporary_one_undone(
    claude: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    # As when the name is in two scopes: `claude mcp remove` refuses to pick one.
    claude.fail(remove=["shop"])
    assert force_install() == 1
    assert claude.servers == {"shop": OLD}
    err = capsys.readouterr().err
    assert "could not remove the old 'shop'" in err
    assert "'shop' is unchanged" in err


def test_a_failed_add_without_force_changes_nothing(claude: FakeClaude) -> None:
    assert main(["install", "claude-code", str(SHOP), "--env", "A=2"]) == 1
    assert claude.servers == {"shop": OLD}
    assert [call[:3] for call in claude.calls] == [["mcp", "add-json", "shop"]]


# --- a configuration file that is a symbolic link ----------------------------------------------


def dotfiles(tmp_path: Path) -> Path:
    """A configuration file kept in a dotfiles folder, holding one server."""
    target = tmp_path / "dotfiles" / "claude" / "config.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({"mcpServers": {"notes": {"command": "notes"}}}))
    target.chmod(0o640)
    return target


def test_a_symlinked_config_is_written_through_the_link(tmp_path: Path) -> None:
    target = dotfiles(tmp_path)
    original = target.read_text()
    link = tmp_path / "Claude" / "claude_desktop_config.json"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(target, link.parent))
    assert main(["install", "claude-desktop", str(SHOP), "--config", str(link)]) == 0
    assert link.is_symlink()
    assert os.readlink(link) == os.path.relpath(target, link.parent)
    servers = json.loads(target.read_text())["mcpServers"]
    assert sorted(servers) == ["notes", "shop"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    # The previous content is kept beside the path that was named, as for a plain file.
    backup = link.with_name(link.name + ".bak")
    assert not backup.is_symlink()
    assert backup.read_text() == original
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.json"]
    assert sorted(p.name for p in link.parent.iterdir()) == sorted([backup.name, link.name])


def test_a_chain_of_links_is_followed_to_the_file_and_every_link_kept(tmp_path: Path) -> None:
    target = dotfiles(tmp_path)
    middle = tmp_path / "middle" / "mcp.json"
    middle.parent.mkdir()
    middle.symlink_to(target)
    link = tmp_path / "mcp.json"
    link.symlink_to(middle)
    assert main(["install", "cursor", str(SHOP), "--config", str(link)]) == 0
    assert link.is_symlink() and middle.is_symlink()
    assert os.readlink(link) == str(middle) and os.readlink(middle) == str(target)
    assert sorted(json.loads(target.read_text())["mcpServers"]) == ["notes", "shop"]


def test_a_jsonc_file_behind_a_link_keeps_its_comments(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "mcp.json"
    target.parent.mkdir()
    target.write_text('// mine\n{"servers": {},}\n')
    link = tmp_path / ".vscode" / "mcp.json"
    link.parent.mkdir()
    link.symlink_to(target)
    assert main(["install", "vscode", str(SHOP), "--config", str(link)]) == 0
    assert link.is_symlink()
    assert target.read_text().startswith("// mine\n")
    assert '"shop"' in target.read_text()


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_link_that_leads_to_no_file_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    link = tmp_path / "mcp.json"
    pointed = tmp_path / "gone" / "mcp.json" if kind == "dangling" else link
    link.symlink_to(pointed)
    assert main(["install", "cursor", str(SHOP), "--config", str(link)]) == 1
    err = capsys.readouterr().err
    assert f"{link} is a symbolic link" in err
    assert "nothing was written" in err
    assert link.is_symlink() and os.readlink(link) == str(pointed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.json"]
