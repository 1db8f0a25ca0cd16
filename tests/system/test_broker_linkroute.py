"""Link routes and auto-links from a real router to a real tdbroker acting as route-container, including
a broker restart under a link-routed consumer: the client sees the detach (``qd:routed-link-lost``),
reattaches on the same connection and receives what is sent after the broker is back.

The helpers (router sections, the retrying clients) live in tests/system/brokerharness.py, shared with the
RabbitMQ tests (``test_rabbitmq_routes.py``), which run the same flows against a broker nobody here wrote."""

from __future__ import annotations

import itertools

import pytest

from tests.system.brokerharness import (
    AUTO_LINKS, LINK_ROUTES, REATTACH_DELAY, TIMEOUT, BrokerProcess, attach_when_routed, receive_all, send_all,
    wait_queue_empty,
)
from tests.system.clients import Consumer, Producer
from tests.system.harness import free_port

pytestmark = pytest.mark.system

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>lr-broker</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
</core></configuration>
"""


class ReattachingConsumer(Consumer):
    """A consumer that, whenever its link is detached or refused, attaches a new link on the same
    connection after :data:`REATTACH_DELAY` (what a resilient application does)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._seq = itertools.count(1)
        self.attaches = 0  # successful attaches (a refusal attaches with a null source)

    def _open_links(self, container, conn) -> None:
        self.receiver = container.create_receiver(conn, self.address, name=f"{self.name}-rx{next(self._seq)}")
        self.receiver.flow(self.credit)

    def on_link_opened(self, event) -> None:
        super().on_link_opened(event)
        if event.link == self.receiver and event.link.remote_source is not None \
                and event.link.remote_source.address:
            with self._cond:
                self.attaches += 1
                self._cond.notify_all()

    def on_link_remote_close(self, event) -> None:
        super().on_link_remote_close(event)
        if event.link != self.receiver or self._closing:
            return
        event.link.close()
        container, conn = event.container, self.conn

        class _Again:
            def on_timer_task(_self, _event):
                if not self._closing:
                    self._open_links(container, conn)

        container.schedule(REATTACH_DELAY, _Again())


@pytest.fixture
def tdbroker(tmp_path):
    """``start()`` -> a tdbroker on a fixed free port (so the router's connector finds it again)."""
    port = free_port()
    conf = tmp_path / "lr-broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "lr-journal", port=port))
    procs: list[BrokerProcess] = []

    def start() -> BrokerProcess:
        b = BrokerProcess(conf, tmp_path).start()
        procs.append(b)
        return b

    start.port = port
    yield start
    for b in procs:
        assert b.stop() == 0, b.stderr_text()


def test_link_routed_send_and_receive_to_a_broker_queue(router_factory, tdbroker):
    tdbroker()
    router = router_factory(LINK_ROUTES.format(port=tdbroker.port))
    send_all(router.url, "test.orders", list(range(25)))
    assert receive_all(router.url, "test.orders", 25) == list(range(25))


def test_link_routed_consumer_reattaches_after_broker_restart(router_factory, tdbroker):
    broker = tdbroker()
    router = router_factory(LINK_ROUTES.format(port=tdbroker.port))
    consumer = attach_when_routed(lambda: ReattachingConsumer(router.url, "test.orders", credit=50))
    try:
        send_all(router.url, "test.orders", list(range(10)))
        consumer.wait(TIMEOUT, count=10)
        # The consumer's accepts travel back through the router: stopping the broker before they arrive
        # would have it deliver some of the ten again after the restart.
        wait_queue_empty(broker, "test.orders")
        assert broker.stop() == 0
        consumer.wait_for(lambda: any(c == "qd:routed-link-lost" for c, _ in consumer.link_errors),
                          TIMEOUT, "the routed link to be lost")
        tdbroker()
        consumer.wait_for(lambda: consumer.attaches >= 2, TIMEOUT, "the consumer to reattach")
        send_all(router.url, "test.orders", list(range(10, 20)))
        consumer.wait(TIMEOUT, count=20)
        assert [m.id for m in consumer.messages] == list(range(20))
        assert consumer.connected.is_set() and not consumer.remote_closed.is_set()  # same connection
    finally:
        consumer.close()


def test_auto_links_store_and_drain_through_the_broker(router_factory, tdbroker):
    tdbroker()
    router = router_factory(AUTO_LINKS.format(port=tdbroker.port, address="queue"))
    send_all(router.url, "queue", list(range(30)))
    assert receive_all(router.url, "queue", 30) == list(range(30))


def test_large_durable_message_streams_through_a_link_route_to_the_broker_and_back(router_factory, tdbroker):
    """Issue 17: a link-routed large message streams through the router (router/routedstreams.py) and the
    broker keeps it as a large message: neither process grows by anything like the message."""
    from proton import Message

    from tools.benchprocs import process_memory_kb

    broker = tdbroker()
    router = router_factory(LINK_ROUTES.format(port=tdbroker.port))
    body = bytes(range(256)) * (80_000_000 // 256)
    rss_before = process_memory_kb(router.pid)[0]
    p = attach_when_routed(lambda: Producer(router.url, "test.large", count=1,
                                            message_fn=lambda i: Message(id=i, body=body, durable=True)))
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": 1}, p.outcomes
    finally:
        p.close()
    c = attach_when_routed(lambda: Consumer(router.url, "test.large", count=1, credit=1))
    try:
        c.wait(TIMEOUT)
        assert c.messages[0].body == body
    finally:
        c.close()
    hwm_growth_mb = (process_memory_kb(router.pid)[1] - rss_before) / 1024
    assert hwm_growth_mb < 40, f"router grew by {hwm_growth_mb:.0f} MiB for an 80 MB message"
    assert broker.pid


MIXED_SIZES = (100, 300_000, 100, 3_000_000, 50_000, 100, 700_000, 10, 1_500_000)


def test_small_and_large_messages_mixed_on_a_link_route_arrive_in_order(router_factory, tdbroker):
    """A producer and a consumer at once on a link-routed address: messages of 10 B to 3 MB, the large
    ones streamed through the routed pair (router/routedstreams.py, held off when the other side has no
    room) with small ones queued behind them; every message arrives, in order, intact."""
    from proton import Message

    tdbroker()
    router = router_factory(LINK_ROUTES.format(port=tdbroker.port))
    n = 36

    def body(i):
        return bytes([65 + i % 26]) * MIXED_SIZES[i % len(MIXED_SIZES)]

    c = attach_when_routed(lambda: Consumer(router.url, "test.mixed", count=n, credit=3))
    p = attach_when_routed(lambda: Producer(router.url, "test.mixed", count=n,
                                            message_fn=lambda i: Message(id=i, body=body(i), durable=True)))
    try:
        c.wait(TIMEOUT * 2)
        p.wait(TIMEOUT * 2)
        assert p.outcomes == {"accepted": n}, p.outcomes
        assert [m.id for m in c.messages] == list(range(n))
        assert all(m.body == body(i) for i, m in enumerate(c.messages))
    finally:
        p.close()
        c.close()
