"""One RoutingEngine driven by hand: HELLO handshake, flood and unicast forwarding rules, duplicate router
ids, bad input (never raises), and a peer that speaks with proton-built (string-keyed) messages."""

from __future__ import annotations

import logging

from proton import Message, symbol

from router.mesh import messages as M
from router.mesh import protocol as P
from router.mesh import engine as engine_module
from router.mesh.engine import RoutingEngine
from tests.unit.meshfabric import FAST, Fabric, Recorder


def engine(rid="A", instance=100):
    rec = Recorder()
    return RoutingEngine(rid, rec, instance=instance, **FAST), rec


def hello(rid, seen, instance=7):
    return M.encode(M.Hello(rid, instance, seen), P.HELLO_ADDRESS, ingress=rid, trace=[rid])


def decoded(out):
    return [(key, M.decode(data)) for key, data in out]


def test_link_up_sends_hello_and_two_way_hello_makes_a_neighbour():
    e, rec = engine()
    e.link_up("c1", 4, 0.0)
    (key, env), = decoded(e.take_output())
    assert key == "c1" and env.opcode == "HELLO" and env.to == "amqp:/_local/qdhello"
    assert env.body == M.Hello("A", 100, [])
    e.receive("c1", hello("B", []), 0.1)             # B does not see me yet: not a neighbour
    assert e.neighbours == {} and rec.costs == {}
    e.tick(1.2)
    hellos = [env for _, env in decoded(e.take_output()) if env.opcode == "HELLO"]
    assert hellos[0].body.seen == ["B"]
    e.receive("c1", hello("B", ["A"]), 1.3)
    assert e.neighbours == {"B": "c1"} and rec.costs == {"B": 4} and rec.next_hops == {"B": "c1"}
    assert e.ls_seq == 1
    ras = [env for _, env in decoded(e.take_output()) if env.opcode == "RA"]
    assert ras and ras[0].body == M.RouterAdvertisement("A", 100, 1, 0)   # sent at once on the change


def test_neighbour_expires_after_hello_max_age_and_at_once_on_link_lost():
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", hello("B", ["A"]), 0.0)
    e.tick(2.9)
    assert "B" in rec.costs
    e.tick(3.1)
    assert rec.costs == {} and rec.lost == ["B"] and e.ls_seq == 2
    e.receive("c1", hello("B", ["A"]), 3.2)
    assert rec.costs == {"B": 1}
    e.link_lost("c1", 3.3)
    assert rec.costs == {} and rec.lost == ["B", "B"]


def test_flood_is_processed_and_forwarded_to_neighbours_not_in_the_trace():
    f = Fabric()
    for r in "ABCD":
        f.add(r)
    f.connect("A", "B")
    f.connect("A", "C")
    f.connect("A", "D")
    f.run(3)
    a = f.engines["A"]
    a.take_output()
    ra = M.encode(M.RouterAdvertisement("B", 1002, 1, 0), P.ALL_ROUTERS_ADDRESS, ingress="B", trace=["B", "C"])
    a.receive("A>B", ra, f.now)
    out = decoded(a.take_output())
    fwd = [(k, env) for k, env in out if env.opcode == "RA"]
    assert [k for k, _ in fwd] == ["A>D"]            # not back to B, not to C (in the trace)
    assert fwd[0][1].ingress == "B" and fwd[0][1].trace == ["B", "C", "A"]


def test_flood_without_ingress_gets_one_and_own_messages_are_not_processed():
    e, rec = engine()
    for k, peer in (("c1", "B"), ("c2", "C")):
        e.link_up(k, 1, 0.0)
        e.receive(k, hello(peer, ["A"]), 0.0)
    e.take_output()
    e.receive("c1", M.encode(M.RouterAdvertisement("B", 7, 1, 0), P.ALL_ROUTERS_ADDRESS), 0.1)
    out = [env for k, env in decoded(e.take_output()) if k == "c2" and env.opcode == "RA"]
    assert out[0].ingress == "A" and out[0].trace == ["A"]
    # a message that already went through me is dropped without processing or forwarding
    e.receive("c1", M.encode(M.RouterAdvertisement("B", 7, 9, 0), P.ALL_ROUTERS_ADDRESS,
                             ingress="A", trace=["A", "B"]), 0.2)
    assert e.take_output() == []


def test_unicast_for_an_unknown_router_is_dropped():
    e, _ = engine()
    e.link_up("c1", 1, 0.0)
    e.take_output()
    e.receive("c1", M.encode(M.LinkStateRequest("B"), P.router_address("Nowhere"), ingress="B", trace=["B"]), 0.1)
    assert e.take_output() == []


def _critical(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL and r.name == "router.mesh"]


def _twin_fabric():
    f = Fabric()
    f.add("X")
    f.add("Y")
    twin = RoutingEngine("X", Recorder(), instance=999, **FAST)
    f.engines["X2"] = twin                            # a second router calling itself X
    f.listeners["X2"] = Recorder()
    return f


def test_duplicate_router_id_connected_directly_is_logged_critical(caplog):
    f = _twin_fabric()
    f.connect("X", "X2")
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.run(2)
    crit = _critical(caplog)
    assert crit and "duplicate router id" in crit[0] and "'X'" in crit[0]
    assert f.engines["X"].neighbours == {}            # never taken for a neighbour


def test_duplicate_router_id_two_hops_away_is_logged_critical_by_the_router_between(caplog):
    f = _twin_fabric()
    f.connect("X", "Y")
    f.connect("Y", "X2")
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.run(4)
    crit = _critical(caplog)
    assert crit and "duplicate router id 'X'" in crit[0] and "X>Y" not in crit[0]
    assert "on connection Y>X2" in crit[0] and "neighbour of 'Y' on connection Y>X;" in crit[0]
    # rate-limited: not one line per HELLO
    caplog.clear()
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.run(5)
    assert len(_critical(caplog)) <= 1


