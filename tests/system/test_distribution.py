"""Distribution (Qpid Dispatch 1.19 src/router_core/forwarder.c, connections.c, delivery.c): closest,
balanced, multicast, patterns, pre-settled.

Every test runs a real tdrouterd and threaded proton clients (tests/system/clients.py).
"""

from __future__ import annotations

import collections

import pytest

from tests.system.clients import Consumer, Producer, close_all, router_crash_fails_test

pytestmark = pytest.mark.system

TIMEOUT = 15


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    # Depends on router_factory so that clients close before the routers stop.
    yield
    close_all()


def _consumers(url, address, n, **kw):
    return [Consumer(url, address, **kw).start() for _ in range(n)]


def _union_check(consumers, expected_ids):
    """Every id in exactly one consumer, nothing else."""
    all_ids = [i for c in consumers for i in c.ids]
    dups = [i for i, k in collections.Counter(all_ids).items() if k > 1]
    assert not dups, f"delivered more than once: {sorted(dups)[:20]}"
    assert sorted(all_ids) == sorted(expected_ids)


def test_closest_round_robin_across_three(router_factory):
    r = router_factory("address {\n prefix: cl\n distribution: closest\n}")
    n = 300
    cs = _consumers(r.url, "cl/q", 3, credit=20)
    p = Producer(r.url, "cl/q", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    # Settlement is end to end, so every consumer has settled (received) its share by now.
    # Closest among local consumers is strict round robin: exactly a third each.
    assert [c.received() for c in cs] == [n // 3] * 3
    _union_check(cs, range(n))
    # And in send order within each consumer, every third message.
    for c in cs:
        ids = c.ids
        assert ids == sorted(ids)
        assert len({i % 3 for i in ids}) == 1, ids[:10]


@pytest.mark.parametrize("configured", [False, True], ids=["default", "configured"])
def test_balanced_spreads_across_equal_consumers(router_factory, configured):
    sections = "address {\n prefix: bal\n distribution: balanced\n}" if configured else ""
    r = router_factory(sections)
    n = 300
    cs = _consumers(r.url, "bal/q", 3, credit=20)
    p = Producer(r.url, "bal/q", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    # The router settles upstream only after the consumer settled, so all n are received by now.
    counts = [c.received() for c in cs]
    assert sum(counts) == n, counts
    assert min(counts) >= n // 5, f"balanced distribution starved a consumer: {counts}"
    _union_check(cs, range(n))


def test_balanced_avoids_a_consumer_that_does_not_settle(router_factory):
    """Balanced picks the link with the fewest undelivered+unsettled; closest would not care."""
    r = router_factory()
    n = 40
    slow = Consumer(r.url, "bq", credit=100, outcome="hold").start()
    fast = Consumer(r.url, "bq", credit=100).start()
    # Paced so each message finds the fast consumer's previous one already settled.
    p = Producer(r.url, "bq", count=n, interval=0.02).start()
    p.wait_sent(timeout=TIMEOUT)
    fast.wait_for(lambda: fast.received() + slow.received() == n, TIMEOUT, "all messages delivered")
    # slow's backlog only grows, so it is picked again only when fast's backlog is as large; a loaded
    # machine can let fast lag by a few, never by a fifth of the run.
    assert slow.received() <= n // 5, (slow.received(), fast.received())
    p.wait_settled(fast.received(), TIMEOUT)
    assert p.outcomes["accepted"] == fast.received()


def test_multicast_every_consumer_gets_everything(router_factory):
    r = router_factory("address {\n prefix: mc\n distribution: multicast\n}")
    n = 50
    cs = _consumers(r.url, "mc/t", 3, credit=20)
    p = Producer(r.url, "mc/t", count=n).start()
    p.wait(TIMEOUT)
    for c in cs:
        c.wait(TIMEOUT, count=n)
    assert p.outcomes == {"accepted": n}
    for c in cs:
        assert c.ids == list(range(n))
        assert c.bodies == [f"m{i}" for i in range(n)]


@pytest.mark.parametrize(
    "consumer_outcomes, expected",
    [
        (("accept", "accept", "reject"), "rejected"),
        (("release", "reject", "modify"), "rejected"),
        (("release", "accept", "modify"), "accepted"),
        (("release", "modify", "release"), "modified"),
        (("release", "release", "release"), "released"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_unsettled_multicast_merges_outcomes(router_factory, consumer_outcomes, expected):
    """The producer's outcome is the highest priority one: rejected > accepted > modified > released."""
    r = router_factory("address {\n prefix: mc\n distribution: multicast\n}")
    n = 10
    cs = [Consumer(r.url, "mc/x", credit=n, replenish=False, outcome=o).start() for o in consumer_outcomes]
    p = Producer(r.url, "mc/x", count=n).start()
    p.wait(TIMEOUT)
    for c in cs:
        c.wait(TIMEOUT, count=n)
    assert p.outcomes == {expected: n}
    for c in cs:
        assert c.ids == list(range(n))
    if expected == "rejected":
        assert len(p.rejections) == n


PATTERN_CONF = "address {\n pattern: news/*/sports\n distribution: closest\n}"


def test_pattern_address_closest_vs_default_balanced(router_factory):
    """news/*/sports is closest: strict round robin even to a consumer that never settles.
    news/europe/fr/sports does not match the pattern, so it gets the default, balanced."""
    r = router_factory(PATTERN_CONF)
    n = 20
    results = {}
    for address in ("news/europe/sports", "news/europe/fr/sports"):
        slow = Consumer(r.url, address, credit=100, outcome="hold").start()
        fast = Consumer(r.url, address, credit=100).start()
        p = Producer(r.url, address, count=n, interval=0.02).start()
        p.wait_sent(timeout=TIMEOUT)
        fast.wait_for(lambda: fast.received() + slow.received() == n, TIMEOUT, f"{n} deliveries on {address}")
        results[address] = (slow.received(), fast.received())
        _union_check([slow, fast], range(n))
        for c in (p, slow, fast):
            c.close()
    assert results["news/europe/sports"] == (n // 2, n // 2), results
    assert results["news/europe/fr/sports"][0] <= 2, results


def test_pattern_closest_round_robin_order(router_factory):
    """Another address matching news/*/sports: exact round robin, in send order, across three."""
    r = router_factory(PATTERN_CONF)
    n = 30
    cs = _consumers(r.url, "news/usa/sports", 3, credit=100, outcome="hold")
    p = Producer(r.url, "news/usa/sports", count=n).start()
    p.wait_sent(timeout=TIMEOUT)
    for c in cs:
        c.wait(TIMEOUT, count=n // 3)
    # Nobody settles, so balanced would also spread evenly here; closest is exact and in order.
    assert [c.ids for c in cs] == [list(range(k, n, 3)) for k in range(3)]


@pytest.mark.parametrize("distribution", [
    "closest",
    "balanced",
    "multicast",
])
def test_presettled_producer(router_factory, distribution):
    r = router_factory(f"address {{\n prefix: ps\n distribution: {distribution}\n}}")
    with router_crash_fails_test(r):
        _presettled_producer(r, distribution)


def _presettled_producer(r, distribution):
    n = 60
    cs = _consumers(r.url, "ps/q", 2, credit=100)
    p = Producer(r.url, "ps/q", count=n, presettled=True).start()
    p.wait(TIMEOUT)
    if distribution == "multicast":
        for c in cs:
            c.wait(TIMEOUT, count=n)
            assert c.ids == list(range(n))
    else:
        cs[0].wait_for(lambda: sum(c.received() for c in cs) >= n, TIMEOUT, f"{n} deliveries")
        _union_check(cs, range(n))
    # Pre-settled in, pre-settled out (the router cannot pass an outcome back); and nothing comes back.
    assert sum(c.presettled_received for c in cs) == sum(c.received() for c in cs)
    assert p.outcomes == {}
    assert not p.link_errors and not p.transport_errors
