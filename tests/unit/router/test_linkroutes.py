"""Link routes (Qpid Dispatch 1.19 src/router_core/route_control.c, qdrouter.json linkRoute; Qpid Dispatch
1.19 src/router_core/forwarder.c (link-route attach forwarding)), driven in memory: client links proxied to a
broker-like container."""

from __future__ import annotations

import proton
from proton import Endpoint

from router.linkroutes import NO_ROUTE, ROUTED_LINK_LOST
from tests.unit.enginepair import ACCEPTED, REJECTED, RouterHarness, settle
from tests.unit.router.fixtures import AutoLinkEntity as Entity, broker_answers


def harness(**route):
    route.setdefault("prefix", "test")
    route.setdefault("connection", "broker")
    return RouterHarness(link_route_entities=[Entity(direction="in", **route), Entity(direction="out", **route)])


def test_client_sender_is_proxied_with_tags_outcomes_and_credit():
    h = harness()
    broker = h.connect(name="broker")
    client = h.connect()
    snd = client.sender("test.q1", name="my-sender")
    h.pump()
    assert snd.state & Endpoint.REMOTE_UNINIT  # not answered until the broker answers
    [b_rcv] = broker_answers(broker)
    assert b_rcv.name == "my-sender" and b_rcv.remote_target.address == "test.q1"
    h.pump()
    assert snd.state & Endpoint.REMOTE_ACTIVE and snd.remote_target.address == "test.q1"
    assert snd.credit == 0  # only the broker gives credit
    b_rcv.flow(3)
    h.pump()
    assert snd.credit == 3

    d1 = client.send(snd, body="one", tag=b"tag-1")
    d2 = client.send(snd, body="two", tag=b"tag-2")
    h.pump()
    got = broker.received(b_rcv)
    assert [r.body for r in got] == ["one", "two"]
    assert [r.delivery.tag for r in got] == ["tag-1", "tag-2"]  # original delivery tags
    settle(got[0], ACCEPTED)
    settle(got[1], REJECTED, condition="amqp:precondition-failed", description="nope")
    h.pump()
    assert d1.remote_state == ACCEPTED and d1.settled
    assert d2.remote_state == REJECTED and d2.remote.condition.name == "amqp:precondition-failed"
    assert snd.credit == 1


def test_client_receiver_is_proxied_with_credit_and_drain():
    h = harness()
    broker = h.connect(name="broker")
    client = h.connect()
    rcv = client.receiver("test.q2", name="my-receiver")
    h.pump()
    [b_snd] = broker_answers(broker)
    assert b_snd.is_sender and b_snd.remote_source.address == "test.q2"
    h.pump()
    rcv.flow(5)
    h.pump()
    assert b_snd.credit == 5  # the client's credit reaches the broker
    d = broker.send(b_snd, body="hello", tag=b"b1")
    h.pump()
    [got] = client.received(rcv)
    assert got.body == "hello"
    settle(got, ACCEPTED)
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled

    rcv.drain(0)
    h.pump()
    assert b_snd.drain_mode
    b_snd.drained()
    h.pump()
    assert rcv.credit == 0 and not rcv.draining()


def test_no_container_refuses_with_no_route_to_dest():
    h = harness()
    client = h.connect()
    snd = client.sender("test.x")
    h.pump()
    assert snd.state & Endpoint.REMOTE_CLOSED
    assert snd.remote_condition.name == NO_ROUTE
    assert snd.remote_target.type == proton.Terminus.UNSPECIFIED  # a refusal's null terminus


def test_broker_refusal_reaches_the_client_with_its_error():
    h = harness()
    broker = h.connect(name="broker")
    client = h.connect()
    snd = client.sender("test.missing")
    h.pump()
    broker_answers(broker, refuse="amqp:not-found")
    h.pump()
    assert snd.state & Endpoint.REMOTE_CLOSED and snd.remote_condition.name == "amqp:not-found"


def test_detach_passes_through_with_the_error_and_lost_container_detaches_clients():
    h = harness()
    broker = h.connect(name="broker")
    client = h.connect()
    a = client.sender("test.a", name="a")
    b = client.receiver("test.b", name="b")
    h.pump()
    links = {link.name: link for link in broker_answers(broker)}
    h.pump()
    links["a"].condition = proton.Condition("amqp:resource-deleted", "queue gone")
    links["a"].close()
    h.pump()
    assert a.state & Endpoint.REMOTE_CLOSED and a.remote_condition.name == "amqp:resource-deleted"
    h.drop(broker)
    assert b.state & Endpoint.REMOTE_CLOSED and b.remote_condition.name == ROUTED_LINK_LOST


def test_addresses_outside_the_route_are_message_routed_and_prefixes_are_rewritten():
    h = harness(delExternalPrefix="test.", addExternalPrefix="broker/")
    broker = h.connect(name="broker")
    client = h.connect()
    plain = client.receiver("other", credit=1)
    routed = client.receiver("test.q")
    h.pump()
    [b_snd] = broker_answers(broker)
    assert b_snd.remote_source.address == "broker/q"  # as the container knows it
    h.pump()
    assert routed.remote_source.address == "test.q"  # as the client knows it
    assert plain.state & Endpoint.REMOTE_ACTIVE and plain.remote_source.address == "other"


def test_add_route_and_remove_route_keep_pattern_and_prefix_apart():
    """Routes added while the router runs are pattern or prefix routes as the entity says, with the mesh
    key of their class (Qpid Dispatch 1.19 src/iterator.c: C/D prefix, E/F pattern)."""
    from router.linkroutes import LinkRoute

    h = RouterHarness()
    lr = h.router.link_router
    pattern = LinkRoute.from_entity(Entity(name="pat", pattern="orders.*.eu", direction="out", connection="broker"))
    prefix = LinkRoute.from_entity(Entity(name="pre", prefix="audit", direction="in", connection="broker"))
    lr.add_route(pattern)
    lr.add_route(prefix)
    assert (pattern.key, prefix.key) == ("Forders.*.eu", "Caudit")
    assert lr.tables["out"].lookup("orders.42.eu") is pattern
    assert lr.tables["out"].lookup("orders.42.us") is None  # a pattern, not the prefix "orders.*.eu"
    assert lr.tables["in"].lookup("audit.x") is prefix
    try:
        lr.add_route(LinkRoute.from_entity(Entity(name="pat", prefix="other", direction="in", connection="b")))
    except ValueError as exc:
        assert "pat" in str(exc)
    else:
        raise AssertionError("a second route named 'pat' was accepted")
    assert lr.remove_route("pat") is pattern
    assert lr.tables["out"].lookup("orders.42.eu") is None
    assert [r.name for r in lr.routes()] == ["pre"]


def test_added_route_is_advertised_at_once_when_its_container_is_connected():
    """A route added (by management) while its container is connected is advertised to the mesh with its
    pattern key at once, and withdrawn when it is removed."""
    from router.linkroutes import LinkRoute
    from tests.unit.meshpair import MeshHarness

    h = MeshHarness("A")
    broker = h.client("A", name="broker", role="route-container")
    router = h.routers["A"]
    advertised = []
    router.advertise_key = lambda key, present: advertised.append((key, present))
    router.link_router.add_route(LinkRoute.from_entity(Entity(name="pat", pattern="orders.#", direction="in",
                                                              connection="broker")))
    assert advertised == [("Eorders.#", True)]
    router.link_router.remove_route("pat")
    assert advertised == [("Eorders.#", True), ("Eorders.#", False)]
    assert broker.connection.state & Endpoint.REMOTE_ACTIVE
