"""Edge routers (router/edge.py) in process: the uplink's standby and take-over, and messages to an edge's
dynamic addresses from link-addressed producers elsewhere in the mesh (issue 13)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, Pipe, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def second_uplink(h: MeshHarness, eid: str, interior: str) -> Pipe:
    """Another ``role: edge`` connection from edge ``eid`` (already added) to ``interior``."""
    e, ri = h.routers[eid], h.routers[interior]
    ee = e.new_engine(e.connection_settings(role="edge", name=f"uplink-{interior}"), server=False)
    ei = ri.new_engine(ri.connection_settings(role="edge", name=f"edge-{eid}"), server=True)
    pipe = Pipe(ee, ei)
    pipe.engines = (ee, ei)
    h.pipes.append(pipe)
    h.links[(eid, interior)] = pipe
    h.pump()
    return pipe


def links_on_edge_connections(router) -> int:
    return sum(len(rc.links) for rc in router.connections if rc.role == "edge")


def test_a_targeted_producer_on_another_interior_reaches_an_edge_dynamic_receiver():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("E", "A")
    h.settle_topology()
    client = h.client("E")
    rcv = client.receiver(None, credit=5, dynamic=True)
    h.pump()
    reply_to = rcv.remote_source.address
    assert reply_to.startswith("amqp:/_edge/E/temp.")
    h.advance(3)
    prod = h.client("B")
    snd = prod.sender(reply_to)      # link-addressed: the messages carry no 'to'
    h.advance(1)
    assert snd.credit > 0
    d = prod.send(snd, Message(body="reply"))
    h.pump()
    got = client.received(rcv)
    assert [g.body for g in got] == ["reply"]
    assert not got[0].message.annotations   # no router annotations reach the client
    settle(got[0], ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled


def test_two_uplinks_one_active_one_standby_and_take_over():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("E", "A")
    second_uplink(h, "E", "B")
    h.settle_topology()
    edge = h.routers["E"].edge
    assert edge.uplink is not None and len(edge.standby) == 1
    consumer = h.client("E")
    rcv = consumer.receiver("edge.q", credit=10)
    h.advance(3)
    # Only the active uplink carries the edge's links.
    assert links_on_edge_connections(h.routers["A"]) > 0
    assert links_on_edge_connections(h.routers["B"]) == 0
    h.cut("E", "A")
    assert edge.standby == [] and edge.uplink is not None and edge.uplink.role == "edge"
    h.advance(3)
    assert links_on_edge_connections(h.routers["B"]) > 0
    prod = h.client("B")
    snd = prod.sender("edge.q")
    h.advance(1)
    assert snd.credit > 0
    prod.send(snd, Message(body="after"))
    h.pump()
    assert [g.body for g in consumer.received(rcv)] == ["after"]


def test_a_standby_that_closes_is_forgotten():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("E", "A")
    second_uplink(h, "E", "B")
    h.settle_topology()
    edge = h.routers["E"].edge
    active = edge.uplink
    h.cut("E", "B")
    assert edge.standby == [] and edge.uplink is active
