"""Processes for ``tdbench``: tdrouterd and tdbroker subprocesses (ports read from their start-up lines),
the line of interior routers for ``--hops``, and the bench's default configurations."""

from __future__ import annotations

import os
import pathlib
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse

import click

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LISTENING_RE = re.compile(r"^tdrouterd: listening on (?P<host>.+):(?P<port>\d+) \(listener [^,]*, role (?P<role>[^)]*)\)")
READY_RE = re.compile(r"^tdrouterd: ready \(router id (?P<id>.*)\)")
ROUTER_START_SECONDS = 15.0

BROKER_LISTENING_RE = re.compile(r"^tdbroker: listening on (?P<host>.+):(?P<port>\d+) \(acceptor")

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>tdbench.broker</name>
  <journal-directory>{journal}</journal-directory>
  <journal-sync-non-transactional>true</journal-sync-non-transactional>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="queue"><anycast><queue name="queue"/></anycast></address></addresses>
  <broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{port}" name="router" retry-interval="100">
      <peer address-match="queue"/>
    </amqp-connection>
  </broker-connections>
</core></configuration>
"""

DEFAULT_ROUTER_CONFIG = """\
router {
    mode: standalone
    id: tdbench.router
}

listener {
    name: bench
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
"""


# --hops N: a line of N+1 interior routers; the senders attach to the first, the receivers to the last.
MAX_HOPS = 4
MESH_ROUTER_CONFIG = """\
router {{
    mode: interior
    id: tdbench.{index}
    helloIntervalSeconds: 1
    helloMaxAgeSeconds: 3
    raIntervalFluxSeconds: 1
}}

listener {{
    name: bench
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}}

listener {{
    name: inter-router
    host: 127.0.0.1
    port: 0
    role: inter-router
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}}
{connector}"""
MESH_CONNECTOR = """
connector {{
    name: to-previous
    host: 127.0.0.1
    port: {port}
    role: inter-router
    retryDelaySeconds: 0.2
}}
"""


def start_line(hops: int) -> list:
    """hops+1 interior routers in a line, each connected to the one before."""
    routers: list = []
    try:
        for i in range(hops + 1):
            connector = MESH_CONNECTOR.format(port=routers[-1].ports["inter-router"]) if routers else ""
            routers.append(RouterProcess(MESH_ROUTER_CONFIG.format(index=i, connector=connector)).start())
    except BaseException:
        for r in routers:
            r.stop()
        raise
    return routers


class BenchError(Exception):
    pass


class RouterProcess:
    """A tdrouterd subprocess for the bench: started from a config, its port read from stdout."""

    def __init__(self, config_text: str | None = None, config_path: str | None = None):
        self.tmp = tempfile.TemporaryDirectory(prefix="tdbench-")
        if config_path is None:
            config_path = os.path.join(self.tmp.name, "router.conf")
            with open(config_path, "w") as f:
                f.write(config_text or DEFAULT_ROUTER_CONFIG)
        self.config_path = config_path
        self.stderr_path = os.path.join(self.tmp.name, "router.stderr")
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.ports: dict[str, int] = {}  # listener role -> its port
        self.router_id: str | None = None

    def start(self) -> "RouterProcess":
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "router.daemon", "-c", self.config_path],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
        )
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + ROUTER_START_SECONDS
        buf = b""
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(f"did not report ready within {ROUTER_START_SECONDS:.0f} s")
                if not sel.select(remaining):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self._fail(f"exited with status {self.proc.wait(timeout=5)} before it was ready")
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode("utf-8", "replace")
                    m = LISTENING_RE.match(text)
                    if m:
                        self.ports.setdefault(m["role"], int(m["port"]))
                    if m and self.port is None:
                        self.port = int(m["port"])
                    m = READY_RE.match(text)
                    if m:
                        if self.port is None:
                            self._fail("was ready without reporting a listener")
                        self.router_id = m["id"]
                        return self
        finally:
            sel.close()

    def _fail(self, why: str):
        self.stop()
        raise BenchError(f"tdrouterd {why}\n--- stderr ---\n{self.stderr_tail()}")

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()
        self.tmp.cleanup()
        return code

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


class BrokerProcess(RouterProcess):
    """A tdbroker subprocess peered with the bench's router (journal in a temporary directory)."""

    def __init__(self, router_port: int):
        super().__init__(config_text="")
        self.config_path = os.path.join(self.tmp.name, "broker.xml")
        with open(self.config_path, "w") as f:
            f.write(BROKER_XML.format(journal=os.path.join(self.tmp.name, "journal"), port=router_port))
        self.stderr_path = os.path.join(self.tmp.name, "broker.stderr")

    def start(self) -> "BrokerProcess":
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.daemon", "-c", self.config_path],
                                     cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        deadline = time.monotonic() + ROUTER_START_SECONDS
        for raw_line in self.proc.stdout:
            text = raw_line.decode("utf-8", "replace")
            m = BROKER_LISTENING_RE.match(text)
            if m and self.port is None:
                self.port = int(m["port"])
            if text.strip() == "tdbroker: ready":
                return self
            if time.monotonic() > deadline:
                break
        self._fail("did not report ready")

    def _fail(self, why: str):
        self.stop()
        raise BenchError(f"tdbroker {why}\n--- stderr ---\n{self.stderr_tail()}")


def parse_router_url(url: str) -> tuple[str, int]:
    """``amqp://127.0.0.1:5672``, ``127.0.0.1:5672`` or ``localhost:5672`` -> (host, port); local only."""
    u = urlparse(url if "://" in url else f"amqp://{url}")
    host = u.hostname or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    if host != "127.0.0.1":
        raise click.BadParameter("tdbench only talks to 127.0.0.1", param_hint="--router")
    return host, u.port or 5672
