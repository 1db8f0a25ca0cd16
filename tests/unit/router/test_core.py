"""The router's credit, distribution and settlement logic, driven in memory (no sockets).

Rules under test: Qpid Dispatch 1.19 src/router_core/forwarder.c, connections.c, delivery.c (distribution,
credit,
settlement). Clients are proton object-API peers wired to router engines by tests/unit/enginepair.py.
"""

from __future__ import annotations

import itertools
import os
import struct

import proton
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from proton import Endpoint, Message, symbol

from tests.unit.enginepair import (
    ACCEPTED, MODIFIED, REJECTED, RELEASED, AddressEntity, ConsumerHandler, Peer, RouterHarness, engine_client,
    outcome, settle,
)
from wire import raw



def harness(*entities, **kw) -> RouterHarness:
    return RouterHarness(address_entities=list(entities), **kw)


@pytest.fixture
def h():
    return RouterHarness()


def anycast_setup(h, address="q", credit=100, producer_kw=None):
    prod = h.connect(**(producer_kw or {}))
    cons = h.connect()
    rcv = cons.receiver(address, credit=credit)
    snd = prod.sender(address)
    h.pump()
    return prod, snd, cons, rcv


# -- credit ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("capacity", [None, 10, 1, 1000])
def test_targeted_producer_gets_credit_only_with_a_consumer(capacity):
    h = RouterHarness()
    kw = {} if capacity is None else {"link_capacity": capacity}
    expected = 250 if capacity is None else capacity
    prod = h.connect(**kw)
    snd = prod.sender("q")
    h.pump()
    assert snd.state & Endpoint.REMOTE_ACTIVE
    assert snd.credit == 0
    cons = h.connect()
    cons.receiver("q")  # a consumer with no credit of its own is still a destination
    h.pump()
    assert snd.credit == expected


def test_anonymous_producer_gets_credit_at_once(h):
    prod = h.connect(link_capacity=17)
    snd = prod.sender(None)
    h.pump()
    assert snd.credit == 17


def test_credit_replenished_exactly_as_messages_leave(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=0, producer_kw={"link_capacity": 10})
    assert snd.credit == 10
    ds = [prod.send(snd, body=i) for i in range(10)]
    h.pump()
    assert snd.credit == 0  # all ten queued in the router: nothing left yet
    rcv.flow(4)
    h.pump()
    assert snd.credit == 4  # four left the router's buffers
    assert cons.bodies(rcv) == [0, 1, 2, 3]
    assert not any(d.settled for d in ds)


def test_thousand_messages_credit_never_exceeds_capacity(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=50)
    capacity = 250
    sent, ds, max_credit = 0, [], snd.credit
    while sent < 1000:
        n = min(snd.credit, 1000 - sent, 37)
        for _ in range(n):
            ds.append(prod.send(snd, body=sent))
            sent += 1
        h.pump()
        max_credit = max(max_credit, snd.credit)
        got = cons.received(rcv, clear=True)
        for g in got:
            settle(g, ACCEPTED)
        if got:
            rcv.flow(len(got))
        h.pump()
        max_credit = max(max_credit, snd.credit)
        assert snd.credit <= capacity
    for _ in range(20):  # drain what is left
        got = cons.received(rcv, clear=True)
        if not got:
            break
        for g in got:
            settle(g, ACCEPTED)
        rcv.flow(len(got))
        h.pump()
    assert max_credit <= capacity
    assert all(outcome(d) == {"state": "accepted", "settled": True} for d in ds)
    rl = next(iter(h.router.addresses["M0q"].rlinks))
    assert rl.accepted == 1000
    assert snd.credit > capacity - rl.credit_batch - 1


