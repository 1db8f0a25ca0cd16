"""A real tdbroker pages (issue 10: address-full-policy PAGE was refused at start-up; without a limit a
100 MB backlog held 144 MB of RSS): messages beyond max-size-bytes go to page files, memory stays bounded,
a consumer gets everything in order, and durable paged messages survive a restart and a ``kill -9``
(non-durable ones do not, as in Artemis)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.system.brokerharness import BrokerProcess
from tests.system.clients import Consumer, Producer, close_all
from tests.system.procstat import rss_mib
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.system

TIMEOUT = 120
BODY = b"p" * 10_000
COUNT = 6000  # 60 MB offered against a 10 MB limit
XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>pager</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="big"><anycast><queue name="big"/></anycast></address></addresses>
  <address-settings>
    <address-setting match="big">
      <max-size-bytes>10MB</max-size-bytes>
      <address-full-policy>PAGE</address-full-policy>
      <page-size-bytes>4MB</page-size-bytes>
    </address-setting>
  </address-settings>
</core>
</configuration>
"""


def _message(i: int) -> Message:
    return Message(id=i, body=BODY, durable=i % 3 != 2)  # two in three durable


@pytest.fixture
def broker_conf(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(XML.format(journal=tmp_path / "journal"))
    brokers: list[BrokerProcess] = []

    def start() -> BrokerProcess:
        b = BrokerProcess(conf, tmp_path).start()
        brokers.append(b)
        return b

    yield start, tmp_path
    close_all()
    for b in brokers:
        if b.proc.poll() is None:
            assert b.stop() == 0, b.stderr_text()


def _queue_row(port: int) -> dict:
    with ManagementClient(f"127.0.0.1:{port}") as client:
        [row] = [r for r in client.query("org.apache.activemq.artemis.queue",
                                         ["name", "messageCount", "paging", "pagedMessageCount", "pagedSize"])
                 if r["name"] == "big"]
        [addr] = [a for a in client.query("org.apache.activemq.artemis.address",
                                          ["name", "paging", "numberOfPages", "addressSize"]) if a["name"] == "big"]
    return {**row, "address": addr}


def test_page_keeps_memory_bounded_and_reads_back_in_order(broker_conf):
    start, tmp_path = broker_conf
    broker = start()
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    before = rss_mib(broker.proc.pid)
    p = Producer(url, "big", count=COUNT, message_fn=_message).start()
    p.wait(TIMEOUT)
    assert p.outcomes["accepted"] == COUNT, p.outcomes
    rss = rss_mib(broker.proc.pid)
    print(f"broker RSS {before:.0f} MB -> {rss:.0f} MB after {COUNT * len(BODY) // 2**20} MB paged against "
          "a 10 MB limit")
    assert rss - before < 45, (before, rss)  # 60 MB held in memory would be > 60
    row = _queue_row(broker.ports["amqp"])
    assert row["messageCount"] == COUNT and row["paging"] and row["pagedMessageCount"] > COUNT - 1100
    assert row["address"]["paging"] and row["address"]["numberOfPages"] >= 3  # 20 MB non-durable, 4 MB files
    assert row["address"]["addressSize"] <= 10 * 2**20
    assert list((tmp_path / "paging").rglob("*.page"))
    c = Consumer(url, "big", credit=200).start()
    c.wait(TIMEOUT, count=COUNT)
    assert [m.id for m in c.messages] == list(range(COUNT))
    peak = rss_mib(broker.proc.pid)
    print(f"broker RSS after consuming everything: {peak:.0f} MB")
    assert _queue_row(broker.ports["amqp"])["messageCount"] == 0
    c.wait_for(lambda: not list((tmp_path / "paging").rglob("*.page")), TIMEOUT, "page files deleted")


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_durable_paged_messages_survive_a_restart_once_each(broker_conf, how):
    start, tmp_path = broker_conf
    broker = start()
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    p = Producer(url, "big", count=COUNT, message_fn=_message).start()
    p.wait(TIMEOUT)
    assert p.outcomes["accepted"] == COUNT, p.outcomes
    close_all()
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.proc.kill()
        broker.proc.wait(TIMEOUT)
    again = start()
    before = rss_mib(again.proc.pid)
    durable = [i for i in range(COUNT) if i % 3 != 2]
    row = _queue_row(again.ports["amqp"])
    assert row["messageCount"] == len(durable) and row["pagedMessageCount"] > len(durable) - 1100
    print(f"broker RSS after recovering {len(durable) * len(BODY) // 2**20} MB of durable messages, "
          f"paging what exceeds 10 MB: {before:.0f} MB")
    assert before < 130, before
    c = Consumer(f"amqp://127.0.0.1:{again.ports['amqp']}", "big", credit=200).start()
    c.wait(TIMEOUT, count=len(durable))
    assert [m.id for m in c.messages] == durable  # in order, none lost, none twice
    c.close()
    assert again.stop() == 0
    third = start()
    assert _queue_row(third.ports["amqp"])["messageCount"] == 0  # every one was acknowledged
