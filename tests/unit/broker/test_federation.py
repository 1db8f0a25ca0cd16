"""Address federation between in-memory brokers (no sockets): demand from local subscriptions, the
federation queue on the upstream, hops and max-hops, symmetric federation without loops, auto-delete of a
federation queue after its delay, and the opposing federation's queues not counting as demand."""

from __future__ import annotations

from types import SimpleNamespace

import proton

from broker.config import parse_broker_config
from broker.federation import FED_HOPS_ANNOTATION
from broker.server import Broker
from broker.configmodel import artemis_match
from tests.unit.enginepair import Pipe, RouterHarness, pump

XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name><persistence-enabled>false</persistence-enabled>
  <addresses><address name="news"><multicast/></address><address name="other"><multicast/></address>
    <address name="copies"><anycast><queue name="copies"/></anycast></address></addresses>
  {extra}
</core></configuration>"""


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self):
        return self.now


def policy(name="p", match="news", max_hops=0, **kw):
    fields = dict(auto_delete=None, auto_delete_delay_ms=None, auto_delete_message_count=None,
                  transformer_ref=None, enable_divert_bindings=False)
    fields.update(kw)
    return SimpleNamespace(name=name, max_hops=max_hops, matches=lambda a, m=match: artemis_match(m, a), **fields)


def federation(name: str, upstream: str, pol):
    stream = SimpleNamespace(name=upstream, user=None, password=None)
    return SimpleNamespace(name=name, upstreams=[stream], transformers={},
                           policies_for=lambda s, p=pol: ([p], []))


class Fed:
    """Brokers by name; ``link(down, up, policy)`` gives ``down`` an upstream to ``up``, connected in memory."""

    def __init__(self, *names, federations=None, extra=None):
        self.clock = Clock()
        self.brokers = {}
        self.harness = {}
        for n in names:
            cfg = parse_broker_config(XML.format(name=n, extra=(extra or {}).get(n, "")))
            cfg.federations = (federations or {}).get(n, [])
            b = self.brokers[n] = Broker(cfg, clock=self.clock)
            self.harness[n] = RouterHarness(router=b)
        self.pipes = []

    def connect(self, down: str, up: str):
        d, u = self.brokers[down], self.brokers[up]
        [upstream] = [x for x in d.federation.upstreams if x.stream.name == up]
        e = d.new_engine(d.connection_settings(properties=d.network.open_properties()), server=False)
        e.app.on_open = lambda engine: upstream.opened(engine)
        self.pipes.append(Pipe(e, u.new_engine(u.connection_settings(), server=True)))
        self.pump()
        return e

    def pump(self):
        for _ in range(8):
            pump(*self.pipes, *[p for h in self.harness.values() for p in h.pipes])
            for b in self.brokers.values():
                b.on_batch_end()

    def subscribe(self, broker: str, address="news"):
        c = self.harness[broker].connect()
        r = c.receiver(address, credit=100)
        self.pump()
        return c, r

    def publish(self, broker: str, bodies, address="news", **fields):
        p = self.harness[broker].connect()
        s = p.sender(address)
        self.pump()
        for b in bodies:
            p.send(s, body=b, **fields)
        self.pump()


def federated_queues(b: Broker) -> list[str]:
    return sorted(n for n in b.queue_info if ".federated." in n)


def test_local_demand_makes_a_federation_queue_upstream_and_messages_come_down_with_a_hop():
    fed = Fed("D", "U", federations={"D": [federation("f", "U", policy())]})
    fed.connect("D", "U")
    assert federated_queues(fed.brokers["U"]) == []  # no demand yet
    c, r = fed.subscribe("D")
    [fq] = federated_queues(fed.brokers["U"])
    assert fq == "D.federated.f.U.news.multicast"
    fed.publish("U", ["hello"])
    [got] = c.received(r)
    assert got.message.body == "hello"
    assert got.message.annotations[proton.symbol(FED_HOPS_ANNOTATION)] == 1


def test_an_address_no_policy_matches_is_not_federated():
    fed = Fed("D", "U", federations={"D": [federation("f", "U", policy(match="news"))]})
    fed.connect("D", "U")
    fed.subscribe("D", "other")
    assert federated_queues(fed.brokers["U"]) == []


def test_demand_going_away_detaches_and_the_queue_is_auto_deleted_after_its_delay():
    pol = policy(auto_delete=True, auto_delete_delay_ms=1000, auto_delete_message_count=-1)
    fed = Fed("D", "U", federations={"D": [federation("f", "U", pol)]})
    fed.connect("D", "U")
    c, r = fed.subscribe("D")
    r.close()
    fed.pump()
    u = fed.brokers["U"]
    [fq] = federated_queues(u)
    assert u.queues[fq].consumer_count == 0  # detached, not deleted: messages wait for the delay
    fed.publish("U", ["kept"])
    assert u.queues[fq].message_count == 1
    fed.clock.now += 999
    u.tick(fed.clock.now)
    assert federated_queues(u) == [fq]
    fed.clock.now += 1
    u.tick(fed.clock.now)
    assert federated_queues(u) == []


def test_auto_delete_message_count_keeps_a_queue_with_more_messages():
    pol = policy(auto_delete=True, auto_delete_delay_ms=10, auto_delete_message_count=0)
    fed = Fed("D", "U", federations={"D": [federation("f", "U", pol)]})
    fed.connect("D", "U")
    c, r = fed.subscribe("D")
    r.close()
    fed.pump()
    fed.publish("U", ["one"])
    fed.clock.now += 10
    fed.brokers["U"].tick(fed.clock.now)
    assert len(federated_queues(fed.brokers["U"])) == 1


def test_symmetric_federation_with_max_hops_one_delivers_once_and_does_not_loop():
    feds = {"A": [federation("f", "B", policy(max_hops=1))], "B": [federation("f", "A", policy(max_hops=1))]}
    fed = Fed("A", "B", federations=feds)
    fed.connect("A", "B")
    fed.connect("B", "A")
    ca, ra = fed.subscribe("A")
    cb, rb = fed.subscribe("B")
    fed.publish("A", ["from A"])
    fed.publish("B", ["from B"])
    assert sorted(ca.bodies(ra)) == ["from A", "from B"]
    assert sorted(cb.bodies(rb)) == ["from A", "from B"]


def test_the_opposing_federation_queue_is_not_demand():
    feds = {"A": [federation("f", "B", policy())], "B": [federation("f", "A", policy())]}
    fed = Fed("A", "B", federations=feds)
    fed.connect("A", "B")
    fed.connect("B", "A")
    c, r = fed.subscribe("A")
    # A federates news from B (a queue on B); B must not take that queue as demand to federate from A
    assert federated_queues(fed.brokers["B"]) == ["A.federated.f.B.news.multicast"]
    assert federated_queues(fed.brokers["A"]) == []
    r.close()
    fed.pump()
    assert not fed.brokers["A"].federation.upstreams[0].receivers


def test_max_hops_keeps_a_message_that_made_its_hops_out_of_the_federation_queue():
    fed = Fed("D", "U", federations={"D": [federation("f", "U", policy(max_hops=2))]})
    fed.connect("D", "U")
    c, r = fed.subscribe("D")
    fed.publish("U", ["twice federated"], annotations={proton.symbol(FED_HOPS_ANNOTATION): 2})
    fed.publish("U", ["once federated"], annotations={proton.symbol(FED_HOPS_ANNOTATION): 1})
    assert c.bodies(r) == ["once federated"]


def test_a_downstreams_command_makes_the_remote_broker_federate_back():
    from broker.fedcommand import command_body
    from broker.federation import CONTROL_ADDRESS
    from broker.fedconfig import AddressPolicy, Stream

    fed = Fed("D", "R")
    r = fed.brokers["R"]
    spawned = []
    r.federation.spawn = spawned.append
    stream = Stream(kind="downstream", name="to-D", user=None, password=None)
    body = command_body(SimpleNamespace(name="f"), stream,
                        [AddressPolicy(name="p", max_hops=1, includes=["news"])], "127.0.0.1", 5999)
    p = fed.harness["R"].connect()
    s = p.sender(CONTROL_ADDRESS)
    fed.pump()
    d = p.send(s, proton.Message(body=body))
    fed.pump()
    assert d.remote_state == proton.Delivery.ACCEPTED
    [up] = spawned
    assert (up.targets[0].host, up.targets[0].port, up.name) == ("127.0.0.1", 5999, "f/to-D")
    # the upstream it made federates like a configured one: connect it to D in memory
    e = r.new_engine(r.connection_settings(properties=r.network.open_properties()), server=False)
    e.app.on_open = lambda engine: up.opened(engine)
    fed.pipes.append(Pipe(e, fed.brokers["D"].new_engine(fed.brokers["D"].connection_settings(), server=True)))
    c, rcv = fed.subscribe("R")
    fed.publish("D", ["from D"])
    assert c.bodies(rcv) == ["from D"]
    # a bad command is rejected, the connection stays
    d = p.send(s, proton.Message(body={"federation": "f"}))
    fed.pump()
    assert d.remote_state == proton.Delivery.REJECTED


def test_a_tls_upstream_connector_ref_is_refused_at_start_up(tmp_path):
    import pytest

    from broker.xmlschema import BrokerConfigError

    text = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <connectors><connector name="remote">tcp://127.0.0.1:5999</connector>
    <connector name="me">tcp://127.0.0.1:5998?sslEnabled=true</connector></connectors>
  <federations><federation name="f"><downstream name="d">
    <static-connectors><connector-ref>remote</connector-ref></static-connectors>
    <upstream-connector-ref>me</upstream-connector-ref><policy ref="p"/></downstream>
    <address-policy name="p"/></federation></federations>
</core></configuration>"""
    with pytest.raises(BrokerConfigError, match=r":6: .*upstream-connector-ref 'me' uses TLS"):
        parse_broker_config(text)


