"""The address-federation blueprints of conf/federation/ (symmetric, full mesh, ring, fan-out tree, the
Artemis manual's downstream sample), run for real on reserved ports: every subscriber on every broker gets
every message exactly once; and ``max-hops`` set wrong shows the duplicates (or the loss) that the Artemis
user manual warns about (``federation-address.adoc``, "Topology Patterns" and ``max-hops``).

A message is copied only into the federation queues that exist when it is published (as in Artemis: demand
creates them), so each test waits until every upstream holds the federation queues of its downstreams
before it publishes.
"""

from __future__ import annotations

import re

import pytest

from broker.config import load_broker_config
from tests.system.clients import close_all
from tests.system.fedharness import (
    FED_BLUEPRINTS_DIR,
    Subscriber,
    federation_queues,
    publish,
    wait_federation_queues,
)
from tests.system.netharness import Network, blueprint_ports, blueprint_xml
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system

BLUEPRINTS = {
    "symmetric": ["broker-A", "broker-B"],
    "full-mesh": ["broker-A", "broker-B", "broker-C"],
    "ring": ["broker-A", "broker-B", "broker-C", "broker-D"],
    "fan-out": ["leaf-1", "leaf-2", "leaf-3", "leaf-4", "mid-1", "mid-2", "root"],
    "downstream": ["eu-east-1", "eu-north-1", "eu-west-1"],
}
#: The fixed ports the blueprints document (conf/federation/README.md): clear of conf/networks/ (61601-61634)
#: and of the default 5672/5673.
PORT_RANGE = range(61701, 61721)
#: How long a test waits after the last expected copy for a duplicate that would follow it: the copies
#: of one broker's federation go out in the order received, so a duplicate of an early message would arrive
#: well before the last original; this only covers the duplicates of the last few.
SETTLE = 0.5


# -- the files -----------------------------------------------------------------------------------------------

def _files(name: str):
    return sorted((FED_BLUEPRINTS_DIR / name).glob("*.xml"))


def test_every_blueprint_is_listed_documented_and_parses():
    assert sorted(p.name for p in FED_BLUEPRINTS_DIR.iterdir() if p.is_dir()) == sorted(BLUEPRINTS)
    readme = (FED_BLUEPRINTS_DIR / "README.md").read_text()
    names, ports = [], []
    for name, stems in BLUEPRINTS.items():
        assert [p.stem for p in _files(name)] == stems
        for stem in stems:
            assert f"conf/federation/{name}/{stem}.xml" in readme, f"README.md does not show how to start {stem}"
            cfg = load_broker_config(FED_BLUEPRINTS_DIR / name / f"{stem}.xml")
            assert cfg.warnings == [], cfg.warnings
            assert cfg.persistence_enabled and cfg.journal_directory == f"data/federation/{name}/{stem}/journal"
            [acceptor] = cfg.acceptors
            assert acceptor.host == "127.0.0.1" and acceptor.port in PORT_RANGE
            names.append(cfg.name)
            ports.append(acceptor.port)
    assert len(set(names)) == len(names) and len(set(ports)) == len(ports)


def test_blueprint_max_hops_are_what_the_readme_says():
    def max_hops(name, stem):
        text = (FED_BLUEPRINTS_DIR / name / f"{stem}.xml").read_text()
        return {int(v) for v in re.findall(r'max-hops="(-?\d+)"', text)}

    assert max_hops("symmetric", "broker-A") == {1}
    assert max_hops("full-mesh", "broker-C") == {1}
    assert all(max_hops("ring", s) == {3} for s in BLUEPRINTS["ring"])
    assert all(max_hops("fan-out", s) == {-1} for s in BLUEPRINTS["fan-out"] if s != "root")
    assert max_hops("downstream", "eu-north-1") == {1}


# -- the blueprints run --------------------------------------------------------------------------------------

