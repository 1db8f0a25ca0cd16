"""stripAnnotations on a listener/connector: what a client's router annotations do, what it receives."""

from __future__ import annotations

from proton import Message

from tests.unit.enginepair import ACCEPTED, RouterHarness, settle


def _router_keys(received) -> dict:
    return {str(k): v for k, v in (received.message.annotations or {}).items() if str(k).startswith("x-opt-qd.")}


def _pair(h, *, producer="both", consumer="both", address="q"):
    cons = h.connect(strip_annotations=consumer)
    rcv = cons.receiver(address, credit=10)
    prod = h.connect(strip_annotations=producer)
    snd = prod.sender(None)
    h.pump()
    return prod, snd, cons, rcv


def test_default_both_ignores_and_removes_client_annotations():
    h = RouterHarness()
    other = h.connect()
    orcv = other.receiver("elsewhere", credit=10)
    prod, snd, cons, rcv = _pair(h)
    prod.send(snd, Message(address="q", body=1, annotations={"x-opt-qd.to": "elsewhere", "user": "kept"}))
    h.pump()
    [got] = cons.received(rcv)
    assert other.received(orcv) == []  # the to-override from a client is not trusted
    assert _router_keys(got) == {}
    assert got.message.annotations["user"] == "kept"
    settle(got, ACCEPTED)


def test_no_honours_a_clients_to_override():
    h = RouterHarness()
    other = h.connect()
    orcv = other.receiver("elsewhere", credit=10)
    prod, snd, cons, rcv = _pair(h, producer="no")
    prod.send(snd, Message(address="q", body=1, annotations={"x-opt-qd.to": "elsewhere"}))
    h.pump()
    assert cons.received(rcv) == []
    [got] = other.received(orcv)
    assert _router_keys(got) == {}  # 'other' strips on egress (both)


def test_in_or_no_on_the_consumer_delivers_the_routers_annotations():
    h = RouterHarness(router_id="R1")
    prod, snd, cons, rcv = _pair(h, consumer="in")
    prod.send(snd, Message(address="q", body=1))
    h.pump()
    [got] = cons.received(rcv)
    keys = _router_keys(got)
    # Routers named as Dispatch names them: area 0, then the id (router_node.c).
    assert keys["x-opt-qd.ingress"] == "0/R1" and list(keys["x-opt-qd.trace"]) == ["0/R1"]
    settle(got, ACCEPTED)
    h.pump()


def test_targeted_link_on_a_trusting_connection_routes_by_its_address():
    h = RouterHarness()
    other = h.connect()
    orcv = other.receiver("elsewhere", credit=10)
    cons = h.connect()
    rcv = cons.receiver("q", credit=10)
    prod = h.connect(strip_annotations="out")
    snd = prod.sender("q")
    h.pump()
    d = prod.send(snd, Message(body=1, annotations={"x-opt-qd.to": "elsewhere"}))
    h.pump()
    [got] = cons.received(rcv)
    assert other.received(orcv) == []
    settle(got, ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED
