"""No release ping-pong between a router and the broker behind a waypoint address (issue 17).

A consumer of a waypoint address (``address {prefix: queue, waypoint: yes}``, a tdbroker attached as an
Artemis ``<peer>``) takes some messages unsettled and leaves. What the router held for it goes back to the
broker once (released, or modified when the consumer had it), and then nothing more may move: the broker
must not be asked for the same messages again while phase 1 has no consumer. Before the fix the broker kept
the link credit it had been given and resent each message the router released, the router released it again
at once (no destination), and so on until that credit was used up: about linkCapacity deliveries for 19
queued messages. The deliveries are counted where an operator sees them: the broker's queue
``deliveredCount`` and the router's ``deliveryCount`` of the broker's phase-1 link and ``deliveriesIngress``
of the phase-1 address (management QUERY through tools/mgmtclient.py).
"""

from __future__ import annotations

import time

import pytest
from proton import Message

from tests.system.brokerharness import BROKER_XML, TIMEOUT, WAYPOINT, BrokerProcess
from tests.system.clients import Consumer, Producer
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.system

QUEUED = 19
TAKEN = 5  # what the leaving consumer has unsettled when it goes
# How long the counters must stay unchanged, once every message is back in the broker, to call them
# settled; the ping-pong, when present, runs for milliseconds on an idle machine, and is over once the
# broker's credit is spent, so the bound below is what the test asserts, not this time.
QUIET_SECONDS = 0.4


@pytest.fixture
def brokered(router_factory, tmp_path):
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal", router_port=router.ports["amqp"]))
    broker = BrokerProcess(conf, tmp_path).start()
    yield router, broker
    code = broker.stop()
    assert code == 0, f"tdbroker exited with {code}:\n{broker.stderr_text()}"


class Counts:
    """The deliveries the broker and the router have counted for ``queue`` phase 1."""

    def __init__(self, router, broker):
        self.router_mc = ManagementClient(router.url, timeout=TIMEOUT)
        self.broker_mc = ManagementClient(f"127.0.0.1:{broker.ports['amqp']}", timeout=TIMEOUT)

    def __enter__(self):
        self.router_mc.__enter__()
        self.broker_mc.__enter__()
        return self

    def __exit__(self, *exc):
        self.broker_mc.__exit__(*exc)
        self.router_mc.__exit__(*exc)

    def read(self) -> dict:
        q = [r for r in self.broker_mc.query("org.apache.activemq.artemis.queue",
                                             ["name", "messageCount", "deliveredCount"])
             if r["name"] == "queue"]
        assert len(q) == 1, q
        links = [r for r in self.router_mc.query("org.apache.qpid.dispatch.router.link",
                                                 ["linkDir", "owningAddr", "deliveryCount", "unsettledCount"])
                 if r["owningAddr"] == "M1queue" and r["linkDir"] == "in"]
        assert len(links) == 1, links  # the broker's phase-1 link
        addr = [r for r in self.router_mc.query("org.apache.qpid.dispatch.router.address",
                                                ["key", "deliveriesIngress", "deliveriesEgress"])
                if r["key"] == "M1queue"]
        return {"brokerDelivered": q[0]["deliveredCount"],
                "brokerMessages": q[0]["messageCount"], "routerLinkDelivered": links[0]["deliveryCount"],
                "routerLinkHolds": links[0]["unsettledCount"],
                "routerIngress": addr[0]["deliveriesIngress"] if addr else 0,
                "routerEgress": addr[0]["deliveriesEgress"] if addr else 0}

    def settled(self) -> dict:
        """The counts once the router holds nothing from the broker and nothing has moved for QUIET_SECONDS."""
        deadline = time.monotonic() + TIMEOUT
        last = self.read()
        quiet_since = time.monotonic()
        while True:
            time.sleep(0.05)
            now = self.read()
            if now != last or now["routerLinkHolds"]:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= QUIET_SECONDS:
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"deliveries never came to rest: {now}")


def _store(router, n: int) -> None:
    p = Producer(router.url, "queue", count=n,
                 message_fn=lambda i: Message(id=i, body=f"m{i}", durable=True)).start()
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": n}, p.outcomes
    finally:
        p.close()


@pytest.mark.parametrize("leaves_by", ["connection", "link"])
def test_a_consumer_that_leaves_unsettled_causes_no_redelivery_storm(brokered, leaves_by):
    router, broker = brokered
    _store(router, QUEUED)
    with Counts(router, broker) as counts:
        holder = Consumer(router.url, "queue", count=TAKEN, credit=TAKEN, replenish=False, outcome="hold").start()
        try:
            holder.wait(TIMEOUT)
            # The router pulls what its credit to the broker allows: all 19, 5 at the consumer, 14 waiting.
            before = counts.read()
            deadline = time.monotonic() + TIMEOUT
            while before["routerLinkDelivered"] < QUEUED:
                assert time.monotonic() < deadline, before
                time.sleep(0.05)
                before = counts.read()
            assert before["brokerDelivered"] == QUEUED, before
            if leaves_by == "link":
                holder.close_link()
                holder.wait_for(lambda: not holder.receiver.state & holder.receiver.REMOTE_ACTIVE, TIMEOUT,
                                "the router's detach")
        finally:
            holder.close()
        after = counts.settled()
        grown = {k: after[k] - before[k] for k in ("brokerDelivered", "routerLinkDelivered", "routerIngress")}
        # What the router held went back once; the broker was not asked for anything again while phase 1
        # had no consumer. At most the messages outstanding at the router may move again (a delivery the
        # broker had in flight when the router withdrew its credit).
        assert all(n <= QUEUED for n in grown.values()), f"before {before}, after {after}: grew {grown}"

        back = Consumer(router.url, "queue", count=QUEUED, credit=50).start()
        try:
            back.wait(TIMEOUT)
            wait_empty(counts)
            ids = [m.id for m in back.messages]
        finally:
            back.close()
    assert sorted(ids) == list(range(QUEUED)), ids  # every message, exactly once
    assert ids == list(range(QUEUED))  # and in order: the broker put the returned ones back in place


def wait_empty(counts: Counts) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        now = counts.read()
        if now["brokerMessages"] == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker still holds messages: {now}")
        time.sleep(0.05)
