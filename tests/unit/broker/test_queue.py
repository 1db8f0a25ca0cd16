"""Tests for broker.queue: priority order, credit and round robin, outcomes (released, modified,
rejected), dead-lettering, expiry, consumer removal, purge and counters; plus a hypothesis state
machine checked against a plain-list model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from proton import Message

from broker.queue import (
    DEFAULT_MAX_DELIVERY_ATTEMPTS, REASON_MAX_DELIVERY_ATTEMPTS, REASON_REJECTED, Queue, QueuedMessage,
)
from wire.header import read_header

NOW = 1_700_000_000_000


class Sink:
    """Collects what the queue's callbacks report."""

    def __init__(self):
        self.dead: list[tuple[bytes, str]] = []
        self.expired: list[bytes] = []

    def dead_letter(self, msg, reason):
        self.dead.append((msg.payload, reason))

    def on_expired(self, msg):
        self.expired.append(msg.payload)


def make_queue(*, tags=(), consumers=(), **kw):
    """A queue reporting to a Sink, holding messages ``tags`` (priority 4) and ``consumers``."""
    sink = Sink()
    q = Queue("q", dead_letter=sink.dead_letter, expired=sink.on_expired, **kw)
    for tag in tags:
        q.enqueue(m(tag))
    for c in consumers:
        q.add_consumer(c)
    return q, sink


def m(tag, priority=4, expires_at=None):
    return QueuedMessage(tag.encode(), priority=priority, expires_at=expires_at)


def tags(deliveries):
    return [msg.payload.decode() for _, _, msg in deliveries]


def ready_tags(q):
    return [msg.payload.decode() for msg in q.ready()]


def deliver_one(q, consumer="c", now=NOW):
    q.credit(consumer, 1)
    (d,) = q.next_deliveries(now)
    return d


# --------------------------------------------------------------------------------------------------
# order and credit
# --------------------------------------------------------------------------------------------------

def test_priority_order_fifo_within_priority():
    q, _ = make_queue(consumers=("c",))
    for i in range(3):
        for p in (3, 9, 0, 4, 7, 1, 8, 2, 6, 5):
            q.enqueue(m(f"p{p}-{i}", p))
    q.credit("c", 100)
    assert tags(q.next_deliveries(NOW)) == [f"p{p}-{i}" for p in range(9, -1, -1) for i in range(3)]


def test_priority_clamped_to_jms_range():
    assert QueuedMessage(b"x", priority=200).priority == 9
    assert QueuedMessage(b"x", priority=-3).priority == 0
    assert QueuedMessage(b"x").priority == 4


def test_from_bytes_reads_header():
    raw = bytes(Message(body="x", durable=True, priority=8, ttl=2.0, delivery_count=2).encode())
    msg = QueuedMessage.from_bytes(raw, NOW, record_id=17)
    assert (msg.durable, msg.priority, msg.expires_at, msg.delivery_count, msg.record_id, msg.enqueued_at) \
        == (True, 8, NOW + 2000, 2, 17, NOW)
    raw = bytes(Message(body="x", expiry_time=(NOW + 5) / 1000).encode())
    assert QueuedMessage.from_bytes(raw, NOW).expires_at == NOW + 5


def test_credit_limits_deliveries():
    q, _ = make_queue(tags=[f"m{i}" for i in range(5)], consumers=("c",))
    assert q.next_deliveries(NOW) == []
    q.credit("c", 2)
    assert tags(q.next_deliveries(NOW)) == ["m0", "m1"]
    assert q.credit_of("c") == 0
    assert q.next_deliveries(NOW) == []
    q.set_credit("c", 10)
    assert tags(q.next_deliveries(NOW)) == ["m2", "m3", "m4"]
    assert q.credit_of("c") == 7                     # unused credit stays for later messages
    q.enqueue(m("m5"))
    assert tags(q.next_deliveries(NOW)) == ["m5"]


