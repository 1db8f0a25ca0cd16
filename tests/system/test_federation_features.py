"""Address federation between real tdbroker processes, feature by feature (Artemis user manual,
``federation-address.adoc``): include/exclude matching, demand appearing and disappearing, auto-delete of
the federation queue, a transformer, ``<downstream>``, and a broker killed with ``kill -9`` in the middle
of a stream of persistent messages.

Most tests use a pair: B federates from A (B's ``<upstream name="from-A">``), so B's demand for an address
makes the federation queue ``B.federated.fed.from-A.<address>.multicast`` on A (seen through A's
management) and messages published on A reach B's subscribers.
"""

from __future__ import annotations

import collections
import time

import pytest
from proton import Message

from tests.system.brokerharness import TIMEOUT
from tests.system.clients import Consumer, Producer, close_all
from tests.system.fedharness import (
    Subscriber,
    fed_broker_xml,
    federation_queue,
    federation_queues,
    federation_xml,
    publish,
    queue_row,
    wait_federated,
    wait_no_queue,
)
from tests.system.fedtransformers import TRANSFORMED_BY
from tests.system.netharness import Network, wait_messages
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

#: After the last expected message, how long a test waits for one that must not come.
SETTLE = 0.5


@pytest.fixture
def pair(tmp_path):
    """``make(topics, persistence=False, subscriptions=None, **policy)`` -> a started Network where B
    federates from A with one address policy (``policy``: federation_xml's keywords)."""
    nets: list[Network] = []

    def make(topics, *, persistence=False, subscriptions=None, **policy) -> Network:
        net = Network(tmp_path / f"pair-{len(nets)}", ["A", "B"])
        net["A"].write(fed_broker_xml(net["A"], topics, persistence=persistence))
        net["B"].write(fed_broker_xml(net["B"], topics, federation_xml({"from-A": net.port("A")}, **policy),
                                      persistence=persistence, subscriptions=subscriptions))
        nets.append(net)
        return net.start()

    yield make
    close_all()
    problems = [p for net in nets for p in net.stop()]
    assert not problems, "\n".join(problems)


def _fq(address: str) -> str:
    return federation_queue("B", "from-A", address)


def test_include_and_exclude_address_match(pair):
    """An address is federated when an include matches and no exclude does (exclude wins); ``news.#``
    matches ``news`` itself (``#``: zero or more words)."""
    topics = ["news", "news.eu", "news.local", "news.local.x", "weather", "sport"]
    net = pair(topics, includes=["news.#", "weather"], excludes=["news.local.#"])
    subs = {t: Subscriber(net["B"], t).start() for t in topics}
    federated, local = ["news", "news.eu", "weather"], ["news.local", "news.local.x", "sport"]
    for t in federated:
        wait_federated(net["A"], _fq(t))
    for t in topics:
        publish(net["A"], t, [f"{t}-1"])
    for t in federated:
        subs[t].wait_ids([f"{t}-1"])
    time.sleep(SETTLE)
    for t in federated:
        subs[t].assert_exactly_once([f"{t}-1"])
    for t in local:
        assert federation_queues(net["A"], t) == [], net["A"].describe(t)
        assert subs[t].received() == 0, t


def test_demand_appears_and_disappears_with_the_subscriber(pair):
    """No subscriber on B: no federation queue on A, and what is published on A goes nowhere. A subscriber
    on B: the queue appears with B's consumer and copies flow. The subscriber leaves: B's consumer leaves
    the queue (it stays until auto-delete, so what A gets meanwhile waits there) and a new subscriber gets
    what waited, once."""
    net = pair(["news"])
    a, b = net["A"], net["B"]
    publish(a, "news", ["before"])
    time.sleep(SETTLE)
    assert federation_queues(a, "news") == [], a.describe("news")
    first = Subscriber(b, "news").start()
    wait_federated(a, _fq("news"))
    publish(a, "news", ["during"])
    first.wait_ids(["during"])
    first.close()
    wait_federated(a, _fq("news"), consumers=0)
    publish(a, "news", ["while-away-1", "while-away-2"])
    wait_for(lambda: (queue_row(a, _fq("news")) or {}).get("messageCount") == 2, "2 messages waiting on A")
    assert b.stats("news").messages == 0, b.describe("news")
    second = Subscriber(b, "news").start()
    wait_federated(a, _fq("news"))
    second.wait_ids(["while-away-1", "while-away-2"])
    time.sleep(SETTLE)
    first.assert_exactly_once(["during"])
    second.assert_exactly_once(["while-away-1", "while-away-2"])
    wait_messages(a, "news", 0)


def test_auto_delete_after_the_delay_once_the_demand_left(pair):
    """auto-delete-delay 500 ms: the federation queue goes from A no sooner than that after B's subscriber
    left."""
    net = pair(["news"], policy_attrs={"auto-delete": True, "auto-delete-delay": 500,
                                        "auto-delete-message-count": -1})
    sub = Subscriber(net["B"], "news").start()
    wait_federated(net["A"], _fq("news"))
    sub.close()
    left = time.monotonic()
    wait_federated(net["A"], _fq("news"), consumers=0)
    wait_no_queue(net["A"], _fq("news"))
    assert time.monotonic() - left >= 0.45, "deleted before auto-delete-delay"


