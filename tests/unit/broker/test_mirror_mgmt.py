"""Management of the broker mirror and of acceptors (broker/facade.py, broker/management.py).

A real Broker answers through its real agent; its mirror part and acceptor controls are small fakes with
the interface broker/mirror.py (``MirrorPart.mgmt_sources`` / ``mgmt_targets``) and broker/acceptors.py
(``AcceptorControl``) offer, so what is tested here is the management side: entity types, attributes,
identities, READ, and ``startAcceptor`` / ``stopAcceptor`` (a disaster-recovery replica's client acceptor
starts disabled and is enabled this way).
"""

from __future__ import annotations

import socket

import pytest

from broker.acceptors import AcceptorControl
from broker.configmodel import Acceptor
from broker.management import BrokerManagement
from tests.unit.broker.fixtures import make_broker
from wire import management as wm

MIRROR = "org.apache.activemq.artemis.mirror"
MIRROR_TARGET = "org.apache.activemq.artemis.mirrorTarget"
ACCEPTOR = "org.apache.activemq.artemis.acceptor"

SOURCE_ROW = {"name": "dr", "remote": "tcp://10.0.0.2:61616", "state": "connected",
              "snfQueue": "$ACTIVEMQ_ARTEMIS_MIRROR_dr", "target": "$ACTIVEMQ_ARTEMIS_MIRROR_dr", "durable": True,
              "queuedEvents": 12, "oldestEventAgeMs": 340, "eventsSent": 9000, "messageEvents": 6000,
              "ackEvents": 3000, "queueEvents": 12, "remoteBrokerId": "replica-7f3a", "lastError": ""}
TARGET_ROW = {"sourceId": "source-19c2", "sourceName": "site-a", "address": "$ACTIVEMQ_ARTEMIS_MIRROR_dr",
              "connected": True, "messagesApplied": 6000, "acksApplied": 2990, "queueEventsApplied": 4,
              "duplicatesSkipped": 3, "acksUnmatched": 0, "loopsSkipped": 0, "lastEventAgeMs": 15}


class FakeMirror:
    """The two views of broker/mirror.py's MirrorPart that management reads."""

    def __init__(self, sources=(), targets=()):
        self.sources = [dict(r) for r in sources]
        self.targets = [dict(r) for r in targets]

    def mgmt_sources(self) -> list[dict]:
        return [dict(r) for r in self.sources]

    def mgmt_targets(self) -> list[dict]:
        return [dict(r) for r in self.targets]


class FakeAcceptor:
    """broker/acceptors.py's AcceptorControl: start()/stop() only trigger (here: flip ``started``)."""

    def __init__(self, name, port, *, auto_start=True, tls=False):
        self.name, self.host, self.port = name, "127.0.0.1", port
        self.auto_start, self.tls = auto_start, tls
        self.started = auto_start
        self.calls: list[str] = []

    @property
    def bound(self):
        return [(self.host, self.port)] if self.started else []

    def start(self):
        self.calls.append("start")
        self.started = True

    def stop(self):
        self.calls.append("stop")
        self.started = False

    def describe(self) -> dict:
        return {"name": self.name, "host": self.host, "port": self.port, "started": self.started,
                "autoStart": self.auto_start, "tls": self.tls, "connections": 2 if self.started else 0}


def call(mgmt: BrokerManagement, operation: str, **kw) -> wm.Response:
    reply = mgmt.handle(wm.build_request(operation, reply_to="reply-q", correlation_id="c", **kw))
    return wm.parse_response(reply)


def rows(mgmt: BrokerManagement, entity_type: str) -> list[dict]:
    body = call(mgmt, "QUERY", entityType=entity_type).body
    return [dict(zip(body["attributeNames"], r)) for r in body["results"]]


@pytest.fixture
def broker(tmp_path):
    return make_broker(tmp_path)


