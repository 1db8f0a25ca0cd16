"""The router's memory budget (router/budget.py), in-process: who is paused, who keeps flowing, when
reading resumes, and what stops output to a consumer that does not keep up.

The in-memory pipes honour a paused reader the way TCP does: bytes wait in the sender's buffers.
"""

from __future__ import annotations

import gc

import pytest

from router.budget import BufferBudget
from router.core import Router
from router.forwarder import unsettled_bytes
from tests.unit.enginepair import ACCEPTED, Peer, RouterHarness, encode

KIB = 1024
BODY = b"x" * (10 * KIB)  # each message ~10 KiB encoded


def harness(clock=None, **budget_kw) -> RouterHarness:
    return RouterHarness(Router("R1", budget=BufferBudget(**budget_kw), clock=clock))


def flood(h: RouterHarness, peer: Peer, snd, n: int) -> list:
    out = [peer.send(snd, body=BODY) for _ in range(n)]
    h.pump()
    return out


def held(h, peer) -> int:
    return peer.router_engine.app.held


def accept_all(h: RouterHarness, cons: Peer, rcv, rounds: int = 20) -> int:
    """Pump, accepting and settling whatever arrives, until nothing more does; how many arrived."""
    n = 0
    for _ in range(rounds):
        h.pump()
        got = cons.received(rcv, clear=True)
        if not got:
            return n
        n += len(got)
        for r in got:
            r.delivery.update(ACCEPTED)
            r.delivery.settle()
    return n


def test_a_producer_over_its_connection_limit_is_paused_and_resumes_when_drained():
    h = harness(max_connection_bytes=100 * KIB, max_bytes=100 * 1024 * KIB)
    cons = h.connect()
    rcv = cons.receiver("q", credit=0)  # a consumer that grants no credit yet
    prod = h.connect()
    snd = prod.sender("q")
    h.pump()
    assert snd.credit == 250
    flood(h, prod, snd, 50)
    engine = prod.router_engine
    assert engine.read_paused
    # What the router holds stops a little past the limit: the bytes it had already read.
    assert 100 * KIB < held(h, prod) < 150 * KIB
    assert h.router.budget.pauses == 1
    # The consumer's connection is not paused: it holds nothing, and its credit is what drains the backlog.
    assert not cons.router_engine.read_paused
    rcv.flow(100)
    assert accept_all(h, cons, rcv) == 50  # every message arrives once reading resumed
    assert not engine.read_paused
    assert h.router.budget.total == 0 and held(h, prod) == 0


def test_over_the_router_wide_limit_every_holder_is_paused_and_consumers_keep_flowing():
    h = harness(max_connection_bytes=1024 * KIB, max_bytes=200 * KIB)
    cons = h.connect()
    rcv = cons.receiver("q", credit=0)
    other_cons = h.connect()
    other_rcv = other_cons.receiver("r", credit=100)
    p1, p2 = h.connect(), h.connect()
    s1, s2 = p1.sender("q"), p2.sender("q")
    h.pump()
    flood(h, p1, s1, 12)  # ~120 KiB held, under both limits
    assert not p1.router_engine.read_paused
    flood(h, p2, s2, 12)  # the total passes 200 KiB: both holders pause
    assert p1.router_engine.read_paused and p2.router_engine.read_paused
    assert h.router.budget.under_pressure
    # A producer to a consumer with credit still gets through (its messages leave at once).
    p3 = h.connect()
    s3 = p3.sender("r")
    h.pump()
    p3.send(s3, body="through")
    h.pump()
    assert other_cons.bodies(other_rcv) == ["through"]
    assert not other_cons.router_engine.read_paused
    # Credit for q drains the backlog: below three quarters of the total both resume.
    rcv.flow(1000)
    assert accept_all(h, cons, rcv) == 24
    assert not h.router.budget.under_pressure
    assert not p1.router_engine.read_paused and not p2.router_engine.read_paused
    assert h.router.budget.total == 0


def test_a_connection_whose_own_consumer_waits_is_not_paused_and_is_closed_past_the_hard_limit():
    """Producing to its own consumer link that has no credit: pausing it would deadlock (its credit
    would never be read), so it keeps being read, and past four times its limit it is closed."""
    h = harness(max_connection_bytes=50 * KIB, max_bytes=100 * 1024 * KIB)
    peer = h.connect()
    rcv = peer.receiver("q", credit=0)
    snd = peer.sender("q")
    h.pump()
    flood(h, peer, snd, 10)  # ~100 KiB: over the limit, under the hard limit
    assert not peer.router_engine.read_paused
    rcv.flow(1)  # its credit is read: the guard is what lets this through
    h.pump()
    assert len(peer.received(rcv)) == 1
    flood(h, peer, snd, 20)  # past 4 x 50 KiB
    assert h.router.budget.closed_over_limit == 1
    cond = peer.connection.remote_condition
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded"


