"""Dispatch's edge address tracking on an interior router (router/edgetracking.py), driven in memory: a
proton peer on a ``role: edge`` connection plays a Qpid Dispatch edge router (Qpid Dispatch 1.19
src/router_core/modules/edge_addr_tracking/edge_addr_tracking.c)."""

from __future__ import annotations

import pytest
from proton import Endpoint

from router.edgetracking import TRACKING_ADDRESS, TRACKING_KEY, TrackingLink, tracking_message
from tests.unit.enginepair import decode
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def dispatch_edge(h: MeshHarness, rid: str = "A", credit: int = 50):
    """A peer on an interior's edge listener with its tracking receiver attached."""
    edge = h.client(rid, role="edge", name="edge-E1")
    tracker = edge.receiver(TRACKING_ADDRESS, credit=credit)
    h.pump()
    return edge, tracker


def updates(edge, tracker) -> list:
    """The [key, can_send] bodies received so far (cleared); every one pre-settled."""
    got = edge.received(tracker, clear=True)
    assert all(g.settled for g in got)
    return [g.body for g in got]


def test_an_interior_serves_the_tracking_address_and_other_modes_do_not():
    from router.core import Router

    addr = Router("I", mode="interior").addresses[TRACKING_KEY]
    assert addr.distribution == "balanced" and addr.handler is not None
    assert TRACKING_KEY not in Router("S").addresses
    assert TRACKING_KEY not in Router("E", mode="edge").addresses


def test_the_edge_is_told_when_its_address_gains_and_loses_a_consumer():
    h = MeshHarness("A")
    edge, tracker = dispatch_edge(h)
    assert tracker.state & Endpoint.REMOTE_ACTIVE
    snd = edge.sender("X")
    h.pump()
    assert updates(edge, tracker) == []          # no consumer anywhere: nothing to tell
    client = h.client("A")
    rcv = client.receiver("X", credit=5)
    h.pump()
    got = edge.received(tracker, clear=True)
    assert [g.body for g in got] == [["M0X", True]]
    assert got[0].message.durable is False and got[0].settled
    rcv.close()
    h.pump()
    assert updates(edge, tracker) == [["M0X", False]]
    assert snd.state & Endpoint.REMOTE_ACTIVE
    # No tracking link is a destination of the address (Dispatch's core endpoints are not rlinks).
    assert not h.routers["A"].addresses[TRACKING_KEY].rlinks


def test_the_edges_own_consumer_is_no_reason_to_send_up():
    h = MeshHarness("A")
    edge, tracker = dispatch_edge(h)
    edge.sender("X")
    own = edge.receiver("X", credit=5)            # the edge's uplink receiver for its own consumer
    h.pump()
    assert updates(edge, tracker) == []
    client = h.client("A")
    rcv = client.receiver("X", credit=5)
    h.pump()
    assert updates(edge, tracker) == [["M0X", True]]    # one local destination to two
    rcv.close()
    h.pump()
    assert updates(edge, tracker) == [["M0X", False]]   # back to one, on the edge's own connection
    own.close()
    h.pump()
    assert updates(edge, tracker) == []


def test_a_consumer_on_another_router_of_the_mesh_counts():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    edge, tracker = dispatch_edge(h, "A")
    edge.sender("X")
    h.pump()
    client = h.client("B")
    rcv = client.receiver("X", credit=5)
    h.advance(2)
    assert updates(edge, tracker) == [["M0X", True]]
    rcv.close()
    h.advance(2)
    assert updates(edge, tracker) == [["M0X", False]]


def test_losing_the_router_with_the_consumer_tells_the_edge():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    edge, tracker = dispatch_edge(h, "A")
    edge.sender("X")
    h.client("B").receiver("X", credit=5)
    h.advance(2)
    assert updates(edge, tracker) == [["M0X", True]]
    h.cut("A", "B")
    h.advance(6)
    assert updates(edge, tracker) == [["M0X", False]]