def test_round_robin_among_consumers_with_credit():
    q, _ = make_queue(tags=[f"m{i}" for i in range(9)], consumers=("a", "b", "c"))
    for c, n in (("a", 5), ("b", 1), ("c", 2)):
        q.credit(c, n)
    out = q.next_deliveries(NOW)
    assert [(cid, msg.payload.decode()) for cid, _, msg in out] == [
        ("a", "m0"), ("b", "m1"), ("c", "m2"), ("a", "m3"), ("c", "m4"), ("a", "m5"), ("a", "m6"),
        ("a", "m7")]
    assert len({token for _, token, _ in out}) == len(out)
    assert ready_tags(q) == ["m8"]


def test_consumer_priority_higher_first_lower_only_when_higher_has_no_credit():
    q, _ = make_queue(tags=[f"m{i}" for i in range(6)])
    q.add_consumer("local", priority=0)
    q.add_consumer("network", priority=-5)
    q.add_consumer("local2", priority=0)
    q.credit("network", 10)
    q.credit("local", 2)
    q.credit("local2", 1)
    out = q.next_deliveries(NOW)
    # the two local consumers share round robin until out of credit; the network one takes the rest
    assert [(cid, msg.payload.decode()) for cid, _, msg in out] == [
        ("local", "m0"), ("local2", "m1"), ("local", "m2"), ("network", "m3"), ("network", "m4"),
        ("network", "m5")]
    q.remove_consumer("network")
    assert q.consumer_priority("local") == 0


def test_consumer_accepts_declines_message_which_stays_for_another_consumer():
    q, _ = make_queue(tags=["red1", "blue1", "red2", "blue2"])
    q.add_consumer("reds", accepts=lambda msg: msg.payload.startswith(b"red"))
    q.credit("reds", 10)
    assert tags(q.next_deliveries(NOW)) == ["red1", "red2"]
    assert ready_tags(q) == ["blue1", "blue2"]
    q.add_consumer("any")
    q.credit("any", 10)
    assert tags(q.next_deliveries(NOW)) == ["blue1", "blue2"]


def test_round_robin_continues_across_calls():
    q, _ = make_queue(consumers=("a", "b"))
    q.credit("a", 10)
    q.credit("b", 10)
    seen = []
    for i in range(6):
        q.enqueue(m(f"m{i}"))
        seen += [cid for cid, _, _ in q.next_deliveries(NOW)]
    assert seen == ["a", "b", "a", "b", "a", "b"]


def test_drain_discards_unused_credit():
    q, _ = make_queue(tags=("m0", "m1"), consumers=("c",))
    q.credit("c", 5)
    q.drain("c")
    assert tags(q.next_deliveries(NOW)) == ["m0", "m1"]
    assert q.take_drained() == {"c": 3}
    assert q.credit_of("c") == 0
    assert q.take_drained() == {}


# --------------------------------------------------------------------------------------------------
# outcomes
# --------------------------------------------------------------------------------------------------

def test_accepted_removes():
    q, sink = make_queue(tags=("m0",), consumers=("c",))
    _, token, msg = deliver_one(q)
    assert (q.message_count, q.delivering_count) == (1, 1)
    assert q.settle(token, "accepted") is msg
    assert (q.message_count, q.delivering_count, q.messages_acknowledged) == (0, 0, 1)
    assert sink.dead == [] and sink.expired == []
    with pytest.raises(KeyError):
        q.settle(token, "accepted")


def test_released_goes_back_in_original_order():
    q, _ = make_queue(tags=[f"m{i}" for i in range(5)], consumers=("c",))
    q.credit("c", 3)
    d = {msg.payload.decode(): token for _, token, msg in q.next_deliveries(NOW)}
    q.enqueue(m("late"))
    q.settle(d["m2"], "released")
    q.settle(d["m0"], "released")                 # released in reverse order: still m0 before m2
    assert ready_tags(q) == ["m0", "m2", "m3", "m4", "late"]
    assert all(msg.delivery_count == 0 for msg in q.ready())
    q.credit("c", 10)
    assert tags(q.next_deliveries(NOW)) == ["m0", "m2", "m3", "m4", "late"]


