"""A real tdbroker enforces max-size-bytes (issue 10: 400 MB were accepted against a 10 MB FAIL limit)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.system.brokerharness import BrokerProcess
from tests.system.clients import Consumer, Producer, close_all
from tests.system.procstat import rss_mib

pytestmark = pytest.mark.system

TIMEOUT = 60
MB = 1024 * 1024
XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>limited</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="big"><anycast><queue name="big"/></anycast></address></addresses>
  <address-settings>
    <address-setting match="big">
      <max-size-bytes>10MB</max-size-bytes>
      <address-full-policy>FAIL</address-full-policy>
    </address-setting>
  </address-settings>
</core>
</configuration>
"""


def test_fail_limit_holds_against_a_flood_of_1mb_messages(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(XML.format(journal=tmp_path / "journal"))
    broker = BrokerProcess(conf, tmp_path).start()
    try:
        url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
        body = b"m" * MB
        n = 60
        p = Producer(url, "big", count=n, message_fn=lambda i: Message(id=i, body=body, durable=True)).start()
        p.wait(TIMEOUT)
        accepted = p.outcomes.get("accepted", 0)
        assert 8 <= accepted <= 10, p.outcomes
        assert p.outcomes.get("rejected", 0) == n - accepted
        rss = rss_mib(broker.proc.pid)
        print(f"broker RSS after {n} MB offered against a 10 MB FAIL limit: {rss:.0f} MB")
        assert rss < 150, rss
        # What was accepted is all there, in order.
        c = Consumer(url, "big", credit=20).start()
        c.wait(TIMEOUT, count=accepted)
        assert c.ids == list(range(accepted))
    finally:
        close_all()
        assert broker.stop() == 0, broker.stderr_text()
