"""Management of network bridges (broker/facade.py, broker/management.py) on two real in-process brokers.

Broker A's duplex network connector dials broker B over a loopback socket in one Trio run (the connector
task of broker/netruntime.py); ``orders`` is statically included, so A forwards it without a consumer on
B. The management agents of both brokers answer for the bridge: A's own row and B's row for A's duplex
half, the demand and forwarded counts after traffic, and stop/start by name taking the bridge down and up.
"""

from __future__ import annotations

import proton
import pytest
import trio

from broker.management import BrokerManagement
from broker.netruntime import NetworkConnectorTask
from tests.unit.broker.fixtures import make_broker
from tests.unit.enginepair import Peer, Pipe, pump
from wire import management as wm
from wire.driver import serve_listener

BRIDGE = "org.apache.activemq.artemis.networkBridge"
NETWORK = "org.apache.activemq.artemis.network"
WAIT_SECONDS = 10


def connector_xml(port: int) -> str:
    return f"""<networkConnectors>
      <networkConnector name="a-to-b" uri="static:(tcp://127.0.0.1:{port})?initialReconnectDelay=50"
                        duplex="true">
        <staticallyIncludedDestinations><queue physicalName="orders"/></staticallyIncludedDestinations>
      </networkConnector>
    </networkConnectors>"""


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


@pytest.fixture
async def network(tmp_path, nursery):
    """(broker A, its agent, broker B, its agent): A's connector connected to B."""
    b = make_broker(tmp_path / "b")
    listeners = await nursery.start(serve_listener, "127.0.0.1", 0,
                                    lambda r: b.new_engine(b.connection_settings(), server=True, remote_host=r))
    port = listeners[0].socket.getsockname()[1]
    a = make_broker(tmp_path / "a", connections=connector_xml(port))
    [connector] = a.network.connectors
    nursery.start_soon(NetworkConnectorTask(a.network, connector).run)
    mgmt_a, mgmt_b = BrokerManagement(a), BrokerManagement(b)
    await until(lambda: [r for r in rows(mgmt_a, BRIDGE) if r["state"] == "connected"], "connected")
    return a, mgmt_a, b, mgmt_b


def produce(broker, n: int) -> Pipe:
    """A client on ``broker`` (in memory) that sends ``n`` messages to ``orders``."""
    client = Peer()
    pipe = Pipe(client, broker.new_engine(broker.connection_settings(), server=True))
    snd = client.sender("orders")
    pump(pipe)
    for i in range(n):
        client.send(snd, proton.Message(body=f"m{i}"))
    pump(pipe)
    return pipe


async def test_bridge_rows_demand_and_forwarded_after_traffic(network):
    a, mgmt_a, b, mgmt_b = network
    [row] = rows(mgmt_a, BRIDGE)
    assert row["name"] == row["identity"] == "a-to-b" and row["type"] == BRIDGE
    assert (row["direction"], row["duplex"], row["state"], row["reconnectAttempts"]) == ("duplex", True,
                                                                                          "connected", 0)
    assert row["peer"] == "b1" and row["peerId"] == b.network.broker_id and row["lastError"] == ""
    [demand] = row["demand"]
    assert (demand["kind"], demand["destination"], demand["static"], demand["forwarded"]) == ("queue", "orders",
                                                                                                True, 0)

    pipe = produce(a, 3)
    await until(lambda: b.queues["orders"].message_count == 3, "3 messages on B", pipe)
    [row] = rows(mgmt_a, BRIDGE)
    assert row["forwarded"] == 3 and row["demand"][0]["forwarded"] == 3

    # B's row for A's duplex half: its identity names the connection; it is A's to start and stop.
    [half] = rows(mgmt_b, BRIDGE)
    assert half["name"] == "a-to-b" and half["direction"] == "duplex (remote's)" and half["peer"] == "b1"
    assert half["identity"].startswith("a-to-b@127.0.0.1:") and half["peerId"] == a.network.broker_id
    assert call(mgmt_b, "READ", type="networkBridge", identity=half["identity"]).body["direction"] == \
        "duplex (remote's)"
    refused = call(mgmt_b, "stopNetworkConnector", name="a-to-b")
    assert refused.status == 400 and "peer's duplex connector" in refused.description

    [net_a] = rows(mgmt_a, NETWORK)
    assert net_a["brokerId"] == a.network.broker_id and net_a["peers"] == ["b1"]
    assert net_a["bridgeCount"] == 1 and net_a["duplicatesDropped"] == 0
    assert rows(mgmt_b, NETWORK)[0]["bridgeCount"] == 1


async def test_stop_and_start_by_management_take_the_bridge_down_and_up(network):
    a, mgmt_a, b, mgmt_b = network
    resp = call(mgmt_a, "stopNetworkConnector", type="networkBridge", name="a-to-b")
    assert resp.status == 200 and resp.body["name"] == "a-to-b" and len(resp.body["bridges"]) == 1
    await until(lambda: rows(mgmt_a, BRIDGE)[0]["state"] == "stopped", "stopped")
    await until(lambda: not rows(mgmt_b, BRIDGE), "B's half to go with the connection")
    [row] = rows(mgmt_a, BRIDGE)
    assert row["demand"] == [] and row["peer"] == "" and row["connections"] == 1
    await trio.sleep(0.2)  # several reconnect delays: a stopped connector stays down
    assert rows(mgmt_a, BRIDGE)[0]["state"] == "stopped"

    assert call(mgmt_a, "startNetworkConnector", name="a-to-b").status == 200
    await until(lambda: rows(mgmt_a, BRIDGE)[0]["state"] == "connected", "connected again")
    assert rows(mgmt_a, BRIDGE)[0]["connections"] == 2
    await until(lambda: rows(mgmt_b, BRIDGE), "B's half again")


async def test_unknown_names_and_missing_names_are_refused(network):
    _, mgmt_a, _, _ = network
    missing = call(mgmt_a, "stopNetworkConnector", name="nope")
    assert missing.status == 404 and "nope" in missing.description
    assert call(mgmt_a, "startNetworkConnector").status == 400
    assert call(mgmt_a, "startNetworkConnector", type="queue", name="a-to-b").status == 400
    assert call(mgmt_a, "READ", type="networkBridge", name="nope").status == 404
    ops = call(mgmt_a, "GET-OPERATIONS", entityType="networkBridge").body
    assert ops == {BRIDGE: ["QUERY", "READ", "startNetworkConnector", "stopNetworkConnector"]}
    assert call(mgmt_a, "DELETE", type="networkBridge", name="a-to-b").status == 400
