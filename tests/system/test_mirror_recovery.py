"""Broker mirror through crashes and site failures, on real tdbrokers (docs/mirror.md, the disaster-recovery
runbook in README.md):

* the source killed with ``kill -9`` in the middle of a stream of durable messages and restarted: the
  replica converges to exactly what the source holds, with no loss and no duplicate (the source's mirror
  events are durable: what it captured before the crash is sent after it);
* the replica killed with ``kill -9`` and restarted: mirroring resumes where it stopped, with no gap and no
  duplicate (the source's stored events are the buffer; a re-sent event finds its effect and is skipped);
* the dual mirror of conf/mirror/ (two sites mirroring each other): no loop, every message counted once on
  each side, acknowledgements on either side reach the other;
* the failover runbook on the source/replica pair of conf/mirror/: the replica's client acceptor is not
  started (``autoStart=false``), the source dies, ``tdmanage startAcceptor`` opens the replica, and a
  consumer there drains what the source had not delivered.
"""

from __future__ import annotations

import json

import pytest
from proton import Message

from tests.system.clients import Producer, close_all
from tests.system.harness import run_tool
from tests.system.mirrorharness import (
    BROKER_CONNECTION,
    Site,
    acceptor_refuses,
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

#: Messages streamed while a broker is killed: enough that the kill lands mid-stream, with events in
#: flight on the mirror link, and that the check of every id means something.
STREAM = 3000
#: The kill comes once this many messages of the stream were accepted.
KILL_AFTER = 800
#: First ids of the streams of the source-kill test, one stream (and one kill) each; then AFTER.
KILL_ROUNDS = (10_000, 20_000, 30_000)
AFTER = 100_000


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    close_all()


def _pair(tmp_path):
    replica = Site("replica", tmp_path)
    replica.configure()
    source = Site("source", tmp_path, mirror_acceptor=False)
    source.configure(connections=[mirror_connection_xml("dr", replica.mirror_port)])
    return source, replica


def _stream(site: Site, ids) -> Producer:
    """A producer of durable messages with the given ids, started (its ``outcome_of`` counts by index)."""
    ids = list(ids)
    return Producer(site.url, "orders", count=len(ids),
                    message_fn=lambda k: Message(id=ids[k], body=f"m{ids[k]}", durable=True)).start()


def _same_content(source: Site, replica: Site, queue: str = "orders") -> list:
    """The ids ``source`` holds on ``queue``, checked to be exactly those the replica holds, in the same
    order, each once."""
    n = source.queue_counts()[queue]
    assert replica.queue_counts()[queue] == n
    on_source = browse_ids(source.url, queue, n)
    on_replica = browse_ids(replica.url, queue, n)
    duplicates = sorted({i for i in on_replica if on_replica.count(i) > 1})
    assert not duplicates, f"duplicates on the replica: {duplicates[:20]}"
    missing = sorted(set(on_source) - set(on_replica))
    extra = sorted(set(on_replica) - set(on_source))
    assert not (missing or extra), f"missing on the replica: {missing[:20]} ({len(missing)}); " \
                                   f"only on the replica: {extra[:20]} ({len(extra)})"
    assert on_replica == on_source, "same messages, different order"
    return on_source


def test_source_killed_mid_stream_and_restarted_the_replica_converges(tmp_path):
    """Each round streams durable messages and kills the source with ``kill -9`` in the middle of the
    stream, with events in flight on the mirror link, then restarts it: the replica must end up holding
    exactly what the source holds. (A source that sent an event before its record was on disk loses the
    message in the crash while the replica keeps it, and reuses its id afterwards: a few rounds make that
    window likely to be hit.)"""
    source, replica = _pair(tmp_path)
    with running(replica, source):
        replica.start()
        source.start()
        produce(source.url, "orders", range(1000))
        assert drain_ids(source.url, "orders", 200) == list(range(200))  # acknowledgements in the stream too
        accepted = []
        for base in KILL_ROUNDS:
            stream = _stream(source, range(base, base + STREAM))
            stream.wait_for(lambda s=stream: s.outcomes["accepted"] >= KILL_AFTER, 30, f"{KILL_AFTER} accepted")
            source.kill()
            accepted += [base + k for k in stream.ids_with("accepted")]  # the producer counts by index
            stream.close()
            source.start()
        # New messages after the restarts (not the in-doubt ones again: the source may or may not hold those).
        produce(source.url, "orders", range(AFTER, AFTER + 500))
        wait_mirror_idle(source, "dr", message_events=500)
        held = _same_content(source, replica)
        # nothing the source accepted is lost, nothing acknowledged comes back
        assert set(accepted) <= set(held) and set(range(200, 1000)) <= set(held)
        assert not set(held) & set(range(200))
        assert held[-500:] == list(range(AFTER, AFTER + 500))


def test_events_captured_before_a_source_kill_9_are_sent_after_its_restart(tmp_path):
    """The store-and-forward queue is durable: events the source captured and had not sent (its broker
    connection stopped: ``auto-start="false"``) survive a ``kill -9`` of the source."""
    replica = Site("replica", tmp_path)
    replica.configure()
    source = Site("source", tmp_path, mirror_acceptor=False)
    source.configure(connections=[mirror_connection_xml("dr", replica.mirror_port, auto_start=False)])
    with running(replica, source):
        replica.start()
        source.start()
        produce(source.url, "orders", range(500))
        assert drain_ids(source.url, "orders", 100) == list(range(100))
        row = wait_for(lambda: (r := source.mirror_row("dr"))["ackEvents"] == 100 and r, "100 acknowledgements")
        assert (row["state"], row["messageEvents"], row["eventsSent"]) == ("stopped", 500, 0), row
        source.kill()
        source.start()
        row = source.mirror_row("dr")
        assert row["state"] == "stopped" and row["queuedEvents"] == 600, row
        source.call("startBrokerConnection", type=BROKER_CONNECTION, name="dr")
        wait_for(lambda: source.mirror_row("dr")["queuedEvents"] == 0, "the stored events to be sent")
        assert _same_content(source, replica) == list(range(100, 500))


def test_replica_killed_and_restarted_mirroring_resumes_without_gap_or_duplicate(tmp_path):
    source, replica = _pair(tmp_path)
    with running(replica, source):
        replica.start()
        source.start()
        stream = _stream(source, range(STREAM))
        wait_for(lambda: replica.queue_counts().get("orders", 0) >= KILL_AFTER, "the replica to get some")
        replica.kill()
        stream.wait(30)
        assert stream.outcomes == {"accepted": STREAM}, stream.describe()
        stream.close()
        # While the replica is down: more messages, and acknowledgements; the source keeps the events.
        produce(source.url, "orders", range(STREAM, STREAM + 500))
        assert drain_ids(source.url, "orders", 100) == list(range(100))
        row = source.mirror_row("dr")
        assert row["state"] != "connected" and row["queuedEvents"] >= 600, row
        replica.start()
        wait_mirror_idle(source, "dr", message_events=STREAM + 500, ack_events=100)
        assert _same_content(source, replica) == list(range(100, STREAM + 500))
        [target] = replica.target_rows()
        print(f"after the replica's restart: {target}")


def test_dual_mirror_counts_every_message_once_on_each_side(tmp_path):
    a = Site("dual-a", tmp_path)
    b = Site("dual-b", tmp_path)
    ports = {**a.blueprint_ports("dual-a"), **b.blueprint_ports("dual-b")}
    a.use_blueprint("dual-a", ports)
    b.use_blueprint("dual-b", ports)
    with running(a, b):
        a.start()
        b.start()
        for site, name in ((a, "to-b"), (b, "to-a")):
            wait_for(lambda s=site, n=name: (r := s.mirror_row(n))["state"] == "connected" and r["remoteBrokerId"],
                     f"{site.name}'s mirror to know the other side")
        produce(a.url, "orders", range(100))
        # B is the standby: open its client acceptor to produce there too (another queue: one site's
        # consumers per queue, as the caveats say).
        b.call("startAcceptor", type="acceptor", name="amqp")
        wait_for(lambda: not acceptor_refuses(b.client_port), "B's client acceptor to listen")
        produce(b.url, "audit", range(1000, 1100))
        wait_mirror_idle(a, "to-b", message_events=100)
        wait_mirror_idle(b, "to-a", message_events=100)
        for site in (a, b):
            counts = site.queue_counts()
            assert (counts["orders"], counts["audit"]) == (100, 100), (site.name, counts)
        # acknowledgements on either side reach the other
        assert drain_ids(a.url, "orders", 40) == list(range(40))
        assert drain_ids(b.url, "audit", 10) == list(range(1000, 1010))
        wait_mirror_idle(a, "to-b", message_events=100, ack_events=40)
        wait_mirror_idle(b, "to-a", message_events=100, ack_events=10)
        for site in (a, b):
            counts = site.queue_counts()
            assert (counts["orders"], counts["audit"]) == (60, 90), (site.name, counts)
            assert browse_ids(site.url, "orders", 60) == list(range(40, 100))
            assert browse_ids(site.url, "audit", 90) == list(range(1010, 1100))
        # each side captured only what happened on it (nothing that came from the other side is sent
        # back), and applied what came from the other side once
        rows = {"to-b": a.mirror_row("to-b"), "to-a": b.mirror_row("to-a")}
        assert (rows["to-b"]["messageEvents"], rows["to-b"]["ackEvents"]) == (100, 40), rows
        assert (rows["to-a"]["messageEvents"], rows["to-a"]["ackEvents"]) == (100, 10), rows
        [from_a] = b.target_rows()
        [from_b] = a.target_rows()
        assert (from_a["messagesApplied"], from_a["acksApplied"], from_a["duplicatesSkipped"]) == (100, 40, 0), from_a
        assert (from_b["messagesApplied"], from_b["acksApplied"], from_b["duplicatesSkipped"]) == (100, 10, 0), from_b


def test_failover_runbook_on_the_blueprint_pair(tmp_path):
    """README.md, "Disaster-recovery runbook", step by step on conf/mirror/source.xml and replica.xml."""
    replica = Site("replica", tmp_path)
    source = Site("source", tmp_path, mirror_acceptor=False)
    ports = {**replica.blueprint_ports("replica"), **source.blueprint_ports("source")}
    replica.use_blueprint("replica", ports)
    source.use_blueprint("source", ports)
    with running(replica, source):
        # Before: a passive replica, its client acceptor not started.
        replica.start()
        source.start()
        assert acceptor_refuses(replica.client_port)
        row = replica.acceptor_row("amqp")
        assert (row["started"], row["autoStart"]) == (False, False), row
        # Normal life on the source: messages produced, some consumed.
        produce(source.url, "orders", range(200))
        assert drain_ids(source.url, "orders", 50) == list(range(50))
        wait_mirror_idle(source, "dr", message_events=200, ack_events=50)
        # Disaster: the source site is gone.
        source.kill()
        [target] = replica.target_rows()
        assert target["messagesApplied"] == 200 and target["acksApplied"] == 50, target
        # The runbook: enable the replica's client acceptor through management...
        out = run_tool("tools.tdmanage", "startAcceptor", "--type", "acceptor", "--name", "amqp",
                       "-b", f"127.0.0.1:{replica.mgmt_port}", "--json")
        assert json.loads(out.stdout)["name"] == "amqp"
        wait_for(lambda: replica.acceptor_row("amqp")["started"], "the replica's client acceptor to start")
        assert not acceptor_refuses(replica.client_port)
        # ...and point the clients at it: a consumer drains what the source had not delivered, in order.
        assert drain_ids(replica.url, "orders", 150) == list(range(50, 200))
        wait_count(replica, "orders", 0)
