"""Per-address delivery counters across routers, as Qpid Dispatch 1.19 keeps them (src/router_core/
transfer.c qdr_link_forward_CT, forwarder.c): deliveriesIngress where a message came in from a client,
deliveriesEgress per copy to a client link, deliveriesTransit per copy sent to another router, counted by
every router that sends one (the ingress router included)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def _counters(router, key):
    addr = router.addresses.get(key)
    return (addr.deliveries_ingress, addr.deliveries_egress, addr.deliveries_transit) if addr else None


def test_two_hops_count_transit_on_every_router_that_forwards():
    h = MeshHarness("A", "B", "C")
    h.link("A", "B")
    h.link("B", "C")
    cons = h.client("C")
    rcv = cons.receiver("far", credit=10)
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("far")
    h.pump()
    for i in range(5):
        prod.send(snd, Message(body=i))
    h.pump()
    for got in cons.received(rcv):
        settle(got, ACCEPTED)
    h.pump()
    routers = h.routers
    assert _counters(routers["A"], "M0far") == (5, 0, 5)
    assert _counters(routers["B"], "M0far") == (0, 0, 5)
    assert _counters(routers["C"], "M0far") == (0, 5, 0)
    assert [routers[r].deliveries_transit for r in "ABC"] == [5, 5, 0]
