"""Shared fixtures: an in-memory client for a server, and well-formed raw requests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import wire
from mrtr import Client, Server
from mrtr.protocol import jsonrpc
from suites import UNIT

TESTS = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m unit`, skip importing the other test files: some need what only the full run
    installs (the official SDK, the docs tools), and collecting them costs time."""
    if config.getoption("markexpr") != "unit" or not collection_path.name.startswith("test_"):
        return None
    return collection_path.parent != TESTS or collection_path.name not in UNIT


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the files tests/suites.py lists `unit` (`pytest -m unit` runs them alone)."""
    unknown = sorted(name for name in UNIT if not (TESTS / name).is_file())
    if unknown:
        raise pytest.UsageError(f"tests/suites.py lists files that do not exist: {unknown}")
    for item in items:
        if item.path.parent == TESTS and item.path.name in UNIT:
            item.add_marker(pytest.mark.unit)


MakeClient = Callable[..., contextlib.AbstractAsyncContextManager[Client]]
MakeRequest = Callable[..., dict[str, Any]]


@pytest.fixture
def make_client() -> MakeClient:
    """`async with make_client(server, **client_kwargs) as client:` over the in-memory transport."""

    @contextlib.asynccontextmanager
    async def make(server: Server, **kwargs: Any) -> AsyncIterator[Client]:
        async with Client.in_memory(server, **kwargs) as client:
            yield client

    return make


@pytest.fixture
def request_meta() -> dict[str, Any]:
    """The `_meta` every well-formed client request carries."""
    return wire.meta()


@pytest.fixture
def make_request(request_meta: dict[str, Any]) -> MakeRequest:
    """`make_request(method, params=None, id=1, **meta_overrides)`: a raw, well-formed request.

    Keyword arguments are extra `_meta` entries (use the full key via `**{key: value}`).
    """

    def make(
        method: str, params: dict[str, Any] | None = None, id: jsonrpc.RequestId = 1, **meta: Any
    ) -> dict[str, Any]:
        body = dict(params or {})
        body["_meta"] = {**request_meta, **meta}
        return jsonrpc.request(id, method, body)

    return make
