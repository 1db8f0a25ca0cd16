"""Network bridges between two in-memory brokers (no sockets): demand from consumer advisories, loop
prevention and TTLs, conduit vs per-consumer demands, network consumer priority, duplicate detection,
replay and rate-limit policies, duplex; and the reconnect schedule of a connector on a mock clock."""

from __future__ import annotations

import proton
import pytest
import trio
from proton import Message

from broker.config import parse_broker_config
from broker.netbridge import NET_ID_ANNOTATION, PATH_ANNOTATION
from broker.netconfig import NetworkConnector, NetworkTarget, ReconnectSettings
from broker.server import Broker
from tests.unit.enginepair import Peer, Pipe, RouterHarness, pump

XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name><persistence-enabled>false</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  {extra}
</core></configuration>"""

REPLAY_POLICY = """<destinationPolicy><policyMap><policyEntries>
  <policyEntry queue=">"><networkBridgeFilterFactory>
    <conditionalNetworkBridgeFilterFactory replayWhenNoConsumers="true" replayDelay="500"/>
  </networkBridgeFilterFactory></policyEntry></policyEntries></policyMap></destinationPolicy>"""

RATE_POLICY = """<destinationPolicy><policyMap><policyEntries>
  <policyEntry queue="slow"><networkBridgeFilterFactory>
    <conditionalNetworkBridgeFilterFactory rateLimit="2" rateDuration="1000"/>
  </networkBridgeFilterFactory></policyEntry></policyEntries></policyMap></destinationPolicy>"""


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self):
        return self.now


class StubControl:
    def __init__(self):
        self.bridge = None
        self.errors = []

    def opened(self, engine):
        pass

    def note_error(self, text):
        self.errors.append(text)


class Net:
    """Brokers A and B in memory, clients on each, and A's network connector to B."""

    def __init__(self, tmp_path, connector: NetworkConnector | None = None, *, extra_a="", extra_b=""):
        self.clock = Clock()
        self.a = Broker(parse_broker_config(XML.format(name="A", journal=tmp_path / "a", extra=extra_a)),
                        clock=self.clock)
        self.b = Broker(parse_broker_config(XML.format(name="B", journal=tmp_path / "b", extra=extra_b)),
                        clock=self.clock)
        self.ha = RouterHarness(router=self.a)
        self.hb = RouterHarness(router=self.b)
        self.connector = connector or NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)])
        self.control = StubControl()
        ea = self.a.new_engine(self.a.network.client_settings(self.connector), server=False)
        ea.app.on_open = lambda e: self.a.network.outbound_opened(e, self.connector, self.control)
        eb = self.b.new_engine(self.b.connection_settings(), server=True)
        self.ea, self.eb = ea, eb
        self.pipe = Pipe(ea, eb)
        self.pump()

    def pump(self):
        for _ in range(5):
            pump(self.pipe, *self.ha.pipes, *self.hb.pipes)
            self.a.on_batch_end()
            self.b.on_batch_end()
        return pump(self.pipe, *self.ha.pipes, *self.hb.pipes)

    @property
    def bridge(self):
        [bridge] = [br for br in self.a.network.bridges if br.direction == "out"]
        return bridge


def consumer(net: Net, broker: str, address: str, credit: int = 100, **kw):
    h = net.ha if broker == "a" else net.hb
    c = h.connect()
    r = c.receiver(address, credit=credit, **kw)
    net.pump()
    return c, r


def send(net: Net, broker: str, address: str, bodies, **fields):
    h = net.ha if broker == "a" else net.hb
    p = h.connect()
    s = p.sender(address)
    net.pump()
    for body in bodies:
        p.send(s, body=body, **fields)
    net.pump()
    return p


def test_a_remote_consumer_creates_demand_and_messages_follow_it_with_path_and_net_id(tmp_path):
    net = Net(tmp_path)
    assert net.a.network.peers and net.b.network.peers  # both learnt the other's broker id
    c, r = consumer(net, "b", "orders")
    assert net.a.queues["orders"].consumer_count == 1  # the network consumer on A
    send(net, "a", "orders", ["m0", "m1"])
    got = c.received(r)
    assert [g.body for g in got] == ["m0", "m1"]
    ann = got[0].message.annotations
    assert ann[proton.symbol(PATH_ANNOTATION)] == [net.a.network.broker_id]
    assert str(ann[proton.symbol(NET_ID_ANNOTATION)]).startswith(net.a.network.broker_id)
    assert net.bridge.forwarded == 2
    r.close()
    net.pump()
    assert net.a.queues["orders"].consumer_count == 0 and not net.bridge.demands
    send(net, "a", "orders", ["m2"])
    assert net.a.queues["orders"].message_count == 1  # no demand: it stays on A


