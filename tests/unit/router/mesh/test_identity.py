"""Duplicate router ids in simulated meshes (tests/unit/meshfabric.py): the router an impostor connects to
refuses it (first come, first served) and logs CRITICAL; routes and addresses of the real router never
change; a restart is not taken for an impostor; and should two routers with one id both get in, each side
keeps its own and the mesh heals once one leaves."""

from __future__ import annotations

import logging

import pytest

from router.mesh import messages as M
from router.mesh import protocol as P
from router.mesh.engine import RoutingEngine
from tests.unit.meshfabric import FAST, Fabric, Recorder

HELLO_MAX_AGE = FAST["hello_max_age"]


def _critical(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL and r.name == "router.mesh"]


def _line_with_consumer_on_c() -> Fabric:
    """A - B - C, converged, with an address on C that A and B know."""
    f = Fabric()
    for rid in "ABC":
        f.add(rid)
    f.connect("A", "B")
    f.connect("B", "C")
    f.engines["C"].add_local_address("M0dup/q", P.HINT_ANYCAST_CLOSEST)
    f.run(5)
    assert f.listeners["A"].next_hops == {"B": "A>B", "C": "A>B"}
    assert f.listeners["A"].where("M0dup/q") == {"C"}
    return f


def _add_impostor(f: Fabric, name: str, rid: str, instance: int) -> RoutingEngine:
    """A second engine calling itself ``rid``, known to the fabric as ``name``."""
    eng = RoutingEngine(rid, Recorder(), instance=instance, **f.timers)
    f.engines[name] = eng
    f.listeners[name] = eng.listener
    return eng


def _whole(f: Fabric) -> bool:
    """A still reaches the real C through B and knows its address; B has C as its neighbour."""
    a, b = f.listeners["A"], f.listeners["B"]
    return (a.next_hops.get("C") == "A>B" and a.where("M0dup/q") == {"C"}
            and b.next_hops.get("C") == "B>C" and b.where("M0dup/q") == {"C"})


@pytest.mark.parametrize("via", ["A", "B", "C"])
@pytest.mark.parametrize("newer", [True, False], ids=["impostor-newer", "impostor-older"])
def test_impostor_is_refused_and_the_real_router_keeps_its_routes(caplog, via, newer):
    f = _line_with_consumer_on_c()
    real = f.engines["C"]
    _add_impostor(f, "C2", "C", real.instance + (1 if newer else -500))
    events_before = {rid: len(f.listeners[rid].events) for rid in "AB"}
    start = f.now
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.connect(via, "C2")
        for _ in range(30):                          # 3 s of an impostor reconnecting at once each time
            f.run(0.1)
            assert _whole(f)
            if (via, f"{via}>C2") not in f.wires:    # refused: its connector comes straight back
                f.connect(via, "C2")
    refused = [(t, r, d) for t, r, p, d in f.refusals if p == "C2"]
    assert len(refused) >= 2, f.refusals
    # refused at the first HELLO when certain (own id, or C's neighbour B); A waits for a second HELLO
    first = refused[0][0] - start
    assert first <= (0.1 if via in "BC" else 1.1) + 1e-9, first
    assert all(r == via and d.startswith("duplicate router id 'C': ") for _, r, d in refused)
    crit = _critical(caplog)
    assert any(f"duplicate router id 'C'" in m and "refused" in m for m in crit) or via == "C", crit
    if via != "C":                                   # (C and the impostor refuse each other)
        assert any("was refused by the router on connection" in m for m in crit), crit  # the impostor's own
    assert len(crit) <= 4                            # rate-limited, not one line per attempt
    # nothing changed for the real C: no restart, no lost router, no address withdrawn
    for rid in "AB":
        new = f.listeners[rid].events[events_before[rid]:]
        assert not [e for e in new if e[0] in ("lost", "del")], new
        assert f.engines[rid]._nodes["C"].instance == real.instance
    # the impostor leaves: nothing to heal
    f.disconnect(via, "C2")
    del f.engines["C2"]
    f.run(0.1)
    assert _whole(f)


def test_check_open_refuses_only_the_own_id(caplog):
    e = RoutingEngine("A", Recorder(), instance=5, **FAST)
    assert e.check_open("B", "1", 0.0) is None
    assert e.check_open(None, "1", 0.0) is None
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        why = e.check_open("A", "7 (inter-router)", 0.0)
    assert why.startswith("duplicate router id 'A': ")
    assert _critical(caplog) and "OPEN on connection 7 (inter-router)" in _critical(caplog)[0]


