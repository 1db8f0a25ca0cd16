"""The network-of-brokers blueprints of conf/networks/ (mesh, hub and spoke, concentrator, cross-region):
every file parses and hangs together, and each blueprint, run for real on reserved ports, carries messages
from a broker to consumers on others exactly once, with demand that comes and goes with the consumers.

The shapes are those of ActiveMQ's "Networks of Brokers" page and of Amazon MQ's network-of-brokers
topologies (Amazon MQ Developer Guide, "Amazon MQ network of brokers"); conf/networks/README.md explains
each one.
"""

from __future__ import annotations

import pathlib

import pytest
from proton import Message

from broker.config import load_broker_config
from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.clients import Consumer, close_all
from tests.system.netharness import (
    BLUEPRINTS_DIR,
    Network,
    blueprint_ports,
    blueprint_xml,
    exactly_once,
    wait_consumers,
    wait_messages,
)
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

BLUEPRINTS = {
    "mesh": ["broker-A", "broker-B", "broker-C"],
    "hub-and-spoke": ["hub", "spoke-1", "spoke-2", "spoke-3", "spoke-4"],
    "concentrator": ["front-1", "front-2", "front-3", "back-1", "back-2"],
    "cross-region": ["east-1", "east-2", "west-1", "west-2"],
}
#: The fixed ports the blueprints document (conf/networks/README.md).
PORT_RANGE = range(61601, 61635)


# -- the files ---------------------------------------------------------------------------------------------

def _files(name: str) -> list[pathlib.Path]:
    return sorted((BLUEPRINTS_DIR / name).glob("*.xml"))


def test_every_blueprint_directory_is_listed_and_documented():
    dirs = sorted(p.name for p in BLUEPRINTS_DIR.iterdir() if p.is_dir())
    assert dirs == sorted(BLUEPRINTS)
    readme = (BLUEPRINTS_DIR / "README.md").read_text()
    for name, stems in BLUEPRINTS.items():
        assert sorted(p.stem for p in _files(name)) == sorted(stems)
        for stem in stems:
            assert f"conf/networks/{name}/{stem}.xml" in readme, f"README.md does not show how to start {stem}"


@pytest.mark.parametrize("name", sorted(BLUEPRINTS))
def test_blueprint_files_parse_and_connect_to_each_other(name):
    """Each file loads with broker.config.load_broker_config without warnings; names, ports and journals
    are unique over all blueprints; every connector dials acceptors of the same blueprint."""
    configs = {p.stem: load_broker_config(p) for p in _files(name)}
    ports = {}
    for stem, cfg in configs.items():
        assert cfg.warnings == [], cfg.warnings
        assert cfg.name and cfg.persistence_enabled
        [acceptor] = cfg.acceptors
        assert acceptor.host == "127.0.0.1" and acceptor.port in PORT_RANGE, (stem, acceptor)
        assert cfg.journal_directory == f"data/networks/{name}/{stem}/journal"
        ports[acceptor.port] = stem
    assert len(ports) == len(configs)
    for stem, cfg in configs.items():
        for connector in cfg.network_connectors:
            for target in connector.targets:
                assert (target.host, target.port in ports) == ("127.0.0.1", True), (stem, connector.name, target)
                assert ports[target.port] != stem, f"{stem}: connector {connector.name} dials itself"
    assert blueprint_ports(BLUEPRINTS_DIR / name) == {s: c.acceptors[0].port for s, c in configs.items()}


def test_blueprints_use_distinct_names_and_ports():
    names, ports = [], []
    for name in BLUEPRINTS:
        for p in _files(name):
            cfg = load_broker_config(p)
            names.append(cfg.name)
            ports.append(cfg.acceptors[0].port)
    assert len(set(names)) == len(names) and len(set(ports)) == len(ports)


