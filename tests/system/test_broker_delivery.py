"""Delivery semantics through real tdbroker processes: dead-lettering after max-delivery-attempts (and the
durable delivery count across a restart), expiry to the expiry address, priority order through a router
with the broker attached as a peer, multicast subscriptions, and the management facade's queue created at
run time getting its peer links."""

from __future__ import annotations

import time

import pytest
from proton import Message

from tests.system.brokerharness import WAYPOINT, BrokerProcess, receive_messages, send_messages
from tests.system.clients import Consumer
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.system

TIMEOUT = 20
MAX_ATTEMPTS = 3

XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>broker-d</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses>
    <address name="queue"><anycast><queue name="queue"/></anycast></address>
    <address name="work"><anycast><queue name="work"/></anycast></address>
    <address name="news"><multicast/></address>
    <address name="cars"><multicast>
      <queue name="red-cars"><filter string="color = 'red' AND weight BETWEEN 1000 AND 2000"/></queue>
      <queue name="all-cars"/>
    </multicast></address>
    <address name="DLQ"><anycast><queue name="DLQ"/></anycast></address>
    <address name="ExpiryQueue"><anycast><queue name="ExpiryQueue"/></anycast></address>
  </addresses>
  <address-settings>
    <address-setting match="#">
      <dead-letter-address>DLQ</dead-letter-address>
      <expiry-address>ExpiryQueue</expiry-address>
      <max-delivery-attempts>{attempts}</max-delivery-attempts>
    </address-setting>
  </address-settings>
  {connections}
  {extra}