def test_last_consumer_leaves_released_modified_and_credit_withheld(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=3, producer_kw={"link_capacity": 10})
    ds = [prod.send(snd, body=i) for i in range(5)]
    h.pump()
    assert cons.bodies(rcv) == [0, 1, 2]  # 3 sent and held unsettled, 2 queued in the router
    assert snd.credit == 8  # 10 - 5 sent + 3 that left the router
    rcv.close()
    h.pump()
    for d in ds[:3]:
        assert outcome(d) == {"state": "modified", "settled": True, "failed": True, "undeliverable": False,
                              "annotations": None}
    for d in ds[3:]:
        assert outcome(d) == {"state": "released", "settled": True}
    assert snd.credit == 8  # the two released are not given back while there is no consumer
    # credit already granted can still be spent: such deliveries go nowhere and are released
    extra = prod.send(snd, body="no one")
    h.pump()
    assert outcome(extra) == {"state": "released", "settled": True}
    assert snd.credit == 7
    # a consumer returns: the producer is topped up to its capacity
    rcv2 = cons.receiver("q", credit=10)
    h.pump()
    assert snd.credit == 10
    d = prod.send(snd, body="again")
    h.pump()
    assert cons.bodies(rcv2) == ["again"]
    settle(cons.received(rcv2)[0], ACCEPTED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


def test_other_consumer_keeps_address_alive(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=1, producer_kw={"link_capacity": 10})
    rcv2 = cons.receiver("q", credit=0)
    h.pump()
    ds = [prod.send(snd, body=i) for i in range(4)]
    h.pump()
    rcv.close()
    h.pump()
    rcv2.flow(10)
    h.pump()
    # each delivery either came back from the departed link (never re-routed) or reached rcv2
    on_rcv2 = cons.bodies(rcv2)
    for i, d in enumerate(ds):
        if i in on_rcv2:
            assert not d.settled
        else:
            assert d.settled and outcome(d)["state"] in ("released", "modified")
    assert snd.credit > 0  # the address still has a destination: credit is not withheld
    d = prod.send(snd, body="x")
    h.pump()
    assert cons.bodies(rcv2)[-1] == "x"
    assert not d.settled


def test_drain_with_nothing_queued(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=0)
    rcv.drain(10)
    h.pump()
    assert rcv.credit == 0
    assert not rcv.draining()


def test_drain_delivers_queued_then_drains(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=0)
    for i in range(3):
        prod.send(snd, body=i)
    h.pump()
    rcv.drain(10)
    h.pump()
    assert cons.bodies(rcv) == [0, 1, 2]
    assert rcv.credit == 0


# -- anycast outcomes --------------------------------------------------------------------------------

ANYCAST_OUTCOMES = [
    pytest.param(dict(outcome=ACCEPTED), {"state": "accepted", "settled": True}, id="accepted"),
    pytest.param(dict(outcome=RELEASED), {"state": "released", "settled": True}, id="released"),
    pytest.param(dict(outcome=REJECTED, condition="amqp:precondition-failed", description="no thanks"),
                 {"state": "rejected", "settled": True, "condition": ("amqp:precondition-failed", "no thanks")},
                 id="rejected-condition"),
    pytest.param(dict(outcome=REJECTED, condition="app:bad"),
                 {"state": "rejected", "settled": True, "condition": ("app:bad", None)},
                 id="rejected-name-only"),
    pytest.param(dict(outcome=MODIFIED, failed=True, undeliverable=False),
                 {"state": "modified", "settled": True, "failed": True, "undeliverable": False,
                  "annotations": None}, id="modified-failed"),
    pytest.param(dict(outcome=MODIFIED, failed=False, undeliverable=True),
                 {"state": "modified", "settled": True, "failed": False, "undeliverable": True,
                  "annotations": None}, id="modified-undeliverable"),
    pytest.param(dict(outcome=MODIFIED, failed=True, undeliverable=True,
                      annotations={symbol("x-reason"): "later", symbol("x-count"): 3}),
                 {"state": "modified", "settled": True, "failed": True, "undeliverable": True,
                  "annotations": {symbol("x-reason"): "later", symbol("x-count"): 3}},
                 id="modified-annotations"),
]


@pytest.mark.parametrize("how,expected", ANYCAST_OUTCOMES)
def test_anycast_outcome_mirrored(h, how, expected):
    prod, snd, cons, rcv = anycast_setup(h)
    d = prod.send(snd, body="m")
    h.pump()
    [g] = cons.received(rcv)
    assert not d.settled and d.remote_state == 0
    settle(g, **how)
    h.pump()
    assert outcome(d) == expected


def test_rejected_without_condition_mirrored(h):
    """A rejected outcome with no error condition reaches the producer (no condition to copy)."""
    prod, snd, cons, rcv = anycast_setup(h)
    d = prod.send(snd, body="m")
    h.pump()
    [g] = cons.received(rcv)
    g.delivery.update(REJECTED)
    g.delivery.settle()
    h.pump()
    assert d.settled
    assert d.remote_state == REJECTED


def test_settled_without_outcome_counts_as_accepted(h):
    prod, snd, cons, rcv = anycast_setup(h)
    d = prod.send(snd, body="m")
    h.pump()
    [g] = cons.received(rcv)
    g.delivery.settle()
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


def test_nothing_settled_upstream_while_consumer_holds(h):
    prod, snd, cons, rcv = anycast_setup(h)
    ds = [prod.send(snd, body=i) for i in range(3)]
    h.pump()
    got = cons.received(rcv)
    assert len(got) == 3
    for _ in range(3):
        h.pump()
    assert [(d.settled, d.remote_state) for d in ds] == [(False, 0)] * 3
    settle(got[1], ACCEPTED)
    h.pump()
    assert [d.settled for d in ds] == [False, True, False]


def test_unsettled_outcome_mirrored_unsettled_until_consumer_settles(h):
    prod, snd, cons, rcv = anycast_setup(h)
    d = prod.send(snd, body="m")
    h.pump()
    [g] = cons.received(rcv)
    settle(g, ACCEPTED, settle=False)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": False}
    settle(g, 0)  # now settle
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


def test_received_state_is_not_terminal(h):
    prod, snd, cons, rcv = anycast_setup(h)
    d = prod.send(snd, body="m")
    h.pump()
    [g] = cons.received(rcv)
    g.delivery.update(proton.Delivery.RECEIVED)
    h.pump()
    assert not d.settled
    settle(g, ACCEPTED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


# -- multicast -----------------------------------------------------------------------------------------

PRIORITY = {RELEASED: 1, MODIFIED: 2, ACCEPTED: 3, REJECTED: 4}  # §1.2: rejected > accepted > modified > released
NAMES = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released", MODIFIED: "modified"}


def multicast_setup(n=3, credit=10):
    h = harness(AddressEntity("mc", distribution="multicast"))
    prod = h.connect()
    conss = [h.connect() for _ in range(n)]
    rcvs = [c.receiver("mc/topic", credit=credit) for c in conss]
    snd = prod.sender("mc/topic")
    h.pump()
    return h, prod, snd, conss, rcvs


@pytest.mark.parametrize("outcomes", list(itertools.product([ACCEPTED, REJECTED, RELEASED, MODIFIED], repeat=3)),
                         ids=lambda o: "-".join(NAMES[x][:3] for x in o))
def test_multicast_merged_outcome(outcomes):
    h, prod, snd, conss, rcvs = multicast_setup()
    d = prod.send(snd, body="fan")
    h.pump()
    copies = [c.received(r)[0] for c, r in zip(conss, rcvs)]
    assert [c.body for c in copies] == ["fan"] * 3
    for i, (copy, oc) in enumerate(zip(copies, outcomes)):
        assert not d.settled, f"settled after {i} of 3 consumers"
        kw = {"failed": True} if oc == MODIFIED else {}
        settle(copy, oc, **kw)
        h.pump()
    assert d.settled
    expected = max(outcomes, key=PRIORITY.__getitem__)
    assert d.remote_state == expected


def test_multicast_reaches_every_consumer_with_identical_bytes():
    h, prod, snd, conss, rcvs = multicast_setup()
    msg = Message(body={"k": [1, 2, 3]}, subject="s", properties={"a": 1}, durable=True)
    data = bytes(msg.encode())
    prod.send(snd, data)
    h.pump()
    assert [c.received(r)[0].data for c, r in zip(conss, rcvs)] == [data] * 3


def test_multicast_consumer_leaving_counts_its_copy(h):
    h, prod, snd, conss, rcvs = multicast_setup()
    d = prod.send(snd, body="fan")
    h.pump()
    settle(conss[0].received(rcvs[0])[0], ACCEPTED)
    settle(conss[1].received(rcvs[1])[0], ACCEPTED)
    h.pump()
    assert not d.settled
    rcvs[2].close()  # held unsettled: its copy becomes modified; accepted wins
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


# The next three guard the multicast fan-out accounting: every copy must be counted (ind.copies,
# ind.buffered) before any is sent, or the message bytes are freed / credit returned / the producer settled
# after the first copy.

def test_multicast_presettled_producer():
    h, prod, snd, conss, rcvs = multicast_setup()
    prod.send(snd, body="fire", settled=True)
    h.pump()
    for c, r in zip(conss, rcvs):
        [g] = c.received(r)
        assert g.body == "fire"
        assert g.settled


def test_multicast_producer_credit_never_exceeds_capacity():
    h = harness(AddressEntity("mc", distribution="multicast"))
    prod = h.connect(link_capacity=10)
    conss = [h.connect() for _ in range(3)]
    rcvs = [c.receiver("mc", credit=100) for c in conss]
    snd = prod.sender("mc")
    h.pump()
    assert snd.credit == 10
    ds = [prod.send(snd, body=i) for i in range(5)]
    h.pump()
    assert snd.credit == 10  # every message left the router's buffers: all 5 credits back, no more
    il = next(iter(h.router.addresses["M0mc"].inlinks))
    assert il.outstanding == 0
    for c, r in zip(conss, rcvs):
        for g in c.received(r):
            settle(g, ACCEPTED)
    h.pump()
    assert all(d.settled for d in ds)


def test_multicast_settles_after_all_even_with_a_presettled_consumer():
    h = harness(AddressEntity("mc", distribution="multicast"))
    prod = h.connect()
    c1, c2 = h.connect(), h.connect()
    r1 = c1.receiver("mc", credit=10, settled=True)  # attached first
    r2 = c2.receiver("mc", credit=10)
    snd = prod.sender("mc")
    h.pump()
    d = prod.send(snd, body="x")
    h.pump()
    assert c1.received(r1)[0].settled
    [g2] = c2.received(r2)
    assert not d.settled  # c2 holds its copy
    settle(g2, RELEASED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}  # accepted (pre-settled copy) > released


def test_multicast_credit_with_consumers_without_credit():
    """Copies queued (no consumer credit): credit comes back once, when the last copy leaves."""
    h = harness(AddressEntity("mc", distribution="multicast"))
    prod = h.connect(link_capacity=10)
    conss = [h.connect() for _ in range(3)]
    rcvs = [c.receiver("mc", credit=0) for c in conss]
    snd = prod.sender("mc")
    h.pump()
    prod.send(snd, body="x")
    h.pump()
    assert snd.credit == 9
    for r in rcvs[:2]:
        r.flow(1)
    h.pump()
    assert snd.credit == 9  # one copy still queued
    rcvs[2].flow(1)
    h.pump()
    assert snd.credit == 10


# -- distribution ----------------------------------------------------------------------------------------

def test_closest_round_robin_exact():
    h = harness(AddressEntity("cl", distribution="closest"))
    prod = h.connect()
    conss = [h.connect() for _ in range(3)]
    rcvs = [c.receiver("cl", credit=100) for c in conss]
    snd = prod.sender("cl")
    h.pump()
    for i in range(30):
        prod.send(snd, body=i)
    h.pump()
    got = [c.bodies(r) for c, r in zip(conss, rcvs)]
    assert [len(g) for g in got] == [10, 10, 10]
    assert sorted(itertools.chain(*got)) == list(range(30))
    # strict rotation: each consumer gets every third message
    offsets = sorted(g[0] for g in got)
    assert offsets == [0, 1, 2]
    for g in got:
        assert g == list(range(g[0], 30, 3))


def test_balanced_prefers_least_backlogged(h):
    prod = h.connect()
    fast, slow = h.connect(), h.connect()
    rf = fast.receiver("b", credit=200)
    rs = slow.receiver("b", credit=200)
    snd = prod.sender("b")
    h.pump()
    fast_n = 0
    for i in range(40):
        prod.send(snd, body=i)
        h.pump()
        got = fast.received(rf, clear=True)  # fast settles at once; slow never does
        fast_n += len(got)
        for g in got:
            settle(g, ACCEPTED)
        h.pump()
    slow_n = len(slow.received(rs))
    assert fast_n + slow_n == 40
    assert slow_n <= 1  # once slow holds one unsettled delivery, fast (backlog 0) always wins


def test_balanced_spreads_ties_when_backlogs_equal(h):
    prod = h.connect()
    conss = [h.connect() for _ in range(2)]
    rcvs = [c.receiver("b2", credit=100) for c in conss]
    snd = prod.sender("b2")
    h.pump()
    for i in range(20):
        prod.send(snd, body=i)
    h.pump()
    counts = [len(c.received(r)) for c, r in zip(conss, rcvs)]
    assert sum(counts) == 20
    assert abs(counts[0] - counts[1]) <= 1  # nobody settles: equal backlogs alternate


def test_balanced_is_the_default(h):
    assert h.router.address_config.default_distribution == "balanced"


# -- anonymous senders ----------------------------------------------------------------------------------

@pytest.mark.parametrize("to", ["q1", "amqp:/q1", "amqp://host/q1", "amqp://host:5672/q1"])
def test_anonymous_routed_by_to(h, to):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q1", credit=5)
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, address=to, body="hello")
    h.pump()
    assert cons.bodies(rcv) == ["hello"]
    settle(cons.received(rcv)[0], ACCEPTED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}


def test_anonymous_to_as_symbol_and_str32(h):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q1", credit=5)
    snd = prod.sender(None)
    h.pump()
    # properties: message-id null, user-id null, to as sym8 / str32
    for to_enc in (b"\xa3\x02q1", b"\xb1\x00\x00\x00\x02q1"):
        props = b"\x00\x53\x73\xc0" + bytes([1 + 2 + len(to_enc), 3]) + b"\x40\x40" + to_enc
        prod.send(snd, props + b"\x00\x53\x77\xa1\x01x")
    h.pump()
    assert cons.bodies(rcv) == ["x", "x"]


def test_anonymous_no_route_unsettled_released(h):
    prod = h.connect()
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, address="nowhere", body="x")
    h.pump()
    assert outcome(d) == {"state": "released", "settled": True}
    assert h.router.deliveries_no_route == 1
    assert h.router.dropped_presettled == 0