def test_released_respects_priority():
    q, _ = make_queue()
    q.enqueue(m("low", 1))
    q.add_consumer("c")
    _, token, _ = deliver_one(q)
    q.enqueue(m("high", 9))
    q.enqueue(m("low2", 1))
    q.settle(token, "released")
    assert ready_tags(q) == ["high", "low", "low2"]


def test_modified_delivery_failed_counts_and_dead_letters_at_default_max():
    q, sink = make_queue(tags=("m0", "m1"), consumers=("c",))
    deliveries = 0
    while True:
        _, token, msg = deliver_one(q)
        assert msg.payload == b"m0"              # still first in line after every failure
        assert msg.delivery_count == deliveries
        deliveries += 1
        q.settle(token, "modified", delivery_failed=True)
        if sink.dead:
            break
    assert deliveries == DEFAULT_MAX_DELIVERY_ATTEMPTS == 10
    assert sink.dead == [(b"m0", REASON_MAX_DELIVERY_ATTEMPTS)]
    assert q.messages_killed == 1 and ready_tags(q) == ["m1"]


@pytest.mark.parametrize("limit", [1, 3])
def test_max_delivery_attempts_configurable(limit):
    q, sink = make_queue(max_delivery_attempts=limit, tags=("m0",), consumers=("c",))
    for attempt in range(limit):
        assert sink.dead == []
        _, token, _ = deliver_one(q)
        q.settle(token, "modified", delivery_failed=True)
    assert sink.dead == [(b"m0", REASON_MAX_DELIVERY_ATTEMPTS)]
    assert q.message_count == 0


def test_max_delivery_attempts_zero_is_unlimited():
    q, sink = make_queue(max_delivery_attempts=0, tags=("m0",), consumers=("c",))
    for _ in range(50):
        q.settle(deliver_one(q)[1], "modified", delivery_failed=True)
    assert sink.dead == [] and q.ready()[0].delivery_count == 50


def test_modified_without_delivery_failed_does_not_count():
    q, sink = make_queue(max_delivery_attempts=1, tags=("m0",), consumers=("c",))
    for _ in range(3):
        _, token, _ = deliver_one(q)
        q.settle(token, "modified")
        q_msg, = q.ready()
        assert q_msg.delivery_count == 0
    assert sink.dead == []


def test_outgoing_carries_the_delivery_count():
    raw = bytes(Message(body="x", durable=True, priority=6).encode())
    q, _ = make_queue()
    q.enqueue(QueuedMessage.from_bytes(raw, NOW))
    q.add_consumer("c")
    _, token, msg = deliver_one(q)
    assert msg.outgoing() is msg.payload               # first delivery: the bytes as they arrived
    q.settle(token, "modified", delivery_failed=True)
    _, token, msg = deliver_one(q)
    h = read_header(msg.outgoing())
    assert (h.delivery_count, h.durable, h.priority) == (1, True, 6)
    assert msg.payload == raw


def test_undeliverable_here_skips_that_consumer():
    q, _ = make_queue(tags=("m0", "m1"), consumers=("a",))
    _, token, _ = deliver_one(q, "a")
    q.settle(token, "modified", undeliverable_here=True)
    q.credit("a", 5)
    assert tags(q.next_deliveries(NOW)) == ["m1"]      # m0 is skipped for a, not lost
    assert ready_tags(q) == ["m0"] and q.ready()[0].delivery_count == 0
    q.add_consumer("b")
    cid, _, msg = deliver_one(q, "b")
    assert (cid, msg.payload) == ("b", b"m0")


def test_undeliverable_here_with_delivery_failed_counts():
    q, _ = make_queue(tags=("m0",), consumers=("a", "b"))
    _, token, _ = deliver_one(q, "a")
    q.settle(token, "modified", delivery_failed=True, undeliverable_here=True)
    q.credit("a", 1)
    assert q.next_deliveries(NOW) == []
    cid, _, msg = deliver_one(q, "b")
    assert (cid, msg.delivery_count) == ("b", 1)


