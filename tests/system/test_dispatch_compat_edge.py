"""Dispatch compatibility (issue 13, routing behaviour): router annotations and edge routers.

Router annotations (Qpid Dispatch 1.19 src/router_node.c ``router_annotate_message``, src/message.c):
interior routers record ``x-opt-qd.ingress`` (a string) and ``x-opt-qd.trace`` (a list of strings), both
naming routers as ``<area>/<id>`` with area ``0``; a connection with the default ``stripAnnotations: both``
neither trusts them from a client nor shows them to one, while the user's own annotations go through
untouched; a listener with ``stripAnnotations: no`` shows them. Edge routers neither add nor read them.

Edge routers (src/router_core/modules/edge_router/): replies to an edge's dynamic addresses come down from
the interior, anonymous senders on an edge get the final consumer's outcome, and an edge with two
``role: edge`` connectors keeps one uplink active and the other standby.

The clients are proton's, reading what they receive the way a Dispatch user's client does.
"""

from __future__ import annotations

import time
import uuid

import pytest
from proton import Message, symbol, ulong

from tests.system.clients import Consumer, Producer, Requester, Responder, close_all
from tests.system.meshharness import Mesh

TIMEOUT = 20.0

EDGE_LISTENER = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                 "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")
# A client listener that shows router annotations (Dispatch's stripAnnotations: no).
KEEP_LISTENER = ("listener {\n    name: keep\n    host: 127.0.0.1\n    port: 0\n    role: normal\n"
                 "    stripAnnotations: no\n    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")

# The user's annotations, of several AMQP types, and a router key a client must not be able to forge.
USER_ANNOTATIONS = {
    symbol("x-opt-string"): "text",
    symbol("x-opt-int"): 42,
    symbol("x-opt-ulong"): ulong(7),
    symbol("x-opt-symbol"): symbol("sym"),
    symbol("x-opt-list"): [1, "two", 3.5],
    symbol("x-opt-map"): {"k": "v", "n": 1},
    symbol("x-opt-bool"): True,
}
FORGED = {symbol("x-opt-qd.ingress"): "0/forged", symbol("x-opt-qd.trace"): ["0/forged"]}


def edge_connector(name: str, port: int) -> str:
    return (f"connector {{\n    name: {name}\n    host: 127.0.0.1\n    port: {port}\n    role: edge\n"
            "    retryDelaySeconds: 0.2\n    retryMultiplier: 1.5\n    retryMaxDelaySeconds: 1.0\n}")


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    """A line A - B - C of interiors, edges EA (on A) and EC (on C); A, C and EC also have a client
    listener with stripAnnotations: no."""
    m = Mesh(tmp_path_factory.mktemp("edge-compat"), None)
    try:
        m.add("A", sections=EDGE_LISTENER + "\n\n" + KEEP_LISTENER)
        m.add("B", connect={"A": 1})
        m.add("C", listen=False, connect={"B": 1}, sections=EDGE_LISTENER + "\n\n" + KEEP_LISTENER)
        m.add("EA", listen=False, mode="edge", sections=edge_connector("uplink", m["A"].ports["edge"]))
        m.add("EC", listen=False, mode="edge",
              sections=edge_connector("uplink", m["C"].ports["edge"]) + "\n\n" + KEEP_LISTENER)
        m.wait_route("A", "C", TIMEOUT)
        m.wait_route("C", "A", TIMEOUT)
        m.wait_route("EA", "EC", TIMEOUT)
        m.wait_route("EC", "EA", TIMEOUT)
        yield m
    finally:
        close_all()
        m.stop_all()


def url(mesh: Mesh, rid: str, listener: str = "amqp") -> str:
    return f"amqp://127.0.0.1:{mesh[rid].ports[listener]}"


