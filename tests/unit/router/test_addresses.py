"""router.addresses: address parsing into Dispatch-style keys, and the address configuration table.

Reference: Qpid Dispatch 1.19 src/iterator.c (classes and keys), src/parse_tree.c (prefix/pattern
precedence), src/router_core/terminus.c (waypoint phases).
"""

from __future__ import annotations

import pytest

import router.addresses as addresses
from router.addresses import (
    BALANCED, CLOSEST, MULTICAST, UNAVAILABLE, Address, AddressConfigTable, AddressParser, AddressSemantics,
    strip_scheme,
)
from router.core import Router
from tests.unit.enginepair import AddressEntity

# -- scheme stripping ---------------------------------------------------------------------------------

@pytest.mark.parametrize("given,expected", [
    ("queue1", "queue1"),
    ("amqp:/queue1", "queue1"),
    ("amqp://host/queue1", "queue1"),
    ("amqp://host:5672/queue1", "queue1"),
    ("amqp://10.0.0.1:5672/a/b/c", "a/b/c"),
    ("amqp://[::1]:5672/a.b", "a.b"),
    ("amqp:queue1", "queue1"),
    ("amqp://host", ""),
    ("amqp://host/", ""),
    ("amqp:/_local/x", "_local/x"),
    ("a/b/c", "a/b/c"),
    ("amqps://host/q", "amqps://host/q"),  # only amqp: is a scheme the router strips
])
def test_strip_scheme(given, expected):
    assert strip_scheme(given) == expected


# -- AddressParser ---------------------------------------------------------------------------------------

PARSE_TABLE = [
    # address, (class, name), key at phase 0, key at phase 1
    ("queue1", ("M", "queue1"), "M0queue1", "M1queue1"),
    ("a/b.c", ("M", "a/b.c"), "M0a/b.c", "M1a/b.c"),
    ("amqp:/queue1", ("M", "queue1"), "M0queue1", "M1queue1"),
    ("amqp://host/queue1", ("M", "queue1"), "M0queue1", "M1queue1"),
    ("amqp://host:5672/queue1", ("M", "queue1"), "M0queue1", "M1queue1"),
    ("_local/mgmt", ("L", "mgmt"), "Lmgmt", "Lmgmt"),
    ("amqp:/_local/mgmt", ("L", "mgmt"), "Lmgmt", "Lmgmt"),
    ("_topo/0/R1/temp.abc", ("L", "temp.abc"), "Ltemp.abc", "Ltemp.abc"),
    ("amqp:/_topo/0/R1/temp.abc", ("L", "temp.abc"), "Ltemp.abc", "Ltemp.abc"),
    ("amqp://h:1/_topo/0/R1/$management", ("L", "$management"), "L$management", "L$management"),
    ("_topo/0/all/qdrouter", ("L", "qdrouter"), "Lqdrouter", "Lqdrouter"),
    ("_topo/0/R1/a/b", ("L", "a/b"), "La/b", "La/b"),
    ("_topo/0/Router.B/temp.x", ("R", "Router.B"), "RRouter.B", "RRouter.B"),
    ("amqp:/_topo/0/R2/$management", ("R", "R2"), "RR2", "RR2"),
]


@pytest.mark.parametrize("address,parsed,key0,key1", PARSE_TABLE)
def test_parse_and_key(address, parsed, key0, key1):
    p = AddressParser("R1")
    assert p.parse(address) == parsed
    assert p.key(address) == key0
    assert p.key(address, 1) == key1
    assert p.key_for_to(address) == key0


def test_mobile_phase_digits():
    p = AddressParser("R1")
    assert [p.key("q", n) for n in range(10)] == [f"M{n}q" for n in range(10)]


def test_router_id_is_this_routers():
    """`_topo/0/<x>/...` is local only for this router's own id."""
    assert AddressParser("R1").parse("_topo/0/R2/x") == ("R", "R2")
    assert AddressParser("R2").parse("_topo/0/R2/x") == ("L", "x")
    assert AddressParser("R1").parse("_topo/0/R1/x") == ("L", "x")


