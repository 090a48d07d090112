"""The replay rule, told at run time: an effect in code a round replays is logged with the fix.

A 2026-07-28 round runs its handler again from the top, so a row inserted before two questions
is inserted three times. While tests run (as these do, under pytest), in development mode, with
`MRTR_CHECK_REPLAY=1` and with `ServerOptions(check_replay=True)` the server watches the
replayed code and logs a warning naming `ctx.once`; code inside `ctx.once`, reads, and effects
after the last question are not reported. An in-memory client outside those pays nothing.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mrtr import Client, ElicitResult, RequestContext, Server, ServerOptions

EMPTY: dict[str, Any] = {"type": "object", "properties": {}}


def _yes(params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={})


@pytest.fixture
def db() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE orders (item TEXT)")
    yield connection
    connection.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "mrtr.server" and record.levelno == logging.WARNING
    ]


def _orders_server(db: sqlite3.Connection, options: ServerOptions | None = None) -> Server:
    server = Server("shop", options=options)

    @server.tool()
    async def order(ctx: RequestContext, item: str) -> str:
        db.execute("INSERT INTO orders VALUES (?)", (item,))  # the mistake: before the questions
        db.commit()
        await ctx.elicit(f"Order {item}?", EMPTY)
        await ctx.elicit("Gift wrap?", EMPTY)
        return "Ordered"

    return server


def _rows(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COUNT(*) FROM orders").fetchone()[0])


async def test_an_insert_before_two_questions_is_reported_with_the_fix(
    db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mrtr.server")
    async with Client.in_memory(_orders_server(db), elicitation_handler=_yes) as client:
        result = await client.call_tool("order", {"item": "tea"})
    assert not result.is_error
    assert _rows(db) == 3  # three rounds, three runs from the top: what the warning is about
    warned = [text for text in _warnings(caplog) if "SQLite" in text]
    assert len(warned) == 2, _warnings(caplog)  # once in each replayed round
    assert warned[0].startswith("tools/call 'order': changed rows of a SQLite database")
    assert "ctx.once(key, fn)" in warned[0]


async def test_the_same_insert_in_ctx_once_is_not_reported(
    db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mrtr.server")
    server = Server("shop")

    def insert(item: str) -> int:
        cursor = db.execute("INSERT INTO orders VALUES (?)", (item,))
        db.commit()
        return int(cursor.lastrowid or 0)

    @server.tool()
    async def order(ctx: RequestContext, item: str) -> str:
        row = await ctx.once("insert", lambda: insert(item), type=int)
        (count,) = db.execute("SELECT COUNT(*) FROM orders").fetchone()  # a read: fine
        await ctx.elicit(f"Order {item} as row {row} of {count}?", EMPTY)
        await ctx.elicit("Gift wrap?", EMPTY)
        db.execute("UPDATE orders SET item = ? WHERE rowid = ?", (f"{item}!", row))  # after
        db.commit()
        return "Ordered"

    async with Client.in_memory(server, elicitation_handler=_yes) as client:
        result = await client.call_tool("order", {"item": "tea"})
    assert not result.is_error
    assert _rows(db) == 1
    assert _warnings(caplog) == []


async def test_a_file_written_and_a_process_started_before_a_question_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import subprocess

    caplog.set_level(logging.WARNING, "mrtr.server")
    server = Server("files")
    log = tmp_path / "audit.log"

    @server.tool()
    async def archive(ctx: RequestContext) -> str:
        with log.open("a", encoding="utf-8") as out:
            out.write("archived\n")
        subprocess.run([sys.executable, "-c", "pass"], check=True)  # noqa: ASYNC221 - the effect under test
        await ctx.elicit("Archive?", EMPTY)
        return "Archived"

    async with Client.in_memory(server, elicitation_handler=_yes) as client:
        await client.call_tool("archive", {})
    warned = _warnings(caplog)
    assert any(f"wrote to the file {str(log)!r}" in text for text in warned), warned
    assert any("started a process" in text for text in warned), warned
    assert log.read_text(encoding="utf-8") == "archived\n" * 2


async def test_check_replay_false_keeps_quiet_in_memory(
    db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mrtr.server")
    server = _orders_server(db, ServerOptions(check_replay=False))
    async with Client.in_memory(server, elicitation_handler=_yes) as client:
        await client.call_tool("order", {"item": "tea"})
    assert _rows(db) == 3
    assert _warnings(caplog) == []
    assert sys.getprofile() is None  # nothing was left installed


SERVED = """
import os, sqlite3
from mrtr import RequestContext, Server, ServerOptions

