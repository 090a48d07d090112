"""The tasks cells of the interoperability matrix: both directions over each transport."""

from __future__ import annotations

import pytest

from helpers.interop.peers import pinned

PEER_CLIENT = "peer client -> mrtr server, tasks"


OUR_CLIENT = "mrtr client -> peer server, tasks"


LABEL = f"fastmcp-tasks {pinned('fastmcp-tasks')}"


TRANSPORTS = ("stdio", "http")


CELLS = [pytest.param(LABEL, transport, id=f"{LABEL}-{transport}") for transport in TRANSPORTS]