@pytest.fixture
def replica(broker):
    """A broker that mirrors to a replica (``dr``) and is itself the replica of ``site-a``, with a client
    acceptor that did not start (``autoStart=false``) beside a started one."""
    broker.mirror = FakeMirror([SOURCE_ROW], [TARGET_ROW])
    broker.acceptors = {"artemis": FakeAcceptor("artemis", 61616, auto_start=False),
                        "mirror-in": FakeAcceptor("mirror-in", 61617, tls=True)}
    return broker, BrokerManagement(broker)


def test_mirror_rows_carry_every_attribute_with_the_connection_name_as_identity(replica):
    _, mgmt = replica
    [row] = rows(mgmt, MIRROR)
    assert row == {**SOURCE_ROW, "identity": "dr", "type": MIRROR}
    assert call(mgmt, "READ", type="mirror", name="dr").body["queuedEvents"] == 12
    assert call(mgmt, "READ", type="mirror", identity="dr").body["oldestEventAgeMs"] == 340


def test_mirror_target_rows_are_named_by_the_source_and_identified_by_its_broker_id(replica):
    broker, mgmt = replica
    [row] = rows(mgmt, MIRROR_TARGET)
    assert row == {**TARGET_ROW, "name": "site-a", "identity": "source-19c2", "type": MIRROR_TARGET}
    assert call(mgmt, "READ", type="mirrorTarget", identity="source-19c2").body["duplicatesSkipped"] == 3
    # a source whose name is not known yet is named by its id
    broker.mirror.targets[0]["sourceName"] = ""
    assert rows(mgmt, MIRROR_TARGET)[0]["name"] == "source-19c2"


def test_acceptor_rows_show_which_listen_and_where(replica):
    _, mgmt = replica
    by_name = {r["name"]: r for r in rows(mgmt, ACCEPTOR)}
    assert by_name["artemis"] == {"name": "artemis", "identity": "artemis", "type": ACCEPTOR, "host": "127.0.0.1",
                                  "port": 61616, "bound": [], "started": False, "autoStart": False, "tls": False,
                                  "connections": 0, "lastError": None}
    assert by_name["mirror-in"]["bound"] == ["127.0.0.1:61617"] and by_name["mirror-in"]["started"] is True
    assert by_name["mirror-in"]["tls"] is True


def test_start_and_stop_acceptor_trigger_the_control_and_answer_its_row(replica):
    broker, mgmt = replica
    started = call(mgmt, "startAcceptor", type="acceptor", name="artemis")
    assert started.status == 200 and broker.acceptors["artemis"].calls == ["start"]
    assert (started.body["name"], started.body["started"], started.body["bound"]) == ("artemis", True,
                                                                                       ["127.0.0.1:61616"])
    # the node-level form (no type) and the body's name are accepted, as for the other start/stop operations
    stopped = call(mgmt, "stopAcceptor", body={"name": "artemis"})
    assert stopped.status == 200 and stopped.body["started"] is False
    assert broker.acceptors["artemis"].calls == ["start", "stop"]
    assert broker.acceptors["mirror-in"].calls == []


def test_unknown_or_missing_acceptor_names_are_refused(replica):
    broker, mgmt = replica
    missing = call(mgmt, "startAcceptor", name="nope")
    assert missing.status == 404 and "nope" in missing.description
    assert call(mgmt, "stopAcceptor").status == 400
    assert call(mgmt, "stopAcceptor", type="queue", name="artemis").status == 400
    assert all(a.calls == [] for a in broker.acceptors.values())
    assert call(mgmt, "READ", type="acceptor", name="nope").status == 404
    assert call(mgmt, "DELETE", type="acceptor", name="artemis").status == 400
    assert call(mgmt, "READ", type="mirror", name="nope").status == 404


