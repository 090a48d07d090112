"""The mrtr server the hostile-peer tests attack, over stdio (`python soundcheck_server.py`)
or built in process (`build()`): resource templates over files, a tool that fails with a
secret in its exception, and a tool that asks once."""

from __future__ import annotations

from typing import Any

from mrtr import ElicitResult, RequestContext, Server, ServerOptions

#: Text only the exception of the `fail` tool carries: it must reach the log, never the caller.
SECRET_FAILURE = "db password hunter2 at /srv/secret.conf"


def build(**options: Any) -> tuple[Server, list[str]]:
    """The server, and the list of every value a template handler was given."""
    server = Server("soundcheck", version="1.0.0", options=ServerOptions(**options))
    opened: list[str] = []

    @server.resource_template("file:///docs/{name}")
    def doc(name: str) -> str:
        opened.append(name)
        return f"doc {name}"

    @server.resource_template("file:///tree/{+path}")
    def tree(path: str) -> str:
        opened.append(path)
        return f"tree {path}"

    @server.tool()
    def fail() -> str:
        """Fail with a secret in the exception."""
        raise RuntimeError(SECRET_FAILURE)

    @server.tool()
    async def confirm(ctx: RequestContext) -> str:
        """Ask one yes/no question."""
        answer: ElicitResult = await ctx.elicit(
            "Sure?", {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        )
        return f"answer {answer.action}"

    return server, opened


if __name__ == "__main__":
    build()[0].run()
