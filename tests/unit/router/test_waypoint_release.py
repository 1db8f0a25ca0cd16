"""No release ping-pong with a waypoint (issue 17), driven in memory.

A broker (a container that declares itself a waypoint with ``qd.waypoint``, or the container of an ``in``
auto-link) feeds phase 1 of a waypoint address while a consumer exists. When the last consumer goes, the
router takes back the credit the broker has not used (a flow with link-credit 0, AMQP 1.0 §2.6.7), so the
messages it releases stay in the broker instead of coming straight back; the credit is owed again, whole,
when a consumer returns. A plain client producer keeps the Dispatch behaviour (its credit is withheld, not
taken back: DISPATCH-1012).
"""

from __future__ import annotations

import re

import proton
from proton import Data, symbol

from wire import raw
from tests.unit.enginepair import ACCEPTED, MODIFIED, RELEASED, AddressEntity, RouterHarness, settle
from tests.unit.router.fixtures import AutoLinkEntity, broker_answers

CAPACITY = 250  # the default linkCapacity


def _waypoint_capability(link) -> None:
    terminus = link.source if link.is_receiver else link.target
    terminus.capabilities.put_object(proton.Array(proton.UNDESCRIBED, Data.SYMBOL, symbol("qd.waypoint")))


LINK_CREDIT = re.compile(r"<- @flow.*link-credit=(0x[0-9a-f]+)")


def broker_flow_credits(broker) -> list[int]:
    """The link-credit of every flow frame the broker received, as on the wire (unsigned)."""
    return [int(m.group(1), 16) for line in broker.frames if (m := LINK_CREDIT.search(line))]


def broker_peer(h, address: str = "queue"):
    """A broker attached as a waypoint (an Artemis ``<peer>``): it consumes phase 0 and produces phase 1.
    The frames it receives are kept (``broker.frames``)."""
    broker = h.connect()
    broker.frames = []
    broker.transport.trace(proton.Transport.TRACE_FRM)
    broker.transport.tracer = lambda _transport, line: broker.frames.append(line)
    rcv = broker.receiver(address, open=False)
    _waypoint_capability(rcv)
    rcv.open()
    rcv.flow(50)
    snd = broker.sender(address, open=False)
    _waypoint_capability(snd)
    snd.open()
    h.pump()
    return broker, snd


def phase1_link(h, address: str = "queue"):
    [il] = h.router.addresses["M1" + address].inlinks
    return il


def test_the_broker_keeps_no_credit_while_phase_1_has_no_consumer():
    h = RouterHarness(address_entities=[AddressEntity("queue", waypoint=True)])
    broker, b_snd = broker_peer(h)
    assert b_snd.credit == 0

    consumer = h.connect()
    c_rcv = consumer.receiver("queue", credit=5)
    h.pump()
    assert b_snd.credit == CAPACITY
    sent = [broker.send(b_snd, body=f"m{i}") for i in range(19)]
    h.pump()
    assert len(consumer.received(c_rcv)) == 5  # unsettled at the consumer; 14 wait in the router
    assert b_snd.credit == CAPACITY - 19

    consumer.connection.close()
    h.pump()
    # What the router held went back once: the 14 it never sent released, the 5 the consumer had modified
    # (delivery-failed); and the broker may not send again: its unused credit was taken back.
    assert [d.remote_state for d in sent] == [MODIFIED] * 5 + [RELEASED] * 14
    assert b_snd.credit == 0
    il = phase1_link(h)
    assert il.withheld and il.owed_credit == CAPACITY and il.outstanding == 0
    for d in sent:
        d.settle()
    h.pump()

    back = h.connect()
    b_rcv = back.receiver("queue", credit=50)
    h.pump()
    assert b_snd.credit == CAPACITY  # all of it, neither less (credit lost) nor more (credit made up)
    again = [broker.send(b_snd, body=f"m{i}") for i in range(19)]
    h.pump()
    assert back.bodies(b_rcv) == [f"m{i}" for i in range(19)]
    for r in back.received(b_rcv):
        settle(r, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in again)