def test_rejected_dead_letters_immediately():
    q, sink = make_queue(tags=("m0",), consumers=("c",))
    _, token, _ = deliver_one(q)
    q.settle(token, "rejected")
    assert sink.dead == [(b"m0", REASON_REJECTED)]
    assert (q.message_count, q.messages_killed, q.messages_acknowledged) == (0, 1, 0)


def test_without_dead_letter_callback_messages_are_dropped():
    q = Queue("q", dead_letter=None, expired=None, max_delivery_attempts=1)
    q.enqueue(m("m0"))
    q.enqueue(m("m1"))
    q.add_consumer("c")
    _, token, _ = deliver_one(q)
    q.settle(token, "rejected")
    _, token, _ = deliver_one(q)
    q.settle(token, "modified", delivery_failed=True)
    assert q.message_count == 0 and q.messages_killed == 2


def test_unknown_outcome_and_misuse():
    q, _ = make_queue(tags=("m0",), consumers=("c",))
    _, token, _ = deliver_one(q)
    with pytest.raises(ValueError):
        q.settle(token, "accepted-ish")
    assert q.delivering_count == 1                     # a bad call changes nothing
    with pytest.raises(ValueError):
        q.add_consumer("c")
    msg = m("x")
    q.enqueue(msg)
    with pytest.raises(ValueError):
        q.enqueue(msg)
    with pytest.raises(ValueError):
        q.credit("c", -1)


# --------------------------------------------------------------------------------------------------
# expiry
# --------------------------------------------------------------------------------------------------

def test_expired_messages_are_not_delivered():
    q, sink = make_queue()
    ttl = bytes(Message(body="ttl", ttl=1.0).encode())
    absolute = bytes(Message(body="abs", expiry_time=(NOW + 500) / 1000).encode())
    forever = bytes(Message(body="forever").encode())
    for raw in (ttl, absolute, forever):
        q.enqueue(QueuedMessage.from_bytes(raw, NOW))
    assert q.next_expiry() == NOW + 500
    q.add_consumer("c")
    q.credit("c", 10)
    out = q.next_deliveries(NOW + 1000)               # both deadlines passed (>=)
    assert [msg.payload for _, _, msg in out] == [forever]
    assert sink.expired == [ttl, absolute]
    assert q.messages_expired == 2 and q.next_expiry() is None


def test_expire_sweeps_ready_messages_only():
    q, sink = make_queue()
    q.enqueue(m("soon", 5, expires_at=NOW + 10))
    q.enqueue(m("later", 5, expires_at=NOW + 100))
    q.enqueue(m("never", 5))
    q.enqueue(m("flying", 9, expires_at=NOW + 1))
    q.add_consumer("c")
    _, token, msg = deliver_one(q, now=NOW)            # 1 ms before its expiry: delivered
    assert msg.payload == b"flying" and sink.expired == []
    assert q.expire(NOW + 9) == 0
    assert q.expire(NOW + 10) == 1 and sink.expired == [b"soon"]
    assert q.next_expiry() == NOW + 100
    assert q.expire(NOW + 10_000) == 1
    assert sink.expired == [b"soon", b"later"]
    assert ready_tags(q) == ["never"] and q.delivering_count == 1
    q.settle(token, "released")                        # back, and now found expired
    assert q.next_expiry() == NOW + 1
    assert q.expire(NOW + 10_000) == 1 and sink.expired[-1] == b"flying"


# --------------------------------------------------------------------------------------------------
# consumers, purge, counters
# --------------------------------------------------------------------------------------------------