def test_one_way_bridge_does_not_forward_backwards(tmp_path):
    net = Net(tmp_path)
    consumer(net, "a", "back")
    send(net, "b", "back", ["x"])
    assert net.b.queues["back"].message_count == 1
    assert net.a.queues["back"].message_count == 0


def test_duplex_builds_the_reverse_bridge_from_the_connectors_configuration(tmp_path):
    connector = NetworkConnector(name="a-b", duplex=True, targets=[NetworkTarget("tcp", "b", 1)],
                                 conduit_subscriptions=False)
    net = Net(tmp_path, connector)
    [reverse] = net.b.network.bridges
    assert reverse.direction == "duplex" and reverse.connector.conduit_subscriptions is False
    c, r = consumer(net, "a", "back")
    send(net, "b", "back", ["x", "y"])
    assert c.bodies(r) == ["x", "y"]


def test_messages_do_not_go_back_where_they_came_from_and_message_ttl_limits_hops(tmp_path):
    net = Net(tmp_path)
    c, r = consumer(net, "b", "q", credit=0)
    b_id = net.b.network.broker_id
    # a message that has been on B is never sent back to B; one that crossed one broker already goes no
    # further with messageTTL 1
    send(net, "a", "q", ["from-b"], annotations={proton.symbol(PATH_ANNOTATION): [b_id]})
    send(net, "a", "q", ["from-x"], annotations={proton.symbol(PATH_ANNOTATION): ["X"]})
    send(net, "a", "q", ["local"])
    r.flow(10)
    net.pump()
    assert c.bodies(r) == ["local"]
    assert net.a.queues["q"].message_count == 2


def test_message_ttl_two_lets_a_message_make_a_second_hop(tmp_path):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], message_ttl=2)
    net = Net(tmp_path, connector)
    c, r = consumer(net, "b", "q")
    send(net, "a", "q", ["from-x"], annotations={proton.symbol(PATH_ANNOTATION): ["X"]})
    assert c.bodies(r) == ["from-x"]
    assert c.received(r)[0].message.annotations[proton.symbol(PATH_ANNOTATION)] == ["X", net.a.network.broker_id]


def advise(net: Net, cid: str, kind="queue", dest="q", path=(), selector=""):
    net.bridge.on_advisory({"op": "add", "id": cid, "kind": kind, "destination": dest, "path": list(path),
                            "selector": selector, "priority": 0})
    net.pump()


def test_consumer_ttl_and_loops_decide_which_advised_consumers_make_demand(tmp_path):
    net = Net(tmp_path)
    advise(net, "far", path=["C"])                       # one hop beyond B: consumerTTL 1 says no
    advise(net, "loop", dest="r", path=[net.a.network.broker_id])  # came through us
    assert not net.bridge.demands
    advise(net, "near")
    assert list(net.bridge.demands) == [("queue", "q")]
    assert net.bridge.demands[("queue", "q")].priority == -5  # consumerPriorityBase


def test_excluded_destinations_make_no_demand(tmp_path):
    from broker.netconfig import DestinationFilter

    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)],
                                 excluded=[DestinationFilter("queue", "private.>")])
    net = Net(tmp_path, connector)
    advise(net, "1", dest="private.x")
    advise(net, "2", dest="public.x")
    assert list(net.bridge.demands) == [("queue", "public.x")]


def test_conduit_collapses_remote_consumers_and_without_it_each_has_a_demand(tmp_path):
    net = Net(tmp_path)
    consumer(net, "b", "q")
    consumer(net, "b", "q")
    assert len(net.bridge.demands) == 1 and net.a.queues["q"].consumer_count == 1
    tmp2 = tmp_path / "noconduit"
    tmp2.mkdir()
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], conduit_subscriptions=False)
    net2 = Net(tmp2, connector)
    consumer(net2, "b", "q")
    consumer(net2, "b", "q")
    assert len(net2.bridge.demands) == 2 and net2.a.queues["q"].consumer_count == 2


