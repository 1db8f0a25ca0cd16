"""tdbroker durability and dead-letter / expiry routing, end to end.

* ``kill -9`` of the broker while a producer streams durable messages through the router: every message
  the producer saw ``accepted`` must come out again after a restart on the same journal.
* A rejected message moves to the address-settings ``dead-letter-address`` (``DLQ``); a message whose
  ttl passes with no consumer moves to the ``expiry-address`` (``ExpiryQueue``).
"""

from __future__ import annotations

import collections
import time

import pytest
from proton import Message

from tests.system.brokerharness import BROKER_XML, TIMEOUT, WAYPOINT, BrokerProcess
from tests.system.clients import Consumer, Producer

pytestmark = pytest.mark.system

KILL_COUNT = 10_000
KILL_AFTER = 2_000

DLQ_SETTINGS = """\
  <address-settings>
    <address-setting match="#">
      <dead-letter-address>DLQ</dead-letter-address>
      <expiry-address>ExpiryQueue</expiry-address>
    </address-setting>
  </address-settings>
"""


@pytest.fixture
def broker_setup(router_factory, tmp_path):
    """``(router, start_broker, brokers)``: like ``test_brokered.brokered`` but a broker the test killed
    on purpose is not required to exit 0. ``start_broker(extra=...)`` inserts XML before
    ``<broker-connections>``."""
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    brokers: list[BrokerProcess] = []

    def start_broker(extra: str = "") -> BrokerProcess:
        text = BROKER_XML.format(journal=tmp_path / "journal", router_port=router.ports["amqp"])
        if extra:
            text = text.replace("  <broker-connections>", extra + "  <broker-connections>")
        conf.write_text(text)
        b = BrokerProcess(conf, tmp_path).start()
        brokers.append(b)
        return b

    yield router, start_broker, brokers
    for b in brokers:
        if getattr(b, "killed", False):
            continue
        code = b.stop()
        assert code == 0, f"tdbroker exited with {code}:\n{b.stderr_text()}"


def _durable(i: int) -> Message:
    return Message(id=i, body=f"m{i}", durable=True)


def _kill9(b: BrokerProcess) -> None:
    b.kill()  # SIGKILL, wait, and mark it killed (the fixture skips its exit check)


def test_accepted_durable_messages_survive_kill_9(broker_setup):
    router, start_broker, _ = broker_setup
    first = start_broker()
    deadline = time.monotonic() + TIMEOUT
    p = Producer(router.url, "queue", count=KILL_COUNT, message_fn=_durable).start()
    try:
        p.wait_for(lambda: p.outcomes["accepted"] >= KILL_AFTER, TIMEOUT, f"{KILL_AFTER} accepted")
        _kill9(first)
        with p._cond:
            accepted_before_kill = {i for i, lst in p.outcome_of.items() if "accepted" in lst}
            sent_at_kill = p.sent
        start_broker()
        # What the router released/modified when its link to the broker went is sent again; ids with no
        # outcome yet are still in flight and get one.
        resent: set = set()
        while True:
            remaining = max(1.0, deadline - time.monotonic())
            p.wait_for(lambda: p.sent >= p.queued and p.settled_count() >= p.sent, remaining,
                       "every send settled")
            with p._cond:
                again = [i for i, lst in p.outcome_of.items() if lst[-1] != "accepted"]
            if not again:
                break
            resent.update(again)
            p.send(again)
        with p._cond:
            accepted = {i for i, lst in p.outcome_of.items() if "accepted" in lst}
            outcomes = dict(p.outcomes)
            sends = collections.Counter(p.sent_ids)
    finally:
        p.close()
    assert accepted == set(range(KILL_COUNT)), outcomes

    c = Consumer(router.url, "queue", credit=250).start()
    try:
        # Until every accepted id came, or nothing new arrived for 3 s (then the assertions below name
        # what was lost instead of a bare timeout).
        last, quiet_since, stop = -1, time.monotonic(), time.monotonic() + TIMEOUT
        while time.monotonic() < stop:
            n = c.received()
            if accepted <= set(c.ids):
                break
            if n != last:
                last, quiet_since = n, time.monotonic()
            elif time.monotonic() - quiet_since > 3.0:
                break
            time.sleep(0.1)
        time.sleep(0.5)  # let any duplicates / strays arrive
        got = c.ids
    finally:
        c.close()
    received = collections.Counter(got)
    dups = {i: n for i, n in received.items() if n > 1}
    print(f"\nkill -9 figures: sent={sum(sends.values())} (distinct {len(sends)}, resent {len(resent)}), "
          f"accepted before kill={len(accepted_before_kill)} of {sent_at_kill} sent by then, "
          f"received={len(got)} (distinct {len(received)}), duplicates={len(dups)}, outcomes={outcomes}")
    assert set(received) <= set(sends), "received messages that were never sent"
    assert accepted_before_kill <= set(received), f"lost: {sorted(accepted_before_kill - set(received))[:20]}"
    assert accepted <= set(received), f"lost: {len(accepted - set(received))}"
    # A duplicate is only legitimate for a message that was sent more than once (its first outcome was
    # unknown to the producer when the broker died, or it came back released/modified).
    bad = {i for i in dups if sends[i] < 2}
    assert not bad, f"duplicated although sent once: {sorted(bad)[:20]}"


