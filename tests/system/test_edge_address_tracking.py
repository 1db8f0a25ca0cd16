"""Edge address tracking end to end (issue 17): a tdrouterd edge router learns from its tdrouterd interior,
on ``_$qd.edge_addr_tracking``, whether its producers' addresses have a consumer beyond the edge (Qpid
Dispatch 1.19 src/router_core/modules/edge_router/addr_proxy.c, edge_addr_tracking/edge_addr_tracking.c).

A producer on the edge whose only consumer is on the interior has credit and delivers; once that consumer
has gone, the producer is given no more credit, everything it sent is answered (released) and nothing waits
at the edge; when a consumer comes back, delivery resumes. Real daemons, real proton clients; what waits at
the edge is read from the edge's management (``router.link`` undeliveredCount)."""

from __future__ import annotations

import time

import pytest

from tests.system.clients import Consumer, Producer, close_all
from tests.system.meshharness import Mesh
from tools.mgmtclient import ManagementClient

TIMEOUT = 20.0
#: How long the producer is watched for credit it should not get, once everything it sent is answered.
QUIET_SECONDS = 1.5
#: More than the producer's credit window (the edge's linkCapacity, 250) and than the interior's window on
#: the edge's uplink sender together: without tracking, part of it would be left waiting at the edge.
BACKLOG = 1000

EDGE_LISTENER = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                 "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")


@pytest.fixture
def interior_and_edge(tmp_path):
    m = Mesh(tmp_path, None)
    try:
        m.add("I", listen=False, sections=EDGE_LISTENER)
        m.add("E", listen=False, mode="edge",
              sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {m['I'].ports['edge']}\n"
                       "    role: edge\n}")
        yield m
    finally:
        close_all()
        m.stop_all()


def edge_links(mesh: Mesh, rid: str) -> list[dict]:
    bus = mesh.url(rid).replace("amqp://", "")
    with ManagementClient(bus, timeout=10) as client:
        return client.query("org.apache.qpid.dispatch.router.link",
                            ["linkName", "linkDir", "owningAddr", "undeliveredCount", "deliveryCount"])


def waiting_at(mesh: Mesh, rid: str) -> int:
    return sum(int(r["undeliveredCount"] or 0) for r in edge_links(mesh, rid))


def test_edge_producer_credit_follows_consumers_beyond_the_edge(interior_and_edge):
    mesh = interior_and_edge
    address = "tracked/q"
    consumer = Consumer(mesh.url("I"), address, credit=50).start()
    consumer.wait_ready()
    producer = Producer(mesh.url("E"), address, count=10).start()
    producer.wait(TIMEOUT)                                  # credit, then delivered
    assert producer.outcomes == {"accepted": 10}
    consumer.wait(TIMEOUT, count=10)

    # The edge attached its tracking receiver on the uplink.
    names = {r["linkName"] for r in edge_links(mesh, "E")}
    assert "E.edge.tracking" in names

    consumer.close()
    producer.send(range(10, 10 + BACKLOG))
    # Whatever credit the producer had left is spent and every message it sent is answered, released:
    # nothing is left waiting at the edge for a consumer that is gone.
    producer.wait_for(lambda: producer.credit == 0 and producer.sent > 10
                      and producer.settled_count() == producer.sent, TIMEOUT,
                      "the producer's credit used up and everything it sent answered")
    assert set(producer.outcomes) <= {"accepted", "released"}
    assert waiting_at(mesh, "E") == 0
    sent = producer.sent
    time.sleep(QUIET_SECONDS)                               # no credit may come while nobody consumes
    assert producer.sent == sent and producer.credit == 0
    assert producer.settled_count() == sent and waiting_at(mesh, "E") == 0

    # A consumer comes back: credit returns and the rest of the backlog is delivered.
    accepted_before = producer.outcomes["accepted"]
    again = Consumer(mesh.url("I"), address, credit=50).start()
    again.wait_ready()
    producer.wait_for(lambda: producer.outcomes["accepted"] > accepted_before, TIMEOUT,
                      "delivery to the returning consumer")
    again.wait(TIMEOUT, count=1)
    assert again.ids and min(again.ids) >= 10