def test_removed_consumer_unacked_go_to_others_in_order():
    q, _ = make_queue(tags=[f"m{i}" for i in range(6)], consumers=("a", "b"))
    q.credit("a", 2)
    q.credit("b", 2)
    out = q.next_deliveries(NOW)
    assert [(cid, msg.payload) for cid, _, msg in out] == [("a", b"m0"), ("b", b"m1"), ("a", b"m2"),
                                                           ("b", b"m3")]
    a_tokens = [t for cid, t, _ in out if cid == "a"]
    q.settle(a_tokens[0], "accepted")                  # m0 done; m2 still unsettled
    assert q.unsettled("a") == a_tokens[1:]
    back = q.remove_consumer("a")
    assert [msg.payload for msg in back] == [b"m2"]
    assert q.consumer_count == 1 and q.delivering_count == 2
    assert ready_tags(q) == ["m2", "m4", "m5"]
    assert back[0].delivery_count == 0
    q.credit("b", 10)
    assert tags(q.next_deliveries(NOW)) == ["m2", "m4", "m5"]


def test_removed_consumer_failed_counts_an_attempt():
    q, sink = make_queue(max_delivery_attempts=2, tags=("m0", "m1"), consumers=("a",))
    q.credit("a", 2)
    q.next_deliveries(NOW)
    q.remove_consumer("a", failed=True)
    assert [msg.delivery_count for msg in q.ready()] == [1, 1]
    q.add_consumer("b")
    q.credit("b", 2)
    q.next_deliveries(NOW)
    q.remove_consumer("b", failed=True)
    assert sink.dead == [(b"m0", REASON_MAX_DELIVERY_ATTEMPTS), (b"m1", REASON_MAX_DELIVERY_ATTEMPTS)]


def test_purge_removes_ready_not_delivering():
    q, _ = make_queue()
    for i in range(4):
        q.enqueue(m(f"m{i}", expires_at=NOW + 5))
    q.add_consumer("c")
    _, token, _ = deliver_one(q)
    assert q.purge() == 3
    assert q.ready() == [] and q.next_expiry() is None
    assert (q.message_count, q.messages_purged) == (1, 3)
    q.settle(token, "accepted")
    assert q.purge() == 0


def test_counters():
    q, _ = make_queue(max_delivery_attempts=1)
    for i in range(6):
        q.enqueue(m(f"m{i}", expires_at=NOW + 1 if i == 5 else None))
    q.add_consumer("c")
    q.add_consumer("d")
    assert (q.messages_added, q.message_count, q.consumer_count) == (6, 6, 2)
    q.credit("c", 4)
    out = q.next_deliveries(NOW)
    assert q.delivering_count == 4
    for (_, token, _), outcome in zip(out, ["accepted", "rejected", "modified", "released"]):
        q.settle(token, outcome, delivery_failed=True)
    assert q.expire(NOW + 1) == 1
    assert (q.messages_acknowledged, q.messages_killed, q.messages_expired) == (1, 2, 1)
    assert (q.message_count, q.delivering_count, q.ready_count) == (2, 0, 2)
    q.remove_consumer("d")
    assert q.consumer_count == 1
    assert q.messages_added == (q.message_count + q.messages_acknowledged + q.messages_expired
                                + q.messages_killed + q.messages_purged)


# --------------------------------------------------------------------------------------------------
# state machine against a list model
# --------------------------------------------------------------------------------------------------

MAX_ATTEMPTS = 2           # low, so that random runs reach the dead-letter limit often


