"""Broker mirror on real tdbrokers (docs/mirror.md; Artemis user manual, "AMQP Broker Connections", Mirror):
a source's messages, acknowledgements and queue creations and deletions reach its replica, in order, and
nothing else does.

* 10,000 durable messages produced on the source, a consumer acknowledging every other one: the replica
  holds exactly the 5,000 unacknowledged, in order;
* a queue created and deleted on the source is created and deleted on the replica;
* no backfill: messages stored before the mirror was configured are not sent;
* events that happen while the broker connection is stopped (management ``stopBrokerConnection``) are kept
  and delivered after ``startBrokerConnection``;
* a replica refuses a second mirror source, and a broker refuses to mirror to itself: the refused source
  shows why in its management ``mirror`` row (``lastError``).

The replicas here keep their client acceptor started, so that the tests can read them; reading is done by
queue browsers, which take nothing. Crashes, the dual mirror and the failover runbook are in
test_mirror_recovery.py.
"""

from __future__ import annotations

import pytest

from tests.system.clients import Consumer, close_all
from tests.system.mirrorharness import (
    BROKER_CONNECTION,
    CLIENT_CREDIT,
    QUEUE,
    Site,
    browse_ids,
    drain_ids,
    mirror_connection_xml,
    produce,
    running,
    wait_count,
    wait_mirror_idle,
)
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

#: The issue's volume: 10,000 durable messages.
BIG = 10_000


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    close_all()


def _pair(tmp_path, **mirror_attrs):
    """A source whose mirror connection ``dr`` goes to a replica's mirror acceptor (both configured)."""
    replica = Site("replica", tmp_path)
    replica.configure()
    source = Site("source", tmp_path, mirror_acceptor=False)
    source.configure(connections=[mirror_connection_xml("dr", replica.mirror_port, **mirror_attrs)])
    return source, replica


