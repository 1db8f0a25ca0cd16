"""Unsettled multicast whose consumers give their outcome without settling (rcv-settle-mode second, Qpid
Dispatch's 3-ack tests, tests/system_tests_multicast.py MulticastUnsettled3Ack): the router settles each
consumer's copy, gives the producer the merged outcome *unsettled*, and settles the producer's delivery
once the producer has settled (Dispatch 1.19 src/router_core/delivery.c)."""

from __future__ import annotations

from tests.unit.enginepair import ACCEPTED, REJECTED, AddressEntity, RouterHarness, settle


def _setup(n=3):
    h = RouterHarness(address_entities=[AddressEntity("mc", distribution="multicast")])
    prod = h.connect()
    conss = [h.connect() for _ in range(n)]
    rcvs = [c.receiver("mc/x", credit=10) for c in conss]
    snd = prod.sender("mc/x")
    h.pump()
    return h, prod, snd, conss, rcvs


def test_outcomes_without_settlement_reach_the_producer_unsettled():
    h, prod, snd, conss, rcvs = _setup()
    d = prod.send(snd, body="fan")
    h.pump()
    copies = [c.received(r)[0] for c, r in zip(conss, rcvs)]
    for copy, state in zip(copies, (ACCEPTED, REJECTED, ACCEPTED)):
        settle(copy, state, settle=False)
        h.pump()
    assert all(copy.delivery.settled for copy in copies), "the router settles each consumer's copy"
    assert d.remote_state == REJECTED and not d.settled, "merged outcome, producer settles first"
    d.settle()
    h.pump()
    # nothing is left waiting for the producer: the same link goes on working
    d2 = prod.send(snd, body="again")
    h.pump()
    for c, r in zip(conss, rcvs):
        settle(c.received(r)[-1], ACCEPTED)
    h.pump()
    assert d2.remote_state == ACCEPTED and d2.settled


def test_consumers_that_settle_settle_the_producer_at_once():
    h, prod, snd, conss, rcvs = _setup()
    d = prod.send(snd, body="fan")
    h.pump()
    for c, r in zip(conss, rcvs):
        settle(c.received(r)[0], ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled


def test_a_producer_that_goes_away_leaves_nothing_waiting():
    h, prod, snd, conss, rcvs = _setup()
    prod.send(snd, body="fan")
    h.pump()
    for c, r in zip(conss, rcvs):
        settle(c.received(r)[0], ACCEPTED, settle=False)
    h.pump()
    forwarder = h.router.forwarder
    assert forwarder.awaiting_producers == 1
    snd.close()
    h.pump()
    assert forwarder.awaiting_producers == 0
