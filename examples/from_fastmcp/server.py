"""A notes server: notes in SQLite, files under a folder, and a few tools around them.

Run it with `python server.py` (stdio); `NOTES_DB` names the database file (default: in
memory), `NOTES_DIR` the folder `file://{path}` reads from (default: the current directory).
"""

import asyncio
import os
import sqlite3
import struct
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from mrtr import Image, ToolError
from mrtr import RequestContext as Context
from mrtr import Server as FastMCP

NOTES_DIR = Path(os.environ.get("NOTES_DIR", ".")).resolve()


@dataclass
class AppContext:
    db: sqlite3.Connection


@asynccontextmanager
async def lifespan(server: FastMCP) -> AsyncIterator[AppContext]:
    # One connection for the process; sync tools run in worker threads.
    db = sqlite3.connect(os.environ.get("NOTES_DB", ":memory:"), check_same_thread=False)
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes"
        " (id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL, tags TEXT NOT NULL)"
    )
    try:
        yield AppContext(db=db)
    finally:
        db.close()


mcp = FastMCP("notes", lifespan=lifespan)


class Note(BaseModel):
    title: str = Field(min_length=1, max_length=80)
    body: str
    tags: list[str] = []


class Confirm(BaseModel):
    confirm: bool


def _db(ctx: Context) -> sqlite3.Connection:
    return ctx.request_context.lifespan_context.db


def _load_note(ctx: Context, note_id: int) -> Note:
    row = (
        _db(ctx).execute("SELECT title, body, tags FROM notes WHERE id = ?", (note_id,)).fetchone()
    )
    if row is None:
        raise ToolError(f"no note {note_id}: find one with search_notes")
    return Note(title=row[0], body=row[1], tags=[tag for tag in row[2].split(",") if tag])


@mcp.tool
async def add_note(note: Note, ctx: Context) -> int:
    """Store a note; its id."""
    db = _db(ctx)
    cursor = db.execute(
        "INSERT INTO notes (title, body, tags) VALUES (?, ?, ?)",
        (note.title, note.body, ",".join(note.tags)),
    )
    db.commit()
    await ctx.info(f"stored note {cursor.lastrowid}")
    return int(cursor.lastrowid or 0)


@mcp.tool
def get_note(note_id: int, ctx: Context) -> Note:
    """One note by id."""
    return _load_note(ctx, note_id)


@mcp.tool
def search_notes(ctx: Context, text: str = "") -> list[int]:
    """The ids of the notes whose title or body holds `text`."""
    pattern = f"%{text}%"
    rows = _db(ctx).execute(
        "SELECT id FROM notes WHERE title LIKE ? OR body LIKE ? ORDER BY id", (pattern, pattern)
    )
    return [row[0] for row in rows]


@mcp.tool
def tag_note(note_id: int, tags: list[str], ctx: Context) -> Note:
    """Add tags to a note."""
    note = _load_note(ctx, note_id)
    merged = sorted({*note.tags, *tags})
    db = _db(ctx)
    db.execute("UPDATE notes SET tags = ? WHERE id = ?", (",".join(merged), note_id))
    db.commit()
    return note.model_copy(update={"tags": merged})


@mcp.tool
async def delete_note(note_id: int, ctx: Context) -> str:
    """Delete a note once the user confirms."""
    note = _load_note(ctx, note_id)
    answer = await ctx.elicit(f"Delete note {note_id} ({note.title})?", Confirm)
    if answer.action != "accept" or not answer.data.confirm:
        return "Kept."
    db = _db(ctx)
    db.execute("DELETE FROM notes WHERE id = ?", (note_id,))
    db.commit()
    return f"Deleted note {note_id}."


@mcp.tool
async def import_notes(titles: list[str], ctx: Context) -> int:
    """Store one empty note per title, reporting progress; how many were stored."""
    db = _db(ctx)
    for done, title in enumerate(titles, start=1):
        db.execute("INSERT INTO notes (title, body, tags) VALUES (?, '', '')", (title,))
        await ctx.report_progress(progress=done, total=len(titles))
        await asyncio.sleep(0)
    db.commit()
    await ctx.info(f"imported {len(titles)} notes")
    return len(titles)


@mcp.tool
def count_words(path: str) -> int:
    """Count the words of a file under the notes folder (blocking file I/O in a sync tool)."""
    return len(_inside(path).read_text(encoding="utf-8").split())


@mcp.tool
def divide(a: float, b: float) -> float:
    """a / b."""
    if b == 0:
        raise ToolError("cannot divide by zero: pass a b other than 0")
    return a / b


@mcp.tool
def note_chart(ctx: Context) -> Image:
    """A bar as wide as the number of notes, as a PNG."""
    (count,) = _db(ctx).execute("SELECT COUNT(*) FROM notes").fetchone()
    return Image(data=_png(width=max(1, count), height=4), format="png")


@mcp.tool
def stats(ctx: Context) -> dict[str, int]:
    """How many notes and tags there are."""
    rows = _db(ctx).execute("SELECT tags FROM notes").fetchall()
    tags = {tag for (text,) in rows for tag in text.split(",") if tag}
    return {"notes": len(rows), "tags": len(tags)}


@mcp.resource("file://{path}")
def read_file(path: str) -> str:
    """A text file under the notes folder."""
    return _inside(path).read_text(encoding="utf-8")


@mcp.prompt
def summarise(note_id: int) -> str:
    """Ask the model to summarise a note."""
    return f"Summarise note {note_id} in one sentence. Read it with get_note first."


def _inside(path: str) -> Path:
    target = (NOTES_DIR / path).resolve()
    if not target.is_relative_to(NOTES_DIR):
        raise ToolError(f"{path!r} is outside the notes folder")
    return target


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    rows = b"".join(b"\x00" + b"\x30\x60\xc0" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


if __name__ == "__main__":
    mcp.run()