class QueueMachine(RuleBasedStateMachine):
    """Random enqueue / consumers / credit / deliver / settle / time / expire / purge, checked against
    a model: a list of ready ids (sorted by (-priority, id) for the expected order), the in-flight map,
    and where every other message ended (accepted, dead-lettered, expired, purged)."""

    @initialize()
    def setup(self):
        self.now = NOW
        self.sink = Sink()
        self.q = Queue("sm", max_delivery_attempts=MAX_ATTEMPTS, dead_letter=self.sink.dead_letter,
                       expired=self.sink.on_expired)
        self.next_id = 0
        self.prio = {}               # id -> priority
        self.expiry = {}             # id -> expires_at | None
        self.count = {}              # id -> expected delivery_count
        self.excluded = {}           # id -> consumers that said undeliverable-here
        self.ready = []              # model ready ids (unordered; order derived)
        self.inflight = {}           # token -> (consumer, id)
        self.accepted, self.dead, self.expired, self.purged = [], [], [], []
        self.consumers = []
        self.next_consumer = 0
        self.credit = {}

    def key(self, i):
        return (-self.prio[i], i)

    @staticmethod
    def ident(msg):
        return int(msg.payload)

    def take_callbacks(self):
        dead = [(int(p), r) for p, r in self.sink.dead]
        expired = [int(p) for p in self.sink.expired]
        self.sink.dead.clear()
        self.sink.expired.clear()
        return dead, expired

    # mostly the default priority, so that FIFO within a priority is exercised as much as priority
    @rule(priority=st.one_of(st.just(4), st.integers(0, 9)),
          ttl=st.one_of(st.none(), st.none(), st.integers(0, 50)))
    def enqueue(self, priority, ttl):
        i = self.next_id
        self.next_id += 1
        exp = None if ttl is None else self.now + ttl
        self.prio[i], self.expiry[i], self.count[i], self.excluded[i] = priority, exp, 0, set()
        self.q.enqueue(QueuedMessage(str(i).encode(), priority=priority, expires_at=exp))
        self.ready.append(i)

    @precondition(lambda self: len(self.consumers) < 4)
    @rule()
    def add_consumer(self):
        c = self.next_consumer
        self.next_consumer += 1
        self.q.add_consumer(c)
        self.consumers.append(c)
        self.credit[c] = 0

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), failed=st.booleans())
    def remove_consumer(self, data, failed):
        c = data.draw(st.sampled_from(self.consumers))
        mine = [(t, i) for t, (cc, i) in self.inflight.items() if cc == c]
        back = self.q.remove_consumer(c, failed=failed)
        assert [self.ident(msg) for msg in back] == [i for _, i in sorted(mine)]
        expect_dead = []
        for t, i in sorted(mine):
            del self.inflight[t]
            if failed:
                self.count[i] += 1
                if self.count[i] >= MAX_ATTEMPTS:
                    expect_dead.append((i, REASON_MAX_DELIVERY_ATTEMPTS))
                    self.dead.append(i)
                    continue
            self.ready.append(i)
        assert self.take_callbacks() == (expect_dead, [])
        self.consumers.remove(c)
        del self.credit[c]

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), n=st.integers(0, 5))
    def give_credit(self, data, n):
        """Credit for one consumer; a delivery pass usually follows in the same step."""
        c = data.draw(st.sampled_from(self.consumers))
        self.q.credit(c, n)
        self.credit[c] += n
        if data.draw(st.booleans()):
            self.deliver()

    @rule(dt=st.integers(0, 30))
    def advance_time(self, dt):
        self.now += dt

    @rule()
    def deliver(self):
        total_credit = sum(self.credit.values())
        out = self.q.next_deliveries(self.now)
        dead, expired = self.take_callbacks()
        assert dead == []
        assert len(out) <= total_credit
        order = sorted(self.ready, key=self.key)
        delivered = [self.ident(msg) for _, _, msg in out]
        # delivered and expired messages were ready, each exactly once
        assert len(set(delivered) | set(expired)) == len(delivered) + len(expired)
        assert set(delivered) | set(expired) <= set(self.ready)
        for i in expired:
            assert self.expiry[i] is not None and self.now >= self.expiry[i]
        # priority order: what was handed out (and met expired) is in queue order
        met = sorted(delivered + expired, key=self.key)
        assert [i for i in met if i in set(delivered)] == delivered
        for cid, token, msg in out:
            i = self.ident(msg)
            assert self.expiry[i] is None or self.now < self.expiry[i]
            assert cid not in self.excluded[i]
            assert msg.delivery_count == self.count[i]
            assert token not in self.inflight
            self.inflight[token] = (cid, i)
            self.credit[cid] -= 1
            assert self.credit[cid] >= 0
        for cid in self.consumers:
            assert self.q.credit_of(cid) == self.credit[cid]
        for i in delivered + expired:
            self.ready.remove(i)
        self.expired += expired
        # nothing deliverable was passed over: a ready message ahead of the last one handed out is
        # either refused by every consumer that had credit or will be met later (credit ran out)
        if out:
            last = self.key(delivered[-1])
            for i in order:
                if i in self.ready and self.key(i) < last:
                    assert self.excluded[i], f"message {i} skipped without reason"
        # credit left over: the pass saw every message, so each one still ready is live and refused
        # by every consumer that has credit
        with_credit = {c for c, n in self.credit.items() if n > 0}
        if with_credit:
            for i in self.ready:
                assert self.expiry[i] is None or self.now < self.expiry[i]
                assert with_credit <= self.excluded[i], f"message {i} left behind"

    @precondition(lambda self: self.inflight)
    @rule(data=st.data(),
          outcome=st.sampled_from(["accepted", "released", "released", "modified", "modified", "rejected"]),
          failed=st.booleans(), here=st.booleans())
    def settle(self, data, outcome, failed, here):
        token = data.draw(st.sampled_from(sorted(self.inflight)))
        cid, i = self.inflight.pop(token)
        msg = self.q.settle(token, outcome, delivery_failed=failed, undeliverable_here=here)
        assert self.ident(msg) == i
        expect_dead = []
        if outcome == "accepted":
            self.accepted.append(i)
        elif outcome == "rejected":
            self.dead.append(i)
            expect_dead.append((i, REASON_REJECTED))
        else:
            if here:
                self.excluded[i].add(cid)
            if outcome == "modified" and failed:
                self.count[i] += 1
            if self.count[i] >= MAX_ATTEMPTS and outcome == "modified" and failed:
                self.dead.append(i)
                expect_dead.append((i, REASON_MAX_DELIVERY_ATTEMPTS))
            else:
                self.ready.append(i)
        assert self.take_callbacks() == (expect_dead, [])

    @rule()
    def expire(self):
        due = sorted((i for i in self.ready if self.expiry[i] is not None and self.now >= self.expiry[i]),
                     key=lambda i: (self.expiry[i], self.key(i)))
        assert self.q.expire(self.now) == len(due)
        assert self.take_callbacks() == ([], due)
        for i in due:
            self.ready.remove(i)
        self.expired += due

    @rule()
    def purge(self):
        order = sorted(self.ready, key=self.key)
        assert [self.ident(msg) for msg in self.q.purge_messages()] == order
        self.purged += order
        self.ready.clear()

    @invariant()
    def ready_matches_model_in_priority_order(self):
        got = [self.ident(msg) for msg in self.q.ready()]
        assert got == sorted(self.ready, key=self.key)
        for msg in self.q.ready():
            assert msg.delivery_count == self.count[self.ident(msg)]

    @invariant()
    def nothing_lost_or_duplicated(self):
        places = [self.ready, [i for _, i in self.inflight.values()], self.accepted, self.dead,
                  self.expired, self.purged]
        everyone = [i for p in places for i in p]
        assert sorted(everyone) == list(range(self.next_id))
        q = self.q
        assert q.message_count == len(self.ready) + len(self.inflight)
        assert q.delivering_count == len(self.inflight)
        assert (q.messages_added, q.messages_acknowledged, q.messages_killed, q.messages_expired,
                q.messages_purged, q.consumer_count) == (
            self.next_id, len(self.accepted), len(self.dead), len(self.expired), len(self.purged),
            len(self.consumers))
        due = [i for i in self.ready if self.expiry[i] is not None]
        assert q.next_expiry() == (min(self.expiry[i] for i in due) if due else None)


QueueMachine.TestCase.settings = settings(max_examples=250, stateful_step_count=80, deadline=None)
TestQueueMachine = QueueMachine.TestCase
