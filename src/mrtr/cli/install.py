"""`mrtr install`: add a server to an MCP host's configuration.

Each host keeps its stdio servers in a JSON file:

| host | file | shape |
| --- | --- | --- |
| `claude-desktop` | `claude_desktop_config.json` in the OS's Claude folder | `mcpServers` |
| `claude-code` | `claude mcp add-json` if `claude` is on PATH, else `./.mcp.json` | `mcpServers` |
| `cursor` | `~/.cursor/mcp.json` (`--project`: `./.cursor/mcp.json`) | `mcpServers` |
| `vscode` | `./.vscode/mcp.json` | `servers`, entries with `"type": "stdio"` |
| `json` | printed, not written | `{name: entry}` |

With `--proxy URL` the entry runs `mrtr proxy URL` instead: a host that starts only stdio
servers reaches a remote server (of either era) through it, its questions included.

The entry runs `mrtr serve /absolute/file.py:ATTR` with this Python interpreter, which has mrtr
whatever the install (editable, wheel, `git+`): `python -m mrtr serve ...`. Packages given with
`--with`/`--with-editable` are layered over it by `uv run --no-project --python THIS ...`.

Rules:

* Merging keeps every other entry and top-level key, refuses to replace an entry of the same
  name without `--force`, keeps the previous file as `<file>.bak`, and replaces the file
  atomically (a temporary file renamed over it), so a host never reads half a file.
* A file that is a symbolic link (or a chain of them) is written through: the file it ends
  at is replaced atomically in its own directory and the link stays; `<file>.bak` is beside
  the path named. A link to nothing, or a loop, is refused with nothing written.
* `--force` through `claude mcp` never leaves fewer working entries than before: the new
  entry is added under a temporary name, then the old removed, then the new added under its
  name and the temporary one dropped; a failed step says which entries are left.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from .jsonc import loads as load_jsonc
from .jsonc import set_entry as set_jsonc_entry
from .serve import TargetError, TargetImportError, load_server, split_target

HOSTS = ("claude-desktop", "claude-code", "cursor", "vscode", "json")


class InstallError(Exception):
    """Installing cannot go on; the message says why and what to do (exit status 1)."""


@dataclass(slots=True)
class ServerEntry:
    """How a host starts the server: a command, its arguments and its environment."""

    name: str
    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def for_host(self, host: str) -> dict[str, Any]:
        """The entry as `host`'s configuration file spells it."""
        entry: dict[str, Any] = {"type": "stdio"} if host == "vscode" else {}
        entry["command"] = self.command
        entry["args"] = list(self.args)
        if self.env:
            entry["env"] = dict(self.env)
        return entry


def resolve_target(target: str) -> tuple[Path, str]:
    """`file.py[:ATTR]` as an absolute path and attribute (default `server`).

    A module name (`shop.app:server`) is refused: a host starts the server from a directory
    of its own choosing, where the module would not be found.
    """
    where, attr = split_target(target)
    path = Path(where)
    if path.suffix != ".py":
        raise TargetError(
            f"{target!r}: give the server as FILE.py:ATTR (a module name depends on the "
            "directory the host starts in)"
        )
    if not path.is_file():
        raise TargetError(f"no such file: {where}")
    return path.resolve(), attr or "server"


