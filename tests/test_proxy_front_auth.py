"""`mrtr proxy --transport http` in front of a backend reached with the operator's credentials:
callers must bring tokens (`--auth-issuer`), or the proxy refuses to listen beyond loopback;
and a failed backend is told to its caller as an incident, never by its command or URL.

The authorization server is the real one of `oauth_as.py` (ES256 JWTs, JWKS, metadata), in
this process; the proxy and its backend (`servers/proxy_secret_backend.py`) are processes
started as a user's command line would start them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import mrtr
from helpers.loopback_process import free_port, listening
from helpers.oauth_as import AuthorizationServer
from mrtr import Client
from mrtr.protocol.errors import INTERNAL_ERROR, McpError

pytestmark = pytest.mark.timeout(120)

SRC = str(Path(mrtr.__file__).resolve().parent.parent)
BACKEND = Path(__file__).resolve().parent / "servers" / "proxy_secret_backend.py"
SECRET = "sk-live-8d1f0c2a"
MRTR = [sys.executable, "-m", "mrtr"]
ENV = {**os.environ, "PYTHONPATH": SRC}


@contextlib.contextmanager
def proxy(port: int, log: Path, *words: str) -> Iterator[str]:
    """`mrtr proxy --transport http --port PORT WORDS...`, its stderr in `log`: its URL."""
    command = [*MRTR, "proxy", "--transport", "http", "--port", str(port), *words]
    with log.open("w") as err, listening(command, port, env=ENV, stderr=err):
        yield f"http://127.0.0.1:{port}/mcp"


def backend_command(*extra: str) -> list[str]:
    return ["--", sys.executable, str(BACKEND), f"--api-key={SECRET}", *extra]


async def test_callers_need_a_valid_token_of_the_issuer_for_this_resource(tmp_path: Path) -> None:
    """No token: 401 pointing at the protected resource metadata; a valid token: the
    backend's answer; a token for another audience: 401 as well."""
    async with AuthorizationServer() as issuer:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        words = ["--auth-issuer", issuer.issuer, "--auth-resource", resource]
        with proxy(port, tmp_path / "proxy.log", *words, *backend_command()) as url:
            async with httpx.AsyncClient() as http:
                bare = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                assert bare.status_code == 401
                challenge = bare.headers["www-authenticate"]
                assert challenge.startswith("Bearer ")
                metadata_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
                assert f'resource_metadata="{metadata_url}"' in challenge
                metadata = (await http.get(metadata_url)).json()
                assert metadata["resource"] == resource
                assert metadata["authorization_servers"] == [issuer.issuer]

            good = issuer.issue_token(audience=resource)
            headers = {"Authorization": f"Bearer {good}"}
            async with Client.http(url, headers=headers) as caller:
                result = await caller.call_tool("echo", {"text": "through"})
            assert result.content[0].text == "through"  # type: ignore[union-attr]

            other = issuer.issue_token(audience="http://127.0.0.1:1/mcp")
            async with httpx.AsyncClient() as http:
                refused = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Authorization": f"Bearer {other}"},
                )
            assert refused.status_code == 401
            assert 'error="invalid_token"' in refused.headers["www-authenticate"]


async def test_required_scopes_are_checked(tmp_path: Path) -> None:
    async with AuthorizationServer() as issuer:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        words = ["--auth-issuer", issuer.issuer, "--auth-resource", resource]
        words += ["--auth-scope", "tools:write"]
        with proxy(port, tmp_path / "proxy.log", *words, *backend_command()) as url:
            weak = issuer.issue_token(audience=resource, scopes=["mcp"])
            async with httpx.AsyncClient() as http:
                refused = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Authorization": f"Bearer {weak}"},
                )
            assert refused.status_code == 403
            assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]


def test_the_auth_variables_stand_for_the_flags(tmp_path: Path) -> None:
    """MRTR_AUTH_ISSUER without MRTR_AUTH_RESOURCE is refused naming both."""
    done = subprocess.run(
        [*MRTR, "proxy", "--transport", "http", *backend_command()],
        env={**ENV, "MRTR_AUTH_ISSUER": "https://issuer.example"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--auth-issuer (MRTR_AUTH_ISSUER) needs --auth-resource (MRTR_AUTH_RESOURCE)" in (
        done.stderr
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("mcp.example.com", False),
    ],
)
def test_loopback_is_127_slash_8_and_ipv6_one_and_localhost(host: str, loopback: bool) -> None:
    from mrtr.cli.proxy import is_loopback

    assert is_loopback(host) is loopback


#: TEST-NET-1 (RFC 5737): no interface here has it, so nothing can listen on it by mistake.
AWAY = "192.0.2.1"


def run_proxy(*words: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MRTR, "proxy", "--transport", "http", "--port", str(free_port()), *words],
        env=ENV if env is None else env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("words", "exposed"),
    [
        (["https://mcp.example.com/mcp", "--header", f"Authorization=Bearer {SECRET}"],
         "the --header Authorization"),
        (["https://mcp.example.com/mcp"], "your OAuth sign-in to the backend"),
        ([f"https://ada:{SECRET}@mcp.example.com/mcp"], "the user and password"),
        (backend_command(), "the command's arguments --api-key"),
    ],
)  # fmt: skip
def test_a_credentialed_backend_beyond_loopback_without_auth_is_refused_before_binding(
    words: list[str], exposed: str
) -> None:
    done = run_proxy("--host", AWAY, *words)
    assert done.returncode == 2, done.stderr
    assert f"mrtr proxy: refusing to start: listening on {AWAY}" in done.stderr
    assert exposed in done.stderr
    assert "--auth-issuer URL --auth-resource URL" in done.stderr
    assert "--allow-unauthenticated" in done.stderr
    assert SECRET not in done.stderr  # what it exposes is named, never shown
    assert "Uvicorn" not in done.stderr and "error while attempting to bind" not in done.stderr


