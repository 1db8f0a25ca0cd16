"""Network bridge semantics between real tdbrokers, after ActiveMQ Classic's "Networks of Brokers" page:
one-way connectors, networkTTL, conduit subscriptions (the 30-message example), network consumer priority,
selectors across a bridge, replayWhenNoConsumers for stuck messages, and the failover-server-list clients
see.

Three brokers A, B, C share the module: A dials B with one connector per behaviour under test, each
limited by ``dynamicallyIncludedDestinations`` to queues of its own (several connectors between one pair,
each with a unique name, as the ActiveMQ page describes), and B dials C for the TTL chain. Each test uses
its own queues, so the tests do not see each other's demand.
"""

from __future__ import annotations

import pytest
from proton import Message
from proton.reactor import Selector

from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.clients import Consumer, close_all
from tests.system.netharness import (
    Network,
    connector_xml,
    exactly_once,
    failover_servers,
    replay_policy_xml,
    server_ports,
    wait_consumers,
    wait_messages,
)
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

#: connector name -> (queue pattern it bridges, its attributes); all dialled by A towards B.
A_TO_B = {
    "oneway": ("oneway.>", {}),
    "conduit": ("conduit.>", {"decreaseNetworkConsumerPriority": False}),
    "noconduit": ("noconduit.>", {"decreaseNetworkConsumerPriority": False, "conduitSubscriptions": False}),
    "priority": ("priority.>", {}),
    "sel-conduit": ("selconduit.>", {}),
    "sel-noconduit": ("selnoconduit.>", {"conduitSubscriptions": False}),
    "stuck": ("stuck.>", {"duplex": True}),
    "replay": ("replay.>", {"duplex": True}),
    "ttl1": ("ttl1.>", {}),
    "ttl2": ("ttl2.>", {"networkTTL": 2}),
}
#: B towards C, for the chain A - B - C.
B_TO_C = {
    "ttl1": ("ttl1.>", {}),
    "ttl2": ("ttl2.>", {"networkTTL": 2}),
}


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    network = Network(tmp_path_factory.mktemp("bridges"), ["A", "B", "C"])
    network.configure("A", connectors=[connector_xml(name, network.port("B"), queues=[pattern], **attrs)
                                       for name, (pattern, attrs) in A_TO_B.items()])
    network.configure("B", connectors=[connector_xml(name, network.port("C"), queues=[pattern], **attrs)
                                       for name, (pattern, attrs) in B_TO_C.items()],
                      policy=replay_policy_xml(("replay.>", {"replayWhenNoConsumers": True})))
    network.configure("C")
    network.start()
    yield network
    close_all()
    problems = network.stop()
    assert not problems, "\n".join(problems)


def _send(broker, address: str, ids, **kw) -> None:
    send_messages(broker.url, address, [Message(id=i, body=f"m{i}", durable=True, **kw) for i in ids])


def _consumer(broker, address: str, **kw) -> Consumer:
    kw.setdefault("credit", 100)
    return Consumer(broker.url, address, **kw).start(timeout=TIMEOUT)


def test_one_way_connector_does_not_forward_backwards(net):
    """A dials B without duplex: B's consumer pulls from A, but A's consumer is never a demand on B, so what
    is sent on B stays on B."""
    on_b = _consumer(net["B"], "oneway.forward")
    on_a = _consumer(net["A"], "oneway.back")
    try:
        wait_consumers(net["A"], "oneway.forward", 1)   # B's consumer, as A's network consumer
        _send(net["B"], "oneway.back", range(10))
        _send(net["A"], "oneway.forward", range(10))
        on_b.wait(TIMEOUT, count=10)
        exactly_once(range(10), on_b)
        # the back messages were on B before the forward ones left A: had B a bridge to A, they would be gone
        assert net["B"].stats("oneway.back") == (0, 10), net["B"].describe("oneway.back")
        assert on_a.received() == 0
    finally:
        on_b.close()
        on_a.close()


@pytest.mark.parametrize("ttl, reaches_c", [(1, False), (2, True)], ids=["networkTTL=1", "networkTTL=2"])
def test_network_ttl_on_a_chain(net, ttl, reaches_c):
    """A - B - C, consumer on C, producer on A: with networkTTL 1 C's demand stops at B (A never forwards);
    with 2 it reaches A and the messages cross both bridges."""
    queue = f"ttl{ttl}.q"
    on_c = _consumer(net["C"], queue)
    control = _consumer(net["C"], f"ttl{ttl}.control")
    try:
        wait_consumers(net["B"], queue, 1)            # C's demand reached B either way
        wait_consumers(net["B"], f"ttl{ttl}.control", 1)
        if reaches_c:
            wait_consumers(net["A"], queue, 1)
        _send(net["A"], queue, range(10))
        if reaches_c:
            on_c.wait(TIMEOUT, count=10)
            exactly_once(range(10), on_c)
            wait_messages(net["A"], queue, 0)         # each acknowledged once C's side stored it
        else:
            # a message sent on B afterwards reaches C: B's bridge works and A had all the time to forward
            _send(net["B"], f"ttl{ttl}.control", ["c"])
            control.wait(TIMEOUT, count=1)
            assert net["A"].stats(queue) == (0, 10), net["A"].describe(queue)
            assert on_c.received() == 0
    finally:
        on_c.close()
        control.close()


