"""Several `mrtr serve --transport http` processes behind a real haproxy (tests, soak script).

`Cluster.start` starts the instances on free loopback ports with one shared environment
(request-state key included), then haproxy with `deploy/haproxy.cfg` (its addresses given
through the variables that file reads), waits until a request through haproxy has reached
every instance, and `stop` ends them all (SIGTERM, then SIGKILL on timeout). For another
number of instances than the file lists, `write_config` derives a config with one `server`
line per instance. `restart` replaces one instance as a rolling restart does.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrtr.protocol import meta as meta_keys
from mrtr.protocol.versions import LATEST_PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parent.parent
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy.cfg"
STOP_TIMEOUT = 10.0
_SERVER_LINE = re.compile(r"\s*server\s+mrtr\d+\s")


def haproxy_binary() -> str | None:
    """The haproxy executable, or None when it is not installed."""
    return shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(p, os.X_OK)),
        None,
    )


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def instance_slots(config: Path = HAPROXY_CONFIG) -> int:
    """How many instances the config lists (its `MRTR_INSTANCE_<n>` variables)."""
    return len(set(re.findall(r"\$\{MRTR_INSTANCE_(\d+)", config.read_text())))


def write_config(n: int, path: Path, template: Path = HAPROXY_CONFIG) -> Path:
    """Write `template` to `path` with its `server` lines replaced by `n` of them, reading
    `MRTR_INSTANCE_1..n`; `path`."""
    lines = [line for line in template.read_text().splitlines() if not _SERVER_LINE.match(line)]
    lines += [f'    server mrtr{i} "${{MRTR_INSTANCE_{i}}}"' for i in range(1, n + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def call_tool_once(port: int, name: str, timeout: float = 5.0) -> Any:
    """One single-round 2026-07-28 `tools/call` on a fresh connection; its structured result
    (or text), or None when the request did not succeed."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": {},
            "_meta": {
                meta_keys.PROTOCOL_VERSION: LATEST_PROTOCOL_VERSION,
                meta_keys.CLIENT_INFO: {"name": "cluster-probe", "version": "1"},
                meta_keys.CLIENT_CAPABILITIES: {},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/mcp", json.dumps(body), headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            return None
        result = json.loads(payload).get("result") or {}
        if "structuredContent" in result:
            return result["structuredContent"].get("result", result["structuredContent"])
        return None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()


@dataclass
class Instance:
    """One `mrtr serve` process."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    pid: int = 0  # as the served tool reports it (the process itself: no workers)


@dataclass
class Cluster:
    """`n` instances behind haproxy; `url` is the load balancer's MCP endpoint."""

    target: str
    workdir: Path
    env: dict[str, str]
    instances: list[Instance] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None
    port: int = 0
    config: Path = HAPROXY_CONFIG

    @property
    def url(self) -> str:
        """The endpoint clients use: haproxy's."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @classmethod
    def start(
        cls,
        target: str,
        workdir: Path,
        env: Mapping[str, str],
        *,
        n: int = 3,
        ready_timeout: float = 30.0,
        config: Path = HAPROXY_CONFIG,
    ) -> Cluster:
        """Start `n` instances serving `target` and haproxy in front (with `config`, which
        must list `n` instances); wait until every instance has answered a request sent
        through haproxy. `env` is added to a copy of this process's environment without its
        own `MRTR_*` variables."""
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError("haproxy is not installed (Debian: apt-get install haproxy)")
        if n != instance_slots(config):
            raise ValueError(f"{config} lists {instance_slots(config)} instances, not {n}")
        base = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_")}
        cluster = cls(target, workdir, {**base, **env}, config=config)
        try:
            cluster._start(binary, n, ready_timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, binary: str, n: int, ready_timeout: float) -> None:
        deadline = time.monotonic() + ready_timeout
        for index in range(n):
            port = free_port()
            log = self.workdir / f"instance-{index + 1}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "mrtr", "serve", self.target,
                     "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
                    stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                    start_new_session=True,
                )  # fmt: skip
            self.instances.append(Instance(port, process, log))
        for instance in self.instances:
            instance.pid = self._wait_for(instance, deadline)
        self.port = free_port()
        lb_env = dict(self.env, MRTR_LB_ADDR=f"127.0.0.1:{self.port}")
        for index, instance in enumerate(self.instances, 1):
            lb_env[f"MRTR_INSTANCE_{index}"] = f"127.0.0.1:{instance.port}"
        lb_log = (self.workdir / "haproxy.log").open("wb")
        with lb_log:
            self.haproxy = subprocess.Popen(
                [binary, "-db", "-f", str(self.config)],
                stdout=lb_log, stderr=subprocess.STDOUT, env=lb_env, start_new_session=True,
            )  # fmt: skip
        # Ready once requests through haproxy have reached every instance (round-robin).
        expected = {instance.pid for instance in self.instances}
        seen: set[int] = set()
        while seen != expected:
            self._check_alive(deadline)
            pid = call_tool_once(self.port, "whoami")
            if isinstance(pid, int):
                seen.add(pid)
            else:
                time.sleep(0.05)

    def _wait_for(self, instance: Instance, deadline: float) -> int:
        while True:
            if instance.process.poll() is not None:
                raise RuntimeError(
                    f"instance on port {instance.port} exited ({instance.process.returncode}): "
                    + instance.log.read_text(errors="replace")[-2000:]
                )
            pid = call_tool_once(instance.port, "whoami", timeout=2.0)
            if isinstance(pid, int):
                return pid
            if time.monotonic() > deadline:
                raise TimeoutError(f"instance on port {instance.port} did not start in time")
            time.sleep(0.05)

    def _check_alive(self, deadline: float) -> None:
        assert self.haproxy is not None
        if self.haproxy.poll() is not None:
            log = (self.workdir / "haproxy.log").read_text(errors="replace")
            raise RuntimeError(f"haproxy exited ({self.haproxy.returncode}): {log[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError("requests through haproxy did not reach every instance in time")

    def kill(self, index: int) -> int:
        """SIGKILL instance `index` (no cleanup of any kind); its pid."""
        instance = self.instances[index]
        instance.process.kill()
        instance.process.wait(timeout=STOP_TIMEOUT)
        return instance.pid

    def stop(self) -> None:
        """End haproxy and every instance: SIGTERM, then SIGKILL after `STOP_TIMEOUT`."""
        processes = [p.process for p in self.instances]
        if self.haproxy is not None:
            processes.append(self.haproxy)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT)


def restart(
    cluster: Cluster,
    index: int,
    env: Mapping[str, str | None] | None = None,
    *,
    timeout: float = 30.0,
) -> int:
    """Replace instance `index` by a new process on the same port, as a rolling restart does:
    SIGTERM (requests in flight finish, haproxy sends new ones elsewhere), then start it with
    the cluster's environment updated by `env` (None removes a variable), and return its pid
    once a request sent through haproxy has reached it (haproxy's health check saw it up)."""
    old = cluster.instances[index]
    if old.process.poll() is None:
        old.process.send_signal(signal.SIGTERM)
        try:
            old.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(old.process.pid, signal.SIGKILL)
            old.process.wait(timeout=STOP_TIMEOUT)
    merged = dict(cluster.env)
    for name, value in (env or {}).items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    deadline = time.monotonic() + timeout
    with old.log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mrtr", "serve", cluster.target,
             "--transport", "http", "--host", "127.0.0.1", "--port", str(old.port)],
            stdout=out, stderr=subprocess.STDOUT, env=merged, cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
    instance = Instance(old.port, process, old.log)
    cluster.instances[index] = instance  # `Cluster.stop` ends it from now on
    while (pid := call_tool_once(old.port, "whoami", timeout=2.0)) is None:
        if process.poll() is not None:
            log = old.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"instance on port {old.port} exited ({process.returncode}): {log}")
        _check(deadline, f"instance on port {old.port} did not start")
        time.sleep(0.05)
    instance.pid = int(pid)
    # Other clients share haproxy's round-robin: a probe reaches it one time in n or so.
    while call_tool_once(cluster.port, "whoami") != instance.pid:
        _check(deadline, f"haproxy did not send a request to the instance on port {old.port}")
        time.sleep(0.05)
    return instance.pid


def _check(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} in time")