def test_the_replica_holds_exactly_the_unacknowledged_half_of_10000_durable_messages_in_order(tmp_path):
    source, replica = _pair(tmp_path)
    with running(replica, source):
        replica.start()
        source.start()
        # Accept the even ids, keep the odd ones unsettled; closing the consumer gives those back.
        consumer = Consumer(source.url, "orders", credit=CLIENT_CREDIT,
                            outcome=lambda m, i: "accept" if m.id % 2 == 0 else "hold").start()
        produce(source.url, "orders", range(BIG), timeout=60)
        consumer.wait(60, count=BIG)
        consumer.close()
        wait_count(source, "orders", BIG // 2)
        row = wait_mirror_idle(source, "dr", message_events=BIG, ack_events=BIG // 2, timeout=60)
        assert (row["messageEvents"], row["ackEvents"]) == (BIG, BIG // 2), row
        assert replica.queue_counts()["orders"] == BIG // 2
        odd = list(range(1, BIG, 2))
        assert browse_ids(replica.url, "orders", BIG // 2) == odd
        [target] = replica.target_rows()
        assert (target["messagesApplied"], target["acksApplied"], target["duplicatesSkipped"]) == \
            (BIG, BIG // 2, 0), target
        # the source holds the same half (the replica is its copy, not a different queue)
        assert browse_ids(source.url, "orders", BIG // 2) == odd


def test_queue_creation_and_deletion_are_mirrored(tmp_path):
    source, replica = _pair(tmp_path)
    with running(replica, source):
        replica.start()
        source.start()
        source.call("CREATE", type=QUEUE, name="audit", body={"address": "audit"})
        wait_for(lambda: "audit" in replica.queue_counts(), "the replica to create audit")
        produce(source.url, "audit", range(3))
        wait_count(replica, "audit", 3)
        assert browse_ids(replica.url, "audit", 3) == [0, 1, 2]
        source.call("DELETE", type=QUEUE, name="audit")
        wait_for(lambda: "audit" not in replica.queue_counts(), "the replica to delete audit")
        row = wait_mirror_idle(source, "dr", message_events=3, queue_events=2)
        assert row["queueEvents"] >= 2, row


def test_messages_stored_before_the_mirror_was_configured_are_not_sent(tmp_path):
    """No backfill (Artemis' manual: only messages arriving once the mirror is configured are mirrored)."""
    source, replica = _pair(tmp_path)
    mirrored = source.conf.read_text()
    source.configure()  # first without the mirror
    with running(source):
        source.start()
        produce(source.url, "orders", range(50))
        assert source.stop() == 0
    source.write(mirrored)  # then with it, on the same journal
    with running(replica, source):
        replica.start()
        source.start()
        assert source.queue_counts()["orders"] == 50  # the old messages are there...
        produce(source.url, "orders", range(100, 120))
        row = wait_mirror_idle(source, "dr", message_events=20)
        assert row["messageEvents"] == 20, row  # ...and were never captured
        assert replica.queue_counts()["orders"] == 20
        assert browse_ids(replica.url, "orders", 20) == list(range(100, 120))
        # Acknowledging old messages on the source: their acknowledgements find nothing on the replica.
        assert drain_ids(source.url, "orders", 10) == list(range(10))
        wait_count(source, "orders", 60)
        wait_mirror_idle(source, "dr", message_events=20)
        assert replica.queue_counts()["orders"] == 20
        assert browse_ids(replica.url, "orders", 20) == list(range(100, 120))


def test_events_of_a_stopped_broker_connection_are_delivered_when_it_starts(tmp_path):
    source, replica = _pair(tmp_path)
    with running(replica, source):
        replica.start()
        source.start()
        wait_for(lambda: source.mirror_row("dr")["state"] == "connected", "the mirror to connect")
        source.call("stopBrokerConnection", type=BROKER_CONNECTION, name="dr")
        wait_for(lambda: source.mirror_row("dr")["state"] == "stopped", "the mirror to stop")
        produce(source.url, "orders", range(100))
        assert drain_ids(source.url, "orders", 30) == list(range(30))
        source.call("CREATE", type=QUEUE, name="audit", body={"address": "audit"})
        wait_count(source, "orders", 70)
        # all captured, none sent: the replica has not moved
        row = wait_for(lambda: (r := source.mirror_row("dr"))["ackEvents"] == 30 and r["queueEvents"] >= 1 and r,
                       "the source to capture the acknowledgements and the queue creation")
        assert row["state"] == "stopped" and row["messageEvents"] == 100, row
        assert row["queuedEvents"] == row["messageEvents"] + row["ackEvents"] + row["queueEvents"], row
        assert row["oldestEventAgeMs"] >= 0 and row["eventsSent"] == 0, row
        counts = replica.queue_counts()
        assert counts.get("orders") == 0 and "audit" not in counts, counts
        source.call("startBrokerConnection", type=BROKER_CONNECTION, name="dr")
        row = wait_mirror_idle(source, "dr", message_events=100, ack_events=30, queue_events=1)
        assert row["eventsSent"] >= 131, row
        assert replica.queue_counts()["orders"] == 70 and "audit" in replica.queue_counts()
        assert browse_ids(replica.url, "orders", 70) == list(range(30, 100))


def test_a_replica_refuses_a_second_mirror_source(tmp_path):
    replica = Site("replica", tmp_path)
    replica.configure()
    first = Site("first", tmp_path, mirror_acceptor=False)
    first.configure(connections=[mirror_connection_xml("dr", replica.mirror_port)])
    second = Site("second", tmp_path, mirror_acceptor=False)
    second.configure(connections=[mirror_connection_xml("dr2", replica.mirror_port)])
    with running(replica, first, second):
        replica.start()
        first.start()
        wait_for(lambda: first.mirror_row("dr")["state"] == "connected", "the first source to connect")
        [target] = replica.target_rows()
        second.start()
        wait_for(lambda: second.mirror_row("dr2")["lastError"], "the second source's error")
        # the replica goes on with the first source, and nothing of the second reaches it
        produce(second.url, "orders", range(1000, 1005))
        produce(first.url, "orders", range(5))
        wait_mirror_idle(first, "dr", message_events=5)
        assert second.mirror_row("dr2")["queuedEvents"] == 5
        assert [r["sourceId"] for r in replica.target_rows()] == [target["sourceId"]]
        assert browse_ids(replica.url, "orders", 5) == list(range(5))
        assert replica.queue_counts()["orders"] == 5


def test_a_broker_refuses_to_mirror_to_itself(tmp_path):
    site = Site("self", tmp_path)
    site.configure(connections=[mirror_connection_xml("me", site.mirror_port)])
    with running(site):
        site.start()
        wait_for(lambda: site.mirror_row("me")["lastError"], "the mirror's error")
        produce(site.url, "orders", range(3))
        assert site.queue_counts()["orders"] == 3  # nothing applied twice
        assert site.mirror_row("me")["eventsSent"] == 0
        assert site.target_rows() == []