@pytest.fixture
def blueprint(tmp_path):
    """``start(name, edit=None)`` -> a started Network running the blueprint's files on reserved ports;
    ``edit(text) -> text`` changes every file first (a wrong max-hops); ``only``: start these brokers only."""
    networks: list[Network] = []

    def start(name: str, edit=None, only=None) -> Network:
        stems = blueprint_ports(FED_BLUEPRINTS_DIR / name)
        net = Network(tmp_path / name, list(stems))
        port_map = {stems[s]: net.port(s) for s in stems}
        for stem in stems:
            b = net[stem]
            text = blueprint_xml(FED_BLUEPRINTS_DIR / name / f"{stem}.xml", port_map, b.journal)
            b.write(edit(text) if edit else text)
        networks.append(net)
        return net.start(only)

    yield start
    close_all()
    problems = [p for net in networks for p in net.stop()]
    assert not problems, "\n".join(problems)


def _subscribe(net, names, address="news") -> dict:
    return {n: Subscriber(net[n], address).start() for n in names}


def _ids(publishers, n=10) -> dict:
    return {p: [f"{p}-{i}" for i in range(n)] for p in publishers}


def _publish_and_wait(net, subscribers: dict, sent: dict, expected: dict, address="news") -> None:
    """Publish ``sent`` (broker -> ids); wait until each subscriber has ``expected[name]`` (ids), then a
    little more for duplicates; check exactly once."""
    for name, ids in sent.items():
        publish(net[name], address, ids)
    for name, sub in subscribers.items():
        sub.wait_ids(expected[name])
    _settle()
    for name, sub in subscribers.items():
        sub.assert_exactly_once(expected[name])


def _settle() -> None:
    import time

    time.sleep(SETTLE)


def _all_ids(sent: dict) -> list:
    return [i for ids in sent.values() for i in ids]


def test_symmetric_every_subscriber_gets_everything_once(blueprint):
    net = blueprint("symmetric")
    names = BLUEPRINTS["symmetric"]
    subs = _subscribe(net, names)
    for n in names:
        wait_federation_queues(net[n], "news", 1)
    sent = _ids(names)
    _publish_and_wait(net, subs, sent, {n: _all_ids(sent) for n in names})


def test_full_mesh_every_subscriber_gets_everything_once(blueprint):
    net = blueprint("full-mesh")
    names = BLUEPRINTS["full-mesh"]
    subs = _subscribe(net, names)
    for n in names:
        wait_federation_queues(net[n], "news", 2)
    sent = _ids(names)
    _publish_and_wait(net, subs, sent, {n: _all_ids(sent) for n in names})


def test_ring_of_four_with_max_hops_3_every_subscriber_gets_everything_once(blueprint):
    net = blueprint("ring")
    names = BLUEPRINTS["ring"]
    subs = _subscribe(net, names)
    for n in names:
        wait_federation_queues(net[n], "news", 1)
    sent = _ids(names)
    _publish_and_wait(net, subs, sent, {n: _all_ids(sent) for n in names})


def test_fan_out_tree_root_reaches_every_broker_and_a_mid_its_own_leaves(blueprint):
    net = blueprint("fan-out")
    names = BLUEPRINTS["fan-out"]
    subs = _subscribe(net, names)
    for n in ("root", "mid-1", "mid-2"):
        wait_federation_queues(net[n], "news", 2)
    sent = _ids(["root", "mid-1"])
    below_mid_1 = {"mid-1", "leaf-1", "leaf-2"}
    expected = {n: sent["root"] + (sent["mid-1"] if n in below_mid_1 else []) for n in names}
    _publish_and_wait(net, subs, sent, expected)


