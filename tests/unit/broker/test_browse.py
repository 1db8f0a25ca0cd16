"""Queue browsers in memory (broker/browse.py): a receiver whose source asks distribution-mode copy
(AMQP 1.0 §3.5.3, a JMS QueueBrowser) sees a queue's messages without taking them."""

from __future__ import annotations

import proton
import pytest
from proton import Message

import trio

from broker.browse import PRUNE_SLACK
from broker.config import parse_broker_config
from broker.server import Broker
from tests.unit.broker.fixtures import make_broker
from tests.unit.enginepair import MODIFIED, REJECTED, RELEASED, RouterHarness, settle

PAGING_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>browse-paging</name>
  <persistence-enabled>false</persistence-enabled>
  <paging-directory>{paging}</paging-directory>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
  <address-settings>
    <address-setting match="orders">
      <max-size-bytes>10K</max-size-bytes>
      <address-full-policy>PAGE</address-full-policy>
    </address-setting>
  </address-settings>
</core></configuration>
"""
BODY = b"p" * 1000


@pytest.fixture
def harness(tmp_path):
    return RouterHarness(router=make_broker(tmp_path))


def browser(peer, address: str, credit: int = 0, name: str = "browser"):
    rcv = peer.receiver(address, credit=0, name=name, open=False)
    rcv.source.distribution_mode = proton.Terminus.DIST_MODE_COPY
    rcv.open()
    if credit:
        rcv.flow(credit)
    return rcv


def fill(harness, peer, address: str, bodies, **kw):
    snd = peer.sender(address)
    harness.pump()
    for body in bodies:
        peer.send(snd, Message(body=body, **kw))
    harness.pump()
    return snd


def test_a_browser_sees_the_queue_in_order_and_later_arrivals_without_taking_them(harness):
    b = harness.router
    c = harness.connect()
    snd = fill(harness, c, "orders", [])
    for body, priority in (("low-1", 1), ("high", 7), ("low-2", 1), ("normal", 4)):
        c.send(snd, Message(body=body, priority=priority))
    harness.pump()
    rcv = browser(c, "orders", credit=10)
    harness.pump()
    assert c.bodies(rcv) == ["high", "normal", "low-1", "low-2"]      # queue order: priority, then arrival
    c.send(snd, Message(body="later"))
    harness.pump()
    assert c.bodies(rcv)[-1] == "later"                                 # later arrivals follow
    q = b.queues["orders"]
    assert q.message_count == 5 and q.delivering_count == 0 and q.messages_acknowledged == 0
    assert [r["consumerCount"] for r in b.mgmt_queues() if r["name"] == "orders"] == [0]
    cons = harness.connect()
    got = cons.receiver("orders", credit=10)
    harness.pump()
    assert sorted(cons.bodies(got)) == sorted(["high", "normal", "low-1", "low-2", "later"])  # consumers get all
    assert len(c.bodies(rcv)) == 5                                      # each shown once


def test_the_browser_outcomes_do_not_change_the_message(harness):
    b = harness.router
    c = harness.connect()
    fill(harness, c, "orders", ["a", "b", "c", "d"])
    rcv = browser(c, "orders", credit=10)
    harness.pump()
    seen = c.received(rcv)
    assert [r.body for r in seen] == ["a", "b", "c", "d"]
    settle(seen[0])                                           # accepted
    settle(seen[1], REJECTED, condition="amqp:internal-error")
    settle(seen[2], MODIFIED, failed=True, undeliverable=True)
    settle(seen[3], RELEASED)
    harness.pump()
    q = b.queues["orders"]
    assert q.message_count == 4 and q.messages_acknowledged == 0 and q.messages_killed == 0
    assert b.queues["DLQ"].message_count == 0
    assert [m.delivery_count for m in q.ready()] == [0, 0, 0, 0]
    assert len(c.bodies(rcv)) == 4                            # nothing came back to be shown again
    cons = harness.connect()
    got = cons.receiver("orders", credit=10)
    harness.pump()
    assert cons.bodies(got) == ["a", "b", "c", "d"]
    assert all(r.message.delivery_count == 0 for r in cons.received(got))


def test_credit_and_drain_work_as_for_consumers(harness):
    c = harness.connect()
    fill(harness, c, "orders", ["m0", "m1", "m2"])
    rcv = browser(c, "orders", credit=2)
    harness.pump()
    assert c.bodies(rcv) == ["m0", "m1"] and rcv.credit == 0
    rcv.drain(5)
    harness.pump()
    assert c.bodies(rcv) == ["m0", "m1", "m2"]
    assert rcv.credit == 0 and not rcv.draining()             # the rest of the credit came back


def test_messages_out_with_a_consumer_or_gone_are_not_shown(harness):
    b = harness.router
    c = harness.connect()
    fill(harness, c, "orders", ["held", "free", "taken"])
    cons = harness.connect()
    got = cons.receiver("orders", credit=1)                   # takes "held", does not settle it yet
    harness.pump()
    rcv = browser(c, "orders", credit=0)
    harness.pump()
    assert cons.bodies(got) == ["held"]
    got.flow(1)                                               # "free" is taken and acknowledged ...
    harness.pump()
    for r in cons.received(got)[1:]:
        settle(r)
    harness.pump()
    rcv.flow(10)                                              # ... before the browser's credit reaches it
    harness.pump()
    assert c.bodies(rcv) == ["taken"]
    assert b.queues["orders"].delivering_count == 1


def test_browse_then_consume_many_keeps_the_cursor_bounded(harness):
    """A browser without credit must not hold references to every message that passed through."""
    b = harness.router
    c = harness.connect()
    browser(c, "orders", credit=0)
    cons = harness.connect()
    got = cons.receiver("orders", credit=1000)
    snd = fill(harness, c, "orders", [])
    for i in range(600):
        c.send(snd, Message(body=f"m{i}"))
        if i % 50 == 49:
            harness.pump()
            for r in cons.received(got, clear=True):
                settle(r)
            harness.pump()
    harness.pump()
    [cursor] = b.browsing.cursors.values()
    assert len(cursor) <= 2 * b.queues["orders"].ready_count + PRUNE_SLACK + 50


def test_a_deleted_queue_detaches_its_browser(harness):
    b = harness.router
    c = harness.connect()
    fill(harness, c, "orders", ["x"])
    rcv = browser(c, "orders", credit=1)
    harness.pump()
    assert c.bodies(rcv) == ["x"]
    b.delete_queue("orders")
    harness.pump()
    assert rcv.remote_condition is not None and rcv.remote_condition.name == "amqp:resource-deleted"
    assert not b.browsing.cursors


def test_closing_a_browser_forgets_it(harness):
    b = harness.router
    c = harness.connect()
    rcv = browser(c, "orders", credit=1)
    harness.pump()
    assert len(b.browsing.cursors) == 1 and len(b.queues["orders"].arrivals) == 1
    rcv.close()
    harness.pump()
    assert not b.browsing.cursors and not b.queues["orders"].arrivals


def test_a_copy_mode_receiver_on_a_multicast_address_is_a_subscription(harness):
    """A subscription is already a copy: the receiver gets its own queue and consumes from it."""
    b = harness.router
    c = harness.connect()
    rcv = browser(c, "news", credit=10)
    harness.pump()
    assert len(b.multicast_queues("news")) == 1 and not b.browsing.cursors
    fill(harness, c, "news", ["n1"])
    assert c.bodies(rcv) == ["n1"]


def paged(b: Broker) -> int:
    return b.pager.stats("orders")[0]


async def settle_io(b: Broker, h: RouterHarness, until, timeout: float = 10) -> None:
    """Pump the connections, letting the pager's thread work, until ``until()`` holds."""
    with trio.fail_after(timeout):
        while True:
            h.pump()
            await trio.sleep(0.005)
            h.pump()
            if until() and not any(s.busy for s in b.pager.spools.values()):
                return