def test_conduit_off_splits_thirty_messages_ten_ten_ten_and_on_fifteen_fifteen(tmp_path):
    for conduit, expected in ((True, [15, 15]), (False, [10, 20])):
        d = tmp_path / str(conduit)
        d.mkdir()
        connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)],
                                     conduit_subscriptions=conduit, decrease_network_consumer_priority=False)
        net = Net(d, connector)
        ca, ra = consumer(net, "a", "q")
        cb1, rb1 = consumer(net, "b", "q")
        cb2, rb2 = consumer(net, "b", "q")
        send(net, "a", "q", [f"m{i}" for i in range(30)])
        on_a, on_b = len(ca.bodies(ra)), len(cb1.bodies(rb1)) + len(cb2.bodies(rb2))
        assert [on_a, on_b] == expected, (conduit, on_a, len(cb1.bodies(rb1)), len(cb2.bodies(rb2)))


def test_network_consumers_yield_to_local_ones(tmp_path):
    net = Net(tmp_path)  # decreaseNetworkConsumerPriority defaults on
    ca, ra = consumer(net, "a", "q")
    cb, rb = consumer(net, "b", "q")
    send(net, "a", "q", [f"m{i}" for i in range(10)])
    assert len(ca.bodies(ra)) == 10 and cb.bodies(rb) == []


def test_without_conduit_a_remote_selector_is_applied_before_forwarding(tmp_path):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], conduit_subscriptions=False)
    net = Net(tmp_path, connector)
    net.b.addressing.lookup_queue("q")
    advise(net, "sel", selector="color = 'red'")
    assert net.bridge.demands
    send(net, "a", "q", ["red1", "red2"], properties={"color": "red"})
    send(net, "a", "q", ["blue"], properties={"color": "blue"})
    assert net.bridge.forwarded == 2
    assert net.a.queues["q"].message_count == 1  # the blue one stays


def test_a_duplicate_from_a_network_peer_is_accepted_and_dropped(tmp_path):
    net = Net(tmp_path)
    peer = net.hb.connect()  # a client that says it is a network broker
    # (its own open carried no broker id, so it is an ordinary client: no duplicate detection)
    s = peer.sender("q")
    net.pump()
    ann = {proton.symbol(NET_ID_ANNOTATION): "Z:1"}
    for _ in range(2):
        peer.send(s, body="x", annotations=ann)
    net.pump()
    assert net.b.queues["q"].message_count == 2
    # the same over the network connection from A: the second copy is dropped
    c, r = consumer(net, "b", "dup", credit=0)
    a_side = net.a.queues["dup"]
    msg = Message(body="y", annotations=ann).encode()
    from broker.queue import QueuedMessage

    for _ in range(2):
        a_side.enqueue(QueuedMessage(msg, enqueued_at=net.clock.now))
        net.a.queue_changed(a_side)
    r.flow(10)
    net.pump()
    assert c.bodies(r) == ["y"] and net.b.network.duplicates_dropped == 1


def test_replay_when_no_consumers_sends_a_stuck_message_back_after_the_delay(tmp_path):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)])
    net = Net(tmp_path, connector, extra_a=REPLAY_POLICY)
    c, r = consumer(net, "b", "q")
    b_id = net.b.network.broker_id
    send(net, "a", "q", ["came-from-b"], annotations={proton.symbol(PATH_ANNOTATION): [b_id]})
    assert c.bodies(r) == [] and net.a.queues["q"].message_count == 1
    net.clock.now += 499
    net.a.tick(net.clock.now)
    net.pump()
    assert c.bodies(r) == []
    assert net.a.next_deadline() == net.clock.now + 1
    net.clock.now += 1
    net.a.tick(net.clock.now)
    net.pump()
    assert c.bodies(r) == ["came-from-b"]


def test_no_replay_while_a_local_consumer_is_there(tmp_path):
    net = Net(tmp_path, extra_a=REPLAY_POLICY)
    consumer(net, "b", "q")
    ca, ra = consumer(net, "a", "q", credit=0)
    send(net, "a", "q", ["came-from-b"], annotations={proton.symbol(PATH_ANNOTATION): [net.b.network.broker_id]})
    net.clock.now += 10_000
    net.a.tick(net.clock.now)
    net.pump()
    assert net.a.queues["q"].message_count == 1