def send_and_receive(mesh: Mesh, src: str, dst: str, annotations: dict, *, dst_listener: str = "amqp",
                     anonymous: bool = False, extra: dict | None = None) -> Message:
    """One message from a client of ``src`` to a client of ``dst`` (on its listener ``dst_listener``); it
    must be accepted by the consumer and that outcome must reach the producer."""
    address = f"ann.{uuid.uuid4().hex[:8]}"
    consumer = Consumer(url(mesh, dst, dst_listener), address, credit=1).start()
    consumer.wait_ready()
    probe = None
    try:
        if anonymous:
            # An anonymous sender has credit at once: send only once the mesh has a route (a sender on
            # the address gets credit only then).
            probe = Producer(url(mesh, src), address).start()
            probe.wait_for(lambda: probe.credit > 0, TIMEOUT, f"a route from {src} to {address} on {dst}")

        def make(i):
            msg = Message(id=i, body="payload", annotations=dict(annotations))
            for k, v in (extra or {}).items():
                setattr(msg, k, v)
            if anonymous:
                msg.address = address
            return msg

        producer = Producer(url(mesh, src), None if anonymous else address, count=1, message_fn=make).start()
        producer.wait(TIMEOUT)
        consumer.wait(TIMEOUT, count=1)
        assert producer.outcomes == {"accepted": 1}
        producer.close()
        return consumer.messages[0]
    finally:
        if probe is not None:
            probe.close()
        consumer.close()


# -- router annotations ----------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("A", "A"), ("A", "B"), ("A", "C"), ("EA", "A"), ("A", "EC"),
                                     ("EA", "EC")])
def test_user_annotations_arrive_unchanged_and_router_annotations_do_not_reach_clients(net, src, dst):
    got = send_and_receive(net, src, dst, {**USER_ANNOTATIONS, **FORGED})
    assert got.body == "payload"
    assert got.annotations == USER_ANNOTATIONS
    assert all(type(k) is symbol for k in got.annotations)
    assert type(got.annotations[symbol("x-opt-ulong")]) is ulong


@pytest.mark.parametrize("src,dst,trace", [
    ("A", "A", ["0/A"]),
    ("C", "C", ["0/C"]),
    ("C", "A", ["0/C", "0/B", "0/A"]),
    ("A", "C", ["0/A", "0/B", "0/C"]),
    ("EA", "C", ["0/A", "0/B", "0/C"]),
    ("EC", "A", ["0/C", "0/B", "0/A"]),
])
def test_router_annotations_have_dispatch_types_where_shown(net, src, dst, trace):
    got = send_and_receive(net, src, dst, {**USER_ANNOTATIONS, **FORGED}, dst_listener="keep")
    ann = dict(got.annotations)
    ingress = ann.pop(symbol("x-opt-qd.ingress"))
    got_trace = ann.pop(symbol("x-opt-qd.trace"))
    # A link-addressed producer's messages carry their link's address as to-override (router_node.c).
    to = ann.pop(symbol("x-opt-qd.to"))
    assert type(to) is str and to.startswith("ann."), to
    assert type(ingress) is str and ingress == trace[0]
    assert type(got_trace) is list and got_trace == trace
    assert all(type(t) is str for t in got_trace)
    assert ann == USER_ANNOTATIONS


@pytest.mark.parametrize("src", ["A", "EA", "EC"])
def test_an_edge_shows_its_clients_no_trace_and_no_ingress(net, src):
    """Edge routers neither add nor pass on trace and ingress: a stripAnnotations: no client of an edge
    sees only the to-override of its link-addressed producer."""
    got = send_and_receive(net, src, "EC", {**USER_ANNOTATIONS, **FORGED}, dst_listener="keep")
    ann = dict(got.annotations)
    to = ann.pop(symbol("x-opt-qd.to"))
    assert type(to) is str and to.startswith("ann."), to
    assert ann == USER_ANNOTATIONS


