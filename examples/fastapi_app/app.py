"""A FastAPI application that serves its own HTTP API and an MCP endpoint side by side.

    uvicorn examples.fastapi_app.app:app --port 8000       # or: python examples/fastapi_app/app.py
    curl http://127.0.0.1:8000/notes                        # the app's own route
    mrtr call http://127.0.0.1:8000/mcp add_note text=hello # the same data, through MCP

The MCP tools and the REST routes share one store, and the server's lifespan runs inside the
app's: a mounted ASGI app is not sent lifespan events of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from mrtr import RequestContext, Server


class Note(BaseModel):
    id: int
    text: str


class Notes:
    """Stands for the application's database."""

    def __init__(self) -> None:
        self.items: dict[int, Note] = {}

    def add(self, text: str) -> Note:
        note = Note(id=len(self.items) + 1, text=text)
        self.items[note.id] = note
        return note


notes = Notes()
mcp = Server("notes", version="1.0.0", instructions="The notes of this application.")


@mcp.tool()
def add_note(text: str) -> Note:
    """Add a note; returns it with its id."""
    return notes.add(text)


@mcp.tool()
async def delete_note(ctx: RequestContext, id: int) -> str:
    """Delete a note, after the user confirms."""
    note = notes.items.get(id)
    if note is None:
        return f"There is no note {id}."
    answer = await ctx.elicit(f"Delete note {id} ({note.text!r})?", {"type": "object"})
    if answer.action != "accept":
        return "Kept."
    del notes.items[id]
    return f"Deleted note {id}."


@mcp.resource("notes://all", mime_type="application/json")
def all_notes() -> list[Note]:
    """Every note."""
    return list(notes.items.values())


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with mcp.running():  # the MCP server's own lifespan, inside the app's
        yield


app = FastAPI(title="Notes", lifespan=lifespan)


@app.get("/notes")
def list_notes() -> list[Note]:
    return list(notes.items.values())


@app.get("/notes/{note_id}")
def get_note(note_id: int) -> Note:
    if note_id not in notes.items:
        raise HTTPException(status_code=404, detail=f"no note {note_id}")
    return notes.items[note_id]


# The MCP endpoint at /mcp (Streamable HTTP, both protocol eras), beside the routes above.
app.router.add_route("/mcp", mcp.asgi_app(), methods=["GET", "POST", "DELETE"])


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=8000)
