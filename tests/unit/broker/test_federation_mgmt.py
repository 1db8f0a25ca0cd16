"""Management of address federation (broker/facade.py, broker/management.py) on two real in-process brokers.

Broker D has an ``<upstream>`` ``f/u`` to broker U over a loopback socket in one Trio run (the dial loop of
broker/fedruntime.py). A subscriber of ``news`` on D is demand: D keeps a federation queue on U and copies
what is published there. D's agent answers for the stream (state, peer, the federated address and what it
copied), U's for the federation queue it keeps for D; stop/start by identity take the stream down and up.
"""

from __future__ import annotations

import proton
import pytest
import trio

from broker.fedruntime import run_federation
from broker.management import BrokerManagement
from tests.unit.broker.fixtures import make_broker
from tests.unit.enginepair import Peer, Pipe, pump
from wire import management as wm
from wire.driver import serve_listener

STREAM = "org.apache.activemq.artemis.federationStream"
FED_QUEUE = "org.apache.activemq.artemis.federationQueue"
WAIT_SECONDS = 10


def federation_xml(port: int) -> str:
    return f"""<connectors><connector name="to-u">tcp://127.0.0.1:{port}</connector></connectors>
    <federations><federation name="f">
      <upstream name="u"><retry-interval>50</retry-interval>
        <static-connectors><connector-ref>to-u</connector-ref></static-connectors><policy ref="p"/></upstream>
      <address-policy name="p" max-hops="1" auto-delete="true" auto-delete-delay="60000"
                      auto-delete-message-count="5"><include address-match="news"/></address-policy>
    </federation></federations>"""


def call(mgmt: BrokerManagement, operation: str, **kw) -> wm.Response:
    reply = mgmt.handle(wm.build_request(operation, reply_to="reply-q", correlation_id="c", **kw))
    return wm.parse_response(reply)


def rows(mgmt: BrokerManagement, entity_type: str) -> list[dict]:
    body = call(mgmt, "QUERY", entityType=entity_type).body
    return [dict(zip(body["attributeNames"], r)) for r in body["results"]]


async def until(predicate, what: str, *pipes: Pipe):
    with trio.fail_after(WAIT_SECONDS):
        while True:
            if pipes:
                pump(*pipes)
            value = predicate()
            if value:
                return value
            await trio.sleep(0.01)


def client(broker) -> tuple[Peer, Pipe]:
    peer = Peer()
    return peer, Pipe(peer, broker.new_engine(broker.connection_settings(), server=True))


def state(mgmt: BrokerManagement) -> str:
    [row] = rows(mgmt, STREAM)
    return row["state"]


@pytest.fixture
async def federated(tmp_path, nursery):
    """(D, its agent, U, its agent): D's upstream ``f/u`` connected to U."""
    u = make_broker(tmp_path / "u")
    listeners = await nursery.start(serve_listener, "127.0.0.1", 0,
                                    lambda r: u.new_engine(u.connection_settings(), server=True, remote_host=r))
    port = listeners[0].socket.getsockname()[1]
    d = make_broker(tmp_path / "d", connections=federation_xml(port))
    await nursery.start(run_federation, d)
    mgmt_d, mgmt_u = BrokerManagement(d), BrokerManagement(u)
    await until(lambda: state(mgmt_d) == "connected", "connected")
    return d, mgmt_d, u, mgmt_u