def test_anonymous_no_route_presettled_dropped_and_counted(h):
    prod = h.connect(link_capacity=10)
    snd = prod.sender(None)
    h.pump()
    credit = snd.credit
    for _ in range(3):
        prod.send(snd, address="nowhere", body="x", settled=True)
    prod.send(snd, body="no to at all", settled=True)
    h.pump()
    assert h.router.dropped_presettled == 4
    assert snd.credit == credit  # the credit came back


def test_anonymous_without_to_released(h):
    prod = h.connect()
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, body="no address")
    h.pump()
    assert outcome(d) == {"state": "released", "settled": True}


# -- unavailable -----------------------------------------------------------------------------------------

def test_unavailable_attach_refused_not_found():
    h = harness(AddressEntity("gone", distribution="unavailable"))
    c = h.connect()
    rcv = c.receiver("gone/x")
    snd = c.sender("gone")
    h.pump()
    for link in (rcv, snd):
        assert link.state & Endpoint.REMOTE_CLOSED
        assert link.remote_condition is not None
        assert link.remote_condition.name == "amqp:not-found"
    # the connection survives
    ok = c.receiver("fine", credit=1)
    h.pump()
    assert ok.state & Endpoint.REMOTE_ACTIVE


def test_unavailable_anonymous_send_rejected_not_found():
    h = harness(AddressEntity("gone", distribution="unavailable"))
    c = h.connect()
    snd = c.sender(None)
    h.pump()
    d = c.send(snd, address="gone", body="x")
    d2 = c.send(snd, address="amqp:/gone/deeper", body="x")
    h.pump()
    for x in (d, d2):
        o = outcome(x)
        assert o["state"] == "rejected" and o["settled"]
        assert o["condition"][0] == "amqp:not-found"


