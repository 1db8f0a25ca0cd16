"""A sender with a dynamic target (what Dispatch's tests call an anonymous sender): its router gives it a
mobile address ``_$temp.<id>``, balanced, that a receiver on any router can attach to (Qpid Dispatch 1.19
src/router_core/modules/address_lookup_client/address_lookup_client.c)."""

from __future__ import annotations

import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def test_dynamic_target_gets_a_mobile_address_reachable_from_another_router():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender(open=False)
    snd.target.dynamic = True
    snd.open()
    h.pump()
    address = snd.remote_target.address
    assert snd.remote_target.dynamic and address.startswith("amqp:/_$temp."), address
    assert snd.credit == 0, "no receiver anywhere yet"
    assert h.routers["A"].addresses["M0" + address[len("amqp:/"):]].distribution == "balanced"
    cons = h.client("B")
    rcv = cons.receiver(address, credit=10)
    h.settle_topology(3)
    assert snd.credit > 0
    ds = [prod.send(snd, Message(body=i)) for i in range(3)]
    h.pump()
    got = cons.received(rcv)
    assert [g.message.body for g in got] == [0, 1, 2]
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED and d.settled for d in ds)


def test_two_dynamic_targets_get_different_addresses():
    h = MeshHarness("A")
    prod = h.client("A")
    addresses = set()
    for _ in range(2):
        snd = prod.sender(open=False)
        snd.target.dynamic = True
        snd.open()
        h.pump()
        addresses.add(snd.remote_target.address)
    assert len(addresses) == 2