async def test_stream_and_federation_queue_rows_after_traffic(federated):
    d, mgmt_d, u, mgmt_u = federated
    [row] = rows(mgmt_d, STREAM)
    assert row["name"] == row["identity"] == "f/u" and row["type"] == STREAM
    assert (row["federation"], row["stream"], row["kind"], row["reconnectAttempts"]) == ("f", "u", "upstream", 0)
    assert row["peer"] == "b1" and row["addresses"] == [] and row["copied"] == 0  # no demand yet
    assert rows(mgmt_u, FED_QUEUE) == [] and rows(mgmt_d, FED_QUEUE) == []

    sub, sub_pipe = client(d)
    rx = sub.receiver("news", credit=10)
    [fq] = await until(lambda: rows(mgmt_u, FED_QUEUE), "U to keep a federation queue for D", sub_pipe)
    assert fq["name"] == fq["identity"] == "b1.federated.f.u.news.multicast" and fq["address"] == "news"
    assert fq["origin"] == d.network.broker_id and fq["originName"] == "b1"  # D is U's network peer
    assert (fq["maxHops"], fq["autoDelete"], fq["autoDeleteDelay"], fq["autoDeleteMessageCount"]) == (1, True,
                                                                                                    60000, 5)
    await until(lambda: rows(mgmt_u, FED_QUEUE)[0]["consumerCount"] == 1, "D's receiver", sub_pipe)

    pub, pub_pipe = client(u)
    tx = pub.sender("news")
    pump(pub_pipe)
    for i in range(3):
        pub.send(tx, proton.Message(body=f"m{i}"))
    await until(lambda: len(sub.received(rx)) == 3, "3 messages on D", pub_pipe, sub_pipe)
    [row] = rows(mgmt_d, STREAM)
    assert row["copied"] == 3 and row["addresses"] == [{"address": "news", "policy": "p", "copied": 3}]
    assert call(mgmt_d, "READ", type="federationStream", identity="f/u").body["copied"] == 3
    assert call(mgmt_u, "READ", type="federationQueue", name=fq["name"]).body["messageCount"] == 0


async def test_stop_and_start_by_management_take_the_stream_down_and_up(federated):
    d, mgmt_d, u, mgmt_u = federated
    sub, sub_pipe = client(d)
    sub.receiver("news", credit=10)
    await until(lambda: [q for q in rows(mgmt_u, FED_QUEUE) if q["consumerCount"] == 1], "demand", sub_pipe)

    resp = call(mgmt_d, "stopFederationStream", type="federationStream", identity="f/u")
    assert resp.status == 200 and resp.body["identity"] == "f/u"
    await until(lambda: state(mgmt_d) == "stopped", "stopped")
    # the federation queue stays on U (auto-delete after its delay), without D's consumer
    await until(lambda: rows(mgmt_u, FED_QUEUE)[0]["consumerCount"] == 0, "D's receiver to go")
    await trio.sleep(0.3)  # several retry intervals: a stopped stream stays down
    [row] = rows(mgmt_d, STREAM)
    assert (row["state"], row["peer"], row["addresses"]) == ("stopped", "", [])

    assert call(mgmt_d, "startFederationStream", name="f/u").status == 200
    await until(lambda: state(mgmt_d) == "connected", "connected again")
    await until(lambda: rows(mgmt_u, FED_QUEUE)[0]["consumerCount"] == 1, "D's receiver again", sub_pipe)
    assert rows(mgmt_d, STREAM)[0]["addresses"][0]["address"] == "news"


async def test_unknown_and_missing_names_are_refused(federated):
    _, mgmt_d, _, _ = federated
    missing = call(mgmt_d, "stopFederationStream", name="f/nope")
    assert missing.status == 404 and "f/nope" in missing.description
    assert call(mgmt_d, "startFederationStream").status == 400
    assert call(mgmt_d, "startFederationStream", type="queue", name="f/u").status == 400
    assert call(mgmt_d, "READ", type="federationStream", identity="f/nope").status == 404
    ops = call(mgmt_d, "GET-OPERATIONS", entityType="federationStream").body
    assert ops == {STREAM: ["QUERY", "READ", "startFederationStream", "stopFederationStream"]}
    assert call(mgmt_d, "GET-OPERATIONS", entityType="federationQueue").body == {FED_QUEUE: ["QUERY", "READ"]}
    assert call(mgmt_d, "DELETE", type="federationStream", name="f/u").status == 400


def test_a_stream_without_its_dial_loop_cannot_be_started(tmp_path):
    d = make_broker(tmp_path, connections=federation_xml(1))  # the federation runtime never started
    mgmt = BrokerManagement(d)
    [row] = rows(mgmt, STREAM)
    assert (row["identity"], row["state"]) == ("f/u", "stopped")
    refused = call(mgmt, "startFederationStream", name="f/u")
    assert refused.status == 400 and "not running" in refused.description