async def test_paged_messages_are_shown_in_order_as_they_come_back_into_memory(tmp_path, nursery):
    b = Broker(parse_broker_config(PAGING_XML.format(paging=tmp_path / "paging")))
    b.open_journal()
    h = RouterHarness(router=b)
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    for i in range(60):
        prod.send(snd, Message(id=i, body=BODY))
    await settle_io(b, h, until=lambda: paged(b) > 0)
    in_memory = b.queues["orders"].message_count
    assert 0 < in_memory < 60 and paged(b) == 60 - in_memory
    c = h.connect()
    rcv = browser(c, "orders", credit=100)
    await settle_io(b, h, until=lambda: len(c.received(rcv)) == in_memory)
    assert [r.message.id for r in c.received(rcv)] == list(range(in_memory))   # the in-memory part
    cons = h.connect()
    got = cons.receiver("orders", credit=100)
    taken = []

    def consumed():
        for r in cons.received(got, clear=True):
            taken.append(r.message.id)
            settle(r)
        return len(taken) == 60

    await settle_io(b, h, until=consumed)
    assert taken == list(range(60))
    assert [r.message.id for r in c.received(rcv)] == list(range(60))   # the paged ones too, in order


def test_a_message_arriving_while_a_consumer_waits_is_shown_to_the_browser_too(harness):
    """Browsers are served before consumers in each batch: a message a waiting consumer takes at once is
    still shown (it was in the queue when it arrived)."""
    c = harness.connect()
    rcv = browser(c, "orders", credit=5)
    cons = harness.connect()
    got = cons.receiver("orders", credit=5, settled=True)   # pre-settled: gone as soon as it is sent
    harness.pump()
    fill(harness, c, "orders", ["quick"])
    assert cons.bodies(got) == ["quick"] and c.bodies(rcv) == ["quick"]
    assert harness.router.queues["orders"].message_count == 0


def test_a_pre_settled_browser_is_sent_settled_deliveries(harness):
    c = harness.connect()
    fill(harness, c, "orders", ["s"])
    rcv = c.receiver("orders", name="browser", settled=True, open=False)
    rcv.source.distribution_mode = proton.Terminus.DIST_MODE_COPY
    rcv.open()
    rcv.flow(1)
    harness.pump()
    [seen] = c.received(rcv)
    assert seen.body == "s" and seen.delivery.settled
    assert harness.router.queues["orders"].message_count == 1