def test_receiver_without_source_address_refused(h):
    c = h.connect()
    rcv = c.receiver(None)
    h.pump()
    assert rcv.state & Endpoint.REMOTE_CLOSED
    assert rcv.remote_condition.name == "amqp:invalid-field"


# -- dynamic receivers ------------------------------------------------------------------------------------

def test_dynamic_receiver_and_replies(h):
    client = h.connect()
    server = h.connect()
    reply_rcv = client.receiver(dynamic=True, credit=10)
    h.pump()
    reply_to = reply_rcv.remote_source.address
    assert reply_to.startswith(f"amqp:/_topo/0/{h.router.id}/temp.")
    assert reply_rcv.remote_source.dynamic
    # request/response: the server answers to reply_to through an anonymous sender
    req_rcv = server.receiver("service", credit=10)
    req_snd = client.sender("service")
    anon = server.sender(None)
    h.pump()
    client.send(req_snd, body="ping", reply_to=reply_to)
    h.pump()
    [req] = server.received(req_rcv)
    assert req.message.reply_to == reply_to
    d = server.send(anon, address=req.message.reply_to, body="pong")
    h.pump()
    assert client.bodies(reply_rcv) == ["pong"]
    settle(client.received(reply_rcv)[0], ACCEPTED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}
    # the scheme-less form and a targeted sender reach it as well
    d2 = server.send(anon, address=reply_to[len("amqp:/"):], body="pong2")
    tsnd = server.sender(reply_to)
    h.pump()
    server.send(tsnd, body="pong3")
    h.pump()
    assert client.bodies(reply_rcv) == ["pong", "pong2", "pong3"]
    assert not d2.settled


