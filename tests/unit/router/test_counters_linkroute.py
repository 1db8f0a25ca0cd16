"""deliveriesIngressRouteContainer / deliveriesEgressRouteContainer of the router entity for link-routed
deliveries (router/linkroutes.py): N deliveries through a link route read N, in their direction."""

from __future__ import annotations

from router.management import ManagementAgent
from tests.unit.enginepair import ACCEPTED, RouterHarness, settle
from tests.unit.router.fixtures import AutoLinkEntity as Entity, broker_answers
from wire import management as wm

N = 7


def _router_row(agent) -> dict:
    data = wm.build_request("QUERY", reply_to="r", correlation_id=1, entityType="org.apache.qpid.dispatch.router",
                            body={"attributeNames": []})
    resp = wm.parse_response(agent.handle(data))
    assert resp.status == 200, resp.description
    [row] = [dict(zip(resp.body["attributeNames"], r)) for r in resp.body["results"]]
    return row


def _setup():
    route = dict(prefix="test", connection="broker")
    h = RouterHarness(link_route_entities=[Entity(direction="in", **route), Entity(direction="out", **route)])
    agent = ManagementAgent(h.router)
    broker = h.connect(name="broker")
    client = h.connect()
    return h, agent, broker, client


def _counts(agent) -> tuple[int, int]:
    row = _router_row(agent)
    return row["deliveriesIngressRouteContainer"], row["deliveriesEgressRouteContainer"]


def test_deliveries_to_a_route_container_are_counted():
    h, agent, broker, client = _setup()
    snd = client.sender("test.q1")
    h.pump()
    [b_rcv] = broker_answers(broker)
    b_rcv.flow(N)
    h.pump()
    for i in range(N):
        client.send(snd, body=i)
    h.pump()
    got = broker.received(b_rcv)
    assert len(got) == N
    for r in got:
        settle(r, ACCEPTED)
    h.pump()
    assert _counts(agent) == (0, N)


def test_deliveries_from_a_route_container_are_counted():
    h, agent, broker, client = _setup()
    rcv = client.receiver("test.q2")
    h.pump()
    [b_snd] = broker_answers(broker)
    h.pump()
    rcv.flow(N)
    h.pump()
    for i in range(N):
        broker.send(b_snd, body=i)
    h.pump()
    assert len(client.received(rcv)) == N
    assert _counts(agent) == (N, 0)