@pytest.mark.parametrize("src,dst", [("A", "C"), ("EA", "EC"), ("C", "A")])
def test_user_annotations_survive_with_every_other_section(net, src, dst):
    """A long annotation map (map32), a header with a priority (another inter-router data link), delivery
    annotations and application properties around the user's annotations."""
    big = {**USER_ANNOTATIONS, symbol("x-opt-long"): "v" * 400}
    got = send_and_receive(net, src, dst, {**big, **FORGED}, extra=dict(
        priority=9, durable=True, instructions={symbol("x-opt-da"): "d"}, properties={"app": 1}))
    assert got.annotations == big
    assert got.priority == 9 and got.durable and got.properties == {"app": 1}


def test_user_annotations_survive_an_anonymous_sender_across_routers(net):
    got = send_and_receive(net, "A", "C", USER_ANNOTATIONS, anonymous=True)
    assert got.annotations == USER_ANNOTATIONS
    got = send_and_receive(net, "EA", "EC", USER_ANNOTATIONS, anonymous=True)
    assert got.annotations == USER_ANNOTATIONS


# -- edge routers ------------------------------------------------------------------------------------

def wait_for_route(mesh: Mesh, router: str, address: str) -> None:
    """Until a sender on ``router`` for ``address`` gets credit (the mesh has a destination for it)."""
    probe = Producer(url(mesh, router), address).start()
    try:
        probe.wait_for(lambda: probe.credit > 0, TIMEOUT, f"a route from {router} to {address}")
    finally:
        probe.close()


@pytest.mark.parametrize("requester,responder", [("EA", "EA"), ("EA", "A"), ("EA", "B"), ("EA", "EC"),
                                                 ("EC", "EA"), ("B", "EA")])
def test_request_reply_with_edges(net, requester, responder):
    """Replies to a requester's dynamic address (``_edge/<edge>/temp.*`` on an edge) come back down."""
    service = f"svc.{uuid.uuid4().hex[:8]}"
    server = Responder(url(net, responder), service).start()
    server.wait_ready()
    wait_for_route(net, requester, service)
    if requester != responder:
        net.wait_reply_route(responder, requester, TIMEOUT)
    client = Requester(url(net, requester), service, count=5).start()
    client.wait_ready()
    scope = f"_edge/{requester}/" if requester.startswith("E") else f"_topo/0/{requester}/"
    assert scope in client.reply_address
    client.wait(TIMEOUT)
    assert client.request_outcomes == {"accepted": 5}
    assert sorted(r.correlation_id for r in client.replies) == list(range(5))
    server.wait_for(lambda: sum(server.reply_outcomes.values()) >= 5, TIMEOUT, "5 reply outcomes")
    assert server.reply_outcomes == {"accepted": 5}
    client.close()
    server.close()


@pytest.mark.parametrize("producer_at,consumer_at", [("EA", "EA"), ("EA", "A"), ("EA", "C"), ("EA", "EC")])
@pytest.mark.parametrize("outcome", ["accept", "reject", "release", "modify"])
def test_anonymous_sender_on_an_edge_gets_the_consumers_outcome(net, producer_at, consumer_at, outcome):
    address = f"anon.{uuid.uuid4().hex[:8]}"
    consumer = Consumer(url(net, consumer_at), address, credit=20, outcome=outcome).start()
    consumer.wait_ready()
    wait_for_route(net, producer_at, address)
    producer = Producer(url(net, producer_at), None, to=address, count=10).start()
    expected = {"accept": "accepted", "reject": "rejected", "release": "released", "modify": "modified"}[outcome]
    if outcome in ("release", "modify"):
        # A released delivery is what a router also answers when it has no route; the consumer
        # having seen them all shows these outcomes are the consumer's.
        producer.wait_settled(10, TIMEOUT)
        consumer.wait(TIMEOUT, count=10)
    else:
        producer.wait(TIMEOUT)
        consumer.wait(TIMEOUT, count=10)
    assert producer.outcomes == {expected: 10}
    assert consumer.settled_by_us == {outcome: 10}
    producer.close()
    consumer.close()