def _direct(broker: BrokerProcess) -> str:
    return f"amqp://127.0.0.1:{broker.ports['amqp']}"


def test_rejected_message_goes_to_dead_letter_address(broker_setup):
    router, start_broker, _ = broker_setup
    broker = start_broker(DLQ_SETTINGS)
    p = Producer(router.url, "queue", count=2, message_fn=_durable).start()
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": 2}
    finally:
        p.close()
    c = Consumer(router.url, "queue", count=2, outcome=lambda m, i: "reject" if m.id == 0 else "accept").start()
    try:
        c.wait(TIMEOUT)
        assert c.ids == [0, 1]
    finally:
        c.close()
    dlq = Consumer(_direct(broker), "DLQ", count=1).start()
    try:
        dlq.wait(TIMEOUT)
        time.sleep(0.2)
        assert dlq.ids == [0]
        assert dlq.bodies == ["m0"]
    finally:
        dlq.close()


def test_expired_message_goes_to_expiry_address(broker_setup):
    router, start_broker, _ = broker_setup
    broker = start_broker(DLQ_SETTINGS)
    url = _direct(broker)
    expq = Consumer(url, "ExpiryQueue", count=1).start()
    try:
        p = Producer(url, "queue", count=1,
                     message_fn=lambda i: Message(id="short-lived", body="x", durable=True, ttl=0.2)).start()
        try:
            p.wait(TIMEOUT)
            assert p.outcomes == {"accepted": 1}
        finally:
            p.close()
        t0 = time.monotonic()
        expq.wait(5)
        took = time.monotonic() - t0
        assert expq.ids == ["short-lived"]
        assert took < 2.0, f"expiry took {took:.2f}s"
    finally:
        expq.close()
    # Nothing is left on the original queue.
    c = Consumer(url, "queue", count=1).start()
    try:
        time.sleep(0.3)
        assert c.received() == 0
    finally:
        c.close()


# -- sans-IO: the Broker object with an injected clock (no processes) ---------------------------------


def _broker(tmp_path, clock, *, settings: bool = True):
    from broker.config import parse_broker_config
    from broker.server import Broker

    text = BROKER_XML.format(journal=tmp_path / "journal", router_port=1)
    if settings:
        text = text.replace("  <broker-connections>", DLQ_SETTINGS + "  <broker-connections>")
    b = Broker(parse_broker_config(text), clock=clock)
    b.open_journal()
    return b


def _put(b, payload: bytes, now: int):
    from broker.queue import QueuedMessage

    q = b.lookup_queue("queue")
    msg = QueuedMessage.from_bytes(payload, now)
    msg.record_id = b.journal.append_message(q.name, payload)
    q.enqueue(msg)
    return q


@pytest.mark.parametrize("settings", [True, False], ids=["expiry-address", "no-expiry-address"])
def test_expiry_with_injected_clock_moves_and_journals(tmp_path, settings):
    now = [1_000_000]
    b = _broker(tmp_path, lambda: now[0], settings=settings)
    q = _put(b, Message(id="e", body="x", durable=True, ttl=0.2).encode(), now[0])
    _put(b, Message(id="keep", body="y", durable=True).encode(), now[0])
    assert b.next_expiry() == now[0] + 200
    now[0] += 199
    assert b.expire_due() == 0
    now[0] += 1
    assert b.expire_due() == 1
    assert q.message_count == 1 and q.messages_expired == 1
    if settings:
        assert b.queues["ExpiryQueue"].message_count == 1
        assert b.queues["ExpiryQueue"].next_expiry() is None  # expiry cleared on the expiry queue
        assert b.messages_moved_expired == 1
    else:
        assert "ExpiryQueue" not in b.queues and b.messages_dropped == 1
    b.journal.sync()
    b.close_journal()
    # Recovery sees the move: one message on queue, the expired one on ExpiryQueue (or gone), and it
    # does not expire again there.
    b2 = _broker(tmp_path, lambda: now[0] + 10_000, settings=settings)
    try:
        assert b2.queues["queue"].message_count == 1
        if settings:
            assert b2.queues["ExpiryQueue"].message_count == 1
            assert b2.expire_due() == 0
        else:
            assert "ExpiryQueue" not in b2.queues
    finally:
        b2.close_journal()


def test_max_delivery_attempts_moves_to_dead_letter_address(tmp_path):
    from broker.queue import MODIFIED

    now = [1_000_000]
    b = _broker(tmp_path, lambda: now[0])
    q = _put(b, Message(id="poison", body="p", durable=True).encode(), now[0])
    q.add_consumer("c")
    for attempt in range(q.max_delivery_attempts):
        q.set_credit("c", 1)
        [(_cid, token, _msg)] = q.next_deliveries(now[0])
        q.settle(token, MODIFIED, delivery_failed=True)
    assert q.message_count == 0 and q.messages_killed == 1
    dlq = b.queues["DLQ"]
    assert dlq.message_count == 1 and b.messages_dead_lettered == 1
    assert dlq.ready()[0].delivery_count == q.max_delivery_attempts
    b.journal.sync()
    b.close_journal()
    b2 = _broker(tmp_path, lambda: now[0])
    try:
        assert b2.queues["queue"].message_count == 0
        assert b2.queues["DLQ"].message_count == 1
    finally:
        b2.close_journal()
