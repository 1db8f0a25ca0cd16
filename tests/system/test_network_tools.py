"""The tools on a network of real tdbroker processes: ``tdstat --broker`` shows a bridge, its demand and its
forwarded count after traffic; ``tdmanage stopNetworkConnector`` / ``startNetworkConnector`` take the bridge
down and up; ``tddemo network`` runs and tells the truth (docs/management.md, docs/networks.md)."""

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

BRIDGE = "org.apache.activemq.artemis.networkBridge"
NETWORK = "org.apache.activemq.artemis.network"

BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
  {network}
</core></configuration>
"""
CONNECTOR = """<networkConnectors>
    <networkConnector name="a-to-b" uri="static:(tcp://127.0.0.1:{port})?initialReconnectDelay=100"
                      duplex="false"/>
  </networkConnectors>"""


def start_broker(tmp_path, name: str, network: str = "") -> BrokerProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    conf = workdir / "broker.xml"
    conf.write_text(BROKER_XML.format(name=name, journal=workdir / "journal", network=network))
    return BrokerProcess(conf, workdir).start()


@pytest.fixture
def a_to_b(tmp_path):
    """Brokers A and B, A with a one-way network connector ``a-to-b`` to B."""
    b = start_broker(tmp_path, "broker-b")
    try:
        a = start_broker(tmp_path, "broker-a", CONNECTOR.format(port=b.port))
        try:
            yield a, b
        finally:
            a.stop()
    finally:
        b.stop()


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


def bridge_state(client: ManagementClient) -> str:
    [row] = client.query(BRIDGE, ["state"])
    return row["state"]


def test_tdstat_shows_the_bridge_and_management_stops_and_starts_it(a_to_b):
    a, b = a_to_b
    url_a, url_b = f"amqp://127.0.0.1:{a.port}", f"amqp://127.0.0.1:{b.port}"
    with ManagementClient(f"127.0.0.1:{a.port}") as mgmt_a, ManagementClient(f"127.0.0.1:{b.port}") as mgmt_b:
        wait_for(lambda: bridge_state(mgmt_a) == "connected", "the bridge to connect")
        consumer = BlockingConnection(url_b, timeout=TIMEOUT)
        producer = BlockingConnection(url_a, timeout=TIMEOUT)
        try:
            rx = consumer.create_receiver("orders", credit=10)
            # (the management clients' reply queues on B are consumers too: A has demand for them as well)
            wait_for(lambda: any(d["destination"] == "orders" for d in mgmt_a.query(BRIDGE, ["demand"])[0]["demand"]),
                     "A to learn of the consumer of orders on B")
            tx = producer.create_sender("orders")
            for i in range(5):
                tx.send(Message(id=f"m{i}", body=i))
            got = []
            for _ in range(5):
                got.append(rx.receive(timeout=TIMEOUT).id)
                rx.accept()
            assert sorted(got) == [f"m{i}" for i in range(5)]

            lines = tdstat_broker(a)
            port_b = f"127.0.0.1:{b.port}"
            assert table(lines, "Network Bridges") == [["a-to-b", "broker-b", "out", "connected", "0", "5", port_b]]
            assert ["a-to-b", "broker-b", "orders", "queue", "1", "5"] in table(lines, "Network Demand")
            [network] = table(lines, "Network")
            assert network[0] == "broker-a" and network[2:] == ["broker-b", "1", "0"]
            # B has no bridge of its own (the connector is one-way) but shows its peer
            lines_b = tdstat_broker(b)
            assert table(lines_b, "Network Bridges") == []
            assert table(lines_b, "Network")[0][2] == "broker-a"

            stopped = json.loads(run_tool("tools.tdmanage", "-b", f"127.0.0.1:{a.port}", "stopNetworkConnector",
                                          "--name", "a-to-b").stdout)
            assert stopped["name"] == "a-to-b" and stopped["bridges"][0]["name"] == "a-to-b"
            wait_for(lambda: bridge_state(mgmt_a) == "stopped", "the bridge to stop")
            wait_for(lambda: mgmt_b.query(NETWORK, ["peers"])[0]["peers"] == [], "B to see A's connection go")
            assert table(tdstat_broker(a), "Network Bridges") == [["a-to-b", "-", "out", "stopped", "0", "0",
                                                                   port_b]]
            tx.send(Message(id="held", body="held"))  # no bridge: it stays on A
            wait_for(lambda: {r["name"]: r["messageCount"] for r in mgmt_a.query(
                "org.apache.activemq.artemis.queue", ["name", "messageCount"])}["orders"] == 1, "A to hold it")
            assert bridge_state(mgmt_a) == "stopped"  # a stopped connector does not reconnect

            run_tool("tools.tdmanage", "-b", f"127.0.0.1:{a.port}", "startNetworkConnector", "--name", "a-to-b")
            assert rx.receive(timeout=TIMEOUT).id == "held"  # the bridge is back, with the consumer's demand
            rx.accept()
            rows = wait_for(lambda: [r for r in table(tdstat_broker(a), "Network Bridges") if r[5] == "1"],
                            "tdstat to count the forwarded message")
            assert rows == [["a-to-b", "broker-b", "out", "connected", "0", "1", port_b]]
            missing = run_tool("tools.tdmanage", "-b", f"127.0.0.1:{a.port}", "stopNetworkConnector", "--name",
                               "nope", check=False)
            assert missing.returncode == 1 and missing.stderr.startswith("tdmanage: 404 ")
        finally:
            producer.close()
            consumer.close()


def test_tddemo_network_follows_the_consumer_both_ways():
    out = subprocess.run([sys.executable, "-m", "tools.demo", "network", "--count", "10"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any("holds all 10: no consumer exists anywhere" in line for line in lines)
    assert any("forwarded 10 messages to B, where the consumer is" in line for line in lines)
    assert any("received 5 on broker B" in line for line in lines)
    assert any("forwarded 5 back to A" in line for line in lines)
    assert any("sent 10, received 10: 10 different, 0 received twice, 0 lost; 0 left" in line for line in lines)
