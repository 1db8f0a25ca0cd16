"""Router annotations across a line of routers, now that each router builds the section it sends on once per
address and path (router/meshforward.py annotated): every message still carries its own path and
addressing, with or without user annotations, and phases keep their address."""

from __future__ import annotations

import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def _line(*ids):
    h = MeshHarness(*ids)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    return h


def _router_keys(received):
    return {str(k): v for k, v in (received.message.annotations or {}).items() if str(k).startswith("x-opt-qd.")}


def _user_keys(received):
    return {str(k): v for k, v in (received.message.annotations or {}).items()
            if not str(k).startswith("x-opt-qd.")}


@pytest.mark.parametrize("user", [None, {"u": 1}])
def test_trace_grows_by_one_router_per_hop_for_every_message(user):
    h = _line("A", "B", "C", "D")
    cons = h.client("D", strip_annotations="no")  # D passes the router annotations on
    rcv = cons.receiver("far", credit=20)
    h.settle_topology(10)
    prod = h.client("A")
    snd = prod.sender("far")
    h.pump()
    for i in range(6):
        prod.send(snd, Message(body=f"m{i}", annotations=dict(user) if user else None))
        h.pump()
    got = cons.received(rcv)
    assert [g.body for g in got] == [f"m{i}" for i in range(6)]
    for g in got:
        keys = _router_keys(g)
        assert keys["x-opt-qd.ingress"] == "0/A"
        assert list(keys["x-opt-qd.trace"]) == ["0/A", "0/B", "0/C", "0/D"]  # D too: it annotates out
        assert keys["x-opt-qd.to"] == "far"
        assert _user_keys(g) == (user or {})
        settle(g, ACCEPTED)
    h.pump()


def test_anonymous_producers_to_two_addresses_keep_their_own_to():
    h = _line("A", "B", "C")
    cons = h.client("C", strip_annotations="no")
    r1 = cons.receiver("one", credit=10)
    r2 = cons.receiver("two", credit=10)
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender(None)  # anonymous: routed by each message's to; the sections carry no x-opt-qd.to
    h.pump()
    for i in range(4):
        prod.send(snd, Message(address="one" if i % 2 == 0 else "two", body=f"m{i}"))
        h.pump()
    one, two = cons.received(r1), cons.received(r2)
    assert [g.body for g in one] == ["m0", "m2"] and [g.body for g in two] == ["m1", "m3"]
    for g in one + two:
        keys = _router_keys(g)
        assert "x-opt-qd.to" not in keys and list(keys["x-opt-qd.trace"]) == ["0/A", "0/B", "0/C"]


def test_producers_on_two_addresses_each_carry_their_own_to():
    h = _line("A", "B", "C")
    cons = h.client("C", strip_annotations="no")
    r1 = cons.receiver("one", credit=10)
    r2 = cons.receiver("two", credit=10)
    h.settle_topology(8)
    prod = h.client("A")
    s1, s2 = prod.sender("one"), prod.sender("two")
    h.pump()
    for i in range(4):
        prod.send(s1 if i % 2 == 0 else s2, Message(body=f"m{i}"))
        h.pump()
    one, two = cons.received(r1), cons.received(r2)
    assert [g.body for g in one] == ["m0", "m2"] and [g.body for g in two] == ["m1", "m3"]
    assert [_router_keys(g)["x-opt-qd.to"] for g in one] == ["one", "one"]
    assert [_router_keys(g)["x-opt-qd.to"] for g in two] == ["two", "two"]


def _without_empty_header(body):
    encoded = Message(body=body).encode()
    assert encoded.startswith(b"\x00\x53\x70\x45")  # proton writes an empty header (list0)
    return encoded[4:]


@pytest.mark.parametrize("header", [True, False])
def test_a_remembered_arrival_section_still_routes_by_the_current_address_table(header):
    """The receiving router remembers what a recurring router-only section says (its annotations and the
    routing key of its to-override), not the address it led to: after the last consumer leaves (the
    address entry goes) and another attaches, messages with the same section in front (after the header,
    or first when there is none) reach the new one."""
    def message(body):
        return Message(body=body) if header else _without_empty_header(body)

    h = _line("A", "B")
    cons = h.client("B")
    rcv = cons.receiver("far", credit=20)
    h.settle_topology(10)
    prod = h.client("A")
    snd = prod.sender("far")
    h.pump()
    for i in range(3):
        prod.send(snd, message(f"a{i}"))
        h.pump()
    got = cons.received(rcv)
    assert [g.body for g in got] == ["a0", "a1", "a2"]
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    old = h.routers["B"].addresses.get("M0far")
    rcv.close()
    h.pump()
    assert h.routers["B"].addresses.get("M0far") is not old
    cons2 = h.client("B")
    rcv2 = cons2.receiver("far", credit=20)
    h.settle_topology(10)
    for i in range(3):
        prod.send(snd, message(f"b{i}"))
        h.pump()
    assert [g.body for g in cons2.received(rcv2)] == ["b0", "b1", "b2"]