@pytest.mark.parametrize("conduit, split", [(True, (15, 15)), (False, (10, 20))],
                         ids=["conduitSubscriptions=true", "conduitSubscriptions=false"])
def test_conduit_subscriptions_thirty_messages(net, conduit, split):
    """The ActiveMQ page's example: one consumer on A, two on B, 30 messages sent on A, network consumers
    at the local priority (decreaseNetworkConsumerPriority=false). Conduit: B's two consumers are one
    network consumer on A, 15 / 15; without: three equal consumers, 10 / 10 / 10."""
    queue = "conduit.q" if conduit else "noconduit.q"
    on_a = _consumer(net["A"], queue)
    on_b = [_consumer(net["B"], queue) for _ in range(2)]
    try:
        wait_consumers(net["A"], queue, 2 if conduit else 3)
        _send(net["A"], queue, range(30))
        wait_for(lambda: on_a.received() + sum(c.received() for c in on_b) >= 30, "30 messages", TIMEOUT)
        exactly_once(range(30), on_a, *on_b)
        got = (on_a.received(), sum(c.received() for c in on_b))
        assert got == split, f"A {got[0]} / B {[c.received() for c in on_b]}"
        if not conduit:
            assert [c.received() for c in on_b] == [10, 10]
    finally:
        for c in [on_a, *on_b]:
            c.close()


def test_decreased_network_consumer_priority_keeps_messages_local(net):
    """decreaseNetworkConsumerPriority (default true): A's network consumer for B has priority -5, so a
    local consumer on A with credit gets every message."""
    on_a = _consumer(net["A"], "priority.q")
    on_b = _consumer(net["B"], "priority.q")
    try:
        wait_consumers(net["A"], "priority.q", 2)
        _send(net["A"], "priority.q", range(30))
        on_a.wait(TIMEOUT, count=30)
        exactly_once(range(30), on_a)
        assert on_b.received() == 0
    finally:
        on_a.close()
        on_b.close()


@pytest.mark.parametrize("conduit", [True, False], ids=["conduit", "no-conduit"])
def test_selectors_across_the_bridge(net, conduit):
    """A consumer on B with a selector. Without conduit the network consumer on A carries the selector and
    only matching messages cross; with conduit everything crosses and B applies the selector, so the other
    messages wait on B."""
    queue = "selconduit.q" if conduit else "selnoconduit.q"
    reds = _consumer(net["B"], queue, options=[Selector("color = 'red'")])
    try:
        wait_consumers(net["A"], queue, 1)
        colors = ["red", "blue"] * 5
        send_messages(net["A"].url, queue, [Message(id=i, body=i, durable=True, properties={"color": c})
                                            for i, c in enumerate(colors)])
        reds.wait(TIMEOUT, count=5)
        exactly_once([i for i, c in enumerate(colors) if c == "red"], reds)
        if conduit:
            wait_messages(net["B"], queue, 5)         # the blue ones crossed too, and wait on B
            wait_messages(net["A"], queue, 0)
        else:
            wait_messages(net["A"], queue, 5)         # the blue ones never left A
            wait_messages(net["B"], queue, 0)
    finally:
        reds.close()


def test_stuck_messages_replay_when_no_consumers(net):
    """Duplex A - B. Messages forwarded to a consumer on B that leaves before taking them stay on B ("stuck")
    when the consumer reappears on A -- unless B's destination policy says replayWhenNoConsumers, which
    sends them back to A's consumer."""
    queues = ["stuck.q", "replay.q"]
    on_b = [_consumer(net["B"], q, credit=0) for q in queues]   # demand, but takes nothing
    for q in queues:
        wait_consumers(net["A"], q, 1)
        _send(net["A"], q, range(10))
    for q in queues:
        wait_messages(net["B"], q, 10)
        wait_messages(net["A"], q, 0)
    for c in on_b:
        c.close()
    for q in queues:
        wait_consumers(net["A"], q, 0)
    stuck, replayed = (_consumer(net["A"], q) for q in queues)
    try:
        for q in queues:
            wait_consumers(net["B"], q, 1)            # A's consumer is a demand on B (the duplex half)
        replayed.wait(TIMEOUT, count=10)
        exactly_once(range(10), replayed)
        wait_messages(net["B"], "replay.q", 0)
        assert stuck.received() == 0
        assert net["B"].stats("stuck.q").messages == 10, net["B"].describe("stuck.q")
    finally:
        stuck.close()
        replayed.close()


def test_failover_server_list_names_the_bridged_brokers(net):
    """Once bridged, each broker lists the other brokers of the network in the OPEN a client gets
    (failover-server-list: maps with hostname, network-host, port, scheme)."""
    wanted = {"A": {"B"}, "B": {"A", "C"}, "C": {"B"}}
    for name, peers in wanted.items():
        ports = {net.port(p) for p in peers}
        entries = wait_for(lambda: (lambda e: e if server_ports(e) >= ports else None)(failover_servers(net[name])),
                           f"{name}'s failover-server-list to name {sorted(peers)}", TIMEOUT)
        assert server_ports(entries) == ports, entries
        for entry in entries:
            entry = {str(k): v for k, v in entry.items()}
            assert entry["hostname"] == entry["network-host"] == "127.0.0.1"
            assert entry["scheme"] == "amqp"
