"""The logs and progress of a relayed round on the instance serving the client's request
(`relay.py`, rule 4): passed on in the order they came, counted, and queued at most
`MAX_NOTES` at once for a listener slower than the backend, the newest dropped past that."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from mrtr.proxy import relay


class SlowListener:
    """A round's listener whose log messages wait for `gate` (a client that reads slowly)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.heard: list[tuple[Any, ...]] = []

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        await self.gate.wait()
        self.heard.append(("log", level, data, logger))

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        self.heard.append(("progress", progress, total, message))


def log(data: Any, level: str = "info") -> str:
    return json.dumps({"log": [level, data, None]})


async def test_notes_are_passed_on_in_order_malformed_ones_counted_and_skipped() -> None:
    listener = SlowListener()
    listener.gate.set()
    notes = relay._Notes(listener)  # type: ignore[arg-type]
    try:
        notes.hear(log("first"))
        notes.hear(json.dumps({"progress": [0.5, 1, "half"]}))
        notes.hear("not json")
        notes.hear(log("odd level", level="loud"))
        await asyncio.wait_for(notes.passed_on(4), 5)
    finally:
        notes.stop()
    assert notes.passed == 4
    assert listener.heard == [
        ("log", "info", "first", None),
        ("progress", 0.5, 1, "half"),
        ("log", "info", "odd level", None),  # an unknown level is passed on as info
    ]


async def test_a_slow_listener_holds_at_most_max_notes_and_the_rest_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = SlowListener()
    notes = relay._Notes(listener)  # type: ignore[arg-type]
    try:
        notes.hear(log(0))
        for _ in range(3):  # the first note is taken off the queue, and waits on the gate
            await asyncio.sleep(0)
        with caplog.at_level(logging.WARNING, logger="mrtr.proxy"):
            for number in range(1, relay.MAX_NOTES + 51):
                notes.hear(log(number))
        assert notes.dropped == 50
        assert "dropping the newest" in caplog.text
        listener.gate.set()
        await asyncio.wait_for(notes.passed_on(relay.MAX_NOTES + 51), 10)
    finally:
        notes.stop()
    # The oldest passed on in order; the 50 newest never were.
    assert [entry[2] for entry in listener.heard] == list(range(relay.MAX_NOTES + 1))