def test_rate_limit_throttles_a_demand_per_window(tmp_path):
    net = Net(tmp_path, extra_a=RATE_POLICY)
    c, r = consumer(net, "b", "slow")
    send(net, "a", "slow", [f"m{i}" for i in range(5)])
    assert c.bodies(r) == ["m0", "m1"]
    net.clock.now += 1000
    net.a.tick(net.clock.now)
    net.pump()
    assert c.bodies(r) == ["m0", "m1", "m2", "m3"]


def test_topic_demand_forwards_once_per_bridge_and_not_back(tmp_path):
    connector = NetworkConnector(name="a-b", duplex=True, targets=[NetworkTarget("tcp", "b", 1)])
    net = Net(tmp_path, connector)
    subs = []
    for h in ("b", "b", "a"):
        hh = net.ha if h == "a" else net.hb
        c = hh.connect()
        rcv = c.session.receiver(f"sub-{len(subs)}")
        rcv.source.address = "news"
        rcv.source.capabilities.put_array(False, proton.Data.SYMBOL)
        rcv.source.capabilities.enter()
        rcv.source.capabilities.put_symbol("topic")
        rcv.source.capabilities.exit()
        rcv.open()
        rcv.flow(10)
        c._track(rcv)
        subs.append((c, rcv))
        net.pump()
    p = net.ha.connect()
    s = p.session.sender("pub")
    s.target.address = "news"
    s.target.capabilities.put_array(False, proton.Data.SYMBOL)
    s.target.capabilities.enter()
    s.target.capabilities.put_symbol("topic")
    s.target.capabilities.exit()
    s.open()
    net.pump()
    for i in range(3):
        p.send(s, body=i)
    net.pump()
    assert [c.bodies(r) for c, r in subs] == [[0, 1, 2]] * 3


def test_a_connector_that_reaches_its_own_broker_closes(tmp_path):
    net = Net(tmp_path)
    assert not net.control.errors
    b_id = net.b.network.broker_id
    net.a.network.broker_id = b_id  # as if A dialled itself
    ea = net.a.new_engine(net.a.network.client_settings(net.connector), server=False)
    ea.app.on_open = lambda e: net.a.network.outbound_opened(e, net.connector, net.control)
    eb = net.b.new_engine(net.b.connection_settings(), server=True)
    pipe = Pipe(ea, eb)
    pump(pipe)
    assert net.control.errors == ["connected to itself"]


async def test_reconnect_backoff_follows_activemq_static_discovery(monkeypatch, autojump_clock):
    """initialReconnectDelay 1 s, doubling, capped at maxReconnectDelay 4 s; then give up after
    maxReconnectAttempts; times on a mock clock."""
    from broker import netruntime

    attempts = []

    async def refused(host, port, make_engine, backoff, *, on_state=None, tls=None):
        attempts.append(trio.current_time())

    monkeypatch.setattr(netruntime, "run_connector", refused)

    class StubNetwork:
        controls = {}
        broker = None

    connector = NetworkConnector(name="c", targets=[NetworkTarget("tcp", "h", 1)], reconnect=ReconnectSettings(
        initial_reconnect_delay_ms=1000, max_reconnect_delay_ms=4000, max_reconnect_attempts=6))
    task = netruntime.NetworkConnectorTask(StubNetwork(), connector)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        while not task.controls or task.controls[0].status != netruntime.FAILED:
            await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    gaps = [round(b - a, 3) for a, b in zip([start] + attempts, attempts)]
    assert gaps == [0, 1, 2, 4, 4, 4], gaps