def test_dynamic_addresses_are_unique_and_removed(h):
    c = h.connect()
    r1 = c.receiver(dynamic=True)
    r2 = c.receiver(dynamic=True)
    h.pump()
    assert r1.remote_source.address != r2.remote_source.address
    n = len(h.router.addresses)
    r1.close()
    h.pump()
    assert len(h.router.addresses) == n - 1


# -- bytes end to end ------------------------------------------------------------------------------------

def _ma_section(entries: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(k + v for k, v in entries)
    return b"\x00\x53\x72\xd1" + struct.pack(">II", len(body) + 4, 2 * len(entries)) + body


def _sym(s: str) -> bytes:
    b = s.encode()
    return b"\xa3" + bytes([len(b)]) + b


def _str(s: str) -> bytes:
    b = s.encode()
    return b"\xa1" + bytes([len(b)]) + b


HEADER = b"\x00\x53\x70\xc0\x02\x01\x41"  # header: durable=true
REST = bytes(Message(address="q", subject="subj", properties={"app": 1}, body="payload").encode())
REST = REST[REST.index(b"\x00\x53\x73"):]  # properties + application-properties + body


@pytest.mark.parametrize("anonymous", [False, True])
def test_router_annotations_stripped_user_annotations_byte_identical(h, anonymous):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=5)
    snd = prod.sender(None if anonymous else "q")
    h.pump()
    user1 = (_sym("user-key"), _str("user-value"))
    user2 = (_sym("x-opt-app"), b"\x55\x07")  # smallint 7
    qd = [(_sym("x-opt-qd.to"), _str("elsewhere")), (_sym("x-opt-qd.phase"), b"\x54\x01"),
          (_sym("x-opt-qd.trace"), b"\x45"), (_sym("x-opt-qd.ingress"), _str("0/Other"))]
    msg = HEADER + _ma_section([user1, user2] + qd) + REST
    d = prod.send(snd, msg)
    h.pump()
    [g] = cons.received(rcv)
    assert b"x-opt-qd" not in g.data
    assert g.data.startswith(HEADER)
    assert g.data.endswith(REST)
    assert user1[0] + user1[1] + user2[0] + user2[1] in g.data
    m = g.message
    assert m.annotations == {symbol("user-key"): "user-value", symbol("x-opt-app"): 7}
    assert m.address == "q" and m.body == "payload"
    settle(g, ACCEPTED)
    h.pump()
    assert outcome(d)["state"] == "accepted"


