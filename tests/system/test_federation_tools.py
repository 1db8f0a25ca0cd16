"""The tools on federated real tdbroker processes: ``tdstat --broker`` shows the federation stream, the
address it federates and what it copied after traffic, and on the upstream broker the federation queue it
keeps; ``tdmanage stopFederationStream`` / ``startFederationStream`` take the stream down and up;
``tddemo federation`` runs and tells the truth (docs/management.md, docs/federation-protocol.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.harness import REPO_ROOT, run_tool
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

STREAM = "org.apache.activemq.artemis.federationStream"
FED_QUEUE = "org.apache.activemq.artemis.federationQueue"
FEDERATION_QUEUES = "Federation Queues (kept for other brokers)"
#: The queue broker-2's upstream ``f/b1`` keeps on broker-1 (Artemis' federation queue name).
KEPT = "broker-2.federated.f.b1.news.multicast"

BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="news"><multicast/></address></addresses>
  {federation}
</core></configuration>
"""
UPSTREAM = """<connectors><connector name="c1">tcp://127.0.0.1:{port}</connector></connectors>
  <federations><federation name="f">
    <upstream name="b1"><retry-interval>100</retry-interval>
      <static-connectors><connector-ref>c1</connector-ref></static-connectors><policy ref="p"/></upstream>
    <address-policy name="p" max-hops="1"><include address-match="news"/></address-policy>
  </federation></federations>"""


def start_broker(tmp_path, name: str, federation: str = "") -> BrokerProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    conf = workdir / "broker.xml"
    conf.write_text(BROKER_XML.format(name=name, journal=workdir / "journal", federation=federation))
    return BrokerProcess(conf, workdir).start()


@pytest.fixture
def federated(tmp_path):
    """broker-1, and broker-2 with an upstream ``f/b1`` to it for ``news``."""
    b1 = start_broker(tmp_path, "broker-1")
    try:
        b2 = start_broker(tmp_path, "broker-2", UPSTREAM.format(port=b1.port))
        try:
            yield b1, b2
        finally:
            b2.stop()
    finally:
        b1.stop()


def table(lines: list[str], title: str) -> list[list[str]]:
    """The rows of one titled table of tdstat's text output, as cells split on runs of spaces."""
    start = lines.index(title) + 3  # title, headers, rule
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def tdstat_broker(broker: BrokerProcess) -> list[str]:
    return run_tool("tools.tdstat", "--broker", "-b", f"127.0.0.1:{broker.port}").stdout.splitlines()


def stream_state(client: ManagementClient) -> str:
    [row] = client.query(STREAM, ["state"])
    return row["state"]


def kept(client: ManagementClient) -> dict:
    """broker-2's federation queue on broker-1 (empty until it exists)."""
    return next((r for r in client.query(FED_QUEUE, ["name", "messageCount", "consumerCount"])
                 if r["name"] == KEPT), {})


def test_tdstat_shows_the_federation_and_management_stops_and_starts_the_stream(federated):
    b1, b2 = federated
    with ManagementClient(f"127.0.0.1:{b1.port}") as mgmt_1, ManagementClient(f"127.0.0.1:{b2.port}") as mgmt_2:
        wait_for(lambda: stream_state(mgmt_2) == "connected", "broker-2's stream to connect")
        subscriber = BlockingConnection(f"amqp://127.0.0.1:{b2.port}", timeout=TIMEOUT)
        producer = BlockingConnection(f"amqp://127.0.0.1:{b1.port}", timeout=TIMEOUT)
        try:
            rx = subscriber.create_receiver("news", credit=10)
            wait_for(lambda: kept(mgmt_1).get("consumerCount") == 1, "broker-2 to federate news from broker-1")
            tx = producer.create_sender("news")
            for i in range(3):
                tx.send(Message(id=f"m{i}", body=i))
            got = []
            for _ in range(3):
                got.append(rx.receive(timeout=TIMEOUT).id)
                rx.accept()
            assert sorted(got) == ["m0", "m1", "m2"]

            remote = f"127.0.0.1:{b1.port}"
            lines = tdstat_broker(b2)
            assert table(lines, "Federation Streams") == [["f", "b1", "upstream", "connected", "broker-1", "0", "3",
                                                           remote]]
            assert table(lines, "Federated Addresses") == [["f/b1", "news", "p", "3"]]
            assert FEDERATION_QUEUES not in lines  # nobody federates from broker-2
            lines_1 = tdstat_broker(b1)
            assert table(lines_1, FEDERATION_QUEUES) == [[KEPT, "news", "broker-2", "1", "yes", "3600000", "any",
                                                          "0", "1"]]
            assert "Federation Streams" not in lines_1  # broker-1 federates from nobody

            stopped = json.loads(run_tool("tools.tdmanage", "-b", f"127.0.0.1:{b2.port}", "stopFederationStream",
                                          "--name", "f/b1").stdout)
            assert stopped["identity"] == "f/b1" and stopped["kind"] == "upstream"
            wait_for(lambda: stream_state(mgmt_2) == "stopped", "the stream to stop")
            wait_for(lambda: kept(mgmt_1).get("consumerCount") == 0, "broker-1 to see broker-2's consumer go")
            assert table(tdstat_broker(b2), "Federation Streams") == [["f", "b1", "upstream", "stopped", "-", "0",
                                                                       "0", remote]]
            tx.send(Message(id="held", body="held"))  # kept for broker-2 in its federation queue on broker-1
            wait_for(lambda: kept(mgmt_1).get("messageCount") == 1, "broker-1 to keep it for broker-2")
            assert stream_state(mgmt_2) == "stopped"  # a stopped stream does not reconnect

            run_tool("tools.tdmanage", "-b", f"127.0.0.1:{b2.port}", "startFederationStream", "--name", "f/b1")
            assert rx.receive(timeout=TIMEOUT).id == "held"  # the stream is back and drains the queue
            rx.accept()
            rows = wait_for(lambda: [r for r in table(tdstat_broker(b2), "Federated Addresses") if r[3] == "1"],
                            "tdstat to count the copied message")
            assert rows == [["f/b1", "news", "p", "1"]]
            missing = run_tool("tools.tdmanage", "-b", f"127.0.0.1:{b2.port}", "stopFederationStream", "--name",
                               "f/nope", check=False)
            assert missing.returncode == 1 and missing.stderr.startswith("tdmanage: 404 ")
        finally:
            producer.close()
            subscriber.close()


def test_tddemo_federation_delivers_every_message_once_on_every_broker():
    out = subprocess.run([sys.executable, "-m", "tools.demo", "federation", "--count", "10"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any("4 streams connected" in line for line in lines)
    assert any("broker-1  keeps 2 federation queue(s)" in line for line in lines)
    assert sum("its upstream b1 copied 10 from broker-1" in line for line in lines) == 2
    assert any("its upstreams b2 and b3 copied 0" in line for line in lines)
    for n in (1, 2, 3):
        assert any(f"broker-{n}: sent 10, received 10: 10 different, 0 received twice, 0 lost" in line
                   for line in lines)
