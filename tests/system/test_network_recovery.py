"""Network bridges across broker crashes: a bridge finds its peer again after the peer was killed with
``kill -9`` and restarted on the same port (static: discovery with ActiveMQ's reconnect schedule), and
persistent messages forwarded store-and-forward come out exactly once when the forwarding broker is
killed in the middle (the source acknowledges only what the target stored; the target drops what it is
sent twice by the network id).

A dials B (one-way, reconnecting after 100 ms, at most 1 s apart).
"""

from __future__ import annotations

import pytest
from proton import Message

from tests.system.brokerharness import TIMEOUT
from tests.system.clients import Consumer, Producer, close_all
from tests.system.netharness import Network, connector_xml, exactly_once, wait_consumers, wait_messages
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

#: Messages in the kill -9 test: enough for the forwarding to take a while on a busy machine.
BULK = 2000


@pytest.fixture
def pair(tmp_path):
    network = Network(tmp_path, ["A", "B"])
    network.configure("A", connectors=[connector_xml("a-to-b", network.port("B"))])
    network.configure("B")
    network.start()
    yield network
    close_all()
    problems = network.stop()
    assert not problems, "\n".join(problems)


def _send(broker, address: str, ids) -> None:
    p = Producer(broker.url, address, count=len(ids),
                 message_fn=lambda k: Message(id=ids[k], body=f"m{ids[k]}", durable=True)).start(timeout=TIMEOUT)
    try:
        p.wait(TIMEOUT * 2)
        assert p.outcomes == {"accepted": len(ids)}, p.outcomes
    finally:
        p.close()


def test_bridge_reconnects_to_a_peer_killed_and_restarted(pair):
    """A's bridge to B works, B is killed with kill -9 and restarted on its port: A's bridge reconnects,
    learns the demand of a consumer on the new B and forwards to it. (The second phase uses a queue of its
    own: what B's first consumer had accepted may come again from B's journal after a kill -9 -- B's own
    at-least-once, not the bridge's business.)"""
    on_b = Consumer(pair["B"].url, "before", credit=100).start(timeout=TIMEOUT)
    wait_consumers(pair["A"], "before", 1)
    _send(pair["A"], "before", list(range(10)))
    on_b.wait(TIMEOUT, count=10)
    exactly_once(range(10), on_b)
    on_b.close()

    pair["B"].kill()
    wait_consumers(pair["A"], "before", 0)      # the bridge's network consumer went with the connection
    pair["B"].start()                           # same port, same journal
    again = Consumer(pair["B"].url, "after", credit=100).start(timeout=TIMEOUT)
    try:
        wait_consumers(pair["A"], "after", 1)   # the bridge is back and has B's new consumer's demand
        _send(pair["A"], "after", list(range(10, 20)))
        again.wait(TIMEOUT, count=10)
        exactly_once(range(10, 20), again)
        wait_messages(pair["A"], "after", 0)
    finally:
        again.close()


def test_kill_9_of_the_forwarding_broker_loses_and_duplicates_nothing(pair):
    """2000 durable messages wait on A; a consumer appears on B; A is killed with kill -9 while it forwards
    and restarted: B's consumer ends with every message exactly once."""
    ids = list(range(BULK))
    _send(pair["A"], "bulk", ids)
    wait_messages(pair["A"], "bulk", BULK)
    on_b = Consumer(pair["B"].url, "bulk", credit=200).start(timeout=TIMEOUT)
    try:
        wait_for(lambda: on_b.received() >= 50, "forwarding to start", TIMEOUT)
        pair["A"].kill()
        at_kill = on_b.received()
        pair["A"].start()
        on_b.wait(TIMEOUT * 2, count=BULK)
        wait_messages(pair["A"], "bulk", 0)
        wait_messages(pair["B"], "bulk", 0)
        print(f"\nkill -9 of the forwarder after {at_kill} of {BULK} messages had reached B's consumer; "
              f"received in all {on_b.received()}")
        assert at_kill < BULK, "A had forwarded everything before it was killed: the test proved nothing"
        exactly_once(ids, on_b)
    finally:
        on_b.close()