BIG_REST = bytes(Message(address="q", body=b"x-opt-qd.to" * 500).encode())
BIG_REST = BIG_REST[BIG_REST.index(b"\x00\x53\x73"):]  # properties + a 5,500-byte body holding the prefix


def test_router_annotations_stripped_from_a_large_message_and_a_body_holding_the_prefix_left_alone(h):
    """Above SCAN_WHOLE_BELOW the router tells by the first sections whether to look for router annotations:
    it still strips them from a message-annotations section, and a body that merely holds the prefix is
    forwarded byte for byte."""
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=5)
    snd = prod.sender("q")
    h.pump()
    user = (_sym("user-key"), _str("user-value"))
    prod.send(snd, HEADER + _ma_section([user, (_sym("x-opt-qd.to"), _str("zz"))]) + BIG_REST)
    prod.send(snd, HEADER + BIG_REST)
    h.pump()
    first, second = cons.received(rcv)
    head = first.data[:-len(BIG_REST)]
    assert first.data.endswith(BIG_REST) and head.startswith(HEADER)
    assert b"x-opt-qd" not in head and user[0] + user[1] in head
    assert second.data == HEADER + BIG_REST


def test_only_router_annotations_drop_the_section(h):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=5)
    snd = prod.sender("q")
    h.pump()
    prod.send(snd, HEADER + _ma_section([(_sym("x-opt-qd.to"), _str("zz"))]) + REST)
    h.pump()
    [g] = cons.received(rcv)
    assert g.data == HEADER + REST


def test_anonymous_to_override_from_client_is_ignored(h):
    """x-opt-qd.to from a normal connection is stripped, not trusted: properties.to routes."""
    prod = h.connect()
    cons = h.connect()
    rq = cons.receiver("q", credit=5)
    rz = cons.receiver("zz", credit=5)
    snd = prod.sender(None)
    h.pump()
    prod.send(snd, _ma_section([(_sym("x-opt-qd.to"), _str("zz"))]) + REST)
    h.pump()
    assert len(cons.received(rq)) == 1
    assert cons.received(rz) == []


