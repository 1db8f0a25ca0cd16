"""Artemis diverts and anycast addresses with several queues through a real tdbroker process and real AMQP
clients: an exclusive filtered divert and a non-exclusive multicast one (the copies carry the original
address), durable diverted copies surviving a broker restart, an anycast address sharing its messages
out among its queues in turn, and a divert cycle refused at start-up with FILE:LINE."""

from __future__ import annotations

import subprocess
import sys

import pytest
from proton import Message

from tests.paths import REPO
from tests.system.brokerharness import BrokerProcess, receive_messages, send_messages
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.system

TIMEOUT = 20

XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>broker-div</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses>
    <address name="priceUpdates"><anycast><queue name="priceUpdates"/></anycast></address>
    <address name="priceForwarding"><anycast><queue name="priceForwarding"/></anycast></address>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="spyTopic"><multicast><queue name="spy1"/><queue name="spy2"/></multicast></address>
    <address name="work"><anycast><queue name="w1"/><queue name="w2"/></anycast></address>
  </addresses>
  <diverts>
    <divert name="prices-divert">
      <address>priceUpdates</address>
      <forwarding-address>priceForwarding</forwarding-address>
      <filter string="office='New York'"/>
      <exclusive>true</exclusive>
    </divert>
    <divert name="order-divert">
      <address>orders</address>
      <forwarding-address>spyTopic</forwarding-address>
      <exclusive>false</exclusive>
      <routing-type>MULTICAST</routing-type>
    </divert>
    {extra}
  </diverts>
</core></configuration>
"""


@pytest.fixture
def broker_proc(tmp_path):
    procs: list[BrokerProcess] = []

    def start() -> BrokerProcess:
        b = BrokerProcess(_write(tmp_path), tmp_path).start()
        procs.append(b)
        return b

    yield start
    for b in procs:
        assert b.stop() == 0, b.stderr_text()


def _write(tmp_path, extra: str = ""):
    conf = tmp_path / "broker.xml"
    conf.write_text(XML.format(journal=tmp_path / "journal", extra=extra))
    return conf


def _url(b: BrokerProcess) -> str:
    return f"amqp://127.0.0.1:{b.ports['amqp']}"


def _counts(b: BrokerProcess, *queues: str) -> dict:
    with ManagementClient(f"127.0.0.1:{b.ports['amqp']}", timeout=TIMEOUT) as m:
        return {q: m.call("READ", type="queue", name=q)["messageCount"] for q in queues}


def test_exclusive_filtered_divert_takes_only_what_it_selects(broker_proc):
    b = broker_proc()
    url = _url(b)
    send_messages(url, "priceUpdates", [Message(id=i, body=f"p{i}", properties={"office": o})
                                        for i, o in enumerate(["New York", "London", "New York"])])
    assert _counts(b, "priceUpdates", "priceForwarding") == {"priceUpdates": 1, "priceForwarding": 2}
    moved = receive_messages(url, "priceForwarding", 2)
    assert [m.id for m in moved] == [0, 2]
    ann = {str(k): v for k, v in (moved[0].annotations or {}).items()}
    assert moved[0].address == "priceForwarding" and ann["x-opt-ORIG-ADDRESS"] == "priceUpdates"
    assert [m.id for m in receive_messages(url, "priceUpdates", 1)] == [1]


def test_non_exclusive_multicast_divert_copies_to_every_subscription_and_survives_restart(broker_proc):
    b = broker_proc()
    send_messages(_url(b), "orders", [Message(id=i, body=f"o{i}", durable=True) for i in range(3)])
    assert b.stop() == 0
    b = broker_proc()
    url = _url(b)
    assert _counts(b, "orders", "spy1", "spy2") == {"orders": 3, "spy1": 3, "spy2": 3}
    assert [m.id for m in receive_messages(url, "orders", 3)] == [0, 1, 2]
    for q in ("spy1", "spy2"):
        copies = receive_messages(url, f"spyTopic::{q}", 3)
        assert [m.id for m in copies] == [0, 1, 2]
        assert {str(k): v for k, v in (copies[0].annotations or {}).items()}["x-opt-ORIG-ADDRESS"] == "orders"


def test_an_anycast_address_shares_its_messages_out_among_its_queues(broker_proc):
    b = broker_proc()
    url = _url(b)
    send_messages(url, "work", [Message(id=i, body=i) for i in range(6)])
    assert _counts(b, "w1", "w2") == {"w1": 3, "w2": 3}
    assert [m.id for m in receive_messages(url, "work::w1", 3)] == [0, 2, 4]
    assert [m.id for m in receive_messages(url, "work::w2", 3)] == [1, 3, 5]


def test_a_divert_cycle_is_refused_at_start_with_file_and_line(tmp_path):
    conf = _write(tmp_path, extra='<divert name="back"><address>spyTopic</address>'
                                  '<forwarding-address>orders</forwarding-address></divert>')
    run = subprocess.run([sys.executable, "-m", "broker.daemon", "-c", str(conf)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert f"{conf}:" in run.stderr and "diverts form a cycle" in run.stderr, run.stderr
