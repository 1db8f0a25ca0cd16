"""Link-routed links in router.link (router/linkroutes.py LinkRouter.management_rows, issue 18): both sides
of a routed pair are listed as Dispatch lists them, ``endpoint`` links owned by the route's C/D key, each
naming the other as its ``peer``, with their delivery and outcome counts. And the refusal of resumable
termini a router with ``allowResumableLinkRoute: no`` makes (``LinkRouter.allow_resumable``)."""

from __future__ import annotations

import pytest
from proton import Endpoint, Terminus

from router.linkroutes import LINK_EXPIRATION
from router.management import ManagementAgent
from tests.unit.enginepair import ACCEPTED, REJECTED, RELEASED, RouterHarness, settle
from tests.unit.router.fixtures import AutoLinkEntity as Entity, broker_answers
from wire import management as wm


def _query(agent, entity_type: str) -> list[dict]:
    data = wm.build_request("QUERY", reply_to="r", correlation_id=1,
                            entityType="org.apache.qpid.dispatch." + entity_type, body={"attributeNames": []})
    resp = wm.parse_response(agent.handle(data))
    assert resp.status == 200, resp.description
    return [dict(zip(resp.body["attributeNames"], r)) for r in resp.body["results"]]


def _setup():
    route = dict(prefix="test", connection="broker")
    h = RouterHarness(link_route_entities=[Entity(direction="in", **route), Entity(direction="out", **route)])
    agent = ManagementAgent(h.router)
    broker = h.connect(name="broker")
    client = h.connect()
    return h, agent, broker, client


def _routed(agent) -> list[dict]:
    return [row for row in _query(agent, "router.link") if row["owningAddr"] and row["owningAddr"][0] in "CDEF"]


def test_a_routed_sender_pair_is_listed_with_its_outcomes():
    h, agent, broker, client = _setup()
    snd = client.sender("test.q1", name="lr-sender")
    h.pump()
    [b_rcv] = broker_answers(broker)
    b_rcv.flow(10)
    h.pump()
    for i in range(6):
        client.send(snd, body=i)
    client.send(snd, body="pre", settled=True)
    h.pump()
    got = broker.received(b_rcv)
    assert len(got) == 7
    for r, outcome in zip(got[:6], [ACCEPTED] * 3 + [REJECTED, RELEASED, RELEASED]):
        settle(r, outcome)
    h.pump()

    rows = _routed(agent)
    assert len(rows) == 2
    by_dir = {row["linkDir"]: row for row in rows}
    client_side, broker_side = by_dir["in"], by_dir["out"]
    conns = {row["identity"] for row in _query(agent, "connection")}
    assert client_side["connectionId"] != broker_side["connectionId"]
    assert conns >= {client_side["connectionId"], broker_side["connectionId"]}
    for row in rows:
        assert row["linkType"] == "endpoint"
        assert row["owningAddr"] == "Ctest"     # Dispatch's class C: a prefix link route, direction in
        assert row["linkName"] == "lr-sender"
        assert (row["adminStatus"], row["operStatus"]) == ("enabled", "up")
        assert row["deliveryCount"] == 7 and row["presettledCount"] == 1
        assert (row["acceptedCount"], row["rejectedCount"], row["releasedCount"], row["modifiedCount"]) == (3, 1, 2, 0)
        assert row["unsettledCount"] == 0 and row["undeliveredCount"] == 0
        assert row["capacity"] == 250
    assert client_side["peer"] == broker_side["identity"] and broker_side["peer"] == client_side["identity"]
    # Every router.link identity stays unique with the routed links among the message-routed ones.
    identities = [row["identity"] for row in _query(agent, "router.link")]
    assert len(identities) == len(set(identities))
    # The router's linkCount counts them, as Dispatch's does.
    [router] = _query(agent, "router")
    assert router["linkCount"] == len(identities)


def test_a_routed_receiver_pair_shows_unsettled_deliveries_and_the_out_key():
    h, agent, broker, client = _setup()
    rcv = client.receiver("test.q2")
    h.pump()
    [b_snd] = broker_answers(broker)
    h.pump()
    rcv.flow(5)
    h.pump()
    for i in range(3):
        broker.send(b_snd, body=i)
    h.pump()
    assert len(client.received(rcv)) == 3
    rows = _routed(agent)
    assert {row["owningAddr"] for row in rows} == {"Dtest"}
    for row in rows:
        assert row["deliveryCount"] == 3 and row["unsettledCount"] == 3 and row["acceptedCount"] == 0
    by_dir = {row["linkDir"]: row for row in rows}
    assert by_dir["out"]["creditAvailable"] == 2     # the client's 5, less the 3 sent on to it


def test_management_refuses_to_detach_a_routed_link_rather_than_pretend():
    h, agent, broker, client = _setup()
    snd = client.sender("test.q4")
    h.pump()
    broker_answers(broker)
    h.pump()
    row = _routed(agent)[0]
    data = wm.build_request("UPDATE", reply_to="r", correlation_id=2, type="org.apache.qpid.dispatch.router.link",
                            identity=row["identity"], body={"adminStatus": "disabled"})
    resp = wm.parse_response(agent.handle(data))
    assert resp.status == 400 and "link-routed link: management cannot detach it" in resp.description
    h.pump()
    assert snd.state & Endpoint.REMOTE_ACTIVE and len(_routed(agent)) == 2


def test_routed_links_leave_router_link_when_detached():
    h, agent, broker, client = _setup()
    snd = client.sender("test.q3")
    h.pump()
    broker_answers(broker)
    h.pump()
    assert len(_routed(agent)) == 2
    snd.close()
    h.pump()
    assert _routed(agent) == []


# -- allowResumableLinkRoute (LinkRouter.allow_resumable) ---------------------------------------------------

def _durable_receiver(client, address: str, *, expiry=None, timeout: int = 0):
    rcv = client.receiver(address, open=False)
    rcv.source.durability = Terminus.DELIVERIES
    if expiry is not None:
        rcv.source.expiry_policy = expiry
    rcv.source.timeout = timeout
    rcv.open()
    return rcv


@pytest.mark.parametrize("expiry,timeout", [(Terminus.EXPIRE_NEVER, 0), (Terminus.EXPIRE_WITH_LINK, 60)],
                         ids=["expiry-never", "timeout"])
def test_a_resumable_terminus_is_refused_when_resumable_link_routes_are_not_allowed(expiry, timeout):
    h, agent, broker, client = _setup()
    h.router.link_router.allow_resumable = False
    rcv = _durable_receiver(client, "test.durable", expiry=expiry, timeout=timeout)
    h.pump()
    assert rcv.state & Endpoint.REMOTE_CLOSED and rcv.remote_condition.name == LINK_EXPIRATION
    assert broker_answers(broker) == []     # nothing went on to the container


def test_a_resumable_terminus_is_routed_by_default_and_a_plain_one_always():
    h, agent, broker, client = _setup()
    durable = _durable_receiver(client, "test.durable", expiry=Terminus.EXPIRE_NEVER)
    h.pump()
    assert len(broker_answers(broker)) == 1
    h.pump()
    assert durable.state & Endpoint.REMOTE_ACTIVE
    h.router.link_router.allow_resumable = False
    plain = client.receiver("test.plain")
    h.pump()
    assert len(broker_answers(broker)) == 1
    h.pump()
    assert plain.state & Endpoint.REMOTE_ACTIVE