def test_message_bytes_identical_end_to_end(h):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=10)
    snd = prod.sender("q")
    h.pump()
    msgs = [
        bytes(Message(body="plain").encode()),
        bytes(Message(id=7, correlation_id="c", reply_to="r", subject="s", content_type="text/plain",
                      durable=True, priority=9, ttl=5.0, properties={"a": 1, "b": "two"},
                      annotations={symbol("user"): "ann"}, body={"map": [1, 2.5, None]}).encode()),
        b"\x00\x53\x75\xa0\x03abc",  # a bare data section
        b"\x00\x53\x75\xa0\x00",  # empty data
        HEADER + REST + b"\x00\x53\x78\xc1\x01\x00",  # with an (empty) footer
    ]
    for m in msgs:
        prod.send(snd, m)
    h.pump()
    assert [g.data for g in cons.received(rcv)] == msgs


# -- presettled consumer, connection loss, malformed input, large messages ---------------------------------

def test_presettled_consumer_link(h):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=10, settled=True)
    snd = prod.sender("q")
    h.pump()
    assert rcv.remote_snd_settle_mode == proton.Link.SND_SETTLED
    ds = [prod.send(snd, body=i) for i in range(3)]
    h.pump()
    got = cons.received(rcv)
    assert [g.body for g in got] == [0, 1, 2]
    assert all(g.settled for g in got)
    assert [outcome(d) for d in ds] == [{"state": "accepted", "settled": True}] * 3


def test_presettled_producer_to_normal_consumer(h):
    prod, snd, cons, rcv = anycast_setup(h)
    prod.send(snd, body="fire and forget", settled=True)
    h.pump()
    [g] = cons.received(rcv)
    assert g.settled


def test_consumer_connection_drop_returns_its_deliveries(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=2, producer_kw={"link_capacity": 10})
    other = h.connect()
    ds = [prod.send(snd, body=i) for i in range(4)]
    h.pump()
    assert cons.bodies(rcv) == [0, 1]
    h.drop(cons)
    assert [outcome(d)["state"] for d in ds] == ["modified", "modified", "released", "released"]
    assert all(d.settled for d in ds)
    assert all(outcome(d)["failed"] for d in ds[:2])
    assert h.router.connections == {p.router_engine.app for p in (prod, other)}
    # the router keeps working
    r2 = other.receiver("q", credit=5)
    h.pump()
    d = prod.send(snd, body="after")
    h.pump()
    assert other.bodies(r2) == ["after"]
    assert not d.settled


@pytest.mark.parametrize("how", ["link-detach", "link-close", "session-end", "connection-close"])
def test_consumer_going_away_gracefully_returns_its_deliveries(h, how):
    prod, snd, cons, rcv = anycast_setup(h, credit=1, producer_kw={"link_capacity": 10})
    ds = [prod.send(snd, body=i) for i in range(3)]
    h.pump()
    assert cons.bodies(rcv) == [0]
    if how == "link-detach":
        rcv.detach()
    elif how == "link-close":
        rcv.close()
    elif how == "session-end":
        cons.session.close()
    else:
        cons.connection.close()
    h.pump()
    assert [outcome(d)["state"] for d in ds] == ["modified", "released", "released"]
    assert all(d.settled for d in ds)
    assert h.router.addresses["M0q"].rlinks == []
    if how == "connection-close":
        assert cons.router_engine.app not in h.router.connections


def test_producer_connection_drop_with_deliveries_in_flight(h):
    prod, snd, cons, rcv = anycast_setup(h, credit=1)
    for i in range(3):
        prod.send(snd, body=i)
    h.pump()
    h.drop(prod)
    [g] = cons.received(rcv)
    settle(g, ACCEPTED)  # the producer is gone: nothing to mirror to, nothing must break
    rcv.flow(5)
    h.pump()
    for g in cons.received(rcv)[1:]:
        settle(g, ACCEPTED)
    h.pump()
    prod2 = h.connect()
    snd2 = prod2.sender("q")
    h.pump()
    d = prod2.send(snd2, body="new")
    h.pump()
    assert cons.bodies(rcv)[-1] == "new"
    assert not d.settled


MALFORMED = [
    b"\xff\xff\xff",
    b"\x00\x53\x73",  # properties descriptor, no value
    b"\x00\x53\x73\xc0\x10\x03\x40",  # list size beyond the message
    b"\x00\x53\x73\xc0\x04\x03\x40\x40\xa1",  # truncated 'to'
    b"\x00\x53\x73\xc0\x05\x03\x40\x40\xa1\x09ab",  # 'to' longer than the list
    b"\x00\x53\x73\xc0\x04\x03\x40\x40\x71",  # 'to' is an int
    b"\x00\x53\x72\xc1\x10\x02\xa3\x0bx-opt-qd.to",  # router annotations, truncated map
    b"\x00\x53\x72\xc1\x03\x01\xa3\x0bx-opt-qd.to",  # odd map count
    b"\x00\x53\x99\x40",  # unknown section
]