@pytest.mark.parametrize("lasted_ms, next_gap", [(100, 2.0), (6000, 1.0)])
async def test_a_connection_lost_soon_counts_as_a_failure_one_that_lasted_resets(monkeypatch, autojump_clock,
                                                                                  lasted_ms, next_gap):
    from broker import netruntime

    attempts = []

    async def connects_then_drops(host, port, make_engine, backoff, *, on_state=None, tls=None):
        attempts.append(trio.current_time())
        if len(attempts) == 2:
            task.controls[0].opened(None)
            await trio.sleep(lasted_ms / 1000)

    monkeypatch.setattr(netruntime, "run_connector", connects_then_drops)

    class StubNetwork:
        controls = {}
        broker = None

    connector = NetworkConnector(name="c", targets=[NetworkTarget("tcp", "h", 1)])
    task = netruntime.NetworkConnectorTask(StubNetwork(), connector)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(task.run)
        while len(attempts) < 3:
            await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    ended = attempts[1] + lasted_ms / 1000
    assert round(attempts[2] - ended, 3) == next_gap


def test_a_remote_temporary_queue_is_bridged_temporarily(tmp_path):
    net = Net(tmp_path)
    c = net.hb.connect()
    rcv = c.session.receiver("reply")
    rcv.source.dynamic = True
    rcv.open()
    rcv.flow(10)
    c._track(rcv)
    net.pump()
    [temp] = [n for n, i in net.b.queue_info.items() if i.temporary]
    assert net.a.queue_info[temp].temporary  # made for the demand, not durable
    send(net, "a", temp, ["the reply"])
    assert c.bodies(rcv) == ["the reply"]
    rcv.close()
    net.pump()
    assert temp not in net.a.queues  # gone with the demand


def durable_subscriber(net: Net, name: str):
    c = net.hb.connect(peer=Peer(container=f"client-{name}"))
    rcv = c.session.receiver(name)
    rcv.source.address = "news"
    rcv.source.durability = proton.Terminus.DELIVERIES
    rcv.source.expiry_policy = proton.Terminus.EXPIRE_NEVER
    rcv.source.capabilities.put_array(False, proton.Data.SYMBOL)
    rcv.source.capabilities.enter()
    rcv.source.capabilities.put_symbol("topic")
    rcv.source.capabilities.exit()
    rcv.open()
    rcv.flow(10)
    c._track(rcv)
    net.pump()
    return c, rcv


@pytest.mark.parametrize("dynamic_only, forwarded", [(False, 1), (True, 0)])
def test_an_inactive_durable_subscription_has_demand_unless_dynamic_only(tmp_path, dynamic_only, forwarded):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], dynamic_only=dynamic_only)
    net = Net(tmp_path, connector)
    c, rcv = durable_subscriber(net, "sub1")
    assert [d.kind for d in net.bridge.demands.values()] == ["topic"]
    rcv.detach()  # the subscriber goes away; its durable subscription stays on B
    net.pump()
    assert len(net.bridge.demands) == (0 if dynamic_only else 1)
    p = net.ha.connect()
    s = p.session.sender("pub")
    s.target.address = "news"
    s.target.capabilities.put_array(False, proton.Data.SYMBOL)
    s.target.capabilities.enter()
    s.target.capabilities.put_symbol("topic")
    s.target.capabilities.exit()
    s.open()
    net.pump()
    p.send(s, body="while away")
    net.pump()
    [sub] = [n for n, i in net.b.queue_info.items() if i.address == "news" and i.durable]
    assert net.b.queues[sub].message_count == forwarded


def test_suppress_duplicate_subscriptions_ignores_a_longer_path_to_a_consumer_already_served(tmp_path):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], consumer_ttl=3,
                                 suppress_duplicate_queue_subscriptions=True)
    net = Net(tmp_path, connector)
    net.bridge.on_advisory({"op": "add", "id": "1", "kind": "queue", "destination": "q", "path": [],
                            "origins": ["C/7"]})
    net.bridge.on_advisory({"op": "add", "id": "2", "kind": "queue", "destination": "q", "path": ["X"],
                            "origins": ["C/7"]})
    net.pump()
    [demand] = net.bridge.demands.values()
    assert list(demand.consumers) == ["1"]


def test_without_always_sync_send_non_persistent_messages_go_presettled(tmp_path):
    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], always_sync_send=False)
    net = Net(tmp_path, connector)
    consumer(net, "b", "q")
    net.pipe.cut()  # B's confirmations never come back
    send(net, "a", "q", ["fast"])
    send(net, "a", "q", ["safe"], durable=True)
    # the non-persistent one left A acknowledged at once; the persistent one waits for B
    q = net.a.queues["q"]
    assert (q.messages_acknowledged, q.delivering_count) == (1, 1)


