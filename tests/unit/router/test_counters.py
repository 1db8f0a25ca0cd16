"""Delayed, stuck and settle-rate counters of router.link and the router entity (router/forwarder.py,
"Delayed, stuck and rate"), on the in-memory harness with a fake clock: the router's tick is called by
hand, as the daemon calls it every TICK_SECONDS."""

from __future__ import annotations

import pytest
from proton import Message

from router.config import parse_config
from router.core import Router
from router.management import ManagementAgent
from tests.unit.enginepair import ACCEPTED, RELEASED, RouterHarness, settle
from wire import management as wm


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Setup:
    """A router with a fake clock, its agent, a consumer of ``q`` and a producer to ``q``."""

    def __init__(self, *, credit: int = 10, consumers: int = 1, address: str = "q", conf: str = ""):
        self.clock = Clock()
        cfg = parse_config("router {\n    id: R1\n}\n" + conf)
        self.router = Router("R1", clock=self.clock, address_entities=cfg.addresses)
        self.h = RouterHarness(self.router)
        self.agent = ManagementAgent(self.router, clock=self.clock)
        self.consumers = []
        for _ in range(consumers):
            cons = self.h.connect()
            self.consumers.append((cons, cons.receiver(address, credit=credit)))
        self.prod = self.h.connect()
        self.snd = self.prod.sender(address)
        self.h.pump()

    def advance(self, seconds: float, step: float = 0.5) -> None:
        """Let time pass with the daemon's ticks every ``step`` seconds."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.clock.now = min(end, self.clock.now + step)
            self.router.tick(self.clock.now)

    def send(self, n: int = 1) -> list:
        out = [self.prod.send(self.snd, Message(body=i)) for i in range(n)]
        self.h.pump()
        return out

    def query(self, entity_type: str) -> list[dict]:
        data = wm.build_request("QUERY", reply_to="r", correlation_id=1, entityType=entity_type,
                                body={"attributeNames": []})
        resp = wm.parse_response(self.agent.handle(data))
        assert resp.status == 200, resp.description
        return [dict(zip(resp.body["attributeNames"], row)) for row in resp.body["results"]]

    def links(self) -> dict:
        """linkDir -> the row of the message link on ``q`` (one producer link, one consumer link)."""
        rows = [r for r in self.query("org.apache.qpid.dispatch.router.link") if r["owningAddr"] == "M0q"]
        return {r["linkDir"]: r for r in rows}

    def router_row(self) -> dict:
        [row] = self.query("org.apache.qpid.dispatch.router")
        return row


DELAY_KEYS = ("deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck")


def _delays(row) -> tuple:
    return tuple(row[k] for k in DELAY_KEYS)


def test_a_prompt_settlement_is_not_delayed():
    s = Setup()
    s.send()
    [(cons, rcv)] = s.consumers
    s.advance(0.5)
    settle(cons.received(rcv)[0], ACCEPTED)
    s.h.pump()
    links = s.links()
    assert _delays(links["in"]) == (0, 0, 0) and _delays(links["out"]) == (0, 0, 0)
    assert _delays(s.router_row()) == (0, 0, 0)


@pytest.mark.parametrize("wait, expected", [(3.0, (1, 0)), (12.0, (0, 1))])
def test_a_late_settlement_counts_on_both_links_and_router_wide(wait, expected):
    s = Setup()
    [d] = s.send()
    [(cons, rcv)] = s.consumers
    s.advance(wait)
    settle(cons.received(rcv)[0], ACCEPTED)
    s.h.pump()
    assert d.remote_state == ACCEPTED and d.settled
    links = s.links()
    assert _delays(links["in"])[:2] == expected
    assert _delays(links["out"])[:2] == expected
    assert _delays(s.router_row())[:2] == expected  # deliveries: their incoming side only


def test_a_released_late_copy_counts_on_the_consumer_link():
    s = Setup()
    s.send()
    [(cons, rcv)] = s.consumers
    s.advance(2.0)
    settle(cons.received(rcv)[0], RELEASED)
    s.h.pump()
    assert _delays(s.links()["out"]) == (1, 0, 0)


def test_a_delivery_unsettled_past_ten_seconds_is_stuck_once():
    s = Setup()
    s.send(2)
    [(cons, rcv)] = s.consumers
    s.advance(9.0)
    assert _delays(s.links()["out"]) == (0, 0, 0)  # not yet
    s.advance(2.0)
    links = s.links()
    assert links["out"]["deliveriesStuck"] == 2 and links["in"]["deliveriesStuck"] == 2
    assert s.router_row()["deliveriesStuck"] == 2
    s.advance(20.0)  # later scans do not count them again
    assert s.links()["out"]["deliveriesStuck"] == 2 and s.router_row()["deliveriesStuck"] == 2
    for got in cons.received(rcv):
        settle(got, ACCEPTED)
    s.h.pump()
    links = s.links()
    assert links["out"]["deliveriesDelayed10Sec"] == 2 and links["in"]["deliveriesDelayed10Sec"] == 2


def test_a_queued_delivery_without_credit_is_stuck():
    s = Setup(credit=1)
    s.send(3)  # one sent, two wait in the router for credit
    s.advance(11.0)
    links = s.links()
    assert links["out"]["undeliveredCount"] == 2
    assert links["out"]["deliveriesStuck"] == 3 and s.router_row()["deliveriesStuck"] == 3


def test_a_multicast_delivery_is_stuck_once_on_its_incoming_side():
    s = Setup(consumers=2, address="multicast.x",
              conf="address {\n    prefix: multicast\n    distribution: multicast\n}\n")
    s.prod.send(s.snd, Message(body=1))
    s.h.pump()
    s.advance(11.0)
    rows = [r for r in s.query("org.apache.qpid.dispatch.router.link") if r["owningAddr"] == "M0multicast.x"]
    outs = [r for r in rows if r["linkDir"] == "out"]
    [incoming] = [r for r in rows if r["linkDir"] == "in"]
    assert [r["deliveryCount"] for r in outs] == [1, 1]
    assert [r["deliveriesStuck"] for r in outs] == [1, 1]
    assert incoming["deliveriesStuck"] == 1 and s.router_row()["deliveriesStuck"] == 1


def test_settle_rate_averages_the_last_five_seconds():
    s = Setup(credit=100)
    [(cons, rcv)] = s.consumers
    s.advance(1.0)
    for _ in range(5):  # 20 settled a second for 5 s
        s.send(20)
        for got in cons.received(rcv, clear=True):
            settle(got, ACCEPTED)
        s.h.pump()
        s.advance(1.0)
    links = s.links()
    assert links["out"]["settleRate"] == 20 and links["in"]["settleRate"] == 20
    s.advance(10.0)  # nothing settles: the rate falls back to 0
    links = s.links()
    assert links["out"]["settleRate"] == 0 and links["in"]["settleRate"] == 0


def test_no_tick_no_delay():
    """Without ticks the coarse clock stands still: the per-message path never reads the clock."""
    s = Setup()
    [d] = s.send()
    [(cons, rcv)] = s.consumers
    s.clock.now += 30.0
    settle(cons.received(rcv)[0], ACCEPTED)
    s.h.pump()
    assert _delays(s.links()["out"]) == (0, 0, 0)


def test_zero_credit_seconds_and_links_blocked_follow_the_consumers_credit():
    """A consumer that gave 2 credit and took 2 messages has none: zeroCreditSeconds counts from the scan
    that saw it, linksBlocked counts the link once that passes 10 s, and both clear when credit comes."""
    s = Setup(credit=2)
    s.advance(2)
    assert s.links()["out"]["zeroCreditSeconds"] == 0 and s.router_row()["linksBlocked"] == 0
    s.send(2)
    s.advance(5)
    assert 3 <= s.links()["out"]["zeroCreditSeconds"] <= 5
    assert s.router_row()["linksBlocked"] == 0
    s.advance(8)
    assert s.links()["out"]["zeroCreditSeconds"] >= 11 and s.router_row()["linksBlocked"] == 1
    assert s.links()["in"]["zeroCreditSeconds"] == 0            # a producer's link: not a consumer's credit
    cons, rx = s.consumers[0]
    rx.flow(5)
    s.h.pump()
    s.advance(1.5)
    assert s.links()["out"]["zeroCreditSeconds"] == 0 and s.router_row()["linksBlocked"] == 0


def test_the_periodic_scan_runs_less_often_on_a_router_with_many_links():
    """Forwarder.on_tick visits every link: past SCAN_LINKS_PER_SECOND links it spaces its scans out."""
    from types import SimpleNamespace

    from router.forwarder import SCAN_LINKS_PER_SECOND
    from router.core import Router

    fw = Router("R").forwarder
    many = [SimpleNamespace(links={i: object() for i in range(SCAN_LINKS_PER_SECOND * 3)})]
    fw.on_tick(10.0, many)
    assert fw.last_scan == 10.0
    fw.on_tick(11.5, many)
    assert fw.last_scan == 10.0  # every 3 s now
    fw.on_tick(13.0, many)
    assert fw.last_scan == 13.0
    fw.on_tick(14.0, [])  # few links: every second again
    fw.on_tick(16.1, [])
    fw.on_tick(17.2, [])
    assert fw.last_scan == 17.2
