"""Broker management end to end through a real tdbroker: requests on ``$management`` with the reply
going to a dynamic-source receiver; a queue created at run time gets its ``<peer>`` links; a broker
connection with ``auto-start="false"`` stays stopped until ``startBrokerConnection``; then messages flow
producer -> router -> broker -> router -> consumer."""

from __future__ import annotations

import time

import pytest
from proton.utils import BlockingConnection

from tests.system.brokerharness import WAYPOINT, BrokerProcess, receive_messages, send_messages
from tests.system.waiting import wait_for
from wire import management as wm

pytestmark = pytest.mark.system

TIMEOUT = 20

XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>broker-m</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <address-settings><address-setting match="#"><auto-create-queues>false</auto-create-queues></address-setting>
  </address-settings>
  <broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{port}" name="to-router" retry-interval="200" auto-start="false">
      <peer address-match="queue.#"/>
    </amqp-connection>
  </broker-connections>
</core></configuration>
"""


class Mgmt:
    def __init__(self, url: str):
        self.conn = BlockingConnection(url, timeout=TIMEOUT)
        self.rx = self.conn.create_receiver(None, dynamic=True)
        self.reply_to = self.rx.link.remote_source.address
        self.tx = self.conn.create_sender("$management")
        self.n = 0

    def call(self, operation: str, **kw) -> wm.Response:
        from proton import Message

        self.n += 1
        req = Message()
        req.decode(wm.build_request(operation, reply_to=self.reply_to, correlation_id=self.n, **kw))
        self.tx.send(req)
        reply = self.rx.receive(timeout=TIMEOUT)
        self.rx.accept()
        resp = wm.parse_response(reply)
        assert resp.correlation_id == self.n
        return resp

    def connection_row(self) -> dict:
        resp = self.call("READ", type="brokerConnection", name="to-router")
        assert resp.ok, resp
        return resp.body

    def close(self):
        self.conn.close()


def test_create_queue_and_start_connection_through_management(router_factory, tmp_path):
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    conf.write_text(XML.format(journal=tmp_path / "journal", port=router.ports["amqp"]))
    broker = BrokerProcess(conf, tmp_path).start()
    m = Mgmt(f"amqp://127.0.0.1:{broker.ports['amqp']}")
    try:
        assert m.reply_to.startswith("temp.")
        row = m.connection_row()
        assert (row["status"], row["links"], row["autoStart"]) == ("stopped", 0, False)
        created = m.call("CREATE", type="queue", name="queue.orders", body={"address": "queue.orders"})
        assert created.status == wm.CREATED and created.body["name"] == "queue.orders"
        assert m.call("CREATE", type="queue", name="queue.orders").status == wm.BAD_REQUEST
        assert m.call("startBrokerConnection", type="brokerConnection", name="to-router").ok
        deadline = time.monotonic() + TIMEOUT
        while (row := m.connection_row())["status"] != "connected" or row["links"] != 2:
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        from proton import Message

        send_messages(router.url, "queue.orders", [Message(id=i, body=i, durable=True) for i in range(10)])
        q = m.call("READ", type="queue", name="queue.orders").body
        assert q["messageCount"] == 10 and q["consumerCount"] == 1  # the peer sender is the consumer
        assert [x.id for x in receive_messages(router.url, "queue.orders", 10)] == list(range(10))
        # the consumer's accepts reach the broker through the router after the client has settled: wait
        # for them (seen under load: the READ came first, (10, 0, 10))
        q = wait_for(lambda: (b := m.call("READ", type="queue", name="queue.orders").body)["messageCount"] == 0
                     and b, "the broker to see the 10 acknowledgements")
        assert (q["messageCount"], q["acknowledgedCount"], q["deliveredCount"]) == (0, 10, 10)
        assert m.call("stopBrokerConnection", type="brokerConnection", name="to-router").ok
        deadline = time.monotonic() + TIMEOUT
        while m.connection_row()["status"] != "stopped":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert m.call("READ", type="queue", name="nope").status == wm.NOT_FOUND
    finally:
        m.close()
        assert broker.stop() == 0, broker.stderr_text()