def test_types_attributes_and_operations_are_listed(replica):
    _, mgmt = replica
    ops = call(mgmt, "GET-OPERATIONS", entityType="acceptor").body
    assert ops == {ACCEPTOR: ["QUERY", "READ", "startAcceptor", "stopAcceptor"]}
    assert call(mgmt, "GET-OPERATIONS", entityType="mirror").body == {MIRROR: ["QUERY", "READ"]}
    assert call(mgmt, "GET-OPERATIONS", entityType="mirrorTarget").body == {MIRROR_TARGET: ["QUERY", "READ"]}
    types = call(mgmt, "GET-TYPES").body
    assert {MIRROR, MIRROR_TARGET, ACCEPTOR} <= set(types)
    attrs = call(mgmt, "GET-ATTRIBUTES", entityType="mirror").body[MIRROR]
    assert {"queuedEvents", "oldestEventAgeMs", "eventsSent", "snfQueue"} <= set(attrs)
    # an untyped QUERY lists them beside the queues
    body = call(mgmt, "QUERY").body
    listed = {r[body["attributeNames"].index("type")] for r in body["results"]}
    assert {MIRROR, MIRROR_TARGET, ACCEPTOR} <= listed


def test_a_broker_without_mirror_or_acceptor_controls_has_no_such_rows(broker):
    mgmt = BrokerManagement(broker)
    assert rows(mgmt, MIRROR) == [] and rows(mgmt, MIRROR_TARGET) == [] and rows(mgmt, ACCEPTOR) == []
    assert call(mgmt, "startAcceptor", name="artemis").status == 404


class RefusingAcceptor(FakeAcceptor):
    """An acceptor whose port is taken: ``start()`` fails as AcceptorControl's does (False, lastError)."""

    def start(self):
        self.calls.append("start")
        self.last_error = f"cannot listen on {self.host}:{self.port}: Address already in use"
        return False

    def describe(self) -> dict:
        return {**super().describe(), "lastError": getattr(self, "last_error", None)}


def test_an_acceptor_that_cannot_listen_is_a_500_with_its_reason(replica):
    broker, mgmt = replica
    broker.acceptors["busy"] = RefusingAcceptor("busy", 61618, auto_start=False)
    refused = call(mgmt, "startAcceptor", name="busy")
    assert refused.status == 500
    assert refused.description == ("acceptor busy did not start: cannot listen on 127.0.0.1:61618: Address already "
                                   "in use")
    row = call(mgmt, "READ", type="acceptor", name="busy").body
    assert row["started"] is False and "Address already in use" in row["lastError"]


async def test_the_real_acceptor_control_starts_and_stops_by_management(broker):
    """broker/acceptors.py's AcceptorControl (autoStart=false) behind the agent: startAcceptor binds before
    the answer, so a client connects at once; stopAcceptor closes the socket; a taken port is a 500."""
    def control(name: str, port: int) -> AcceptorControl:
        acc = Acceptor(name, "127.0.0.1", port, ("AMQP",), {}, 1, auto_start=False)
        settings = broker.connection_settings(name=name)
        return AcceptorControl(acc, lambda remote: broker.new_engine(settings, server=True, remote_host=remote))

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        broker.acceptors = {"clients": control("clients", 0), "busy": control("busy", taken.getsockname()[1])}
        mgmt = BrokerManagement(broker)
        assert [(r["name"], r["started"], r["bound"]) for r in rows(mgmt, ACCEPTOR)] == [
            ("clients", False, []), ("busy", False, [])]
        started = call(mgmt, "startAcceptor", name="clients")
        assert started.status == 200 and started.body["started"] is True
        [address] = started.body["bound"]
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5):
            pass  # listening when the answer came
        stopped = call(mgmt, "stopAcceptor", name="clients")
        assert stopped.status == 200 and (stopped.body["started"], stopped.body["bound"]) == (False, [])
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=5).close()
        refused = call(mgmt, "startAcceptor", name="busy")
        assert refused.status == 500 and "busy did not start: cannot listen on" in refused.description
    finally:
        taken.close()
