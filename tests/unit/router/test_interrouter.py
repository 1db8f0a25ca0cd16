"""The mesh data plane in-process: interior routers with the real routing engine, clients on any router."""

from __future__ import annotations

import proton
import pytest
from proton import Message

from tests.unit.enginepair import ACCEPTED, RELEASED, AddressEntity, settle
from tests.unit.meshpair import MeshHarness

pytest.importorskip("router.mesh.engine")


def _send(h, peer, snd, n, prefix="m"):
    ds = []
    for i in range(n):
        ds.append(peer.send(snd, Message(body=f"{prefix}{i}")))
    h.pump()
    return ds


def _annotations(received):
    return dict(received.message.annotations or {})


def test_two_routers_deliver_and_settle_end_to_end():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    cons = h.client("B")
    rcv = cons.receiver("q", credit=20)
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender("q")
    h.pump()
    assert snd.credit > 0, "a destination on B must give the producer on A credit"
    ds = _send(h, prod, snd, 5)
    got = cons.received(rcv)
    assert [g.body for g in got] == [f"m{i}" for i in range(5)]
    for g in got:
        assert not any(str(k).startswith("x-opt-qd.") for k in _annotations(g)), "router annotations leaked"
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED and d.settled for d in ds)


def test_no_credit_until_a_destination_exists_anywhere():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender("late")
    h.advance(2)
    assert snd.credit == 0
    cons = h.client("B")
    cons.receiver("late", credit=5)
    h.advance(3)
    assert snd.credit > 0


def test_two_hops_in_a_line_with_trace():
    h = MeshHarness("A", "B", "C")
    h.link("A", "B")
    h.link("B", "C")
    cons = h.client("C")
    rcv = cons.receiver("far", credit=10)
    h.settle_topology(8)
    assert h.routers["A"].next_hops["C"].mesh.peer_id == "B"
    prod = h.client("A")
    snd = prod.sender("far")
    h.pump()
    ds = _send(h, prod, snd, 3)
    got = cons.received(rcv)
    assert len(got) == 3
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in ds)
    assert h.routers["B"].deliveries_transit >= 3


def test_closest_prefers_the_local_consumer():
    h = MeshHarness("A", "B", address_entities=[AddressEntity("near", distribution="closest")])
    h.link("A", "B")
    local = h.client("A")
    lr = local.receiver("near", credit=50)
    remote = h.client("B")
    rr = remote.receiver("near", credit=50)
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender("near")
    h.pump()
    _send(h, prod, snd, 10)
    assert len(local.received(lr)) == 10
    assert remote.received(rr) == []


def test_balanced_spreads_across_two_remote_routers():
    h = MeshHarness("A", "B", "C")
    h.link("A", "B")
    h.link("A", "C")
    cb, cc = h.client("B"), h.client("C")
    rb = cb.receiver("work", credit=100)
    rc = cc.receiver("work", credit=100)
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender("work")
    h.pump()
    for i in range(20):
        prod.send(snd, Message(body=i))
    h.pump()
    nb, nc = len(cb.received(rb)), len(cc.received(rc))
    assert nb + nc == 20
    assert nb > 0 and nc > 0


def test_multicast_reaches_every_consumer_exactly_once_in_a_triangle():
    h = MeshHarness("A", "B", "C", address_entities=[AddressEntity("news", distribution="multicast")])
    h.link("A", "B")
    h.link("B", "C")
    h.link("C", "A")
    consumers = {}
    for rid in "ABC":
        p = h.client(rid)
        consumers[rid] = (p, p.receiver("news", credit=50))
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("news")
    h.pump()
    ds = _send(h, prod, snd, 4)
    for rid, (p, r) in consumers.items():
        got = p.received(r)
        assert sorted(g.body for g in got) == [f"m{i}" for i in range(4)], rid
        for g in got:
            settle(g, ACCEPTED)
    h.pump()
    assert all(d.settled and d.remote_state == ACCEPTED for d in ds)


