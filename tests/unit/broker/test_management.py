"""The broker's management agent against a fake of the broker's management facade."""

from __future__ import annotations

import pytest

from broker.management import BrokerManagement
from wire import management as wm


class FakeBroker:
    """The facade broker/management.py calls, over plain dicts."""

    def __init__(self):
        self.queues = {"orders": {"name": "orders", "address": "orders", "routingType": "anycast",
                                  "durable": True, "messageCount": 3, "consumerCount": 1, "deliveredCount": 7,
                                  "acknowledgedCount": 4, "deadLetteredCount": 1}}
        self.connections = {"peer-router": {"name": "peer-router", "uri": "tcp://127.0.0.1:5672",
                                            "status": "STOPPED", "links": 0, "autoStart": False}}

    def mgmt_queues(self):
        return [dict(q) for q in self.queues.values()]

    def mgmt_addresses(self):
        addrs = {}
        for q in self.queues.values():
            a = addrs.setdefault(q["address"], {"name": q["address"], "routingTypes": [], "queues": []})
            a["queues"].append(q["name"])
            if q["routingType"] not in a["routingTypes"]:
                a["routingTypes"].append(q["routingType"])
        return list(addrs.values())

    def mgmt_connections(self):
        return [dict(c) for c in self.connections.values()]

    def create_queue(self, name, address=None, routing_type="anycast", durable=True):
        if name in self.queues:
            raise ValueError(f"queue {name} already exists")
        if routing_type not in ("anycast", "multicast"):
            raise ValueError(f"routing type must be anycast or multicast, got {routing_type!r}")
        self.queues[name] = {"name": name, "address": address or name, "routingType": routing_type,
                             "durable": durable, "messageCount": 0, "consumerCount": 0, "deliveredCount": 0,
                             "acknowledgedCount": 0, "deadLetteredCount": 0}
        return {"name": name}

    def delete_queue(self, name):
        return self.queues.pop(name)["messageCount"]

    def purge_queue(self, name):
        q = self.queues[name]
        n, q["messageCount"] = q["messageCount"], 0
        return n

    def start_broker_connection(self, name):
        self.connections[name]["status"] = "STARTED"
        self.connections[name]["links"] = 2

    def stop_broker_connection(self, name):
        self.connections[name]["status"] = "STOPPED"

    # the network part of the facade (broker/facade.py), over one bridge row
    bridges = {"a-to-b": {"name": "a-to-b", "identity": "a-to-b", "remote": "127.0.0.1:61616", "direction": "out",
                          "duplex": False, "state": "connected", "reconnectAttempts": 0, "connections": 1,
                          "lastError": "", "peer": "b", "peerId": "b-1",
                          "demand": [{"kind": "queue", "destination": "orders", "consumers": 2, "static": False,
                                      "forwarded": 5, "priority": -5, "path": ["b-1"]}], "forwarded": 5}}

    def mgmt_network(self):
        return [{"name": "a", "brokerId": "a-1", "peers": ["b"], "bridgeCount": 1, "duplicatesDropped": 4}]

    def mgmt_network_bridges(self):
        return [dict(b) for b in self.bridges.values()]

    def start_network_connector(self, name):
        self.bridges[name]["state"] = "connecting"

    def stop_network_connector(self, name):
        self.bridges[name]["state"] = "stopped"


@pytest.fixture
def mgmt():
    return BrokerManagement(FakeBroker())


def call(mgmt, operation, **kw):
    reply = mgmt.handle(wm.build_request(operation, reply_to="reply-q", correlation_id="x", **kw))
    resp = wm.parse_response(reply)
    assert resp.to == "reply-q" and resp.correlation_id == "x"
    return resp


def table(resp):
    return [dict(zip(resp.body["attributeNames"], r)) for r in resp.body["results"]]


def test_query_queues_all_attributes(mgmt):
    resp = call(mgmt, "QUERY", entityType="org.apache.activemq.artemis.queue")
    assert resp.status == 200
    # docs/management.md: Artemis' queue attributes, then tdbroker's paging ones.
    assert resp.body["attributeNames"] == ["name", "identity", "type", "address", "routingType", "durable",
                                           "messageCount", "consumerCount", "deliveredCount",
                                           "acknowledgedCount", "deadLetteredCount", "temporary", "paging",
                                           "pagedMessageCount", "pagedSize"]
    [row] = table(resp)
    assert row["messageCount"] == 3 and row["deadLetteredCount"] == 1 and row["identity"] == "orders"