DIVERT = """<diverts><divert name="keep-a-copy"><address>news</address><forwarding-address>copies</forwarding-address>
  </divert></diverts>"""


def test_enable_divert_bindings_makes_a_divert_forwarding_queue_demand_for_its_source_address():
    for enabled, pulled in ((False, 0), (True, 1)):
        fed = Fed("D", "U", federations={"D": [federation("f", "U", policy(enable_divert_bindings=enabled))]},
                  extra={"D": DIVERT})
        fed.connect("D", "U")
        fed.publish("U", ["diverted"])
        assert fed.brokers["D"].queues["copies"].message_count == pulled, enabled


def queue_federation(name: str, upstream: str, **kw):
    pol = SimpleNamespace(name="qp", include_federated=kw.get("include_federated", False),
                          priority_adjustment=kw.get("priority_adjustment", -1), transformer_ref=None,
                          matches=lambda q, a: artemis_match("jobs", q))
    stream = SimpleNamespace(name=upstream, user=None, password=None)
    return SimpleNamespace(name=name, upstreams=[stream], transformers={},
                           policies_for=lambda s, p=pol: ([], [p]))


QUEUES = """<addresses><address name="jobs"><anycast><queue name="jobs"/></anycast></address></addresses>"""


def test_queue_federation_pulls_for_an_idle_local_consumer_and_leaves_the_upstreams_own_consumers_first():
    fed = Fed("D", "U", federations={"D": [queue_federation("f", "U")]}, extra={"D": "", "U": ""})
    for b in fed.brokers.values():
        b.addressing.lookup_queue("jobs")
    fed.connect("D", "U")
    u = fed.brokers["U"]
    fed.publish("U", [f"j{i}" for i in range(5)], address="jobs")
    assert u.queues["jobs"].message_count == 5  # no consumer on D yet: nothing pulled
    c, r = fed.subscribe("D", "jobs")
    assert c.bodies(r) == [f"j{i}" for i in range(5)]
    # an upstream consumer with credit comes first: the federation consumer's priority is one lower
    cu, ru = fed.subscribe("U", "jobs")
    fed.publish("U", ["for U"], address="jobs")
    assert cu.bodies(ru) == ["for U"] and c.bodies(r) == [f"j{i}" for i in range(5)]