def test_auto_delete_message_count_0_keeps_a_queue_with_a_message_waiting(pair):
    """auto-delete-message-count 0: a federation queue holding a message is not deleted when the delay
    ends; it is deleted only when empty."""
    delay = 1500
    net = pair(["news"], policy_attrs={"auto-delete": True, "auto-delete-delay": delay,
                                        "auto-delete-message-count": 0})
    a = net["A"]
    sub = Subscriber(net["B"], "news").start()
    wait_federated(a, _fq("news"))
    sub.close()
    wait_federated(a, _fq("news"), consumers=0)
    left = time.monotonic()
    publish(a, "news", ["waiting"])
    wait_for(lambda: (queue_row(a, _fq("news")) or {}).get("messageCount") == 1, "the message to wait on A")
    assert time.monotonic() - left < delay / 1000, "the machine was too slow to publish within the delay"
    time.sleep(max(0.0, left + delay / 1000 + SETTLE - time.monotonic()))  # past the auto-delete check
    row = queue_row(a, _fq("news"))
    assert row is not None and row["messageCount"] == 1, a.describe("news")


def test_transformer_is_applied_to_the_federated_copies(pair):
    """B's policy names tests.system.fedtransformers:SuffixTransformer: B's subscriber gets the transformed
    copy; A's own subscriber the message as published."""
    net = pair(["news"], transformer="tests.system.fedtransformers:SuffixTransformer")
    on_a, on_b = Subscriber(net["A"], "news").start(), Subscriber(net["B"], "news").start()
    wait_federated(net["A"], _fq("news"))
    publish(net["A"], "news", ["t-1", "t-2"])
    on_a.wait_ids(["t-1", "t-2"])
    on_b.wait_ids(["t-1", "t-2"])
    time.sleep(SETTLE)
    on_b.assert_exactly_once(["t-1", "t-2"])
    assert sorted(m.body for m in on_b.messages) == ["m-t-1-transformed", "m-t-2-transformed"]
    assert all((m.properties or {}).get(TRANSFORMED_BY) == "SuffixTransformer" for m in on_b.messages)
    assert sorted(m.body for m in on_a.messages) == ["m-t-1", "m-t-2"]
    assert all(TRANSFORMED_BY not in (m.properties or {}) for m in on_a.messages)


@pytest.fixture
def hub_and_spoke(tmp_path):
    """``make(transformer=None)`` -> (hub, spoke) started: the hub has a ``<downstream>`` to the spoke
    (``upstream-connector-ref``: the hub's own connector) for ``news``. The spoke has a federation of its
    own, on another address: see test_federation_topologies' downstream sample for a spoke with none."""
    nets: list[Network] = []

    def make(transformer=None):
        net = Network(tmp_path / f"hub-{len(nets)}", ["hub", "spoke"])
        hub, spoke = net["hub"], net["spoke"]
        hub.write(fed_broker_xml(hub, ["news"], federation_xml(
            downstreams={"to-spoke": spoke.port}, own_port=hub.port, federation="hubfed", transformer=transformer)))
        spoke.write(fed_broker_xml(spoke, ["news", "other"], federation_xml(
            {"unrelated": hub.port}, includes=["other"], federation="own")))
        nets.append(net)
        net.start()
        return hub, spoke

    yield make
    close_all()
    problems = [p for net in nets for p in net.stop()]
    assert not problems, "\n".join(problems)


def test_downstream_makes_the_remote_broker_federate_back(hub_and_spoke):
    """The hub's <downstream> makes the spoke create an upstream to the hub: the spoke's subscriber gets
    what is published on the hub; the hub does not federate from the spoke."""
    hub, spoke = hub_and_spoke()
    on_hub, on_spoke = Subscriber(hub, "news").start(), Subscriber(spoke, "news").start()
    wait_federated(hub, federation_queue("spoke", "to-spoke", "news", "hubfed"))
    publish(hub, "news", ["h-1", "h-2"])
    publish(spoke, "news", ["s-1"])
    on_spoke.wait_ids(["h-1", "h-2", "s-1"])
    on_hub.wait_ids(["h-1", "h-2"])
    time.sleep(SETTLE)
    on_spoke.assert_exactly_once(["h-1", "h-2", "s-1"])
    on_hub.assert_exactly_once(["h-1", "h-2"])
    assert federation_queues(spoke, "news") == [], spoke.describe("news")


def test_downstream_policy_transformer_is_applied_by_the_remote_broker(hub_and_spoke):
    """Artemis sends a downstream's policies with their transformers to the remote broker, which applies
    them to what it federates: the spoke's subscriber gets the transformed copy."""
    hub, spoke = hub_and_spoke(transformer="tests.system.fedtransformers:SuffixTransformer")
    on_spoke = Subscriber(spoke, "news").start()
    wait_federated(hub, federation_queue("spoke", "to-spoke", "news", "hubfed"))
    publish(hub, "news", ["h-1"])
    on_spoke.wait_ids(["h-1"])
    assert [m.body for m in on_spoke.messages] == ["m-h-1-transformed"]