def test_create_read_purge_delete_queue(mgmt):
    resp = call(mgmt, "CREATE", type="queue", name="q2", body={"address": "addr2", "routingType": "multicast",
                                                                "durable": False})
    assert resp.status == 201 and resp.body["address"] == "addr2" and resp.body["durable"] is False
    assert call(mgmt, "READ", type="org.apache.activemq.artemis.queue", name="q2").body["routingType"] == "multicast"
    resp = call(mgmt, "PURGE", type="queue", name="orders")
    assert resp.status == 200 and resp.body["messagesRemoved"] == 3
    assert mgmt.broker.queues["orders"]["messageCount"] == 0
    assert call(mgmt, "DELETE", type="queue", name="q2").status == 204
    assert "q2" not in mgmt.broker.queues
    addrs = table(call(mgmt, "QUERY", entityType="address"))
    # The fake facade reports no paging figures: they come back as null, never invented.
    assert addrs == [{"name": "orders", "identity": "orders", "type": "org.apache.activemq.artemis.address",
                      "routingTypes": ["anycast"], "queues": ["orders"], "paging": None, "numberOfPages": None,
                      "addressSize": None, "pagedSize": None}]


def test_broker_connection_start_stop(mgmt):
    resp = call(mgmt, "startBrokerConnection", name="peer-router")
    assert resp.status == 200 and resp.body["status"] == "STARTED" and resp.body["links"] == 2
    resp = call(mgmt, "stopBrokerConnection", type="org.apache.activemq.artemis.brokerConnection",
                name="peer-router")
    assert resp.body["status"] == "STOPPED"
    [row] = table(call(mgmt, "QUERY", entityType="brokerConnection", body={"attributeNames": ["name", "status"]}))
    assert row == {"name": "peer-router", "status": "STOPPED"}
    assert call(mgmt, "startBrokerConnection", name="nope").status == 404


def test_errors(mgmt):
    assert call(mgmt, "CREATE", type="queue", name="orders").status == 400
    resp = call(mgmt, "CREATE", type="queue", name="q3", body={"routingType": "sideways"})
    assert resp.status == 400 and "routing" in resp.description
    resp = call(mgmt, "CREATE", type="queue", name="q3", body={"colour": "red"})
    assert resp.status == 400 and "colour" in resp.description
    resp = call(mgmt, "CREATE", type="queue", name="q3", body={"durable": 3})
    assert resp.status == 400 and "durable" in resp.description
    assert call(mgmt, "DELETE", type="queue", name="nope").status == 404
    assert call(mgmt, "READ", type="nosuch", name="x").status == 404
    resp = call(mgmt, "QUERY", entityType="queue", body={"attributeNames": ["name", "bogus"]})
    assert resp.status == 400 and "bogus" in resp.description
    assert call(mgmt, "CREATE", type="address", name="a").status == 400
    assert call(mgmt, "EXPLODE", type="queue", name="a").status == 501
    assert mgmt.handle(b"garbage") is None


def test_facade_errors_become_statuses():
    class Broken(FakeBroker):
        def purge_queue(self, name):
            raise RuntimeError("disk on fire")

    mgmt = BrokerManagement(Broken())
    resp = call(mgmt, "PURGE", type="queue", name="orders")
    assert resp.status == 500 and "disk on fire" in resp.description


def test_get_operations(mgmt):
    ops = call(mgmt, "GET-OPERATIONS").body
    assert ops["org.apache.activemq.artemis.queue"] == ["QUERY", "READ", "CREATE", "DELETE", "PURGE"]
    assert "startBrokerConnection" in ops["org.apache.activemq.artemis.brokerConnection"]


def test_network_bridges_and_their_start_stop(mgmt):
    [row] = table(call(mgmt, "QUERY", entityType="networkBridge"))
    assert row["identity"] == "a-to-b" and row["type"] == "org.apache.activemq.artemis.networkBridge"
    assert row["demand"][0]["destination"] == "orders" and row["forwarded"] == 5
    resp = call(mgmt, "stopNetworkConnector", name="a-to-b")
    assert resp.status == 200 and resp.body["bridges"][0]["state"] == "stopped"
    resp = call(mgmt, "startNetworkConnector", type="org.apache.activemq.artemis.networkBridge", name="a-to-b")
    assert resp.body["bridges"][0]["state"] == "connecting"
    assert call(mgmt, "stopNetworkConnector", name="nope").status == 404
    [net] = table(call(mgmt, "QUERY", entityType="network"))
    assert net["duplicatesDropped"] == 4 and net["identity"] == "a" and net["peers"] == ["b"]
    types = {r["type"] for r in table(call(mgmt, "QUERY"))}
    assert {"org.apache.activemq.artemis.network", "org.apache.activemq.artemis.networkBridge"} <= types