def test_hello_with_own_id_is_a_duplicate_even_with_the_same_instance(caplog):
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        e.receive("c1", hello("A", ["A"], instance=100), 0.1)
    assert any(r.levelno == logging.CRITICAL for r in caplog.records)
    assert e.neighbours == {}


def test_newer_protocol_version_is_ignored_with_a_warning(caplog):
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    m = Message(address=P.HELLO_ADDRESS, properties={"opcode": "HELLO"},
                body={symbol("id"): "B", symbol("pv"): 2, symbol("instance"): 1, symbol("seen"): ["A"]})
    with caplog.at_level(logging.WARNING, logger="router.mesh"):
        e.receive("c1", m.encode(), 0.1)
    assert e.neighbours == {}
    assert any(r.levelno == logging.WARNING and "protocol version 2" in r.getMessage() for r in caplog.records)


def test_bad_input_never_raises(caplog):
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", hello("B", ["A"]), 0.0)
    good = M.encode(M.RouterAdvertisement("B", 7, 1, 0), P.ALL_ROUTERS_ADDRESS)
    junk = [b"", b"\x00", b"garbage" * 10, good[:-3], good + b"\x00\x53",
            Message(address="amqp:/_topo/0/all/qdrouter", properties={"opcode": "LSU"},
                    body={"id": "B", "pv": 1, "ls_seq": "x"}).encode(),
            Message(address="amqp:/somewhere/else", properties={"opcode": "RA"},
                    body={"id": "B", "pv": 1, "instance": 7, "ls_seq": 1, "mobile_seq": 0}).encode()]
    with caplog.at_level(logging.WARNING, logger="router.mesh"):
        for data in junk:
            e.receive("c1", data, 0.1)
        e.receive("unknown-conn", good, 0.1)
        # Dropped messages are logged once per interval, with a count of those not logged.
        e.receive("c1", junk[0], 0.1 + engine_module.MALFORMED_LOG_INTERVAL)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings  # the first junk, the unknown connection, the next interval's
    assert f"({len(junk) - 1} more dropped since the last such line)" in warnings[-1]
    assert e.neighbours == {"B": "c1"}               # still working


def test_peer_speaking_string_keyed_messages_is_understood():
    """What a peer whose codec writes string keys and int widths of its choosing would send."""
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", Message(address="amqp:/_local/qdhello", properties={"opcode": "HELLO"},
                            body={"id": "Q", "pv": 1, "area": "0", "instance": 55, "seen": ["A"]}).encode(), 0.1)
    assert e.neighbours == {"Q": "c1"}
    e.take_output()
    e.receive("c1", Message(address="amqp:/_topo/0/all/qdrouter", properties={"opcode": "RA"},
                            body={"id": "Q", "pv": 1, "area": "0", "instance": 55, "ls_seq": 3,
                                  "mobile_seq": 1}).encode(), 0.2)
    asks = {env.opcode: env for _, env in decoded(e.take_output())}
    assert asks["LSR"].to == "amqp:/_topo/0/Q/qdrouter" and asks["MAR"].body.have_seq == 0
    assert asks["MAR"].to == "amqp:/_topo/0/Q/qdrouter.ma"
    e.receive("c1", Message(address="amqp:/_topo/0/A/qdrouter.ma", properties={"opcode": "MAU"},
                            body={"id": "Q", "pv": 1, "area": "0", "mobile_seq": 1, "exist": ["M0q"],
                                  "hints": [2]}).encode(), 0.3)
    assert rec.addresses["Q"] == {"M0q": 2}


def test_mar_is_answered_with_an_absolute_mau_only_when_behind():
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", hello("B", ["A"]), 0.0)
    e.add_local_address("M0a", 3)
    e.add_local_address("Lnot-synced", 3)
    e.tick(0.1)
    e.take_output()
    e.receive("c1", M.encode(M.MobileAddressRequest("B", 1), P.router_ma_address("A")), 0.2)
    assert e.take_output() == []
    e.receive("c1", M.encode(M.MobileAddressRequest("B", 0), P.router_ma_address("A")), 0.3)
    (key, env), = decoded(e.take_output())
    assert key == "c1" and env.to == "amqp:/_topo/0/B/qdrouter.ma"
    assert env.body == M.MobileAddressUpdate("A", 1, exist=["M0a"], hints=[3])


def test_neighbour_restart_seen_in_hello_voids_its_addresses():
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", hello("B", ["A"], instance=7), 0.0)
    e.receive("c1", M.encode(M.MobileAddressUpdate("B", 1, add=["M0b"], hints=[3]),
                             P.ALL_ROUTERS_MA_ADDRESS), 0.1)
    assert rec.addresses["B"] == {"M0b": 3}
    e.receive("c1", hello("B", ["A"], instance=8), 0.2)
    assert rec.addresses["B"] == {}
    assert e.remote_keys("B") == {}


def test_router_table_is_bounded(caplog):
    from router.mesh.engine import MAX_NODES
    e, rec = engine()
    e.link_up("c1", 1, 0.0)
    e.receive("c1", hello("B", ["A"]), 0.0)
    peers = {f"R{i}": 1 for i in range(MAX_NODES + 50)}
    lsu = M.LinkStateUpdate("B", 7, 1, M.LinkState("B", 1, peers))
    with caplog.at_level(logging.WARNING, logger="router.mesh"):
        e.receive("c1", M.encode(lsu, P.router_address("A")), 0.1)
    assert len(e._nodes) == MAX_NODES
    assert any("routers known" in r.getMessage() for r in caplog.records)