def test_local_prefix_needs_the_slash():
    p = AddressParser("R1")
    assert p.parse("_localx") == ("M", "_localx")
    assert p.parse("_local") == ("M", "_local")


def test_key_for_to_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(addresses, "TO_KEY_CACHE_LIMIT", 5)
    p = AddressParser("R1")
    for i in range(23):
        assert p.key_for_to(f"amqp:/q{i}") == f"M0q{i}"
        assert p.memoised <= 5
    assert p.key_for_to("amqp:/q3") == "M0q3"
    assert p.key_for_to("_topo/0/R1/t") == "Lt"


# -- AddressConfigTable ---------------------------------------------------------------------------------

def test_defaults_without_configuration():
    t = AddressConfigTable()
    assert t.default_distribution == BALANCED
    assert t.semantics("anything") == AddressSemantics(distribution=BALANCED, in_phase=0, out_phase=0,
                                                       waypoint=False, pattern=None)
    assert AddressConfigTable(CLOSEST).semantics("x").distribution == CLOSEST


def test_entity_without_distribution_takes_the_default():
    t = AddressConfigTable(MULTICAST)
    t.add(AddressEntity("p"))
    assert t.semantics("p").distribution == MULTICAST
    assert t.semantics("p").pattern == "p"


@pytest.mark.parametrize("address,matches", [
    ("my_address", True), ("my_address.1", True), ("my_address/1", True), ("my_address/a/b", True),
    ("my_address1", False), ("other", False), ("x/my_address", False),
])
def test_prefix_semantics(address, matches):
    t = AddressConfigTable()
    t.add(AddressEntity("my_address", distribution=CLOSEST))
    assert (t.semantics(address).distribution == CLOSEST) is matches


PRECEDENCE_ENTITIES = [
    AddressEntity("news", distribution=MULTICAST),
    AddressEntity(pattern="news/*", distribution=CLOSEST),
    AddressEntity(pattern="news/europe/#", distribution=BALANCED),
    AddressEntity(pattern="news/*/sports", distribution=UNAVAILABLE),
    AddressEntity(pattern="news/usa", distribution=MULTICAST),
]


@pytest.mark.parametrize("address,distribution,pattern", [
    ("news", MULTICAST, "news"),                       # prefix news == news/#
    ("news/asia", CLOSEST, "news/*"),                  # '*' beats '#'
    ("news.asia", CLOSEST, "news/*"),                  # '.' and '/' are interchangeable
    ("news/usa", MULTICAST, "news/usa"),               # exact beats '*'
    ("news/europe", BALANCED, "news/europe/#"),        # exact 'europe' path beats '*'
    ("news/europe/fr/paris", BALANCED, "news/europe/#"),
    ("news/asia/sports", UNAVAILABLE, "news/*/sports"),
    ("news/europe/sports", BALANCED, "news/europe/#"),  # exact 'europe' is tried before '*'
    ("news/asia/x/y", MULTICAST, "news"),              # only the prefix's '#' covers it
    ("sport", "default", None),
])
def test_prefix_and_pattern_precedence(address, distribution, pattern):
    t = AddressConfigTable("default")
    for e in PRECEDENCE_ENTITIES:
        t.add(e)
    sem = t.semantics(address)
    assert sem.distribution == distribution
    assert sem.pattern == pattern


def test_longer_literal_path_wins():
    t = AddressConfigTable()
    t.add(AddressEntity(pattern="a/#", distribution=MULTICAST))
    t.add(AddressEntity(pattern="a/b/#", distribution=CLOSEST))
    t.add(AddressEntity(pattern="a.b.c", distribution=UNAVAILABLE))
    assert t.semantics("a/b/c").distribution == UNAVAILABLE
    assert t.semantics("a/b/d").distribution == CLOSEST
    assert t.semantics("a/x").distribution == MULTICAST