def test_inherited_secret_variables_count_for_a_command_backend() -> None:
    env = {**ENV, "SHOP_API_TOKEN": SECRET}
    done = run_proxy("--host", AWAY, "--", sys.executable, str(BACKEND), env=env)
    assert done.returncode == 2, done.stderr
    assert "the environment variables it inherits" in done.stderr
    assert "SHOP_API_TOKEN" in done.stderr and SECRET not in done.stderr


def test_allow_unauthenticated_starts_it_anyway_with_a_warning() -> None:
    """The flag passes the refusal and says what is exposed; the address, which no interface
    here has, then fails to bind, so nothing ever listens beyond loopback."""
    done = run_proxy("--host", AWAY, "--allow-unauthenticated", *backend_command())
    assert "refusing to start" not in done.stderr
    warning = re.search(r"mrtr proxy: warning: listening on 192\.0\.2\.1.*", done.stderr)
    assert warning is not None, done.stderr
    assert "uses the backend as you: the command's arguments --api-key" in warning[0]
    assert done.returncode != 0  # the bind failed: the address is not this machine's


def test_loopback_needs_no_auth_and_no_flag(tmp_path: Path) -> None:
    port = free_port()
    with proxy(port, tmp_path / "proxy.log", *backend_command()):
        pass
    assert "refusing" not in (tmp_path / "proxy.log").read_text()


def incident_of(exc: McpError) -> str:
    data = exc.data
    assert isinstance(data, dict)
    incident = data["incident"]
    assert isinstance(incident, str) and re.fullmatch(r"[0-9a-f]{8}", incident)
    assert incident in exc.message
    return incident


async def test_a_command_backend_that_dies_is_told_without_its_command_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "proxy.log"
    with proxy(free_port(), log, *backend_command()) as url:
        async with Client.http(url) as caller:
            with pytest.raises(McpError) as failed:
                await caller.call_tool("die", {})
    exc = failed.value
    assert exc.code == INTERNAL_ERROR
    told = f"{exc.message} {exc.data}"
    for hidden in (SECRET, "--api-key", str(BACKEND), BACKEND.name, sys.executable, "pid"):
        assert hidden not in told
    assert exc.data["backend"] == "secret-backend"  # its serverInfo name
    assert exc.data["mayHaveRun"] is True
    incident = incident_of(exc)
    logged = log.read_text()
    assert SECRET not in logged
    line = next(row for row in logged.splitlines() if f"backend incident {incident}" in row)
    assert "--api-key=***" in line and BACKEND.name in line


async def test_a_url_backend_that_stops_is_told_without_its_url(tmp_path: Path) -> None:
    backend_port, port = free_port(), free_port()
    serve = [*MRTR, "serve", f"{BACKEND}:server", "--transport", "http", "--port"]
    with listening([*serve, str(backend_port)], backend_port, env=ENV) as backend:
        url_backend = f"http://ada:{SECRET}@127.0.0.1:{backend_port}/mcp?token={SECRET}&v=2"
        log = tmp_path / "proxy.log"
        with proxy(port, log, url_backend) as url:
            async with Client.http(url) as caller:
                assert (await caller.call_tool("echo", {"text": "up"})).content
                backend.terminate()
                backend.wait(30)
                with pytest.raises(McpError) as failed:
                    await caller.call_tool("echo", {"text": "down"})
    exc = failed.value
    told = f"{exc.message} {exc.data}"
    for hidden in (SECRET, "ada", f":{backend_port}", "token", "/mcp"):
        assert hidden not in told
    incident = incident_of(exc)
    logged = log.read_text()
    assert SECRET not in logged
    line = next(row for row in logged.splitlines() if f"backend incident {incident}" in row)
    assert f"http://***@127.0.0.1:{backend_port}/mcp?token=***&v=***" in line


def test_a_backend_that_cannot_start_is_named_to_the_operator_redacted() -> None:
    done = subprocess.run(
        [*MRTR, "proxy", "--", "/no/such/server", f"--token={SECRET}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert done.returncode == 1
    assert "could not reach its backend /no/such/server --token=***" in done.stderr
    assert SECRET not in done.stderr


async def test_mrtr_serve_takes_the_same_auth_options(tmp_path: Path) -> None:
    async with AuthorizationServer() as issuer:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        command = [*MRTR, "serve", f"{BACKEND}:server", "--transport", "http", "--port"]
        command += [str(port), "--auth-issuer", issuer.issuer, "--auth-resource", resource]
        with listening(command, port, env=ENV):
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient() as http:
                bare = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert bare.status_code == 401
            headers = {"Authorization": f"Bearer {issuer.issue_token(audience=resource)}"}
            async with Client.http(url, headers=headers) as caller:
                result = await caller.call_tool("echo", {"text": "served"})
            assert result.content[0].text == "served"  # type: ignore[union-attr]