def test_blueprint_links_are_what_the_readme_says():
    """The properties each blueprint relies on (a change here must change README.md too)."""
    def connectors(name, stem):
        return {c.name: c for c in load_broker_config(BLUEPRINTS_DIR / name / f"{stem}.xml").network_connectors}

    mesh_a = connectors("mesh", "broker-A")
    assert mesh_a["A-queues"].duplex and not mesh_a["A-queues"].conduit_subscriptions
    assert mesh_a["A-topics"].duplex and mesh_a["A-topics"].conduit_subscriptions
    assert all(c.network_ttl == 1 for c in mesh_a.values())
    spoke = connectors("hub-and-spoke", "spoke-1")["spoke-1-to-hub"]
    assert spoke.duplex and spoke.network_ttl == 2
    front = connectors("concentrator", "front-1")["front-1-to-back"]
    assert not front.duplex and [t.port for t in front.targets] == [61624, 61625]
    east = connectors("cross-region", "east-1")
    assert (east["east-region"].network_ttl, east["east-to-west"].network_ttl) == (3, 2)
    assert connectors("cross-region", "west-1")["west-region"].network_ttl == 3


# -- the blueprints run ------------------------------------------------------------------------------------

@pytest.fixture
def blueprint(tmp_path):
    """``start(name)`` -> a started :class:`Network` running the blueprint's own files on reserved ports."""
    networks: list[Network] = []

    def start(name: str) -> Network:
        stems = blueprint_ports(BLUEPRINTS_DIR / name)
        net = Network(tmp_path / name, list(stems))
        port_map = {stems[s]: net.port(s) for s in stems}
        for stem in stems:
            b = net[stem]
            b.write(blueprint_xml(BLUEPRINTS_DIR / name / f"{stem}.xml", port_map, b.journal))
        networks.append(net)
        return net.start()

    yield start
    close_all()
    problems = [p for net in networks for p in net.stop()]
    assert not problems, "\n".join(problems)


def _consumers(broker, address: str, n: int, **kw) -> list[Consumer]:
    return [Consumer(broker.url, address, credit=100, **kw).start(timeout=TIMEOUT) for _ in range(n)]


def _send(broker, address: str, ids) -> None:
    send_messages(broker.url, address, [Message(id=i, body=f"m{i}", durable=True) for i in ids])


def _wait_received(consumers, n: int) -> None:
    wait_for(lambda: sum(c.received() for c in consumers) >= n,
             f"{n} messages over {len(consumers)} consumers", TIMEOUT)


def _demand_leaves_with_the_consumers(net, producer: str, consumers, others, address: str) -> None:
    """Close ``consumers``; once ``producer`` has no network consumer left, messages sent there stay
    there: none reaches ``others``, and a local consumer gets them all."""
    for c in consumers:
        c.close()
    wait_consumers(net[producer], address, 0)
    ids = [f"after-{i}" for i in range(10)]
    _send(net[producer], address, ids)
    wait_messages(net[producer], address, len(ids))
    for name in others:
        assert net[name].stats(address).messages == 0, net[name].describe(address)
    local = Consumer(net[producer].url, address, count=len(ids), credit=100).start(timeout=TIMEOUT)
    try:
        local.wait(TIMEOUT)
        exactly_once(ids, local)
    finally:
        local.close()


def test_mesh(blueprint):
    """Three brokers, every pair linked duplex (queues without conduit, topics with): a queue consumer on
    C gets what is sent on A; topic subscribers on B and C each get every message once."""
    net = blueprint("mesh")
    queue_consumer = _consumers(net["broker-C"], "orders", 1)
    subscribers = _consumers(net["broker-B"], "news", 1) + _consumers(net["broker-C"], "news", 1)
    wait_consumers(net["broker-A"], "orders", 1)  # C's consumer, as a network consumer on A
    # A's "news" subscriptions: one network subscription per subscribing broker (B's and C's)
    wait_consumers(net["broker-A"], "news", 2)
    _send(net["broker-A"], "orders", range(30))
    _send(net["broker-A"], "news", [f"n{i}" for i in range(10)])
    _wait_received(queue_consumer, 30)
    exactly_once(range(30), *queue_consumer)
    for s in subscribers:
        s.wait(TIMEOUT, count=10)
        exactly_once([f"n{i}" for i in range(10)], s)
    for name in ("broker-A", "broker-B", "broker-C"):
        wait_messages(net[name], "orders", 0)
    _demand_leaves_with_the_consumers(net, "broker-A", queue_consumer, ["broker-B", "broker-C"], "orders")