def _waypoint(terminus):
    terminus.capabilities.put_array(False, proton.Data.SYMBOL)
    terminus.capabilities.enter()
    terminus.capabilities.put_symbol("qd.waypoint")
    terminus.capabilities.exit()


def test_waypoint_broker_on_another_router():
    entities = [AddressEntity("queue", waypoint=True)]
    h = MeshHarness("A", "B", "C", address_entities=entities)
    h.link("A", "B")
    h.link("B", "C")
    broker = h.client("B")
    # The broker's links declare qd.waypoint: it consumes phase 0 and produces phase 1.
    from_router = broker.receiver("queue", open=False)
    _waypoint(from_router.source)
    from_router.open()
    from_router.flow(50)
    to_router = broker.sender("queue", name="broker-out")
    to_router.close()
    to_router = broker.session.sender("broker-out2")
    to_router.target.address = "queue"
    _waypoint(to_router.target)
    to_router.open()
    consumer = h.client("C")
    rcv = consumer.receiver("queue", credit=50)
    h.settle_topology(8)
    prod = h.client("A")
    snd = prod.sender("queue")
    h.pump()
    assert snd.credit > 0
    ds = _send(h, prod, snd, 3)
    stored = broker.received(from_router)
    assert len(stored) == 3
    for g in stored:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in ds)  # accepted by the broker: stored
    assert to_router.credit > 0, "the phase-1 consumer on C must give the broker credit"
    for g in stored:
        broker.send(to_router, g.message)
    h.pump()
    assert sorted(g.body for g in consumer.received(rcv)) == ["m0", "m1", "m2"]


def test_link_failure_reroutes_and_releases_in_flight():
    h = MeshHarness("A", "B", "C")
    h.link("A", "B")
    h.link("B", "C")
    h.link("A", "C", cost=5)
    cons = h.client("C")
    rcv = cons.receiver("q", credit=100)
    h.settle_topology(8)
    assert h.routers["A"].next_hops["C"].mesh.peer_id == "B"
    prod = h.client("A")
    snd = prod.sender("q")
    h.pump()
    _send(h, prod, snd, 2)
    first = cons.received(rcv, clear=True)
    assert len(first) == 2  # delivered via B, still unsettled at the consumer
    h.cut("A", "B")
    h.advance(4)
    assert h.routers["A"].next_hops["C"].mesh.peer_id == "C"
    ds = _send(h, prod, snd, 2, prefix="after")
    got = cons.received(rcv)
    assert [g.body for g in got] == ["after0", "after1"]
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in ds)


def test_topological_address_reaches_a_local_endpoint_on_another_router():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    seen = []
    h.routers["B"].add_local_endpoint("$probe", seen.append)
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, Message(address="amqp:/_topo/0/B/$probe", body="ping"))
    h.pump()
    assert len(seen) == 1
    assert d.remote_state == ACCEPTED


def test_send_local_replies_reach_a_dynamic_receiver_on_another_router():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    client = h.client("A")
    rcv = client.receiver(None, credit=5, dynamic=True)
    h.pump()
    reply_to = rcv.remote_source.address
    assert reply_to.startswith("amqp:/_topo/0/A/")
    assert h.routers["B"].send_local(Message(address=reply_to, body="pong").encode())
    h.pump()
    assert [g.body for g in client.received(rcv)] == ["pong"]


def test_no_route_is_released():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender(None)
    h.pump()
    d = prod.send(snd, Message(address="nowhere", body=1))
    h.pump()
    assert d.remote_state == RELEASED