def test_a_consumer_that_never_settles_stops_getting_messages_at_the_unsettled_limit():
    h = harness(max_connection_bytes=100 * KIB, max_bytes=100 * 1024 * KIB)
    cons = h.connect()
    rcv = cons.receiver("q", credit=1000)
    prod = h.connect()
    snd = prod.sender("q")
    h.pump()
    flood(h, prod, snd, 40)
    got = cons.received(rcv)
    assert len(got) < 40
    # Unsettled bytes sent to the consumer stop just past the limit; the rest wait in the router,
    # charged to the producer (whose reading then pauses: its backlog does not drain).
    assert 10 <= len(got) <= 12
    assert cons.router_engine.output_blocked
    assert prod.router_engine.read_paused
    assert accept_all(h, cons, rcv) == 40
    assert not cons.router_engine.output_blocked
    assert not prod.router_engine.read_paused
    assert h.router.budget.total == 0
    assert unsettled_bytes(cons.router_engine.app) == 0


def test_a_consumer_that_stops_reading_stops_getting_messages_at_the_output_limit():
    """Bytes the engine holds for a socket nobody reads: the router stops sending at the limit."""
    h = harness(max_connection_bytes=800 * KIB, max_bytes=100 * 1024 * KIB)  # output limit 100 KiB
    cons = h.connect()
    rcv = cons.receiver("q", credit=1000)
    prod = h.connect()
    snd = prod.sender("q")
    h.pump()
    cons.pipe.cut()  # the consumer reads nothing any more (its socket is not read)
    flood(h, prod, snd, 50)
    engine = cons.router_engine
    assert engine.output_blocked
    assert 100 * KIB <= engine.out_pending < 120 * KIB
    waiting = sum(len(rl.undelivered) for rl in engine.app.links.values())
    assert waiting >= 35  # the rest wait in the router, not in the consumer's engine


def test_a_stalled_partial_delivery_is_aborted_after_the_timeout():
    now = [0.0]
    h = harness(stalled_delivery_timeout=5, clock=lambda: now[0])
    cons = h.connect()
    rcv = cons.receiver("q", credit=10)
    prod = h.connect(Peer(max_frame_size=4096))
    snd = prod.sender("q")
    h.pump()
    d = snd.delivery(b"never-finished")
    msg = encode(body=b"y" * 100_000)
    snd.send(msg[:50_000])  # partial: more frames would follow
    h.pump()
    assert h.router.budget.total >= 40_000
    now[0] = 4.0
    h.router.tick(now[0])
    assert snd.state & snd.REMOTE_ACTIVE
    now[0] = 6.0
    h.router.tick(now[0])
    h.pump()
    assert snd.state & snd.REMOTE_CLOSED
    assert snd.remote_condition.name == "amqp:resource-limit-exceeded"
    assert h.router.budget.total == 0 and not h.router.assembly
    assert h.router.budget.stalled_aborted == 1
    assert cons.received(rcv) == []
    del d


def test_a_burst_leaves_no_reference_cycles_behind():
    """Everything a burst allocates (per delivery and per connection) is freed by reference counting
    alone: with the cycle collector off, nothing is left for it to find afterwards."""
    h = harness()
    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        cons, prod = h.connect(), h.connect()
        rcv = cons.receiver("q", credit=500)
        snd = prod.sender("q")
        h.pump()
        flood(h, prod, snd, 300)
        accept_all(h, cons, rcv)
        for peer in (cons, prod):
            peer.connection.close()
        h.pump()
        for peer in (cons, prod):
            peer.router_engine.dispose()  # what the driver does when a connection's task ends
            peer.router_engine = peer.pipe = None  # the harness's own references
        del cons, prod, rcv, snd
        h.pipes.clear()
        found = gc.collect()
        # The test's proton Peers are not the router's business; the router's and wire's records are.
        leaked = sorted({type(o).__name__ for o in gc.garbage if type(o).__module__.split(".")[0]
                         in ("router", "wire")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert leaked == [], f"reference cycles through {leaked} ({found} objects)"


@pytest.mark.parametrize("n", [1000])
def test_sessions_opened_and_ended_do_not_accumulate(n):
    from wire import raw

    h = harness()
    peer = h.connect()
    conn = raw.pointer(peer.router_engine.connection)  # counting the engine's sessions

    def sessions() -> int:
        count, s = 0, raw.lib.pn_session_head(conn, 0)
        while s:
            count += 1
            s = raw.lib.pn_session_next(s, 0)
        return count

    for _ in range(n):
        s = peer.connection.session()
        s.open()
        h.pump()
        s.close()
        h.pump()
    assert sessions() <= 2  # the peer's first session, and at most one being ended
