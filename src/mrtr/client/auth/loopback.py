"""`LoopbackRedirectHandler`: the redirect of a native app (RFC 8252 7.3), a one-shot HTTP
listener on 127.0.0.1 that takes the authorization server's redirect back from the browser."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import sys
import threading
import webbrowser
from collections.abc import Awaitable, Callable

from aiohttp import web

from .discovery import AuthorizationFailed
from .redirect import AuthorizationResponse, InvalidCallback

logger = logging.getLogger("mrtr.auth")

_PAGE = (
    "<!doctype html><meta charset=utf-8><title>Signed in</title>"
    "<p>{message} You can close this window.</p>"
)

UrlOpener = Callable[[str], Awaitable[None] | None]


def open_in_browser(url: str) -> None:
    """Print the URL (for a person without a browser at hand) and try to open a browser."""
    print(f"To authorize, open this URL in a browser:\n\n  {url}\n", file=sys.stderr)
    # In a thread, not awaited: some browser launchers wait for the browser to exit, and the
    # redirect must be served meanwhile.
    threading.Thread(target=_launch, args=(url,), name="open-browser", daemon=True).start()


def _launch(url: str) -> None:
    with contextlib.suppress(Exception):  # no browser is a normal case, not an error
        webbrowser.open(url)


class LoopbackRedirectHandler:
    """A `RedirectHandler` listening on `http://127.0.0.1:<port><path>`.

    The port is chosen when `redirect_uri` is first read (0: any free one) and kept, so a
    registration made with it stays valid while this object lives. `open_url` shows the
    authorization URL to the person (default: print it and open a browser). `timeout`:
    seconds to wait for the redirect.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        path: str = "/callback",
        open_url: UrlOpener = open_in_browser,
        timeout: float = 300.0,
    ) -> None:
        self._port = port
        self._path = path if path.startswith("/") else f"/{path}"
        self._open_url = open_url
        self._timeout = timeout
        self._socket: socket.socket | None = None

    @property
    def redirect_uri(self) -> str:
        """`http://127.0.0.1:<port><path>`."""
        return f"http://127.0.0.1:{self._bound().getsockname()[1]}{self._path}"

    def _bound(self) -> socket.socket:
        if self._socket is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self._port))
            sock.listen(16)
            sock.setblocking(False)
            self._port = sock.getsockname()[1]  # kept: a registration names this port
            self._socket = sock
        return self._socket

    def close(self) -> None:
        """Release the port."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def authorize(self, url: str) -> AuthorizationResponse:
        """Show `url`, then serve until the browser comes back to the redirect URI."""
        sock = self._bound()
        answer: asyncio.Future[AuthorizationResponse] = asyncio.get_running_loop().create_future()

        async def callback(request: web.BaseRequest) -> web.StreamResponse:
            if request.path != self._path or request.method != "GET":
                return web.Response(status=404, text="Not found")
            try:
                response = AuthorizationResponse.from_query(request.query_string)
            except InvalidCallback as exc:
                return web.Response(status=400, text=str(exc))
            if not answer.done():
                answer.set_result(response)
            message = "Authorization failed." if response.error else "Authorization complete."
            return web.Response(text=_PAGE.format(message=message), content_type="text/html")

        runner = web.ServerRunner(web.Server(callback), handle_signals=False)
        await runner.setup()
        try:
            site = web.SockSite(runner, sock)
            await site.start()
            opened = self._open_url(url)
            if inspect.isawaitable(opened):
                await opened
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # lands as the answer arrives, and a cancelled sign-in would then carry on.
            try:
                async with asyncio.timeout(self._timeout):
                    return await answer
            except TimeoutError:
                raise AuthorizationFailed(
                    f"no redirect back from the authorization server within {self._timeout:g} s"
                ) from None
        finally:
            await runner.cleanup()
            # The site closed the listening socket: bind afresh (same port) next time.
            self._socket = None


__all__ = ["LoopbackRedirectHandler", "open_in_browser"]
