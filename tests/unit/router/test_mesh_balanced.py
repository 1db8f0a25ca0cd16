"""Balanced (and closest) distribution across routers in-process, with Qpid Dispatch 1.19's weighting
(src/router_core/forwarder.c, qdr_forward_balanced_CT): a local link weighs its undelivered + unsettled
deliveries, a neighbour the address's unsettled deliveries sent to it plus the path cost to the cheapest
router behind it with a destination; ties stay local. Receivers here never settle, so the split depends
on nothing but the algorithm (the derivation is in tests/system/test_dispatch_compat_routing.py)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, AddressEntity, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def _line(middle_receiver: bool):
    h = MeshHarness("A", "B", "C")
    h.link("A", "B", cost=10)
    h.link("B", "C", cost=20)
    clients = {r: h.client(r) for r in "ABC"}
    receivers = {r: clients[r].receiver("work", credit=200) for r in ("ABC" if middle_receiver else "AC")}
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("work")
    h.pump()
    return h, clients, receivers, prod, snd


def _counts(clients, receivers):
    return tuple(len(clients[r].received(receivers[r])) if r in receivers else 0 for r in "ABC")


@pytest.mark.parametrize("middle, expected", [(False, (65, 0, 35)), (True, (55, 33, 12))])
def test_unsettled_split_along_a_weighted_line(middle, expected):
    h, clients, receivers, prod, snd = _line(middle)
    assert h.routers["A"].costs["C"] == 30
    for i in range(100):
        prod.send(snd, Message(body=i))
    h.pump()
    assert _counts(clients, receivers) == expected


def test_settled_remote_deliveries_stop_weighing_the_neighbour():
    """Once C settles what it holds, its count at A falls to zero. A still holds 65 unsettled, so C (0 + 30)
    is lighter until 35 more are outstanding there: every one of the next 35 goes to C."""
    h, clients, receivers, prod, snd = _line(False)
    ds = [prod.send(snd, Message(body=i)) for i in range(100)]
    h.pump()
    assert _counts(clients, receivers) == (65, 0, 35)
    for got in clients["C"].received(receivers["C"]):
        settle(got, ACCEPTED)
    h.pump()
    assert sum(1 for d in ds if d.settled) == 35
    assert h.routers["A"].addresses["M0work"].outstanding == {}
    for i in range(100, 135):
        prod.send(snd, Message(body=i))
    h.pump()
    assert _counts(clients, receivers) == (65, 0, 70)


def test_deliveries_outstanding_at_the_only_router_weigh_a_consumer_that_comes_later():
    """40 unsettled messages went to C, the only router with a receiver; then a receiver attaches on A.
    C now weighs 40 + 30, so A keeps the next 71 (while a <= 70) and then they alternate: of 100 more, A
    gets 71 + 14 = 85 and C 15 (55 in all)."""
    h = MeshHarness("A", "B", "C")
    h.link("A", "B", cost=10)
    h.link("B", "C", cost=20)
    far = h.client("C")
    rc = far.receiver("late", credit=200)
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("late")
    h.pump()
    for i in range(40):
        prod.send(snd, Message(body=i))
    h.pump()
    near = h.client("A")
    ra = near.receiver("late", credit=200)
    h.pump()
    for i in range(40, 140):
        prod.send(snd, Message(body=i))
    h.pump()
    assert (len(near.received(ra)), len(far.received(rc))) == (85, 55)


def test_closest_round_robins_over_the_routers_at_the_least_cost():
    """closest, no local consumer, two routers at the same cost: they take turns (Dispatch 1.19
    qdr_forward_closest_CT, closest_remotes); a costlier one gets nothing."""
    h = MeshHarness("A", "B", "C", "D", address_entities=[AddressEntity("near", distribution="closest")])
    h.link("A", "B")
    h.link("A", "C")
    h.link("A", "D", cost=5)
    clients = {r: h.client(r) for r in "BCD"}
    receivers = {r: clients[r].receiver("near", credit=100) for r in "BCD"}
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("near")
    h.pump()
    for i in range(10):
        prod.send(snd, Message(body=i))
    h.pump()
    assert [len(clients[r].received(receivers[r])) for r in "BCD"] == [5, 5, 0]
