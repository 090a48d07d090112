"""The server the tasks tests drive (`helpers/tasks_server_app.py`)."""

from __future__ import annotations

from helpers.tasks_server_app import (
    build_server,
)
from mrtr import Server
from mrtr.protocol.tasks import EXTENSION_ID


def test_the_app_advertises_the_extension_only_with_task_tools() -> None:
    assert build_server().capabilities()["extensions"] == {EXTENSION_ID: {}}
    bare = Server("bare")

    @bare.tool()
    def one() -> int:
        return 1

    assert "extensions" not in bare.capabilities()
