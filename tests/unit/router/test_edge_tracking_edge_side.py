"""The edge side of edge address tracking (router/edgeproxy.py, router/edge.py), in memory: a tdrouterd
edge router on its uplink to a tdrouterd interior, which tells it on ``_$qd.edge_addr_tracking`` which of
its producer addresses have a consumer beyond the edge (Qpid Dispatch 1.19
src/router_core/modules/edge_router/addr_proxy.c)."""

from __future__ import annotations

import pytest
from proton import Message

from router.edgeproxy import TRACKING_CREDIT, parse_update
from router.edgetracking import TRACKING_ADDRESS, tracking_message
from tests.unit.enginepair import ACCEPTED, RELEASED, settle
from tests.unit.meshpair import MeshHarness
from wire import raw
from wire.amqptypes import CodecError
from wire.codec import encode_message

pytest.importorskip("router.mesh.engine")


def interior_and_edge() -> MeshHarness:
    h = MeshHarness("A")
    h.add_edge("E", "A")
    h.pump()
    return h


def uplink_sender(h: MeshHarness, key: str):
    return h.routers["E"].edge.senders[key]


def is_destination(h: MeshHarness, key: str) -> bool:
    addr = h.routers["E"].addresses[key]
    return uplink_sender(h, key) in addr.remote


def send_while_credit(h: MeshHarness, client, snd, limit: int = 10_000) -> list:
    """Send one message per credit the producer has, pumping after each, until it has none."""
    sent = []
    while snd.credit > 0 and len(sent) < limit:
        sent.append(client.send(snd, Message(body=len(sent))))
        h.pump()
    return sent


# -- the updates ---------------------------------------------------------------------------------------
def test_an_update_is_read_as_the_interior_writes_it():
    assert parse_update(tracking_message("M0q", True)) == ("M0q", True)
    assert parse_update(tracking_message("M1a.b", False)) == ("M1a.b", False)


@pytest.mark.parametrize("msg", [
    encode_message(body=b"M0q"),                       # a data section, not an amqp-value
    encode_message(body_value=["M0q"]),                # one element
    encode_message(body_value=["M0q", True, 1]),       # three
    encode_message(body_value=[1, True]),              # a key that is no string
    encode_message(body_value=["M0q", 1]),             # a flag that is no boolean
    encode_message(to="x"),                            # no body at all
    tracking_message("M0" + "x" * 5000, True),         # larger than any update
])
def test_anything_else_is_no_update(msg):
    with pytest.raises(CodecError):
        parse_update(msg)


# -- the link ----------------------------------------------------------------------------------------
def test_the_edge_attaches_the_tracking_receiver_and_the_interior_serves_it():
    h = interior_and_edge()
    edge = h.routers["E"].edge
    assert edge.tracking is not None and not edge.tracking.closed
    lo = raw.link_object(edge.tracking.ptr)
    assert lo.source.address == TRACKING_ADDRESS and lo.is_receiver
    assert raw.link_credit(edge.tracking.ptr) == TRACKING_CREDIT
    [endpoint] = h.routers["A"].edge_tracking.endpoints.values()
    assert raw.link_credit(endpoint.ptr) == TRACKING_CREDIT