def test_link_route_to_a_container_on_another_router():
    from proton import Endpoint

    from tests.unit.router.fixtures import AutoLinkEntity as Entity
    from tests.unit.router.fixtures import broker_answers

    routes = [Entity(direction="in", prefix="test", connection="broker"),
              Entity(direction="out", prefix="test", connection="broker")]
    h = MeshHarness("A", "B", "C", link_route_entities=routes)
    h.link("A", "B")
    h.link("B", "C")
    broker = h.client("C", name="broker", role="route-container")
    h.settle_topology(8)
    client = h.client("A")
    snd = client.sender("test.q1", name="far-sender")
    h.pump()
    [b_rcv] = broker_answers(broker)
    assert b_rcv.name == "far-sender" and b_rcv.remote_target.address == "test.q1"
    h.pump()
    assert snd.state & Endpoint.REMOTE_ACTIVE
    b_rcv.flow(2)
    h.pump()
    assert snd.credit == 2
    d = client.send(snd, body="routed", tag=b"t1")
    h.pump()
    [got] = broker.received(b_rcv)
    assert got.body == "routed" and got.delivery.tag == "t1"
    settle(got, ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled


def test_link_route_without_a_container_anywhere_is_refused():
    from tests.unit.router.fixtures import AutoLinkEntity as Entity

    routes = [Entity(direction="in", prefix="test", connection="broker")]
    h = MeshHarness("A", "B", link_route_entities=routes)
    h.link("A", "B")
    h.settle_topology()
    client = h.client("A")
    snd = client.sender("test.q1")
    h.pump()
    assert snd.remote_condition is not None and snd.remote_condition.name == "qd:no-route-to-dest"


def test_edge_to_edge_through_two_interiors_with_end_to_end_credit():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("EA", "A")
    h.add_edge("EB", "B")
    h.settle_topology()
    prod = h.client("EA")
    snd = prod.sender("edgy")
    h.advance(2)
    assert snd.credit == 0, "no consumer anywhere yet"
    cons = h.client("EB")
    rcv = cons.receiver("edgy", credit=20)
    h.advance(3)
    assert snd.credit > 0
    ds = _send(h, prod, snd, 3)
    got = cons.received(rcv)
    assert [g.body for g in got] == ["m0", "m1", "m2"]
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED and d.settled for d in ds)


def test_edge_anonymous_producer_reaches_an_interior_consumer_and_no_echo():
    h = MeshHarness("A")
    h.add_edge("E", "A")
    cons = h.client("A")
    rcv = cons.receiver("up", credit=10)
    edge_cons = h.client("E")
    erc = edge_cons.receiver("up", credit=10)
    h.advance(2)
    prod = h.client("E")
    snd = prod.sender(None)
    h.pump()
    prod.send(snd, Message(address="up", body="one"))
    prod.send(snd, Message(address="nowhere-at-all", body="two"))
    h.pump()
    # 'up' has a local consumer on the edge (closest by default is balanced: either is fine), but each
    # message is delivered once in total and never bounces back up and down.
    total = len(cons.received(rcv)) + len(edge_cons.received(erc))
    assert total == 1


def test_request_reply_from_an_edge_to_an_endpoint_on_another_interior():
    h = MeshHarness("A", "B")
    h.link("A", "B")
    h.add_edge("E", "A")
    requests = []
    rb = h.routers["B"]
    rb.add_local_endpoint("$echo", lambda m: (requests.append(m), rb.send_local(
        Message(address=_decode(m).reply_to, body="pong").encode())))
    h.settle_topology()
    client = h.client("E")
    rcv = client.receiver(None, credit=5, dynamic=True)
    h.pump()
    reply_to = rcv.remote_source.address
    assert reply_to.startswith("amqp:/_edge/E/temp.")
    h.advance(3)
    snd = client.sender(None)
    h.pump()
    client.send(snd, Message(address="_topo/0/B/$echo", reply_to=reply_to, body="ping"))
    h.advance(1)
    assert len(requests) == 1
    assert [g.body for g in client.received(rcv)] == ["pong"]


def _decode(data):
    m = Message()
    m.decode(data)
    return m