SELECTOR_AWARE_POLICY = REPLAY_POLICY.replace('replayDelay="500"', 'replayDelay="0" selectorAware="true"')


@pytest.mark.parametrize("policy, replayed", [(REPLAY_POLICY.replace('replayDelay="500"', 'replayDelay="0"'), False),
                                               (SELECTOR_AWARE_POLICY, True)])
def test_selector_aware_replay_ignores_local_consumers_that_do_not_want_the_message(tmp_path, policy, replayed):
    from proton.reactor import Selector

    net = Net(tmp_path, extra_a=policy)
    cb, rb = consumer(net, "b", "q")
    ca = net.ha.connect()
    ra = ca.receiver("q", credit=10)
    Selector("color = 'red'").apply(ra)
    net.pump()
    send(net, "a", "q", ["blue, came from B"], properties={"color": "blue"},
         annotations={proton.symbol(PATH_ANNOTATION): [net.b.network.broker_id]})
    assert cb.bodies(rb) == (["blue, came from B"] if replayed else [])


def test_a_dropped_bridge_does_not_count_its_unconfirmed_forwards_as_failed_attempts(tmp_path):
    net = Net(tmp_path)
    consumer(net, "b", "q")
    net.pipe.cut()
    send(net, "a", "q", ["in flight"])
    q = net.a.queues["q"]
    assert q.delivering_count == 1
    net.ea.abort()
    net.pump()
    [msg] = q.ready()
    assert msg.delivery_count == 0


def test_static_bridge_forwards_its_static_destinations_without_any_consumer_or_advisory(tmp_path):
    from broker.netconfig import DestinationFilter

    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)], static_bridge=True,
                                 statically_included=[DestinationFilter("queue", "always")])
    net = Net(tmp_path, connector)
    assert net.bridge.advisory is None  # no advisory subscription at all
    assert list(net.bridge.demands) == [("queue", "always")]
    consumer(net, "b", "other")           # demand on B is not followed
    assert list(net.bridge.demands) == [("queue", "always")]
    send(net, "a", "always", ["x", "y"])
    assert net.b.queues["always"].message_count == 2


def test_dynamically_included_destinations_limit_demand(tmp_path):
    from broker.netconfig import DestinationFilter

    connector = NetworkConnector(name="a-b", targets=[NetworkTarget("tcp", "b", 1)],
                                 dynamically_included=[DestinationFilter("queue", "orders.*")])
    net = Net(tmp_path, connector)
    consumer(net, "b", "orders.eu")
    consumer(net, "b", "invoices")
    assert list(net.bridge.demands) == [("queue", "orders.eu")]


def test_a_dropped_bridge_leaves_no_queue_it_made_for_a_remote_temporary_queue(tmp_path):
    net = Net(tmp_path)
    c = net.hb.connect()
    rcv = c.session.receiver("reply")
    rcv.source.dynamic = True
    rcv.open()
    rcv.flow(10)
    net.pump()
    [temp] = [n for n, i in net.b.queue_info.items() if i.temporary]
    assert temp in net.a.queues
    net.pipe.cut()
    net.ea.abort()
    net.pump()
    assert temp not in net.a.queues and not net.a.network.bridges


def test_a_withdrawn_demand_keeps_its_forwards_in_flight_until_the_remote_settles_them(tmp_path):
    """The consumer on B leaves while A's forwards are in flight: A must not take them back (B may have
    stored them: a local consumer on A would get them a second time); the link goes once they settle."""
    net = Net(tmp_path)
    c, r = consumer(net, "b", "q", credit=0)
    bridge = net.bridge
    [cid] = list(bridge.by_consumer)
    net.pipe.cut()                      # B's answers do not come back for now
    send(net, "a", "q", ["in flight"])
    q = net.a.queues["q"]
    assert q.delivering_count == 1
    bridge.on_advisory({"op": "remove", "id": cid})
    net.pump()
    assert (q.delivering_count, q.ready_count) == (1, 0)   # still B's to answer, not back on A
    assert net.a.network.closing and not bridge.demands
    ca, ra = consumer(net, "a", "q")
    assert ca.bodies(ra) == []          # a local consumer does not get a second copy