db = sqlite3.connect(os.environ["SHOP_DB"], isolation_level=None)  # autocommit: no commit() to see
db.execute("CREATE TABLE IF NOT EXISTS orders (item TEXT)")
server = Server("shop", options=ServerOptions(check_replay=True))


@server.tool()
async def order(ctx: RequestContext, item: str) -> str:
    db.execute("INSERT INTO orders VALUES (?)", (item,))
    await ctx.elicit(f"Order {item}?", {"type": "object", "properties": {}})
    return "Ordered"


if __name__ == "__main__":
    server.run()
"""


async def test_a_served_server_with_check_replay_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mrtr.stdio.server")  # the child's stderr, line by line
    script = tmp_path / "shop.py"
    script.write_text(SERVED, encoding="utf-8")
    database = tmp_path / "shop.db"
    client = Client.stdio(
        sys.executable,
        ["-m", "mrtr", "serve", f"{script}:server"],
        env={**os.environ, "SHOP_DB": str(database)},
        elicitation_handler=_yes,
    )
    async with client:
        result = await client.call_tool("order", {"item": "tea"})
    assert not result.is_error
    with sqlite3.connect(database) as check:
        assert check.execute("SELECT COUNT(*) FROM orders").fetchone() == (2,)
    served = [r.getMessage() for r in caplog.records if r.name == "mrtr.stdio.server"]
    assert any("changed rows of a SQLite database" in line for line in served), served


async def test_a_call_that_fails_in_replayed_code_fails_as_itself_and_the_watch_goes_on(
    db: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "mrtr.server")
    closed = sqlite3.connect(":memory:")
    closed.close()
    server = Server("closed")

    @server.tool()
    async def probe(ctx: RequestContext) -> str:
        try:
            closed.execute("SELECT 1")
        except sqlite3.ProgrammingError as error:
            seen = str(error)
        db.execute("INSERT INTO orders VALUES ('after')")  # still seen
        await ctx.elicit("Go on?", EMPTY)
        return seen

    async with Client.in_memory(server, elicitation_handler=_yes) as client:
        result = await client.call_tool("probe", {})
    assert result.content[0].text == "Cannot operate on a closed database."
    assert any("changed rows of a SQLite database" in text for text in _warnings(caplog))
    assert sys.getprofile() is None


EMBEDDED = """
import asyncio, logging, sqlite3
from mrtr import Client, ElicitResult, RequestContext, Server

logging.basicConfig(level=logging.WARNING)
db = sqlite3.connect(":memory:")
db.execute("CREATE TABLE orders (item TEXT)")
server = Server("shop")


@server.tool()
async def order(ctx: RequestContext, item: str) -> str:
    db.execute("INSERT INTO orders VALUES (?)", (item,))
    await ctx.elicit(f"Order {item}?", {"type": "object", "properties": {}})
    return "Ordered"


async def main() -> None:
    yes = lambda params: ElicitResult(action="accept", content={})
    async with Client.in_memory(server, elicitation_handler=yes) as client:
        await client.call_tool("order", {"item": "tea"})


asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("flags", "env", "checked"),
    [
        ((), {}, False),  # an agent embedding its server: no hook for an in-memory client
        (("-X", "dev"), {}, True),  # Python's development mode
        ((), {"MRTR_CHECK_REPLAY": "1"}, True),
    ],
    ids=["embedded", "dev-mode", "variable"],
)
def test_the_check_is_on_where_it_serves_not_by_transport(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], checked: bool
) -> None:
    script = tmp_path / "embedded.py"
    script.write_text(EMBEDDED, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST",)}
    clean.pop("MRTR_CHECK_REPLAY", None)
    clean.pop("PYTHONDEVMODE", None)
    done = subprocess.run(
        [sys.executable, *flags, str(script)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert ("ctx.once" in done.stderr) is checked, done.stderr
