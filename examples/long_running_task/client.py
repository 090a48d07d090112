"""Calls `monthly_report` on the example server and prints what happens.

    python3 examples/long_running_task/client.py http://127.0.0.1:8000/mcp

`call_tool` drives the task to its end by itself: it answers the question asked before the
task (MRTR) and the one asked during it (`tasks/get` then `tasks/update`) with the same
elicitation handler, and returns the tool's result as if it had come at once.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mrtr import Client, ElicitResult


def answer(params: Any) -> ElicitResult:
    """A user who always picks March and keeps the drafts out."""
    print(f"asked: {params.message}")
    if "month" in params.message:
        return ElicitResult(action="accept", content={"month": "March"})
    return ElicitResult(action="accept", content={"include": False})


def status(task: Any) -> None:
    message = f" ({task.status_message})" if task.status_message else ""
    print(f"task {task.status}{message}")


def progress(done: float, total: float | None, message: str | None) -> None:
    print(f"progress {done:g}/{total:g}: {message}")


async def main(url: str) -> None:
    async with Client.http(url, elicitation_handler=answer) as client:
        result = await client.call_tool(
            "monthly_report",
            {"team": "platform"},
            on_task_status=status,
            progress_callback=progress,
        )
        print(f"result: {result.content[0].text}")  # type: ignore[union-attr]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    asyncio.run(main(parser.parse_args().url))