def test_messages_on_a_refused_connection_are_dropped():
    e = RoutingEngine("A", Recorder(), instance=5, **FAST)
    e.link_up("c1", 1, 0.0)
    e.take_output()
    e.receive("c1", M.encode(M.Hello("A", 9, []), P.HELLO_ADDRESS, ingress="A", trace=["A"]), 0.1)
    assert [k for k, _ in e.take_refusals()] == ["c1"]
    ra = M.encode(M.RouterAdvertisement("Q", 3, 1, 0), P.ALL_ROUTERS_ADDRESS, ingress="Q", trace=["Q"])
    e.receive("c1", ra, 0.2)
    e.tick(1.5)
    assert e.take_output() == [] and e.remote_keys("Q") == {} and "Q" not in e._nodes


def test_restart_in_a_triangle_is_not_taken_for_an_impostor(caplog):
    """C dies (its connections break) and comes back at once with a new instance on both links."""
    f = Fabric()
    for rid in "ABC":
        f.add(rid)
    f.connect("A", "B")
    f.connect("A", "C")
    f.connect("B", "C")
    f.engines["C"].add_local_address("M0x", 2)
    f.run(5)
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.kill("C")
        f.add("C")
        f.engines["C"].add_local_address("M0y", 2)
        f.connect("A", "C")
        f.connect("B", "C")
        f.run(3)
    assert not _critical(caplog) and not f.refusals
    assert f.listeners["A"].next_hops["C"] == "A>C" and f.listeners["A"].where("M0y") == {"C"}
    assert f.listeners["A"].where("M0x") == set()


def test_restart_seen_through_the_mesh_before_its_news_is_refused_then_let_in():
    """Line A - B - C; C restarts and connects to A first, while A still reaches the old C through B
    (B has not noticed yet: a half-open connection). A refuses; once B drops the old C (helloMaxAge),
    A lets the new C in at its next attempt."""
    f = Fabric()
    for rid in "ABC":
        f.add(rid)
    f.connect("A", "B")
    f.connect("B", "C")
    f.run(5)
    f.silent.add("C")                                # the old C is gone without a word
    _add_impostor(f, "C-new", "C", f.engines["C"].instance + 1)
    f.connect("A", "C-new")
    f.run(1.5)
    assert [p for _, _, p, _ in f.refusals] == ["C-new"]
    f.run(HELLO_MAX_AGE)                             # B has given up on the old C: C unreachable
    assert "C" not in f.listeners["A"].costs
    f.connect("A", "C-new")
    f.run(1)
    assert [p for _, _, p, _ in f.refusals] == ["C-new"]
    assert f.listeners["A"].next_hops["C"] == "A>C-new"


def test_two_routers_with_one_id_inside_the_mesh_are_contained_and_the_mesh_heals(caplog):
    """The impostor got in through D before D knew the real C; D then joins the mesh. B (the real C's
    neighbour) drops floods claiming C with another instance, D drops the real C's, so each side keeps
    its own C. When the impostor leaves, D chases the id (an LSR) and takes the real C's answer within
    helloMaxAge."""
    f = _line_with_consumer_on_c()
    f.add("D")
    _add_impostor(f, "C2", "C", f.engines["C"].instance + 1)
    f.connect("D", "C2")
    f.run(3)
    with caplog.at_level(logging.CRITICAL, logger="router.mesh"):
        f.connect("A", "D")
        f.run(10)
    assert any("duplicate router id 'C'" in m for m in _critical(caplog)), _critical(caplog)
    b = f.listeners["B"]
    assert b.next_hops["C"] == "B>C" and b.where("M0dup/q") == {"C"}   # B's side keeps the real C
    assert f.engines["B"]._nodes["C"].instance == f.engines["C"].instance
    assert f.listeners["D"].next_hops["C"] == "D>C2"                   # D's side keeps its own
    f.kill("C2")
    left = f.now
    while not (_whole(f) and f.listeners["D"].next_hops.get("C") == "D>A"
               and f.listeners["D"].where("M0dup/q") == {"C"}):
        # the impostor's last HELLO is at most a hello interval old when it leaves
        assert f.now - left <= HELLO_MAX_AGE + 0.5, "the mesh did not heal within helloMaxAge"
        f.run(0.1)
    print(f"healed {f.now - left:.1f} s after the impostor left")