def test_queue_federation_pulls_only_what_local_consumers_can_take():
    fed = Fed("D", "U", federations={"D": [queue_federation("f", "U")]})
    for b in fed.brokers.values():
        b.addressing.lookup_queue("jobs")
    fed.connect("D", "U")
    fed.publish("U", [f"j{i}" for i in range(5)], address="jobs")
    c = fed.harness["D"].connect()
    r = c.receiver("jobs", credit=0)      # a consumer with no credit: demand, but nothing to pull for
    fed.pump()
    u = fed.brokers["U"].queues["jobs"]
    assert u.message_count == 5 and u.consumer_count == 1  # the federation consumer is there, idle
    r.flow(2)
    fed.pump()
    assert c.bodies(r) == ["j0", "j1"] and u.message_count == 3


def test_stream_attempt_limits_initial_before_the_first_connection_reconnect_after():
    from broker.fedruntime import _schedule

    s = SimpleNamespace(retry_interval_ms=500, retry_interval_multiplier=2.0, max_retry_interval_ms=2000,
                        initial_connect_attempts=2, reconnect_attempts=-1)
    sched = _schedule(s)
    assert [sched.failed(0), sched.failed(0)] == [500, None]  # gives up after 2 initial attempts
    s.initial_connect_attempts, s.reconnect_attempts = -1, 2
    sched = _schedule(s)
    assert [sched.failed(0) for _ in range(4)] == [500, 1000, 2000, 2000]  # never gives up before connecting
    sched.connected(10)
    # then reconnect-attempts counts: the loss of the connection, and 2 failed attempts to reconnect
    assert [sched.failed(20), sched.failed(30), sched.failed(40)] == [500, 1000, None]