@pytest.mark.parametrize("sender_at", ["EA", "A", "B", "EC"])
@pytest.mark.parametrize("anonymous", [False, True], ids=["targeted", "anonymous"])
def test_messages_to_an_edge_dynamic_address(net, sender_at, anonymous):
    """A sender (link-addressed to the reply address, or anonymous with ``to``) anywhere in the mesh
    reaches a dynamic receiver on edge EA."""
    consumer = Consumer(url(net, "EA"), dynamic=True, credit=20).start()
    consumer.wait_ready()
    reply_to = consumer.dynamic_address
    assert reply_to.startswith("amqp:/_edge/EA/temp.") or reply_to.startswith("_edge/EA/temp."), reply_to
    wait_for_route(net, sender_at, reply_to)
    if anonymous:
        producer = Producer(url(net, sender_at), None, to=reply_to, count=5).start()
    else:
        producer = Producer(url(net, sender_at), reply_to, count=5).start()
    producer.wait(TIMEOUT)
    consumer.wait(TIMEOUT, count=5)
    assert producer.outcomes == {"accepted": 5}
    assert [m.id for m in consumer.messages] == list(range(5))
    producer.close()
    consumer.close()


def edge_links_at(mesh: Mesh, interior: str, edge: str) -> int:
    """How many links interior ``interior`` has on connections from edge router ``edge`` (management)."""
    from tools.mgmtclient import ManagementClient

    with ManagementClient(url(mesh, interior).replace("amqp://", ""), timeout=TIMEOUT) as client:
        conns = {str(r["identity"]) for r in client.query("org.apache.qpid.dispatch.connection",
                                                          ["identity", "container", "role"])
                 if r["container"] == edge and r["role"] == "edge"}
        if not conns:
            return -1  # not connected at all
        links = client.query("org.apache.qpid.dispatch.router.link", ["connectionId"])
    return sum(1 for r in links if str(r["connectionId"]) in conns)


def test_edge_with_two_uplinks_keeps_one_active_and_fails_over(tmp_path):
    """Edge E has a ``role: edge`` connector to each of I1 and I2: both connections open, one carries the
    edge's links (active), the other none (standby) until the active one is lost."""
    m = Mesh(tmp_path, None)
    try:
        m.add("I1", sections=EDGE_LISTENER)
        m.add("I2", connect={"I1": 1}, sections=EDGE_LISTENER)
        m.add("E", listen=False, mode="edge",
              sections=edge_connector("up1", m["I1"].ports["edge"]) + "\n\n"
              + edge_connector("up2", m["I2"].ports["edge"]))
        consumer = Consumer(url(m, "E"), "edge.q", credit=50).start()
        consumer.wait_ready()
        m.wait_route("I2", "E", TIMEOUT)
        m.wait_route("I1", "E", TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        counts = {}
        while time.monotonic() < deadline:
            counts = {i: edge_links_at(m, i, "E") for i in ("I1", "I2")}
            if -1 not in counts.values():
                break
            time.sleep(0.1)
        assert sorted(counts.values())[0] == 0 and sorted(counts.values())[1] > 0, counts
        active = "I1" if counts["I1"] > 0 else "I2"
        standby = "I2" if active == "I1" else "I1"
        m[active].kill()
        # The standby takes over: a producer on it reaches the edge's consumer.
        wait_for_route(m, standby, "edge.q")
        producer = Producer(url(m, standby), "edge.q", count=10).start()
        producer.wait(TIMEOUT)
        consumer.wait(TIMEOUT, count=10)
        assert producer.outcomes == {"accepted": 10}
        assert edge_links_at(m, standby, "E") > 0
        producer.close()
        consumer.close()
    finally:
        close_all()
        m.stop_all()


@pytest.mark.parametrize("producer_at", ["EA", "A"])
def test_anonymous_sender_to_an_address_nobody_consumes_is_settled(net, producer_at):
    """No consumer anywhere: every delivery still comes back settled (released), as from an interior."""
    producer = Producer(url(net, producer_at), None, to=f"nobody.{uuid.uuid4().hex[:8]}", count=5).start()
    producer.wait_settled(5, TIMEOUT)
    assert producer.outcomes == {"released": 5}
    producer.close()
