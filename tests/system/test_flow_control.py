"""Credit-based flow control (Qpid Dispatch 1.19 src/router_core/connections.c): no credit without a
destination,
release on consumer detach, credit withheld after the last consumer leaves, linkCapacity."""

from __future__ import annotations

import time

import pytest

from tests.system.clients import Consumer, Producer, close_all, router_crash_fails_test

pytestmark = pytest.mark.system

TIMEOUT = 15


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    yield
    close_all()


def _each_accepted_once(p: Producer, ids) -> None:
    for i in ids:
        assert p.outcome_of[i].count("accepted") == 1, (i, p.outcome_of[i])


def test_no_credit_without_consumer_then_all_arrive(router):
    n = 40
    p = Producer(router.url, "fc.nobody", count=n).start()
    time.sleep(0.5)
    # A targeted sender gets credit only once its address has a destination.
    assert p.max_credit == 0, p.credit_history
    assert p.sent == 0
    assert p.outcomes == {}
    c = Consumer(router.url, "fc.nobody", credit=20).start()
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=n)
    assert p.outcomes == {"accepted": n}
    assert sorted(c.ids) == list(range(n))
    assert len(c.ids) == n  # exactly once
    assert p.max_credit == 250  # linkCapacity default, granted when the consumer appeared


@pytest.mark.parametrize("how", ["detach", "disconnect"])
def test_consumer_leaves_with_unsettled_deliveries(router, how):
    """Queued copies are released, sent-but-unsettled ones modified; none is lost, and resending
    the non-accepted ones to a new consumer delivers each exactly once."""
    n, credit, accept = 20, 7, 2
    c1 = Consumer(router.url, "fc.q", credit=credit, replenish=False,
                  outcome=lambda m, i: "accept" if i < accept else "hold").start()
    p = Producer(router.url, "fc.q", count=n).start()
    p.wait_sent(timeout=TIMEOUT)
    c1.wait(TIMEOUT, count=credit)
    p.wait_settled(accept, TIMEOUT)
    time.sleep(0.1)
    assert c1.received() == credit  # the router respects the consumer's credit
    assert p.outcomes == {"accepted": accept}
    if how == "detach":
        c1.close_link()
    else:
        c1.close()
    p.wait_settled(n, TIMEOUT)
    assert sum(p.outcomes.values()) == n, p.outcomes
    assert p.outcomes["accepted"] + p.outcomes["released"] + p.outcomes["modified"] == n
    assert p.outcomes["accepted"] == accept
    # Never sent to the consumer -> released; sent but not settled -> modified (delivery-failed).
    assert p.outcomes["modified"] == credit - accept, p.outcomes
    assert p.outcomes["released"] == n - credit, p.outcomes
    assert all(failed for _, failed, _ in p.modified_info), p.modified_info

    again = p.ids_with("released", "modified")
    assert again == sorted(set(range(n)) - set(range(accept)))
    c2 = Consumer(router.url, "fc.q", credit=50).start()
    p.send(again)
    p.wait_settled(n + len(again), TIMEOUT)
    c2.wait(TIMEOUT, count=len(again))
    assert sorted(c2.ids) == again
    assert p.outcomes["accepted"] == n
    _each_accepted_once(p, range(n))


def test_credit_withheld_after_last_consumer_leaves(router_factory):
    r = router_factory(listener_extra="linkCapacity: 10")
    c1 = Consumer(r.url, "fc.w", credit=50).start()
    p = Producer(r.url, "fc.w", count=10).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": 10}
    p.wait_for(lambda: p.credit == 10, TIMEOUT, "credit back to linkCapacity")
    c1.close()
    time.sleep(0.3)
    # Leftover credit: these go nowhere and are released, and their credit does not come back.
    p.send(range(10, 14))
    p.wait_settled(14, TIMEOUT)
    assert p.outcomes == {"accepted": 10, "released": 4}
    time.sleep(0.5)
    assert p.credit == 6, p.credit_history[-5:]
    assert p.sent == 14
    # A destination reappears: the withheld credit is topped back up.
    c2 = Consumer(r.url, "fc.w", credit=50).start()
    p.wait_for(lambda: p.credit == 10, TIMEOUT, "withheld credit to come back")
    p.send(range(10, 14))
    p.wait_settled(18, TIMEOUT)
    c2.wait(TIMEOUT, count=4)
    assert c2.ids == [10, 11, 12, 13]
    assert p.outcomes == {"accepted": 14, "released": 4}
    assert p.max_credit == 10


@pytest.mark.parametrize("capacity", [None, 10, 3])
def test_link_capacity_is_initial_credit(router_factory, capacity):
    extra = f"linkCapacity: {capacity}" if capacity else ""
    r = router_factory(listener_extra=extra)
    c = Consumer(r.url, "fc.cap", credit=10).start()
    p = Producer(r.url, "fc.cap", count=0).start()
    want = capacity or 250
    p.wait_for(lambda: p.max_credit > 0, TIMEOUT, "initial credit")
    time.sleep(0.2)
    assert p.credit == want
    assert p.max_credit == want
    # Credit comes back as messages leave, and never beyond the capacity.
    p.send(range(2 * want))
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=2 * want)
    p.wait_for(lambda: p.credit == want, TIMEOUT, "credit back to capacity")
    assert p.max_credit == want
    assert p.outcomes == {"accepted": 2 * want}


def test_router_respects_consumer_credit_and_drain(router):
    c = Consumer(router.url, "fc.cr", credit=5, replenish=False).start()
    p = Producer(router.url, "fc.cr", count=12).start()
    c.wait(TIMEOUT, count=5)
    time.sleep(0.3)
    assert c.ids == [0, 1, 2, 3, 4]
    c.add_credit(4)
    c.wait(TIMEOUT, count=9)
    time.sleep(0.3)
    assert c.ids == list(range(9))
    # Drain with 3 queued and 10 credit: the 3 come, the other 7 credits are given back.
    c.add_credit(10)
    c.drain()
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=12)
    c.wait_for(lambda: c.link_credit == 0, TIMEOUT, "drained credit")
    assert c.ids == list(range(12))
    assert p.outcomes == {"accepted": 12}


def test_multicast_credit_stays_within_capacity(router_factory):
    r = router_factory("address {\n prefix: mc\n distribution: multicast\n}",
                       listener_extra="linkCapacity: 10")
    with router_crash_fails_test(r):
        cs = [Consumer(r.url, "mc/fc", credit=100).start() for _ in range(3)]
        p = Producer(r.url, "mc/fc", count=30).start()
        p.wait(TIMEOUT)
        for c in cs:
            c.wait(TIMEOUT, count=30)
        time.sleep(0.2)
        assert p.outcomes == {"accepted": 30}
        assert p.max_credit <= 10, p.credit_history
        assert p.credit == 10