def test_prefix_is_the_same_entry_as_pattern_hash():
    t = AddressConfigTable()
    t.add(AddressEntity("dup"))
    with pytest.raises(ValueError):
        t.add(AddressEntity(pattern="dup/#"))
    with pytest.raises(ValueError):
        t.add(AddressEntity("dup", distribution=CLOSEST))


def test_remove_restores_defaults():
    t = AddressConfigTable()
    e1 = AddressEntity("q", distribution=CLOSEST)
    e2 = AddressEntity(pattern="q/*", distribution=MULTICAST)
    t.add(e1)
    t.add(e2)
    assert t.semantics("q/x").distribution == MULTICAST
    t.remove(e2)
    assert t.semantics("q/x").distribution == CLOSEST
    t.remove(e1)
    assert t.semantics("q/x").distribution == BALANCED


@pytest.mark.parametrize("entity,in_phase,out_phase", [
    (AddressEntity("q"), 0, 0),
    (AddressEntity("q", waypoint=True), 0, 1),
    (AddressEntity("q", waypoint=False), 0, 0),
    (AddressEntity("q", waypoint=True, egressPhase=2), 0, 2),
    (AddressEntity("q", waypoint=True, ingressPhase=3), 3, 1),
    (AddressEntity("q", waypoint=True, ingressPhase=0, egressPhase=0), 0, 0),
    (AddressEntity("q", ingressPhase=4, egressPhase=7), 4, 7),
    (AddressEntity("q", egressPhase=9), 0, 9),
    (AddressEntity("q", ingressPhase="2", egressPhase="5"), 2, 5),
    (AddressEntity(pattern="q/#", waypoint=True), 0, 1),
])
def test_waypoint_phases(entity, in_phase, out_phase):
    t = AddressConfigTable()
    t.add(entity)
    sem = t.semantics("q")
    assert (sem.in_phase, sem.out_phase) == (in_phase, out_phase)
    assert sem.waypoint == bool(entity.get("waypoint"))


# -- how the router binds links to keys ---------------------------------------------------------------

def test_router_binds_links_to_phase_keys():
    r = Router("R1", address_entities=[
        AddressEntity("wp", waypoint=True),
        AddressEntity("chain", ingressPhase=0, egressPhase=2),
        AddressEntity("mc", distribution=MULTICAST),
        AddressEntity("gone", distribution=UNAVAILABLE),
    ])
    assert r.address_for("wp", outgoing=False).key == "M0wp"
    assert r.address_for("wp", outgoing=True).key == "M1wp"
    assert r.address_for("amqp:/wp/x", outgoing=True).key == "M1wp/x"
    assert r.address_for("chain", outgoing=True).key == "M2chain"
    assert r.address_for("plain", outgoing=True).key == "M0plain"
    assert r.address_for("plain", outgoing=False) is r.address_for("plain", outgoing=True)
    mc = r.address_for("mc.1", outgoing=True)
    assert mc.distribution == MULTICAST and mc.pattern == "mc"
    assert r.address_for("plain", outgoing=True).distribution == BALANCED
    assert r.address_for("gone", outgoing=True) is None
    assert r.address_for("gone/sub", outgoing=False) is None
    assert r.address_for("_local/x", outgoing=True).key == "Lx"
    assert r.address_for("_topo/0/R1/temp.1", outgoing=True).key == "Ltemp.1"
    assert r.address_for("_topo/0/R9/x", outgoing=False).key == "RR9"


def test_router_default_distribution():
    r = Router("R1", default_distribution=CLOSEST)
    assert r.address_for("x", outgoing=True).distribution == CLOSEST


def test_address_record():
    a = Address("M0q", "q", 0, CLOSEST)
    assert a.unused and not a.has_destination
    a.rlinks.append(object())
    assert a.has_destination and not a.unused
    assert "M0q" in repr(a)