@pytest.mark.parametrize("names", ["ours", "dispatch"])
def test_message_priority_picks_the_inter_router_data_link(names, monkeypatch):
    """Each side's ten data links carry priorities 0..9 in attach order, whatever they are named (Dispatch
    names them ``qdlink.<random>``; reading a digit from the name gave random priorities)."""
    if names == "dispatch":
        import secrets

        import router.interrouter

        monkeypatch.setattr(router.interrouter, "data_link_name", lambda d, p: f"qdlink.{secrets.token_hex(4)}7")
    h = MeshHarness("A", "B")
    h.link("A", "B")
    cons = h.client("B")
    rcv = cons.receiver("prio", credit=10)
    h.settle_topology()
    prod = h.client("A")
    snd = prod.sender("prio")
    h.pump()
    prod.send(snd, Message(body="urgent", priority=9))
    prod.send(snd, Message(body="normal"))
    prod.send(snd, Message(body="low", priority=0, durable=True))
    h.pump()
    assert sorted(g.body for g in cons.received(rcv)) == ["low", "normal", "urgent"]
    [mesh] = [rc.mesh for rc in h.routers["A"].connections if rc.mesh]
    counts = {p: rl.delivery_count for p, rl in mesh.data_links.items()}
    assert counts[9] == 1 and counts[4] == 1 and counts[0] == 1
    assert sorted(mesh.data_links) == list(range(10))


def test_multicast_between_edges_reaches_each_consumer_once_and_never_echoes():
    entities = [AddressEntity("news", distribution="multicast")]
    h = MeshHarness("A", "B", address_entities=entities)
    h.link("A", "B")
    h.add_edge("EA", "A", address_entities=entities)
    h.add_edge("EB", "B", address_entities=entities)
    consumers = {}
    for rid in ("EA", "EB", "A", "B"):
        p = h.client(rid)
        consumers[rid] = (p, p.receiver("news", credit=20))
    h.settle_topology(8)
    prod = h.client("EA")
    snd = prod.sender("news")
    h.advance(2)
    assert snd.credit > 0
    ds = _send(h, prod, snd, 3)
    h.advance(1)
    for rid, (p, r) in consumers.items():
        got = p.received(r)
        assert sorted(g.body for g in got) == ["m0", "m1", "m2"], rid
        for g in got:
            settle(g, ACCEPTED)
    h.advance(1)
    assert all(d.settled for d in ds)


@pytest.mark.parametrize("via, own_id", [("A", False), ("C", True)])
def test_a_router_claiming_an_id_in_use_is_refused_with_not_allowed(via, own_id):
    """Line A - B - C; a second router calling itself C connects to A (which reaches C through B: refused
    at its HELLO) or to C itself (its OPEN carries C's own id: refused at once). The connection closes
    with amqp:not-allowed naming the id, and A keeps routing to the real C."""
    from router.core import Router
    from tests.unit.meshpair import FAST_TIMERS

    h = MeshHarness("A", "B", "C")
    h.link("A", "B")
    h.link("B", "C")
    cons = h.client("C")
    rcv = cons.receiver("dup", credit=10)
    h.settle_topology(8)
    impostor = h.routers["C2"] = Router("C", mode="interior", clock=lambda: h.now, mesh_timers=FAST_TIMERS)
    impostor.mesh.instance = h.routers["C"].mesh.instance + 1   # started a second later (boot time)
    pipe = h.link("C2", via)
    h.advance(1.5)                                    # two HELLO intervals of the impostor
    impostor_end, via_end = pipe.engines
    for end in pipe.engines:
        assert end.connection.state & proton.Endpoint.LOCAL_CLOSED
    cond = impostor_end.connection.remote_condition
    assert cond is not None and cond.name == "amqp:not-allowed"
    assert cond.description.startswith("duplicate router id 'C': ")
    if own_id:
        assert "the id of the router 'C' you connected to" in cond.description
    else:
        assert "reachable from 'A' through 'B'" in cond.description
    assert h.routers["A"].next_hops["C"].mesh.peer_id == "B"
    prod = h.client("A")
    snd = prod.sender("dup")
    h.pump()
    ds = _send(h, prod, snd, 3)
    got = cons.received(rcv)
    assert [g.body for g in got] == ["m0", "m1", "m2"]
    for g in got:
        settle(g, ACCEPTED)
    h.pump()
    assert all(d.remote_state == ACCEPTED for d in ds)
