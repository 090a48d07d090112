"""A backend started with a secret on its command line (`tests/test_proxy_front_auth.py`):
`echo` answers, `die` ends the process mid-call. Over stdio when run as a script (its
arguments, `--api-key=...` among them, are ignored), or `mrtr serve`d over HTTP.
"""

from __future__ import annotations

import os
import sys

from mrtr import Server

server = Server("secret-backend")


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def die() -> str:
    """End this process before answering."""
    sys.stdout.flush()
    os._exit(3)


if __name__ == "__main__":
    server.run()