def server_command(
    file: Path,
    attr: str,
    with_packages: Sequence[str] = (),
    with_editable: Sequence[str] = (),
    uv: str | None = None,
) -> tuple[str, list[str]]:
    """The command and arguments that serve `file:attr` over stdio.

    This interpreter runs `-m mrtr serve FILE:ATTR`: it has mrtr however mrtr was installed
    (editable, a wheel, `git+`, an index), and needs no network when the host starts it. With
    packages to add and `uv` (its path): `uv run --no-project --python THIS [--with PKG]
    [--with-editable DIR] python -m mrtr serve FILE:ATTR`, which layers them over this
    interpreter's environment, so mrtr still comes from it.
    """
    serve = ["-m", "mrtr", "serve", f"{file}:{attr}"]
    if uv is None or not (with_packages or with_editable):
        return sys.executable, serve
    # --no-project: the host's working directory may hold another project that uv would sync.
    args = ["run", "--no-project", "--python", sys.executable]
    for package in with_packages:
        args += ["--with", package]
    for directory in with_editable:
        args += ["--with-editable", str(Path(directory).resolve())]
    return uv, [*args, "python", *serve]


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """`["K=V", ...]` as a dict; raises `InstallError` for a word that is not `K=V`."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _is_env_name(name):
            raise InstallError(f"--env {pair!r} is not NAME=VALUE")
        env[name] = value
    return env


def parse_env_file(path: str | Path) -> dict[str, str]:
    """The variables of a dotenv file: `NAME=VALUE` lines (an `export ` prefix and matching
    quotes around the value allowed), blank lines and `#` comments skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"--env-file {path}: cannot read it ({exc})") from None
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not _is_env_name(name):
            raise InstallError(f"--env-file {path}, line {number}: {raw!r} is not NAME=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[name] = value
    return env


def _is_env_name(name: str) -> bool:
    return bool(name) and not name[0].isdigit() and all(c.isalnum() or c == "_" for c in name)


def default_config_path(
    host: str,
    *,
    project: bool = False,
    platform: str = sys.platform,
    home: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Path:
    """Where `host` reads its servers from on this machine (or in the current project)."""
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    cwd = Path.cwd() if cwd is None else cwd
    if host == "claude-desktop":
        if platform == "darwin":
            folder = home / "Library" / "Application Support" / "Claude"
        elif platform == "win32":
            folder = Path(env.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
        else:
            folder = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
        return folder / "claude_desktop_config.json"
    if host == "claude-code":
        return cwd / ".mcp.json"
    if host == "cursor":
        return (cwd if project else home) / ".cursor" / "mcp.json"
    if host == "vscode":
        return cwd / ".vscode" / "mcp.json"
    raise ValueError(f"{host!r} has no configuration file")


def servers_key(host: str) -> str:
    """The top-level key under which `host` keeps its servers."""
    return "servers" if host == "vscode" else "mcpServers"


def merge_entry(path: Path, key: str, name: str, entry: dict[str, Any], force: bool) -> bool:
    """Add `entry` as `name` under `key` in the JSON file at `path`, keeping the rest.

    A file with comments or trailing commas (JSONC, as VS Code writes) is edited in place: its
    comments and layout stay. Returns False when the file already holds exactly this entry
    (nothing is written). Raises `InstallError` when the file is not a JSON object, or holds
    another entry named `name` and `force` is false.
    """
    target = _link_target(path)
    config: dict[str, Any] = {}
    existed = target.exists()
    commented: str | None = None  # the text of a JSONC file, edited in place to keep comments
    if existed:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallError(f"cannot read {path}: {exc}") from None
        if text.strip():
            try:
                loaded = json.loads(text)
            except ValueError:
                try:
                    loaded = load_jsonc(text)
                except ValueError as exc:
                    raise InstallError(
                        f"{path} is not valid JSON or JSONC ({exc}); fix it or move it away "
                        "(nothing was written)"
                    ) from None
                commented = text
            if not isinstance(loaded, dict):
                raise InstallError(f"{path} does not hold a JSON object; nothing was written")
            config = loaded
    servers = config.setdefault(key, {})
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: {key!r} is not an object; nothing was written")
    if name in servers:
        if servers[name] == entry:
            return False
        if not force:
            raise InstallError(
                f"{path} already has a server named {name!r}; pass --force to replace it, "
                "or --name to install under another name"
            )
    servers[name] = entry
    if commented is None:
        written = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    else:
        written = set_jsonc_entry(commented, key, name, entry)
        if load_jsonc(written) != config:  # never write what would not read back as merged
            raise InstallError(
                f"{path}: cannot add the entry without disturbing its comments; remove the "
                "comments or add the entry by hand (nothing was written)"
            )
    _write_atomically(path, target, written, existed)
    return True


def _link_target(path: Path) -> Path:
    """The file to write for `path`: `path` itself, or the file a symbolic link (or a chain of
    them) ends at, so that the link, often a dotfiles checkout's, stays a link."""
    if not path.is_symlink():
        return path
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        # Refused rather than created: a link to nothing usually means the checkout holding its
        # target moved or is missing, and a file created there would not be the one meant.
        raise InstallError(
            f"{path} is a symbolic link to {path.resolve()}, which does not exist; create that "
            "file (`{}` will do) or replace the link (nothing was written)"
        ) from None
    except (OSError, RuntimeError) as exc:  # a loop: RuntimeError up to 3.12, OSError after
        raise InstallError(
            f"{path} is a symbolic link that leads to no file ({exc}); nothing was written"
        ) from None


def _write_atomically(path: Path, target: Path, text: str, existed: bool) -> None:
    """Write `text` to `target` (`path`, or the file the link `path` ends at) by renaming a
    temporary file over it in its own directory, keeping the previous content as `path.bak`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # A new file may hold secrets (--env): readable by its owner only.
    mode = target.stat().st_mode & 0o777 if existed else 0o600
    if existed:
        shutil.copy2(target, path.with_name(path.name + ".bak"))
    # The temporary file sits beside the target: a rename is atomic only within one filesystem.
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclass(slots=True)
class InstallCommand:
    """One `mrtr install`."""

    host: str
    target: str
    name: str | None = None
    with_packages: list[str] = field(default_factory=list)
    with_editable: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    config: Path | None = None
    project: bool = False
    force: bool = False
    #: A remote server's URL, served to the host over stdio by `mrtr proxy` (no target then).
    proxy: str | None = None

    def entry(self, err: TextIO) -> ServerEntry:
        """The server's entry; raises `TargetError` for a target that names no server."""
        if self.proxy is not None:
            remote = self.name or urlsplit(self.proxy).hostname or "remote"
            return ServerEntry(
                remote, sys.executable, ["-m", "mrtr", "proxy", self.proxy], dict(self.env)
            )
        file, attr = resolve_target(self.target)
        name = self.name
        if name is None:
            try:
                name = load_server(f"{file}:{attr}").name
            except TargetImportError as exc:
                # Its dependencies may exist only in the environment `--with` gives it.
                name = file.stem
                first = str(exc).splitlines()[-1]
                print(f"mrtr install: could not import it here ({first}); "
                      f"naming it {name!r} (--name to choose)", file=err)  # fmt: skip
        uv = shutil.which("uv")
        if uv is None and (self.with_packages or self.with_editable):
            print(
                "mrtr install: uv is not on PATH, so --with and --with-editable cannot be "
                f"honoured: install those packages into {sys.executable} yourself",
                file=err,
            )
        command, args = server_command(file, attr, self.with_packages, self.with_editable, uv)
        return ServerEntry(name, command, args, dict(self.env))

    def run(self, out: TextIO | None = None, err: TextIO | None = None) -> int:
        """Write (or print) the entry; returns the exit status."""
        out = out if out is not None else sys.stdout
        err = err if err is not None else sys.stderr
        entry = self.entry(err)
        wire = entry.for_host(self.host)
        if self.host == "json":
            print(json.dumps({entry.name: wire}, indent=2, ensure_ascii=False), file=out)
            return 0
        if self.host == "claude-code" and self.config is None:
            claude = shutil.which("claude")
            if claude is not None:
                return self._claude_mcp_add(claude, entry.name, wire, err)
        path = self.config or default_config_path(self.host, project=self.project)
        if merge_entry(path, servers_key(self.host), entry.name, wire, self.force):
            print(f"Installed {entry.name!r} in {path}", file=out)
            print(f"  {_shell_line(entry)}", file=out)
            if self.host == "claude-desktop":
                print("Restart Claude Desktop to load it.", file=out)
        else:
            print(f"{entry.name!r} is already installed in {path}, unchanged", file=out)
        return 0

    def _claude_mcp_add(self, claude: str, name: str, wire: dict[str, Any], err: TextIO) -> int:
        config = json.dumps({"type": "stdio", **wire})
        if self.force:
            return _claude_mcp_replace(claude, name, config, err)
        added, why = _run_claude(claude, ["add-json", name, config], show=True)
        if not added:
            print(f"mrtr install: `claude mcp add-json` failed ({why})", file=err)
        return 0 if added else 1


#: Where `--force` puts the new entry while the old one is still there (`add-json` refuses a
#: name it has): the old one is removed only once the new one is known to be addable.
REPLACING_SUFFIX = "-mrtr-replacing"


def _claude_mcp_replace(claude: str, name: str, config: str, err: TextIO) -> int:
    """`claude mcp add-json` over an entry that may exist, never ending with fewer working
    entries than before: add under a temporary name, remove the old, add, drop the temporary.

    The old entry cannot be read back exactly to restore it (`claude mcp get` prints a
    summary, and misses some scopes), so it is removed only once the new one has been added.
    """
    temporary = name + REPLACING_SUFFIX
    added, why = _run_claude(claude, ["add-json", temporary, config])
    if not added:
        print(f"mrtr install: could not add the new entry (as {temporary!r}: {why}); "
              f"{name!r} is unchanged", file=err)  # fmt: skip
        return 1
    # A failure here is expected when there is no old entry; it matters only if the add fails.
    removed, why_kept = _run_claude(claude, ["remove", name])
    added, why = _run_claude(claude, ["add-json", name, config], show=True)
    if added:
        dropped, why_left = _run_claude(claude, ["remove", temporary])
        if not dropped:
            print(f"mrtr install: {name!r} is installed, but removing the temporary entry "
                  f"{temporary!r} failed ({why_left}): `claude mcp remove {temporary}`",
                  file=err)  # fmt: skip
        return 0
    if not removed:
        # Both failed: the old entry is still there (in two scopes, say), so nothing changes.
        dropped, why_left = _run_claude(claude, ["remove", temporary])
        left = "" if dropped else f"; remove {temporary!r} with `claude mcp remove {temporary}`"
        print(f"mrtr install: could not remove the old {name!r} ({why_kept}); {name!r} is "
              f"unchanged{left}", file=err)  # fmt: skip
        return 1
    again = shlex.join([claude, "mcp", "add-json", name, config])
    print(f"mrtr install: the old {name!r} was removed, then adding {name!r} failed ({why}); "
          f"the new entry is installed as {temporary!r} and works under that name. To give it "
          f"its name: `{again}`, then `claude mcp remove {temporary}`", file=err)  # fmt: skip
    return 1


def _run_claude(claude: str, words: list[str], *, show: bool = False) -> tuple[bool, str]:
    """Run `claude mcp WORDS`: whether it succeeded, and if not, why in a few words.

    `show` lets the CLI speak to the user (the step they asked for); otherwise its output is
    captured and only its reason for failing is returned.
    """
    try:
        done = subprocess.run(
            [claude, "mcp", *words], capture_output=not show, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"it did not run: {exc}"
    if done.returncode == 0:
        return True, ""
    said = " ".join((done.stderr or done.stdout or "").split())
    return False, f"status {done.returncode}" + (f": {said}" if said else "")


def _shell_line(entry: ServerEntry) -> str:
    return shlex.join([entry.command, *entry.args])


__all__ = [
    "HOSTS",
    "InstallCommand",
    "InstallError",
    "ServerEntry",
    "default_config_path",
    "merge_entry",
    "parse_env_file",
    "parse_env_pairs",
    "resolve_target",
    "server_command",
    "servers_key",
]