def test_downstream_sample_spokes_federate_from_the_hub(blueprint):
    """eu-north-1's <downstream>s make eu-east-1 and eu-west-1 create an upstream back to it: their
    subscribers get what is published on eu-north-1 for the included addresses, never the excluded ones;
    nothing flows the other way (the spokes are no upstream of the hub)."""
    net = blueprint("downstream")
    hub, spokes = "eu-north-1", ["eu-east-1", "eu-west-1"]
    europe = {n: Subscriber(net[n], "queue.news.europe").start() for n in [hub, *spokes]}
    football = {n: Subscriber(net[n], "queue.news.sport.football").start() for n in spokes}
    wait_for(lambda: _no_refusal(net, spokes) and len(federation_queues(net[hub], "queue.news.europe")) == 2,
             "the spokes' federation queues on the hub")
    wait_federation_queues(net[hub], "queue.news.europe", 2)
    sent = _ids([hub, *spokes])
    expected = {hub: sent[hub], **{s: sent[hub] + sent[s] for s in spokes}}  # hub -> spokes only
    _publish_and_wait(net, europe, sent, expected, "queue.news.europe")
    publish(net[hub], "queue.news.sport.football", ["goal"])
    assert federation_queues(net[hub], "queue.news.sport.football") == []
    _settle()
    assert all(sub.received() == 0 for sub in football.values())


def _no_refusal(net, names) -> bool:
    """True; AssertionError at once when a broker logged that it refused a downstream's command (rather
    than waiting for the whole timeout)."""
    for n in names:
        tail = net[n].process.stderr_text()
        assert "federation command refused" not in tail, f"{n} refused the command:\n{tail}"
    return True


# -- max-hops set wrong ----------------------------------------------------------------------------------------

def _max_hops(value: int):
    return lambda text: re.sub(r'max-hops="-?\d+"', f'max-hops="{value}"', text)


def test_full_mesh_with_max_hops_2_duplicates(blueprint):
    """Artemis: max-hops 1 for a full mesh, else copies come back. With 2, a message published on A
    reaches B and C directly and again through each other (hops 1 < 2), and A gets it back twice."""
    net = blueprint("full-mesh", edit=_max_hops(2))
    names = BLUEPRINTS["full-mesh"]
    subs = _subscribe(net, names)
    for n in names:
        wait_federation_queues(net[n], "news", 2)
    ids = [f"dup-{i}" for i in range(5)]
    publish(net["broker-A"], "news", ids)
    want = {"broker-A": 3, "broker-B": 2, "broker-C": 2}
    for n, sub in subs.items():
        wait_for(lambda s=sub, k=want[n]: all(s.counts()[i] >= k for i in ids), f"{want[n]} copies on {n}")
    _settle()
    for n, sub in subs.items():
        assert all(sub.counts()[i] == want[n] for i in ids), (n, sub.counts())
        assert all(c > 1 for c in sub.counts().values())


def test_ring_with_max_hops_4_brings_each_message_back_to_its_publisher(blueprint):
    """A ring of n needs max-hops n-1; with n the message comes round once more to where it was published
    (a duplicate there), then stops."""
    net = blueprint("ring", edit=_max_hops(4))
    names = BLUEPRINTS["ring"]
    subs = _subscribe(net, names)
    for n in names:
        wait_federation_queues(net[n], "news", 1)
    ids = [f"round-{i}" for i in range(5)]
    publish(net["broker-A"], "news", ids)
    wait_for(lambda: all(subs["broker-A"].counts()[i] == 2 for i in ids), "every message twice on broker-A")
    _settle()
    assert all(subs["broker-A"].counts()[i] == 2 for i in ids), subs["broker-A"].counts()
    for n in names[1:]:
        subs[n].assert_exactly_once(ids)


def test_fan_out_with_max_hops_1_stops_at_the_mids(blueprint):
    """max-hops 1 in a tree of depth 2: a message published on the root is copied to the mids (hop 1) but
    the leaves' federation queues on the mids let in only messages with fewer hops: leaves get nothing."""
    net = blueprint("fan-out", edit=_max_hops(1), only=["root", "mid-1", "leaf-1"])
    subs = _subscribe(net, ["mid-1", "leaf-1"])
    wait_federation_queues(net["root"], "news", 1)
    wait_federation_queues(net["mid-1"], "news", 1)
    ids = [f"t-{i}" for i in range(5)]
    publish(net["root"], "news", ids)
    subs["mid-1"].wait_ids(ids)
    _settle()
    assert subs["leaf-1"].received() == 0