# -- kill -9 ------------------------------------------------------------------------------------------------------

#: Messages in the kill -9 tests: enough that the federation is still copying when the broker is killed.
BULK = 1500
#: The upstream test copies what already waits on A, which goes faster than the producer of the other test:
#: more and bigger messages, so that the copying takes long enough to be interrupted.
UPSTREAM_BULK = 4000
PADDING = "x" * 4096


def _produce(broker, address: str, ids) -> Producer:
    return Producer(broker.url, address, count=len(ids),
                    message_fn=lambda k: Message(id=ids[k], body=f"m-{ids[k]}", durable=True)).start(timeout=TIMEOUT)


def _subscription_count(broker) -> int:
    row = queue_row(broker, "news-sub")
    return row["messageCount"] if row else 0


def _drain_exactly_once(b, ids) -> None:
    """Every id of ``ids`` once from B's durable subscription, and nothing more after a pause."""
    wait_messages(b, "news", len(ids))
    sub = Consumer(b.url, "news::news-sub", credit=500).start(timeout=TIMEOUT)
    try:
        sub.wait_for(lambda: len(sub.messages) >= len(ids), TIMEOUT, f"{len(ids)} messages")
        time.sleep(SETTLE)
        got = collections.Counter(m.id for m in sub.messages)
    finally:
        sub.close()
    duplicates = {i: n for i, n in got.items() if n > 1}
    missing = set(ids) - set(got)
    assert not duplicates and not missing and len(got) == len(ids), (
        f"duplicates {list(duplicates.items())[:10]} ({len(duplicates)}), missing {sorted(missing)[:10]} "
        f"({len(missing)})")


def _pair_with_durable_subscription(pair):
    """B keeps a durable subscription queue ``news-sub`` on ``news`` (configured: demand for ``news`` from
    start-up on, across restarts); both brokers persist."""
    net = pair(["news"], persistence=True, subscriptions={"news-sub": "news"})
    wait_federated(net["A"], _fq("news"))
    return net


def test_kill_9_of_the_downstream_mid_stream_loses_and_duplicates_nothing(pair):
    """Persistent messages are published on A while B copies them into its durable subscription; B is
    killed with kill -9 in the middle and restarted: the subscription ends with every message once (A
    resends what B had not confirmed; B drops the copies it had already stored)."""
    net = _pair_with_durable_subscription(pair)
    a, b = net["A"], net["B"]
    ids = [f"p-{i}" for i in range(BULK)]
    # The stream's second half is published only once B is down: however fast B copies (a loaded machine
    # can let it catch up with the producer before a management read), the kill falls mid-stream.
    first, second = ids[:BULK // 2], ids[BULK // 2:]
    seen = []
    producer = _produce(a, "news", first)
    try:
        wait_for(lambda: seen.append(_subscription_count(b)) or seen[-1] >= 100, "copying to start")
        b.kill()
        later = _produce(a, "news", second)
        try:
            b.start()
            producer.wait(TIMEOUT * 2)
            later.wait(TIMEOUT * 2)
            assert producer.outcomes == {"accepted": len(first)}, producer.outcomes
            assert later.outcomes == {"accepted": len(second)}, later.outcomes
        finally:
            later.close()
    finally:
        producer.close()
    at_kill = seen[-1]
    print(f"\nkill -9 of the downstream after it had copied about {at_kill} of {BULK}")
    wait_federated(a, _fq("news"))
    wait_for(lambda: queue_row(a, _fq("news"))["messageCount"] == 0, "A's federation queue to drain")
    _drain_exactly_once(b, ids)


def test_kill_9_of_the_upstream_mid_stream_loses_and_duplicates_nothing(pair):
    """Persistent messages wait on A's federation queue while B is stopped; B comes back and copies them;
    A is killed with kill -9 in the middle and restarted: B's subscription ends with every message once
    (the federation queue and its messages come back from A's journal; B drops what it already had)."""
    net = _pair_with_durable_subscription(pair)
    a, b = net["A"], net["B"]
    assert b.stop() == 0
    wait_federated(a, _fq("news"), consumers=0)
    ids = [f"q-{i}" for i in range(UPSTREAM_BULK)]
    publish(a, "news", ids, durable=True, body=PADDING)
    wait_for(lambda: queue_row(a, _fq("news"))["messageCount"] == UPSTREAM_BULK, "the messages to wait on A")
    b.start()
    wait_for(lambda: _subscription_count(b) >= 1, "copying to start")
    at_kill = _subscription_count(b)
    a.kill()
    a.start()
    print(f"\nkill -9 of the upstream after {at_kill} of {UPSTREAM_BULK} had been copied")
    assert at_kill < UPSTREAM_BULK, "everything was copied before the kill: the test proved nothing"
    wait_federated(a, _fq("news"))
    wait_for(lambda: queue_row(a, _fq("news"))["messageCount"] == 0, "A's federation queue to drain")
    _drain_exactly_once(b, ids)