@pytest.mark.parametrize("bad", MALFORMED, ids=lambda b: b.hex()[:24])
def test_malformed_on_anonymous_link_rejected_decode_error(h, bad):
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=5)
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, bad)
    h.pump()
    o = outcome(d)
    assert o["settled"]
    assert o["state"] == "rejected", o
    assert o["condition"][0] == "amqp:decode-error"
    # the router keeps working, on the same link
    d2 = prod.send(snd, address="q", body="good")
    h.pump()
    assert cons.bodies(rcv) == ["good"]
    assert not d2.settled


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=48).map(lambda b: b"\x00\x53\x73" + b),
    st.binary(max_size=48).map(lambda b: b"\x00\x53\x72" + b + b"x-opt-qd.to"),
    st.binary(max_size=48).map(lambda b: b"\x00\x53\x72\xc1" + b),
))
def test_fuzz_anonymous_link_never_breaks_the_router(data):
    h = RouterHarness()
    prod = h.connect()
    cons = h.connect()
    rcv = cons.receiver("q", credit=5)
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, data)
    h.pump()
    for g in cons.received(rcv, clear=True):
        settle(g, ACCEPTED)
    h.pump()
    o = outcome(d)
    assert o["settled"], o
    assert o["state"] in ("rejected", "released", "accepted")
    if o["state"] == "rejected":
        assert o["condition"][0] == "amqp:decode-error"
    d2 = prod.send(snd, address="q", body="good")
    h.pump()
    assert cons.bodies(rcv)[-1:] == ["good"]


@pytest.mark.parametrize("anonymous", [False, True])
@pytest.mark.parametrize("size", [1024 * 1024, 16384 * 3 + 1])
def test_large_message_forwarded_intact(h, anonymous, size):
    prod = h.connect(Peer(max_frame_size=16384))
    cons = h.connect(Peer(max_frame_size=4096))
    rcv = cons.receiver("big", credit=5)
    snd = prod.sender(None if anonymous else "big")
    h.pump()
    body = os.urandom(size)
    msg = bytes(Message(address="big", body=body).encode())
    d = prod.send(snd, msg)
    d_small = prod.send(snd, address="big", body="after")
    h.pump()
    got = cons.received(rcv)
    assert [g.data for g in got[:1]] == [msg]
    assert got[1].body == "after"
    settle(got[0], ACCEPTED)
    h.pump()
    assert outcome(d) == {"state": "accepted", "settled": True}
    assert not d_small.settled
    assert not h.router.assembly and h.router.budget.total == 0


def test_aborted_delivery_is_dropped(h):
    prod, snd, cons, rcv = anycast_setup(h)
    d = snd.delivery(b"abort-me")
    snd.send(b"\x00\x53\x75\xb0" + struct.pack(">I", 100_000) + b"x" * 50_000)
    h.pump()
    d.abort()
    h.pump()
    assert cons.received(rcv) == []
    assert not h.router.assembly and h.router.budget.total == 0
    d2 = prod.send(snd, body="next")
    h.pump()
    assert cons.bodies(rcv) == ["next"]
    assert not d2.settled


# -- an EngineConnection client instead of a Peer ----------------------------------------------------------

@pytest.mark.parametrize("auto_accept", [True, False])
def test_engine_connection_client(h, auto_accept):
    handler = ConsumerHandler("eq", credit=10, auto_accept=auto_accept)
    client = h.connect(engine_client(handler))
    assert handler.opens == 1
    prod = h.connect()
    snd = prod.sender("eq")
    h.pump()
    assert snd.credit == 250
    ds = [prod.send(snd, body=i) for i in range(3)]
    h.pump()
    assert handler.bodies == [0, 1, 2]
    if not auto_accept:
        assert not any(d.settled for d in ds)
        for d in handler.deliveries:
            raw.set_modified(d, failed=True, undeliverable=True)
            raw.delivery_settle(d)
        client.wake()
        h.pump()
        assert [outcome(d)["undeliverable"] for d in ds] == [True] * 3
    else:
        assert [outcome(d) for d in ds] == [{"state": "accepted", "settled": True}] * 3
    client.close()
    h.pump()
    assert handler.closes == 1
    assert client.router_engine.app not in h.router.connections