</core></configuration>
"""

PEER = """<broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{port}" name="router" retry-interval="200">
      <peer address-match="queue"/>
    </amqp-connection></broker-connections>"""


@pytest.fixture
def broker_proc(tmp_path):
    procs: list[BrokerProcess] = []

    def start(router_port: int | None = None, extra: str = "") -> BrokerProcess:
        conf = tmp_path / "broker.xml"
        conns = PEER.format(port=router_port) if router_port else ""
        conf.write_text(XML.format(journal=tmp_path / "journal", attempts=MAX_ATTEMPTS, connections=conns,
                                   extra=extra))
        b = BrokerProcess(conf, tmp_path).start()
        procs.append(b)
        return b

    yield start
    for b in procs:
        assert b.stop() == 0, b.stderr_text()


def _url(b: BrokerProcess) -> str:
    return f"amqp://127.0.0.1:{b.ports['amqp']}"


def test_dead_letter_after_max_delivery_attempts_with_durable_counts(broker_proc):
    b = broker_proc()
    url = _url(b)
    send_messages(url, "work", [Message(id="poison", body="p", durable=True)])
    # Fail the delivery once, then restart: the journaled delivery count survives.
    first = receive_messages(url, "work", 1, outcome="modify", credit=1, replenish=False)
    assert first[0].delivery_count == 0
    b.stop()
    b = broker_proc()
    url = _url(b)
    again = receive_messages(url, "work", MAX_ATTEMPTS - 1, outcome="modify", credit=1)
    assert [m.delivery_count for m in again] == list(range(1, MAX_ATTEMPTS))
    [dead] = receive_messages(url, "DLQ", 1)
    assert dead.id == "poison" and dead.delivery_count == MAX_ATTEMPTS
    ann = {str(k): v for k, v in (dead.annotations or {}).items()}
    assert (ann["x-opt-ORIG-ADDRESS"], ann["x-opt-ORIG-QUEUE"], ann["x-opt-ORIG-MESSAGE-ID"]) == \
        ("work", "work", "poison")


def test_expired_messages_move_to_the_expiry_address(broker_proc):
    b = broker_proc()
    url = _url(b)
    send_messages(url, "work", [Message(id="short", body="s", durable=True, ttl=0.3),
                        Message(id="long", body="l", durable=True)])
    time.sleep(0.8)  # nobody consumes: the broker's timer moves the first one
    [expired] = receive_messages(url, "ExpiryQueue", 1)
    assert expired.id == "short"
    ann = {str(k): v for k, v in (expired.annotations or {}).items()}
    assert ann["x-opt-ORIG-QUEUE"] == "work" and ann["x-opt-ACTUAL-EXPIRY"] > 0
    assert not expired.ttl  # it does not expire again where it was moved
    [kept] = receive_messages(url, "work", 1)
    assert kept.id == "long"


def test_priority_order_through_the_router(router_factory, broker_proc):
    router = router_factory(WAYPOINT)
    broker_proc(router_port=router.ports["amqp"])
    msgs = [Message(id=i, body=f"p{i % 10}", priority=i % 10, durable=True) for i in range(30)]
    send_messages(router.url, "queue", msgs)
    got = receive_messages(router.url, "queue", 30, credit=30)
    prios = [m.priority for m in got]
    assert prios == sorted(prios, reverse=True), prios
    # FIFO within a priority.
    assert [m.id for m in got if m.priority == 9] == [9, 19, 29]


def test_multicast_subscribers_each_get_every_message(broker_proc):
    b = broker_proc()
    url = _url(b)
    subs = [Consumer(url, "news", count=5).start() for _ in range(2)]
    try:
        for s in subs:
            s.wait_ready(TIMEOUT)
        send_messages(url, "news", [Message(id=i, body=f"n{i}") for i in range(5)])
        for s in subs:
            s.wait(TIMEOUT)
            assert [m.id for m in s.messages] == list(range(5))
    finally:
        for s in subs:
            s.close()


def test_flow_records_of_store_deliver_and_settle(broker_proc, tmp_path):
    import json

    records = tmp_path / "flows"
    b = broker_proc(extra=f'<flow-records directory="{records}" sample="1.0" rotate-mb="1"/>')
    url = _url(b)
    send_messages(url, "work", [Message(id=f"f{i}", body="x", durable=True) for i in range(3)])
    assert [m.id for m in receive_messages(url, "work", 3)] == ["f0", "f1", "f2"]
    assert b.stop() == 0  # the recorder writes what it buffered and finishes its file
    lines = [json.loads(line) for f in sorted(records.glob("*.jsonl")) for line in f.read_text().splitlines()]
    events = [(r.get("event") or r.get("ev"), r.get("mid")) for r in lines]
    for i in range(3):
        for ev in ("store", "deliver", "settle"):
            assert (ev, f"f{i}") in events, events


def _durable_subscriber(url: str):
    from proton.reactor import Container, DurableSubscription
    from proton.utils import BlockingConnection

    container = Container()
    container.container_id = "app-1"
    conn = BlockingConnection(url, timeout=TIMEOUT, container=container)
    rcv = conn.create_receiver("news", name="sub-a", options=DurableSubscription())
    return conn, rcv


def test_durable_subscription_survives_detach_and_broker_restart(broker_proc):
    b = broker_proc()
    conn, rcv = _durable_subscriber(_url(b))
    rcv.link.detach()  # detached, not closed: the subscription stays
    conn.close()
    send_messages(_url(b), "news", [Message(id=i, body=i, durable=True) for i in range(3)])
    assert b.stop() == 0
    b = broker_proc()  # the bindings file binds app-1.sub-a to 'news' again, the journal refills it
    send_messages(_url(b), "news", [Message(id=3, body=3, durable=True)])
    conn, rcv = _durable_subscriber(_url(b))
    try:
        got = []
        for _ in range(4):
            got.append(rcv.receive(timeout=TIMEOUT).id)
            rcv.accept()
        assert got == [0, 1, 2, 3]
    finally:
        conn.close()  # closed: the subscription is deleted


def test_a_queue_filter_takes_only_the_messages_its_selector_selects(broker_proc):
    """Artemis' queue <filter> (a JMS selector over header, properties and application-properties): the
    filtered queue gets the matching messages only, the unfiltered one every message."""
    b = broker_proc()
    url = _url(b)
    cars = [("red", 1500), ("blue", 1500), ("red", 3000), ("red", 1999), (None, 1500)]
    send_messages(url, "cars", [Message(id=i, body=i, properties={"weight": w, **({"color": c} if c else {})})
                                for i, (c, w) in enumerate(cars)])
    with ManagementClient(f"127.0.0.1:{b.ports['amqp']}", timeout=TIMEOUT) as m:
        counts = {name: m.call("READ", type="queue", name=name)["messageCount"]
                  for name in ("red-cars", "all-cars")}
    assert counts == {"red-cars": 2, "all-cars": 5}, counts
    assert [m.body for m in receive_messages(url, "cars::red-cars", 2)] == [0, 3]
    assert [m.body for m in receive_messages(url, "cars::all-cars", 5)] == [0, 1, 2, 3, 4]


def test_consumer_selectors_on_a_queue_and_a_topic(broker_proc):
    """A consumer attaching with the selector filter (apache.org:selector-filter:string) gets only the
    messages its JMS selector selects; the others stay on the queue for another consumer; the answered
    source carries the filter in force (AMQP 1.0 §3.5.8). On a topic, a subscriber's selector filters what
    its subscription stores."""
    from proton.reactor import Selector
    from proton.utils import BlockingConnection

    b = broker_proc()
    url = _url(b)
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        reds = conn.create_receiver("work", options=Selector("color = 'red'"))
        answered = reds.link.remote_source.filter
        answered.rewind()
        answered.next()
        (entry,) = answered.get_object().values()
        assert (str(entry.descriptor), entry.value) == ("apache.org:selector-filter:string", "color = 'red'")
        sender = conn.create_sender("work")
        for i, color in enumerate(["red", "blue", "red", "green"]):
            sender.send(Message(id=i, body=i, properties={"color": color}))
        got = [reds.receive(TIMEOUT) for _ in range(2)]
        for _ in got:
            reds.accept()
        assert [m.body for m in got] == [0, 2]
        with pytest.raises(Exception):
            reds.receive(0.5)
        # blue and green wait on the queue for a consumer without the selector
        assert [m.body for m in receive_messages(url, "work", 2)] == [1, 3]
    finally:
        conn.close()


def test_topic_subscriber_selector_filters_its_subscription(broker_proc):
    from proton.reactor import Selector

    b = broker_proc()
    url = _url(b)
    reds = Consumer(url, "news", count=2, options=[Selector("color = 'red'")]).start()
    every = Consumer(url, "news", count=3).start()
    try:
        reds.wait_ready(TIMEOUT)
        every.wait_ready(TIMEOUT)
        send_messages(url, "news", [Message(id=i, body=i, properties={"color": c})
                                    for i, c in enumerate(["red", "blue", "red"])])
        reds.wait(TIMEOUT)
        every.wait(TIMEOUT)
        assert [m.body for m in reds.messages] == [0, 2]
        assert [m.body for m in every.messages] == [0, 1, 2]
    finally:
        reds.close()
        every.close()


def test_a_malformed_selector_is_refused_with_invalid_field(broker_proc):
    from proton.reactor import Selector
    from proton.utils import BlockingConnection, LinkDetached

    b = broker_proc()
    conn = BlockingConnection(_url(b), timeout=TIMEOUT)
    try:
        with pytest.raises(LinkDetached) as info:
            conn.create_receiver("work", options=Selector("color = = 'red'"))
        assert "amqp:invalid-field" in str(info.value) and "selector" in str(info.value), info.value
    finally:
        conn.close()
