"""``tdbench --network``: forwarding throughput across one network bridge between two tdbrokers.

Broker A has a ``<networkConnector>`` to broker B (docs/networks.md); the receivers attach to B, the
senders to A, so every message crosses the bridge: stored on A, forwarded by A's network consumer, stored on
B, delivered. Each load runs durable (persistent messages, both journals fsync: A acknowledges a message only
after B has it on disk) and non-durable, and, in the same run, the same load with the clients on one broker
(no bridge) as the baseline.
"""

from __future__ import annotations

import os

import trio

from tools import daemons
from tools.benchclient import process_cpu_seconds
from tools.benchprocs import BenchError, BenchDaemon  # noqa: F401 - BenchError is what callers catch
from tools.benchrun import run_via_peer

NETWORK_MESSAGES = 30_000
WARMUP_FRACTION = 0.05

NET_BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <journal-directory>{journal}</journal-directory>
  <journal-sync-non-transactional>true</journal-sync-non-transactional>
  <security-enabled>false</security-enabled>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  {network}
</core></configuration>
"""

CONNECTOR = """<networkConnectors>
    <networkConnector name="bench" uri="static:(tcp://127.0.0.1:{port})?initialReconnectDelay=100"/>
  </networkConnectors>"""


class NetBrokerProcess(BenchDaemon):
    """A tdbroker of the network bench, with a connector to ``remote_port`` when given."""

    def __init__(self, name: str, remote_port: int | None = None):
        super().__init__(daemons.BROKER, "broker.xml", "", None)
        network = CONNECTOR.format(port=remote_port) if remote_port else ""
        with open(self.conf_path, "w") as f:
            f.write(NET_BROKER_XML.format(name=name, journal=os.path.join(self.tmp.name, "journal"),
                                          network=network))


async def _loads(loads: list, opts: dict) -> dict:
    out = {}
    for label, tx_port, rx_port, address, durable, pids in loads:
        cpu0 = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        r = await run_via_peer("127.0.0.1", tx_port, rx_host="127.0.0.1", rx_port=rx_port,
                               senders=opts["senders"], receivers=opts["receivers"], messages=opts["messages"],
                               size=opts["size"], presettled=False, window=opts["window"], address=address,
                               warmup=int(opts["messages"] * WARMUP_FRACTION),
                               deadline=trio.current_time() + opts["duration_limit"], durable=durable)
        for name, pid in pids.items():
            c1 = process_cpu_seconds(pid)
            if cpu0[name] is not None and c1 is not None:
                r[f"{name}_cpu_us_per_msg"] = round((c1 - cpu0[name]) * 1e6 / max(1, opts["messages"]), 1)
        out[label] = r
    return out


def run_network(*, messages: int = NETWORK_MESSAGES, size: int = 100, window: int = 1000, senders: int = 1,
                receivers: int = 1, duration_limit: float = 300.0) -> dict:
    opts = dict(messages=messages, size=size, window=window, senders=senders, receivers=receivers,
                duration_limit=duration_limit)
    report: dict = {"kind": "network", "messages": messages, "size": size, "window": window,
                    "senders": senders, "receivers": receivers, "loads": {}}
    a = b = None
    try:
        b = NetBrokerProcess("bench-B").start()
        a = NetBrokerProcess("bench-A", remote_port=b.port).start()
        pids = {"A": a.pid, "B": b.pid}
        loads = []
        for kind, durable in (("durable", True), ("non-durable", False)):
            loads.append((f"{kind}, across the bridge", a.port, b.port, f"net.{kind}", durable, pids))
            loads.append((f"{kind}, one broker", b.port, b.port, f"local.{kind}", durable, {"B": b.pid}))
        report["loads"] = trio.run(_loads, loads, opts)
    finally:
        for p in (a, b):
            if p is not None:
                p.stop()
    problems = []
    for label, r in report["loads"].items():
        problems += [f"{label}: {e}" for e in r["errors"]]
        if r["received"] != messages or r["accepted"] != messages:
            problems.append(f"{label}: sent {r['sent']}, received {r['received']}, accepted {r['accepted']} "
                            f"of {messages}")
    report["problems"] = problems
    report["ok"] = not problems
    return report


def _fmt(v, width: int, digits: int = 0) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def format_network(rep: dict) -> str:
    lines = [f"tdbench --network: {rep['senders']} -> {rep['receivers']}, {rep['messages']} x {rep['size']} B, "
             f"at-least-once, window {rep['window']}; senders on broker A, receivers on broker B",
             f"{'':30}{'msgs/s':>9}{'p50 us':>10}{'p99 us':>10}{'A us/msg':>10}{'B us/msg':>10}"]
    for label, x in rep["loads"].items():
        lines.append(f"{label:30}{_fmt(x['msgs_per_s'], 9)}{_fmt(x['p50_us'], 10)}{_fmt(x['p99_us'], 10)}"
                     f"{_fmt(x.get('A_cpu_us_per_msg'), 10, 1)}{_fmt(x.get('B_cpu_us_per_msg'), 10, 1)}")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)
