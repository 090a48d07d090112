"""A file organiser: an MCP server that tidies one folder and asks before it deletes anything.

    python examples/file_organiser/server.py ~/Downloads           # stdio, for a host
    ORGANISE_ROOT=~/Downloads mrtr serve examples/file_organiser/server.py
    mrtr call tidy -- python examples/file_organiser/server.py ~/Downloads
    mrtr install claude-desktop examples/file_organiser/server.py \
        --env ORGANISE_ROOT=$HOME/Downloads

The folder is the script's argument when it is run as `python server.py FOLDER`, else the
`ORGANISE_ROOT` environment variable (under `mrtr serve` or a host), else the current directory.

Every path a tool takes is resolved inside the folder it was started on: a name that points
outside it (`../x`, an absolute path, a symlink out) is refused.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field

from mrtr import RequestContext, Server, ToolError


def folder() -> Path:
    """The folder to organise. Only a script run reads `sys.argv`: under `mrtr serve`, the
    arguments are mrtr's own (`serve`, the file), not a folder."""
    if __name__ == "__main__" and len(sys.argv) > 1:
        return Path(sys.argv[1])
    return Path(os.environ.get("ORGANISE_ROOT", "."))


ROOT = folder().resolve()
if not ROOT.is_dir():
    sys.exit(f"file organiser: {ROOT} is not a folder; set ORGANISE_ROOT or pass a folder")

server = Server(
    "file-organiser",
    version="1.0.0",
    instructions=f"Tidies the folder {ROOT}. Deleting always asks the user first.",
)

#: Where `tidy` files each kind of file.
FOLDERS = {
    "images": {".png", ".jpg", ".jpeg", ".gif", ".webp"},
    "documents": {".pdf", ".doc", ".docx", ".txt", ".md"},
    "archives": {".zip", ".tar", ".gz", ".7z"},
}


class Confirm(BaseModel):
    """What the user is shown before a deletion."""

    confirm: Annotated[bool, Field(description="delete these files for good")]


def inside(name: str) -> Path:
    """`name` resolved inside ROOT; a path that escapes it is a ToolError the model can read."""
    path = (ROOT / name).resolve()
    if path != ROOT and ROOT not in path.parents:
        raise ToolError(f"{name!r} is outside the folder this server organises")
    return path


def files() -> list[Path]:
    return sorted(path for path in ROOT.iterdir() if path.is_file())


@server.tool()
def list_files(pattern: str = "*") -> list[str]:
    """The files at the top of the folder whose names match `pattern` (a shell glob)."""
    return [path.name for path in files() if fnmatch.fnmatch(path.name, pattern)]


@server.tool()
def tidy() -> dict[str, list[str]]:
    """Move images, documents and archives into folders of their own; returns what moved where."""
    moved: dict[str, list[str]] = {}
    for path in files():
        for folder, suffixes in FOLDERS.items():
            if path.suffix.lower() in suffixes:
                target = inside(folder)
                target.mkdir(exist_ok=True)
                path.rename(target / path.name)
                moved.setdefault(folder, []).append(path.name)
    return moved


@server.tool()
def move(name: str, folder: str) -> str:
    """Move the file `name` into `folder` (created when missing), both inside the folder."""
    source, target = inside(name), inside(folder)
    if not source.is_file():
        raise ToolError(f"no file {name!r}; list_files shows what there is")
    target.mkdir(parents=True, exist_ok=True)
    source.rename(target / source.name)
    return f"Moved {name} to {folder}/"


@server.tool()
async def delete_matching(ctx: RequestContext, pattern: str) -> str:
    """Delete the files matching `pattern`, after the user confirms the exact list."""
    doomed = [path for path in files() if fnmatch.fnmatch(path.name, pattern)]
    if not doomed:
        return f"No file matches {pattern!r}."
    names = ", ".join(path.name for path in doomed)
    # The question names the exact files: if the folder changes between rounds, the question
    # changes too, and the user is asked again instead of an old "yes" deleting other files.
    answer = await ctx.elicit(f"Delete {len(doomed)} file(s): {names}?", Confirm)
    if not answer.is_accepted() or answer.content is None or not answer.content.confirm:
        return "Nothing deleted."
    for path in doomed:
        path.unlink(missing_ok=True)  # after the question: runs once, on the final round
    return f"Deleted {names}."


@server.resource("organiser://summary", mime_type="application/json")
def summary() -> dict[str, int]:
    """How many files each folder holds (the top of the folder as ".")."""
    counts = {".": len(files())}
    for folder in FOLDERS:
        path = ROOT / folder
        if path.is_dir():
            counts[folder] = sum(1 for entry in path.iterdir() if entry.is_file())
    return counts


if __name__ == "__main__":
    server.run()