def test_hub_and_spoke(blueprint):
    """Four spokes dial the hub duplex with networkTTL 2: spoke to spoke crosses the hub; topic
    subscribers on the hub and on two spokes each get every message of spoke-1 once."""
    net = blueprint("hub-and-spoke")
    queue_consumers = _consumers(net["spoke-3"], "orders", 1) + _consumers(net["spoke-4"], "orders", 1)
    subscribers = [c for name in ("hub", "spoke-2", "spoke-4") for c in _consumers(net[name], "news", 1)]
    # spoke-1 sees one conduit demand for "orders" (both consumers are behind the hub) and one for "news"
    wait_consumers(net["spoke-1"], "orders", 1)
    wait_consumers(net["spoke-1"], "news", 1)
    wait_consumers(net["hub"], "orders", 2)        # a network consumer towards each of spoke-3, spoke-4
    # a topic message reaches only the subscriptions that exist when it arrives: the hub's own subscriber
    # and one network subscription towards each of spoke-2 and spoke-4 must be there before publishing
    wait_consumers(net["hub"], "news", 3)
    _send(net["spoke-1"], "orders", range(40))
    _send(net["spoke-1"], "news", [f"n{i}" for i in range(10)])
    _wait_received(queue_consumers, 40)
    exactly_once(range(40), *queue_consumers)
    for s in subscribers:
        s.wait(TIMEOUT, count=10)
        exactly_once([f"n{i}" for i in range(10)], s)
    _demand_leaves_with_the_consumers(net, "spoke-1", queue_consumers,
                                      ["hub", "spoke-2", "spoke-3", "spoke-4"], "orders")


def test_concentrator(blueprint):
    """Three front brokers forward one-way to two back brokers: consumers on the back brokers get every
    message of producers on all front brokers exactly once, and nothing flows back to the front."""
    net = blueprint("concentrator")
    fronts = ["front-1", "front-2", "front-3"]
    backs = _consumers(net["back-1"], "orders", 1) + _consumers(net["back-2"], "orders", 1)
    back_orders = Consumer(net["front-1"].url, "returns", credit=100).start(timeout=TIMEOUT)  # no demand back
    for name in fronts:
        wait_consumers(net[name], "orders", 2)     # a bridge to each back broker
    ids = [f"{name}-{i}" for name in fronts for i in range(20)]
    for name in fronts:
        _send(net[name], "orders", [i for i in ids if i.startswith(name)])
    _send(net["back-1"], "returns", [f"r{i}" for i in range(5)])
    _wait_received(backs, len(ids))
    exactly_once(ids, *backs)
    # one-way: back-1 never got a network consumer for the front's consumer, so its messages stay there
    assert net["back-1"].stats("returns") == (0, 5), net["back-1"].describe("returns")
    assert back_orders.received() == 0
    back_orders.close()
    _demand_leaves_with_the_consumers(net, "front-2", backs, ["back-1", "back-2"], "orders")


def test_cross_region(blueprint):
    """Two regions of two brokers, one duplex link between the gateways: a queue consumer on west-2 gets
    what is sent on east-2 (three bridges) exactly once, and a topic published on west-2 reaches
    subscribers in both regions once each."""
    net = blueprint("cross-region")
    queue_consumer = _consumers(net["west-2"], "orders", 1)
    subscribers = [c for name in ("east-1", "east-2", "west-1") for c in _consumers(net[name], "news", 1)]
    wait_consumers(net["east-2"], "orders", 1)     # demand crossed west-1, east-1
    wait_consumers(net["west-2"], "news", 1)       # one conduit subscription towards west-1
    wait_consumers(net["west-1"], "news", 2)       # west-1's subscriber, a conduit subscription towards east-1
    wait_consumers(net["east-1"], "news", 3)       # its subscriber, network subscriptions towards east-2, west-1
    _send(net["east-2"], "orders", range(30))
    _send(net["west-2"], "news", [f"n{i}" for i in range(10)])
    _wait_received(queue_consumer, 30)
    exactly_once(range(30), *queue_consumer)
    for s in subscribers:
        s.wait(TIMEOUT, count=10)
        exactly_once([f"n{i}" for i in range(10)], s)
    _demand_leaves_with_the_consumers(net, "east-2", queue_consumer, ["east-1", "west-1", "west-2"], "orders")