# -- credit follows consumers beyond the edge ---------------------------------------------------------
def test_an_edge_producer_has_credit_only_while_a_consumer_exists_beyond_the_edge():
    h = interior_and_edge()
    producer = h.client("E")
    snd = producer.sender("q")
    h.pump()
    assert snd.credit == 0 and not is_destination(h, "M0q")

    consumer = h.client("A")
    rcv = consumer.receiver("q", credit=100)
    h.pump()
    assert is_destination(h, "M0q") and snd.credit > 0
    d = producer.send(snd, Message(body="first"))
    h.pump()
    [got] = consumer.received(rcv, clear=True)
    assert got.body == "first"
    settle(got, ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED

    rcv.close()
    h.pump()
    assert not is_destination(h, "M0q")
    # What the producer was given before is used up at once and released back; no more comes.
    sent = send_while_credit(h, producer, snd)
    assert all(x.remote_state == RELEASED and x.settled for x in sent)
    h.advance(2)
    assert snd.credit == 0
    assert not uplink_sender(h, "M0q").undelivered
    assert h.routers["E"].edge.tracker.updates >= 2

    consumer2 = h.client("A")
    rcv2 = consumer2.receiver("q", credit=10)
    h.pump()
    assert snd.credit > 0
    producer.send(snd, Message(body="again"))
    h.pump()
    assert [g.body for g in consumer2.received(rcv2)] == ["again"]


def test_what_waits_on_the_uplink_is_released_when_the_last_remote_consumer_goes():
    h = interior_and_edge()
    consumer = h.client("A")
    rcv = consumer.receiver("q", credit=5)      # takes 5, never settles: the interior's credit runs out
    producer = h.client("E")
    snd = producer.sender("q")
    h.pump()
    sent = send_while_credit(h, producer, snd, limit=2000)
    up = uplink_sender(h, "M0q")
    assert up.undelivered                          # waiting at the edge for the interior's credit
    waiting = len(up.undelivered)
    rcv.close()
    h.pump()
    assert not up.undelivered
    assert sum(len(rl.undelivered) for rc in h.routers["E"].connections for rl in rc.links.values()) == 0
    unanswered = [x for x in sent if not x.settled]
    assert unanswered == []
    released = [x for x in sent if x.remote_state == RELEASED]
    assert len(released) >= waiting
    h.advance(2)
    assert snd.credit == 0


def test_the_edges_own_consumer_is_no_reason_to_send_up():
    h = interior_and_edge()
    producer = h.client("E")
    snd = producer.sender("q")
    local = h.client("E")
    rcv = local.receiver("q", credit=50)
    h.pump()
    assert snd.credit > 0                          # the local consumer is a destination
    assert not is_destination(h, "M0q")            # the interior said: nobody else
    for i in range(20):
        producer.send(snd, Message(body=i))
    h.pump()
    assert [g.body for g in local.received(rcv)] == list(range(20))

    remote = h.client("A")
    rcv_a = remote.receiver("q", credit=50)
    h.pump()
    assert is_destination(h, "M0q")
    rcv_a.close()
    h.pump()
    assert not is_destination(h, "M0q")


def test_a_producer_attached_where_a_consumer_exists_is_served_at_once():
    h = interior_and_edge()
    consumer = h.client("A")
    rcv = consumer.receiver("q", credit=10)
    h.pump()
    producer = h.client("E")
    snd = producer.sender("q")
    h.pump()
    assert snd.credit > 0 and is_destination(h, "M0q")
    snd.close()
    h.pump()
    assert "M0q" not in h.routers["E"].edge.can_send
    snd2 = producer.sender("q")
    h.pump()
    assert snd2.credit > 0
    producer.send(snd2, Message(body="x"))
    h.pump()
    assert consumer.bodies(rcv) == ["x"]


def test_an_update_for_an_address_without_a_sender_changes_nothing():
    h = interior_and_edge()
    edge = h.routers["E"].edge
    edge.tracking_update("M0nobody", True)
    edge.tracking_update("M0nobody", False)
    assert "M0nobody" not in h.routers["E"].addresses and not edge.can_send


def test_without_tracking_the_first_credit_makes_the_uplink_a_destination():
    h = interior_and_edge()
    producer = h.client("E")
    snd = producer.sender("q")
    consumer = h.client("A")
    rcv = consumer.receiver("q", credit=10)
    h.pump()
    assert is_destination(h, "M0q")
    rcv.close()
    h.pump()
    assert not is_destination(h, "M0q")
    # The interior detaches the tracking link (as one that does not serve it would).
    [endpoint] = h.routers["A"].edge_tracking.endpoints.values()
    raw.link_object(endpoint.ptr).close()
    endpoint.engine.wake()
    h.pump()
    edge = h.routers["E"].edge
    assert edge.tracking is None
    assert is_destination(h, "M0q")                # it had credit: served as before tracking


def test_a_standby_uplink_that_takes_over_attaches_its_own_tracking_link():
    from tests.unit.router.test_edge_uplinks import second_uplink

    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("E", "A")
    second_uplink(h, "E", "B")
    h.settle_topology()
    producer = h.client("E")
    snd = producer.sender("q")
    consumer = h.client("B")
    rcv = consumer.receiver("q", credit=10)
    h.advance(3)
    assert snd.credit > 0 and is_destination(h, "M0q")
    h.cut("E", "A")
    h.advance(3)
    edge = h.routers["E"].edge
    assert edge.tracking is not None and edge.tracking.conn is edge.uplink
    assert h.routers["B"].edge_tracking.endpoints
    assert is_destination(h, "M0q")
    producer.send(snd, Message(body="after"))
    h.advance(1)
    assert consumer.bodies(rcv) == ["after"]
