"""Every code block of the documentation (README.md and docs/**/*.md) is real.

The convention (published in docs/contributing.md):

* a ```python block is a self-contained program: it is run with `python3`, from the repository
  root, and must exit 0, on loopback only (stopped after 60 s: a guard against a hang);
* a ```python block whose lines are `--8<-- "examples/..."` includes a file of examples/ (run by
  the example's own test): the file must exist;
* a ```bash or ```console block holds commands (a console block's commands start with `$ `,
  the other lines are their output): every `mrtr ...` command in it must be accepted by the
  command line's argument parser;
* a ```json block must parse;
* ```mermaid blocks are diagrams and ```text blocks are output or file trees: not code.

Any other fence (or one with no language) fails, so that nothing slips through unchecked.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mrtr.cli import _build

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# A fence may be indented (inside a list item or a tab): its closing fence has the same indent.
_FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S
)
_SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')
_RUN_TIMEOUT = 60.0  # seconds: only a hang reaches it, however loaded the machine
_COMMAND_LANGS = {"bash", "sh", "console", "shell"}
_PLAIN_LANGS = {"mermaid", "text"}


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and its text (dedented)."""

    path: Path
    line: int
    lang: str
    body: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _blocks() -> list[Block]:
    found = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            indent = len(match["indent"])
            body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, match["lang"], body))
    return found


BLOCKS = _blocks()


def _of(*langs: str) -> list[Block]:
    return [block for block in BLOCKS if block.lang in langs]


def _included(block: Block) -> list[str] | None:
    """The example files a block includes, or None when it is code of its own."""
    lines = [line.strip() for line in block.body.splitlines() if line.strip()]
    paths = [_SNIPPET.match(line) for line in lines]
    if lines and all(paths):
        return [match["path"] for match in paths if match]
    return None


PROGRAMS = [block for block in _of("python") if _included(block) is None]
INCLUDES = [block for block in _of("python") if _included(block) is not None]


def test_the_documentation_has_code_of_every_kind() -> None:
    """The collection itself works: a broken fence pattern would make every test vacuous."""
    assert len(PROGRAMS) >= 30, [block.id for block in PROGRAMS]
    assert len(INCLUDES) >= 4
    assert len(_of(*_COMMAND_LANGS)) >= 5
    assert any(block.path.name == "README.md" for block in PROGRAMS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_every_fence_names_a_checked_language(block: Block) -> None:
    known = {"python", "json", *_COMMAND_LANGS, *_PLAIN_LANGS}
    assert block.lang in known, (
        f"{block.id}: a ```{block.lang or '(no language)'} block is neither run nor checked; "
        f"use one of {sorted(known)} (see docs/contributing.md)"
    )


@pytest.mark.parametrize("block", PROGRAMS, ids=lambda block: block.id)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    program = tmp_path / "block.py"
    program.write_text(block.body, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_RUN_TIMEOUT,
    )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("block", INCLUDES, ids=lambda block: block.id)
def test_included_example_exists(block: Block) -> None:
    for path in _included(block) or []:
        assert path.startswith("examples/"), f"{block.id}: include from examples/, not {path}"
        assert (ROOT / path).is_file(), f"{block.id}: {path} does not exist"


def _commands(block: Block) -> list[str]:
    commands = []
    carried = ""  # a line ending in a backslash goes on on the next, as in a shell
    for raw in block.body.splitlines():
        line = raw.strip()
        if carried:
            line, carried = carried + " " + line, ""
        elif block.lang == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            carried = line[:-1].rstrip()
            continue
        commands.append(line)
    return commands


def _mrtr_invocations(command: str) -> list[list[str]]:
    """The argument lists of every `mrtr ...` (or `python -m mrtr ...`) in a shell line."""
    words = shlex.split(command, comments=True)
    found: list[list[str]] = []
    segment: list[str] = []
    for word in [*words, "&&"]:
        if word in {"&&", "||", "|", ";", "&"}:
            while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", segment[0]):
                segment = segment[1:]  # VAR=value before the command
            if segment[:1] == ["mrtr"]:
                found.append(segment[1:])
            elif len(segment) >= 3 and segment[1:3] == ["-m", "mrtr"]:
                found.append(segment[3:])
            segment = []
        else:
            segment.append(word)
    return found


def _check_mrtr(arguments: list[str], where: str) -> None:
    parser, subparsers = _build()
    if not arguments or arguments[0] not in subparsers:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(arguments)
        assert exit_.value.code == 0, f"{where}: `mrtr {shlex.join(arguments)}` is not a command"
        return
    name, rest, inner = arguments[0], arguments[1:], []
    if name in ("call", "list", "inspect", "proxy") and "--" in rest:
        cut = rest.index("--")
        rest, inner = rest[:cut], rest[cut + 1 :]
    try:
        subparsers[name].parse_intermixed_args(rest)
    except SystemExit as exc:
        pytest.fail(f"{where}: `mrtr {shlex.join(arguments)}` is refused (exit {exc.code})")
    if inner[:1] == ["mrtr"]:
        _check_mrtr(inner[1:], where)


@pytest.mark.parametrize("block", _of(*_COMMAND_LANGS), ids=lambda block: block.id)
def test_mrtr_commands_parse(block: Block) -> None:
    for command in _commands(block):
        for arguments in _mrtr_invocations(command):
            _check_mrtr(arguments, block.id)


def test_the_command_check_refuses_a_wrong_command() -> None:
    """The check can fail: an option that does not exist is caught."""
    with pytest.raises(pytest.fail.Exception):
        _check_mrtr(["serve", "shop.py:server", "--no-such-option"], "here")
    with pytest.raises(pytest.fail.Exception):
        _check_mrtr(["list", "--", "mrtr", "serve"], "here")  # the inner serve lacks its target
    assert _mrtr_invocations("MRTR_PORT=1 mrtr serve a.py:s && python -m mrtr demo") == [
        ["serve", "a.py:s"],
        ["demo"],
    ]


@pytest.mark.parametrize("block", _of("json"), ids=lambda block: block.id)
def test_json_block_parses(block: Block) -> None:
    json.loads(block.body)


def test_readme_keeps_the_quick_start() -> None:
    """The two commands of the quick start, exactly: nothing installs into the system Python."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/mrtr demo" in readme
    assert "bash scripts/test.sh" in readme
