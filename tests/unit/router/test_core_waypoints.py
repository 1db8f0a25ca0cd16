"""Waypoint phases and endpoint-declared waypoints (Qpid Dispatch 1.19 src/router_core/terminus.c and its
book's brokered-messaging chapters), driven in memory.

A container (a broker) declares itself waypoint N with the capability ``qd.waypoint`` (N = 1) or
``qd.waypoint.N`` on the terminus that names the node, as a single symbol or an array of symbols: its
receiving link consumes phase N-1 and its sending link produces phase N.
"""

from __future__ import annotations

import proton
import pytest
from proton import Data, symbol

from wire.terminus import waypoint_ordinal
from tests.unit.enginepair import ACCEPTED, AddressEntity, RouterHarness, settle


def _capable(link, capability: str, as_array: bool) -> None:
    terminus = link.source if link.is_receiver else link.target
    if as_array:
        terminus.capabilities.put_object(proton.Array(proton.UNDESCRIBED, Data.SYMBOL, symbol(capability)))
    else:
        terminus.capabilities.put_object(symbol(capability))


def waypoint_container(h, address: str, capability: str = "qd.waypoint", *, as_array: bool = True,
                       credit: int = 50):
    """A broker-like peer: a receiver (consumes the ingress phase) and a sender (produces the next one)."""
    peer = h.connect()
    rcv = peer.receiver(address, open=False)
    _capable(rcv, capability, as_array)
    rcv.open()
    rcv.flow(credit)
    snd = peer.sender(address, open=False)
    _capable(snd, capability, as_array)
    snd.open()
    h.pump()
    return peer, rcv, snd


@pytest.mark.parametrize("caps, expected", [
    (None, None),
    ([symbol("qd.waypoint")], 1),
    (symbol("qd.waypoint"), 1),
    (symbol("qd.waypoint.3"), 3),
    ([symbol("other"), symbol("qd.waypoint.9")], 9),
    (symbol("qd.waypoint.10"), None),
    (symbol("qd.waypoint.x"), None),
    ([symbol("qd.fallback")], None),
])
def test_waypoint_ordinal(caps, expected):
    conn = proton.Connection()  # kept referenced: the link's terminus lives inside it
    link = conn.session().sender("x")
    t = link.target
    if isinstance(caps, list):
        t.capabilities.put_object(proton.Array(proton.UNDESCRIBED, Data.SYMBOL, *caps))
    elif caps is not None:
        t.capabilities.put_object(caps)
    assert waypoint_ordinal(t) == expected


@pytest.mark.parametrize("as_array", [True, False])
def test_brokered_flow_through_a_waypoint_container(as_array):
    h = RouterHarness(address_entities=[AddressEntity("queue", waypoint=True)])
    producer = h.connect()
    snd = producer.sender("queue")
    h.pump()
    assert snd.credit == 0  # phase 0 has no destination yet

    broker, b_rcv, b_snd = waypoint_container(h, "queue", as_array=as_array)
    assert snd.credit == 250  # the broker's receiving link is phase 0's destination
    assert b_snd.credit == 0  # phase 1 has no consumer: the broker is not asked for anything yet

    sent = [producer.send(snd, body=f"m{i}") for i in range(3)]
    h.pump()
    stored = broker.received(b_rcv, clear=True)
    assert [r.body for r in stored] == ["m0", "m1", "m2"]
    assert all(not d.settled for d in sent)  # end to end: settled only when the broker settles
    for r in stored:
        settle(r, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED and d.settled for d in sent)

    consumer = h.connect()
    c_rcv = consumer.receiver("queue", credit=10)  # egress phase 1
    h.pump()
    assert b_snd.credit == 250  # now the router pulls from the broker
    forwarded = [broker.send(b_snd, body=r.body) for r in stored]
    h.pump()
    assert consumer.bodies(c_rcv) == ["m0", "m1", "m2"]
    for r in consumer.received(c_rcv):
        settle(r, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in forwarded)


def test_waypoint_chain_with_phases_declared_by_two_containers():
    """ingressPhase 0 / egressPhase 2: broker A (qd.waypoint.1) then broker B (qd.waypoint.2)."""
    h = RouterHarness(address_entities=[AddressEntity("chain", ingressPhase=0, egressPhase=2)])
    a, a_rcv, a_snd = waypoint_container(h, "chain", "qd.waypoint.1")
    b, b_rcv, b_snd = waypoint_container(h, "chain", "qd.waypoint.2")
    consumer = h.connect()
    c_rcv = consumer.receiver("chain", credit=10)
    producer = h.connect()
    snd = producer.sender("chain")
    h.pump()

    producer.send(snd, body="x", settled=True)
    h.pump()
    assert a.bodies(a_rcv) == ["x"] and b.bodies(b_rcv) == [] and consumer.bodies(c_rcv) == []
    a.send(a_snd, body="x", settled=True)  # phase 1 -> broker B
    h.pump()
    assert b.bodies(b_rcv) == ["x"] and consumer.bodies(c_rcv) == []
    b.send(b_snd, body="x", settled=True)  # phase 2 -> the consumer
    h.pump()
    assert consumer.bodies(c_rcv) == ["x"]
