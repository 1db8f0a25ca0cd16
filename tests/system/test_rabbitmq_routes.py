"""RabbitMQ (Debian's rabbitmq-server with the AMQP 1.0 plugin) as the router's route-container: the
link-route and auto-link flows of ``test_broker_linkroute.py`` against a broker nobody here wrote. One
private node per module (starting it is the cost); skipped with the reason when RabbitMQ is missing,
failed instead under CI=true."""

from __future__ import annotations

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import AUTO_LINKS, LINK_ROUTES, BrokerProcess, receive_all, send_all
from tests.system.clients import Consumer, Producer
from tools.rabbitmq import RabbitNode, require_rabbitmq

pytestmark = pytest.mark.system

TIMEOUT = 30


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory):
    require_rabbitmq()
    node = RabbitNode(tmp_path_factory.mktemp("rabbitmq")).start()
    yield node
    node.stop()


def test_rabbitmq_node_speaks_amqp_1_0(rabbit):
    conn = BlockingConnection(rabbit.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("test.direct")
        conn.create_sender("test.direct").send(Message(body="hello", durable=True))
        assert rcv.receive(timeout=TIMEOUT).body == "hello"
        rcv.accept()
        assert "RabbitMQ" in str(conn.conn.remote_properties)  # really the real thing
    finally:
        conn.close()


def test_link_routed_send_and_receive_via_rabbitmq(router_factory, rabbit):
    router = router_factory(LINK_ROUTES.format(port=rabbit.port))
    send_all(router.url, "test.orders", list(range(25)))
    assert receive_all(router.url, "test.orders", 25) == list(range(25))


def test_auto_links_store_in_rabbitmq_and_drain_from_it(router_factory, rabbit):
    router = router_factory(AUTO_LINKS.format(port=rabbit.port, address="rq"))
    send_all(router.url, "rq", list(range(30)))
    assert receive_all(router.url, "rq", 30) == list(range(30))


BRIDGE_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>bridge-broker</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses>
    <address name="outbox"><anycast><queue name="outbox"/></anycast></address>
    <address name="inbox"><anycast><queue name="inbox"/></anycast></address>
  </addresses>
  <broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{port}" name="rabbit" user="guest" password="{password}"
                     retry-interval="200">
      <sender queue-name="outbox"/>
      <receiver queue-name="inbox"/>
    </amqp-connection>
  </broker-connections>
</core></configuration>
"""


def _bridge(tmp_path, rabbit, password: str) -> BrokerProcess:
    conf = tmp_path / "bridge.xml"
    conf.write_text(BRIDGE_XML.format(journal=tmp_path / "journal", port=rabbit.port, password=password))
    return BrokerProcess(conf, tmp_path).start()


def test_sender_and_receiver_bridge_with_sasl_plain(tmp_path, rabbit):
    """tdbroker's <sender> pushes its queue to RabbitMQ and its <receiver> pulls RabbitMQ's queue, over
    a connection that logs in with user/password (SASL PLAIN)."""
    broker = _bridge(tmp_path, rabbit, "guest")
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    try:
        out = Consumer(rabbit.url, "outbox", count=5).start()
        p = Producer(url, "outbox", count=5, message_fn=lambda i: Message(id=i, body=f"o{i}", durable=True)).start()
        p.wait(TIMEOUT)
        out.wait(TIMEOUT)
        assert [m.id for m in out.messages] == list(range(5))
        out.close()
        p.close()
        p = Producer(rabbit.url, "inbox", count=5, message_fn=lambda i: Message(id=i, body=f"i{i}", durable=True)).start()
        p.wait(TIMEOUT)
        p.close()
        c = Consumer(url, "inbox", count=5).start()
        c.wait(TIMEOUT)
        assert [m.id for m in c.messages] == list(range(5))
        c.close()
    finally:
        assert broker.stop() == 0


def test_wrong_password_is_refused_by_rabbitmq(tmp_path, rabbit):
    broker = _bridge(tmp_path, rabbit, "not-the-password")
    try:
        import time

        time.sleep(1.5)  # a few attempts at retry-interval 200 ms
        log = broker.stderr_text()
        assert "links for queue outbox attached" not in log
    finally:
        assert broker.stop() == 0


def test_missing_rabbitmq_skips_locally_and_fails_under_ci(monkeypatch):
    from tools import rabbitmq

    monkeypatch.setattr(rabbitmq, "SERVER_SCRIPTS", ("/nonexistent/rabbitmq-server",))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not installed.*CI=true"):
        rabbitmq.require_rabbitmq()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="install-rabbitmq"):
        rabbitmq.require_rabbitmq()


def test_router_connector_logs_in_with_sasl_plain(router_factory, rabbit, tmp_path):
    """saslUsername/saslPassword on a connector: PLAIN to RabbitMQ (password from a file), then the
    link route works through that connection."""
    secret = tmp_path / "rabbit.password"
    secret.write_text("guest\n")
    section = LINK_ROUTES.format(port=rabbit.port).replace(
        "    role: route-container\n",
        f"    role: route-container\n    saslUsername: guest\n    saslPassword: file:{secret}\n", 1)
    router = router_factory(section)
    send_all(router.url, "test.plain", list(range(5)))
    assert receive_all(router.url, "test.plain", 5) == list(range(5))

    # The same with a wrong password: RabbitMQ refuses the login, so there is no route-container.
    secret.write_text("not-the-password\n")
    refused = router_factory(section)
    conn = BlockingConnection(refused.url, timeout=TIMEOUT)
    try:
        with pytest.raises(Exception) as info:
            conn.create_sender("test.plain")
        assert "qd:no-route-to-dest" in str(info.value)
    finally:
        conn.close()
