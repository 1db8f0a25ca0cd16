"""Processes for ``tdbench``: tdrouterd and tdbroker subprocesses (started, and their ports read, by
:mod:`tools.daemons`), the line of interior routers for ``--hops``, and the bench's default
configurations."""

from __future__ import annotations

import os
import tempfile
from urllib.parse import urlparse

import click
import trio

from tools import daemons

REPO_ROOT = daemons.PACKAGE_ROOT
ROUTER_START_SECONDS = 15.0

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


# How often RssSampler reads the routers' memory: often enough to catch the peak of a large message's
# passage (it lasts seconds), rarely enough to cost nothing (a read of /proc/PID/status is ~20 µs).
RSS_SAMPLE_SECONDS = 0.05


def process_memory_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in KiB from /proc/PID/status, or None when unreadable. VmHWM is the
    peak resident size over the process's whole life (proc(5))."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rss = hwm = None
    for line in data.splitlines():
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1])
    return None if rss is None or hwm is None else (rss, hwm)


class RssSampler:
    """Samples the resident memory of one or more processes (the routers of a run) while a load runs:
    each one's RSS at the start, the highest RSS seen, and VmHWM at the end, in MiB."""

    def __init__(self, pids):
        self.pids = list(pids) if isinstance(pids, (list, tuple)) else [pids]
        self.start: dict = {}
        self.peak: dict = {}
        for pid in self.pids:
            m = process_memory_kb(pid)
            if m is not None:
                self.start[pid] = self.peak[pid] = m[0]

    def sample(self) -> None:
        for pid in self.pids:
            m = process_memory_kb(pid)
            if m is not None and m[0] > self.peak.get(pid, 0):
                self.peak[pid] = m[0]

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            self.sample()
            await trio.sleep(RSS_SAMPLE_SECONDS)

    def result(self) -> dict:
        """``router_rss_mb``: per process, {start, peak, growth, hwm} (MiB, one decimal); a single
        process's figures also at the top level as ``router_rss_start_mb`` etc."""
        self.sample()
        per = []
        for pid in self.pids:
            m = process_memory_kb(pid)
            if pid not in self.start:
                continue
            per.append({"pid": pid, "start": _mib(self.start[pid]), "peak": _mib(self.peak[pid]),
                        "growth": _mib(self.peak[pid] - self.start[pid]),
                        "hwm": _mib(m[1]) if m is not None else None})
        out: dict = {"router_rss_mb": per}
        if per:
            out["router_rss_start_mb"] = round(sum(p["start"] for p in per), 1)
            out["router_rss_peak_mb"] = round(sum(p["peak"] for p in per), 1)
            out["router_rss_growth_max_mb"] = max(p["growth"] for p in per)
        return out


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


class BenchError(Exception):
    """The bench cannot run (a daemon did not start, a bad option): tdbench says why and exits 2."""


class BenchDaemon(daemons.DaemonProcess):
    """A daemon of the bench: its configuration (unless the caller names a file), stderr and any journal
    live in a temporary directory that :meth:`stop` removes."""

    failure = BenchError

    def __init__(self, program: daemons.Program, conf_name: str, config_text: str, config_path: str | None):
        self.tmp = tempfile.TemporaryDirectory(prefix="tdbench-")
        if config_path is None:
            config_path = os.path.join(self.tmp.name, conf_name)
            with open(config_path, "w") as f:
                f.write(config_text)
        stderr_path = os.path.join(self.tmp.name, os.path.splitext(conf_name)[0] + ".stderr")
        super().__init__(program, config_path, stderr_path=stderr_path, start_timeout=ROUTER_START_SECONDS)

    def describe_failure(self, why: str) -> str:
        return f"{self.program.name} {why}\n--- stderr ---\n{self.stderr_tail()}"

    def stop(self, timeout: float = daemons.DEFAULT_STOP_TIMEOUT) -> int | None:
        try:
            return super().stop(timeout)
        except BenchError:
            return self.returncode  # killed after ignoring SIGTERM: the status tells, not a traceback
        finally:
            self.tmp.cleanup()


class RouterProcess(BenchDaemon):
    """A tdrouterd subprocess for the bench: started from a config (text, or a file of the caller's);
    ``port`` is its first listener's, ``ports`` maps listener names to ports."""

    def __init__(self, config_text: str | None = None, config_path: str | None = None):
        super().__init__(daemons.ROUTER, "router.conf", config_text or DEFAULT_ROUTER_CONFIG, config_path)

    @property
    def router_id(self) -> str | None:
        return self.reported_id


class BrokerProcess(BenchDaemon):
    """A tdbroker subprocess peered with the bench's router (journal in its temporary directory)."""

    def __init__(self, router_port: int):
        super().__init__(daemons.BROKER, "broker.xml", "", None)
        with open(self.conf_path, "w") as f:
            f.write(BROKER_XML.format(journal=os.path.join(self.tmp.name, "journal"), port=router_port))


def parse_router_url(url: str) -> tuple[str, int]:
    """``amqp[s]://127.0.0.1:5672``, ``127.0.0.1:5672`` or ``localhost:5672`` -> (host, port); local only.
    Without a port: 5671 for amqps://, else 5672."""
    u = urlparse(url if "://" in url else f"amqp://{url}")
    host = u.hostname or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    if host != "127.0.0.1":
        raise click.BadParameter("tdbench only talks to 127.0.0.1", param_hint="--router")
    return host, u.port or (5671 if u.scheme == "amqps" else 5672)