def test_a_producer_attaching_where_a_consumer_exists_is_told_at_once_and_again_after_reattaching():
    h = MeshHarness("A")
    h.client("A").receiver("X", credit=5)
    edge, tracker = dispatch_edge(h)
    snd = edge.sender("X")
    h.pump()
    assert updates(edge, tracker) == [["M0X", True]]
    snd.close()
    h.pump()
    assert updates(edge, tracker) == []
    edge.sender("X")
    h.pump()
    assert updates(edge, tracker) == [["M0X", True]]   # a new producer hears its state, as in Dispatch


def test_producers_attached_before_the_tracking_link_are_told():
    h = MeshHarness("A")
    h.client("A").receiver("X", credit=5)
    edge = h.client("A", role="edge", name="edge-E1")
    edge.sender("X")
    edge.sender("Y")
    h.pump()
    tracker = edge.receiver(TRACKING_ADDRESS, credit=10)
    h.pump()
    assert updates(edge, tracker) == [["M0X", True]]


def test_without_credit_only_the_latest_value_waits():
    h = MeshHarness("A")
    edge, tracker = dispatch_edge(h, credit=0)
    edge.sender("X")
    edge.sender("Y")
    client = h.client("A")
    h.pump()
    rx = client.receiver("X", credit=5)
    h.pump()
    rx.close()                                   # X flips back before the edge could hear: nothing
    h.pump()
    client.receiver("Y", credit=5)
    client.receiver("X", credit=5)
    h.pump()
    tracker.flow(1)
    h.pump()
    assert updates(edge, tracker) == [["M0Y", True]]
    tracker.flow(5)
    h.pump()
    assert updates(edge, tracker) == [["M0X", True]]


def test_other_edges_and_plain_clients_are_tracked_separately():
    h = MeshHarness("A")
    e1, t1 = dispatch_edge(h)
    e2 = h.client("A", role="edge", name="edge-E2")
    t2 = e2.receiver(TRACKING_ADDRESS, credit=5)
    e1.sender("X")
    h.client("A").sender("X")                     # a plain client's producer is not tracked
    h.pump()
    e2.receiver("X", credit=5)                    # E2's consumer is a destination for E1, not for E2
    h.pump()
    assert updates(e1, t1) == [["M0X", True]]
    assert updates(e2, t2) == []


@pytest.mark.parametrize("role, as_sender", [("normal", False), ("edge", True), ("route-container", False)])
def test_other_tracking_attaches_are_detached_without_error(role, as_sender):
    h = MeshHarness("A")
    peer = h.client("A", role=role)
    link = peer.sender(TRACKING_ADDRESS) if as_sender else peer.receiver(TRACKING_ADDRESS, credit=5)
    h.pump()
    assert link.state & Endpoint.REMOTE_CLOSED
    assert link.remote_condition is None
    assert not h.routers["A"].edge_tracking.endpoints
    assert not h.routers["A"].addresses[TRACKING_KEY].rlinks


def test_the_tracking_endpoint_goes_with_its_link_or_connection():
    h = MeshHarness("A")
    edge, tracker = dispatch_edge(h)
    tracking = h.routers["A"].edge_tracking
    assert len(tracking.endpoints) == 1
    tracker.close()
    h.pump()
    assert not tracking.endpoints
    edge2, _ = dispatch_edge(h)
    assert len(tracking.endpoints) == 1
    edge2.connection.close()
    h.pump()
    assert not tracking.endpoints


def test_the_message_is_dispatchs_form():
    msg = decode(tracking_message("M0queue", True))
    assert msg.durable is False and msg.body == ["M0queue", True]
    assert tracking_message("M0q", False).startswith(b"\x00\x53\x70\xc0\x02\x01\x42")   # header [false]


def test_decisions_send_only_changes():
    class Conn:
        engine = None

    ep = TrackingLink(None, Conn(), None)
    ep.decide("M0a", False)
    assert ep.pending == {}                       # an edge presumes false
    ep.decide("M0a", True)
    ep.decide("M0b", True)
    assert ep.pending == {"M0a": True, "M0b": True}
    ep.decide("M0a", False)                       # flipped back before it was sent
    assert ep.pending == {"M0b": True}
    ep.told["M0b"] = ep.pending.pop("M0b")
    ep.decide("M0b", True)
    assert ep.pending == {}
    ep.decide("M0b", False)
    assert ep.pending == {"M0b": False}
    ep.forget("M0b")
    assert ep.pending == {} and ep.told == {}
