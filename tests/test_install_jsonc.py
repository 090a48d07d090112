"""`mrtr install vscode` into a JSONC `mcp.json` (comments, trailing commas), as VS Code writes
it: the entry is added or replaced by editing the text, and every comment stays."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mrtr.cli import main
from mrtr.cli.jsonc import loads, set_entry

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop.py"

VSCODE = """\
// Workspace MCP servers (see the VS Code docs)
{
  "inputs": [
    {
      "type": "promptString",
      "id": "api-key", // asked once per session
      "password": true,
    },
  ],
  /* Servers of this project.
     Keep them sorted. */
  "servers": {
    "notes": {
      "type": "stdio",
      "command": "notes-server", // on PATH
      "args": ["--dir", "//shared/notes"],
    },
  },
}
"""

ENTRY = {
    "type": "stdio",
    "command": sys.executable,
    "args": ["-m", "mrtr", "serve", f"{SHOP}:server"],
}


@pytest.fixture
def vscode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no uv: the entry is this interpreter
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".vscode" / "mcp.json"
    path.parent.mkdir()
    return path


TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.DOTALL)


def comments(text: str) -> list[str]:
    """Each comment of `text`, in order (strings are matched first, so `"//x"` is none)."""
    return [token for token in TOKENS.findall(text) if token.startswith("/")]


def test_install_adds_the_entry_and_keeps_every_comment(vscode: Path) -> None:
    vscode.write_text(VSCODE)
    assert main(["install", "vscode", str(SHOP)]) == 0
    written = vscode.read_text()
    assert comments(written) == comments(VSCODE)
    assert comments(VSCODE)[0] == "// Workspace MCP servers (see the VS Code docs)"
    config = loads(written)
    assert config["servers"] == {"notes": loads(VSCODE)["servers"]["notes"], "shop": ENTRY}
    assert config["inputs"] == loads(VSCODE)["inputs"]
    # Everything before the new entry is untouched, character for character.
    cut = VSCODE.index('      "args": ["--dir"')
    assert written.startswith(VSCODE[:cut])
    assert vscode.with_name("mcp.json.bak").read_text() == VSCODE

    # Again: nothing to do. With --force and another setting: replaced in place.
    assert main(["install", "vscode", str(SHOP)]) == 0
    assert vscode.read_text() == written
    assert main(["install", "vscode", str(SHOP), "--env", "A=1", "--force"]) == 0
    forced = vscode.read_text()
    assert comments(forced) == comments(VSCODE)
    assert loads(forced)["servers"]["shop"] == {**ENTRY, "env": {"A": "1"}}
    assert list(loads(forced)["servers"]) == ["notes", "shop"]


@pytest.mark.parametrize(
    "text",
    [
        '{\n  // nothing yet\n  "servers": {},\n}\n',
        '/* a fresh file */\n{\n  "inputs": [],\n}\n',
        '{"servers": {"a": {"command": "a"},}} // one line\n',
    ],
)
def test_an_empty_or_missing_servers_object_gets_the_entry(vscode: Path, text: str) -> None:
    vscode.write_text(text)
    assert main(["install", "vscode", str(SHOP)]) == 0
    written = vscode.read_text()
    assert comments(written) == comments(text)
    assert loads(written)["servers"]["shop"] == ENTRY


def test_a_broken_jsonc_file_is_left_alone_with_the_place_named(
    vscode: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for text, says in [
        ('{\n  "servers": {} /* never closed\n}\n', "a /* comment on line 2 is never closed"),
        ('{\n  // fine\n  "servers": {\n}\n', "line 5"),
    ]:
        vscode.write_text(text)
        assert main(["install", "vscode", str(SHOP)]) == 1
        err = capsys.readouterr().err
        assert "is not valid JSON or JSONC" in err and says in err, err
        assert vscode.read_text() == text


def test_strings_that_look_like_comments_or_commas_are_kept() -> None:
    text = '{"a": "http://x/*y*/", "b": ["//", ",}"],}'
    assert loads(text) == {"a": "http://x/*y*/", "b": ["//", ",}"]}
    edited = set_entry(text, "servers", "s", {"command": "c"})
    assert loads(edited) == {**loads(text), "servers": {"s": {"command": "c"}}}
