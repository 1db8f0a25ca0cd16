"""router/routedstreams.py: large deliveries on link-routed pairs stream frame by frame, tags and outcomes
kept, aborts passed on, the router holding none of the message."""

from __future__ import annotations

import os

from proton import Message

from tests.unit.enginepair import ACCEPTED, MODIFIED, encode
from tests.unit.router.fixtures import broker_answers
from tests.unit.router.test_linkroutes import harness

BIG = 3 * 1024 * 1024


def routed_pair():
    h = harness()
    broker = h.connect(name="broker")
    client = h.connect()
    snd = client.sender("test.big", name="big-sender")
    h.pump()
    [b_rcv] = broker_answers(broker)
    h.pump()
    b_rcv.flow(5)
    h.pump()
    return h, broker, client, snd, b_rcv


def big() -> bytes:
    return encode(Message(body=os.urandom(BIG)))


def test_large_routed_delivery_streams_with_its_tag_and_outcome():
    h, broker, client, snd, b_rcv = routed_pair()
    data = big()
    d = client.send(snd, data, tag=b"huge-1")
    h.pump()
    [got] = broker.received(b_rcv)
    assert got.data == data and got.delivery.tag == "huge-1"
    streams = h.router.link_router.streams
    assert streams.started == 1 and not streams and not h.router.assembly
    got.delivery.update(ACCEPTED)
    got.delivery.settle()
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled
    client.send(snd, body="small")  # the pair carries on
    h.pump()
    assert broker.received(b_rcv)[-1].body == "small"


def test_aborted_routed_delivery_is_aborted_at_the_container():
    h, broker, client, snd, b_rcv = routed_pair()
    data = big()
    d = snd.delivery(b"half")
    snd.send(data[: len(data) // 2])
    h.pump()
    assert h.router.link_router.streams.started == 1
    d.abort()
    h.pump()
    assert broker.received(b_rcv) == [] and h.router.link_router.streams.aborted == 1
    client.send(snd, body="after")
    h.pump()
    assert [r.body for r in broker.received(b_rcv)] == ["after"]


def test_container_leaving_mid_delivery_ends_the_client_link():
    h, broker, client, snd, b_rcv = routed_pair()
    data = big()
    d = snd.delivery(b"m")
    snd.send(data[: len(data) // 2])
    h.pump()
    h.drop(broker)
    assert not h.router.link_router.streams
    assert snd.remote_condition is not None  # routed-link-lost
    assert d.remote_state in (0, MODIFIED)