def test_messages_in_flight_when_the_consumer_leaves_are_released_once_and_the_credit_adds_up():
    """The broker sends before it hears that its credit is gone (AMQP 1.0 §2.6.7: credit reduced while
    transfers are in flight): those messages are released, each once, and count in what is owed."""
    h = RouterHarness(address_entities=[AddressEntity("queue", waypoint=True)])
    broker, b_snd = broker_peer(h)
    consumer = h.connect()
    consumer.receiver("queue", credit=5)
    h.pump()

    # The router hears the consumer leave before the broker's next transfers reach it.
    consumer.connection.close()
    consumer.pipe.step()
    in_flight = [broker.send(b_snd, body=f"late{i}") for i in range(3)]
    h.pump()
    assert [d.remote_state for d in in_flight] == [RELEASED] * 3
    assert b_snd.credit == 0  # nothing more may come
    il = phase1_link(h)
    assert il.outstanding == 0
    # The router's flow frames never announced a negative credit (proton would send it as an unsigned
    # link-credit near 2**32, which a broker other than a proton one takes as endless credit).
    assert raw.link_credit(il.ptr) - raw.link_queued(il.ptr) == 0
    assert all(0 <= c <= CAPACITY for c in broker_flow_credits(broker))
    for d in in_flight:
        d.settle()
    h.pump()

    back = h.connect()
    back.receiver("queue", credit=10)
    h.pump()
    assert b_snd.credit == CAPACITY


def test_credit_is_taken_back_only_when_the_last_consumer_goes():
    h = RouterHarness(address_entities=[AddressEntity("queue", waypoint=True)])
    broker, b_snd = broker_peer(h)
    first = h.connect()
    first.receiver("queue", credit=5)
    second = h.connect()
    second.receiver("queue", credit=5)
    h.pump()
    first.connection.close()
    h.pump()
    assert b_snd.credit == CAPACITY
    second.connection.close()
    h.pump()
    assert b_snd.credit == 0


def test_an_in_auto_link_is_stopped_too():
    h = RouterHarness(
        address_entities=[AddressEntity("queue", waypoint=True)],
        auto_link_entities=[AutoLinkEntity(address="queue", direction="in", connection="broker", name="from-broker")],
    )
    broker = h.connect(name="broker")
    [b_snd] = broker_answers(broker)
    h.pump()
    assert b_snd.credit == 0
    consumer = h.connect()
    consumer.receiver("queue", credit=5)
    h.pump()
    assert b_snd.credit == CAPACITY
    sent = [broker.send(b_snd, body=f"m{i}") for i in range(8)]
    h.pump()
    consumer.connection.close()
    h.pump()
    assert [d.remote_state for d in sent] == [MODIFIED] * 5 + [RELEASED] * 3
    assert b_snd.credit == 0


def _mesh_with_broker_on_a():
    from tests.unit.meshpair import MeshHarness

    waypoint = [AddressEntity("queue", waypoint=True)]
    h = MeshHarness("A", "B", address_entities=waypoint)
    h.link("A", "B")
    h.settle_topology()
    broker = h.client("A")
    rcv = broker.receiver("queue", open=False)
    _waypoint_capability(rcv)
    rcv.open()
    b_snd = broker.sender("queue", open=False)
    _waypoint_capability(b_snd)
    b_snd.open()
    h.pump()
    return h, broker, b_snd


def test_the_broker_is_stopped_when_the_consumer_behind_another_router_leaves():
    h, broker, b_snd = _mesh_with_broker_on_a()
    consumer = h.client("B")
    consumer.receiver("queue", credit=5)
    h.settle_topology(2)
    assert b_snd.credit == CAPACITY  # B's consumer is phase 1's destination, through the mesh
    sent = [broker.send(b_snd, body=f"m{i}") for i in range(8)]
    h.pump()
    consumer.connection.close()
    h.settle_topology(2)  # B withdraws M1queue; A hears it
    assert b_snd.credit == 0
    assert all(d.remote_state in (RELEASED, MODIFIED) for d in sent)


def test_the_broker_is_stopped_when_the_router_of_the_consumer_is_lost():
    h, broker, b_snd = _mesh_with_broker_on_a()
    consumer = h.client("B")
    consumer.receiver("queue", credit=5)
    h.settle_topology(2)
    assert b_snd.credit == CAPACITY
    h.kill("B")
    h.settle_topology(2)
    assert b_snd.credit == 0


def test_a_plain_producer_keeps_its_credit_and_hears_released():
    """Not a waypoint: Dispatch's behaviour (DISPATCH-1012) stays: credit withheld, not taken back."""
    h = RouterHarness()
    producer = h.connect()
    snd = producer.sender("plain")
    consumer = h.connect()
    c_rcv = consumer.receiver("plain", credit=5)
    h.pump()
    assert snd.credit == CAPACITY
    consumer.connection.close()
    h.pump()
    assert snd.credit == CAPACITY
    d = producer.send(snd, body="x")
    h.pump()
    assert d.remote_state == RELEASED and snd.credit == CAPACITY - 1
    del c_rcv
